#include "worker/engine/fit.h"

#include <memory>
#include <vector>

#include "absl/strings/str_format.h"
#include "base/random.h"
#include "base/status.h"
#include "spec/checks.h"
#include "spec/task_plan.h"
#include "spec/validation.h"
#include "worker/engine/fit/backend_factory.h"
#include "worker/engine/fit/fit_loop.h"
#include "worker/engine/fit/fit_task.h"
#include "worker/engine/fit/parallel_strategy.h"
#include "worker/engine/parallel/communicator.h"
#include "worker/engine/schedules.h"

namespace traind::engine {
namespace {

using traind::v1::FoldResult;
using traind::v1::JobSpec;

absl::Status CheckInputs(const JobSpec& spec, const data::Dataset& data, const data::FoldRows& rows,
                         int32_t task) {
  const bool classes =
      data.target == data::TargetKind::kClasses || data.target == data::TargetKind::kBinary;
  const size_t values = data.pixels.empty() ? data.x.size() : data.pixels.size();
  if (data.rows <= 0 || values != static_cast<size_t>(data.rows * data.features) ||
      (classes && data.y.size() != static_cast<size_t>(data.rows)) ||
      (!classes && data.targets.size() != static_cast<size_t>(data.rows * data.outputs))) {
    return absl::InvalidArgumentError(
        absl::StrFormat("Fit: inconsistent dataset (%d rows, %d features, %d values, %d labels)",
                        data.rows, data.features, values, data.y.size()));
  }
  for (const std::vector<int64_t>* list : {&rows.train, &rows.val}) {
    for (int64_t r : *list) {
      if (r < 0 || r >= data.rows) {
        return absl::InvalidArgumentError(
            absl::StrFormat("Fit: row %d is not in [0, %d)", r, data.rows));
      }
    }
  }
  if (classes) {
    // The codes index class weights on the host and on the device.
    const int64_t codes = static_cast<int64_t>(data.classes.size());
    for (size_t r = 0; r < data.y.size(); ++r) {
      if (data.y[r] < 0 || data.y[r] >= codes) {
        return absl::InvalidArgumentError(
            absl::StrFormat("Fit: row %d has class code %d, not in [0, %d)", r, data.y[r], codes));
      }
    }
  }
  if (rows.train.empty()) {
    return InvalidSpecError(absl::StrFormat("task %d has no training rows", task));
  }
  if (data::TargetKindOf(spec) != data.target) {
    return absl::InvalidArgumentError("Fit: the dataset was loaded for another loss");
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<FoldResult> Fit(const JobSpec& spec, const data::Dataset& data,
                               const data::FoldRows& rows, int32_t task, const FitOptions& options,
                               FitObserver* observer) {
  Communicator* const comm = options.communicator;
  std::unique_ptr<ParallelStrategy> parallel =
      comm != nullptr ? NewDataParallel(comm, options.allreduce_bucket_bytes) : NewSingleRank();
  bool every_rank_fails = false;
  absl::StatusOr<FoldResult> result = [&]() -> absl::StatusOr<FoldResult> {
    TRAIND_RETURN_IF_ERROR(spec::CheckTrainingSpec(spec));
    TRAIND_RETURN_IF_ERROR(CheckInputs(spec, data, rows, task));
    TRAIND_RETURN_IF_ERROR(CheckBackendDevice(spec, options.backend, options.backend_factory));
    if (comm != nullptr && (comm->size() < 1 || comm->rank() < 0 || comm->rank() >= comm->size())) {
      return absl::InvalidArgumentError(
          absl::StrFormat("Fit: communicator of rank %d of %d ranks", comm->rank(), comm->size()));
    }
    FitTask fit_task(spec, data, rows, task, options);
    FitLoop loop(&fit_task, parallel.get(), options.backend_factory, observer);
    absl::StatusOr<FoldResult> trained = loop.Run();
    every_rank_fails = loop.every_rank_fails();
    return trained;
  }();
  // A rank that fails alone must not leave the others waiting in a
  // collective.
  if (!result.ok() && !every_rank_fails) parallel->AbortOthers(result.status());
  return result;
}

}  // namespace traind::engine
