// The rows each task of a job trains and validates on.
#ifndef TRAIND_SPEC_TASK_ROWS_H_
#define TRAIND_SPEC_TASK_ROWS_H_

#include "absl/status/statusor.h"
#include "data/dataset.h"
#include "data/split.h"
#include "traind/v1/job.pb.h"

namespace traind::spec {

// The training and validation rows of task `task`, deterministic from
// spec.seed(): the same on every run, rank and retry. Folds of repeat r > 0
// are shuffled with a seed derived from (seed, r).
// Errors: InvalidArgumentError for a task outside [0, PlanTasks(spec).total);
// InvalidSpecError when the data cannot be split so (more folds than rows or
// groups).
absl::StatusOr<data::FoldRows> RowsForTask(const traind::v1::JobSpec& spec,
                                           const data::Dataset& data, int task);

}  // namespace traind::spec

#endif  // TRAIND_SPEC_TASK_ROWS_H_
