#include "spec/task_rows.h"

#include <cstdint>
#include <vector>

#include "absl/strings/str_format.h"
#include "base/random.h"
#include "base/status.h"
#include "spec/checks.h"
#include "spec/task_plan.h"

namespace traind::spec {

using traind::v1::JobSpec;

absl::StatusOr<data::FoldRows> RowsForTask(const JobSpec& spec, const data::Dataset& data,
                                           int task) {
  const spec::TaskPlan plan = spec::PlanTasks(spec);
  if (task < 0 || task >= plan.total) {
    return absl::InvalidArgumentError(
        absl::StrFormat("task %d is not in [0, %d)", task, plan.total));
  }
  data::FoldRows rows;
  if (!spec::HasValidation(spec) || (plan.refit && task == plan.fold_tasks)) {
    rows.train.resize(static_cast<size_t>(data.rows));
    for (int64_t i = 0; i < data.rows; ++i) rows.train[static_cast<size_t>(i)] = i;
    return rows;
  }
  const auto& cv = spec.cross_validation();
  const bool shuffle = !cv.has_shuffle() || cv.shuffle();
  const bool class_target =
      data.target == data::TargetKind::kClasses || data.target == data::TargetKind::kBinary;
  const bool stratified =
      class_target && cv.group_column().empty() && (!cv.has_stratified() || cv.stratified());
  if (!cv.validation_path().empty()) {
    for (int64_t i = 0; i < data.rows; ++i) {
      (i < data.validation_start ? rows.train : rows.val).push_back(i);
    }
    return rows;
  }
  if (cv.validation_fraction() > 0) {
    rows.val = data::HoldoutRows(data.rows, stratified ? &data.y : nullptr,
                                 cv.validation_fraction(), shuffle, spec.seed());
    size_t v = 0;
    for (int64_t i = 0; i < data.rows; ++i) {
      if (v < rows.val.size() && rows.val[v] == i) {
        ++v;
      } else {
        rows.train.push_back(i);
      }
    }
    return rows;
  }
  const int repeat = task / plan.folds;
  const int fold = task % plan.folds;
  // Repeat 0 uses the job's seed itself, so repeats: 1 is plain k-fold.
  const uint64_t seed =
      repeat == 0 ? spec.seed() : DeriveSeed(spec.seed(), 0x5245504541540000ULL, repeat);
  std::vector<std::vector<int64_t>> folds;
  if (!cv.group_column().empty()) {
    folds = data::GroupKFold(data.groups, plan.folds, shuffle, seed);
  } else if (stratified) {
    folds = data::StratifiedKFold(data.y, plan.folds, shuffle, seed);
  } else {
    folds = data::KFold(data.rows, plan.folds, shuffle, seed);
  }
  if (folds.empty()) {
    return InvalidSpecError(absl::StrFormat(
        "cross_validation.folds: cannot split %d rows into %d folds", data.rows, plan.folds));
  }
  return data::FoldSplit(folds, fold);
}

}  // namespace traind::spec
