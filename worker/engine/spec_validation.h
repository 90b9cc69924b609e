// Complete validation of a JobSpec before it is queued, and the job's task
// layout.
//
// Every error is an InvalidSpecError whose message starts with the field
// path as it is written in a spec file ("model.layers[1].dense.units: ...").
// The data file is opened to check what depends on it (the columns, the
// number of rows for the folds, the number of classes or targets for the
// last layer, the lengths of class_weights and pos_weight). Problems inside
// the data rows themselves (a ragged row, a non-numeric value) are not spec
// errors: the task fails with DATA_ERROR naming file, line and column when
// the worker loads the data.
#ifndef TRAIND_WORKER_ENGINE_SPEC_VALIDATION_H_
#define TRAIND_WORKER_ENGINE_SPEC_VALIDATION_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "traind/v1/job.pb.h"
#include "worker/engine/data/dataset.h"
#include "worker/engine/data/split.h"

namespace traind::engine {

struct ValidationContext {
  // GPUs this server can place tasks on.
  int gpus = 0;
  // Whether CPU tasks run where oneDNN has bf16 matmuls (training.precision:
  // bf16). One source of truth: oneDNN in the worker, under the workers'
  // environment (ONEDNN_MAX_CPU_ISA may cap it). traind asks
  // `traind-worker --capabilities` at start; the standalone worker asks
  // CpuSupportsBf16(). The worker checks again when it creates the backend.
  bool cpu_bf16 = false;
};

// What validation learned of the model's shape (when the data could be read).
struct ValidatedShape {
  int64_t features = 0;  // model inputs, after one-hot encoding
  int64_t outputs = 0;   // model outputs
};

// `shape` (optional) receives the model's input and output widths, for the
// memory estimate that places GPU tasks; both stay 0 when the rows could not
// be read (the task then fails with DATA_ERROR).
absl::Status ValidateJobSpec(const traind::v1::JobSpec& spec, const ValidationContext& context,
                             ValidatedShape* shape = nullptr);

// training.precision of a job on the CPU: fp32 (or unspecified) always,
// bf16 when `cpu_bf16`; tf32 is a GPU mode. The InvalidSpecError names the
// field. Used at submit (ValidateJobSpec) and by the worker's CPU backend.
absl::Status CheckCpuPrecision(traind::v1::Precision precision, bool cpu_bf16);

// The tasks a spec expands to.
//
// Task i < fold_tasks validates on fold i % folds of repeat i / folds. When
// refit, task fold_tasks is the refit task: it trains on all rows without
// validation and must run after every fold task succeeded. A holdout
// (validation_fraction) or a validation file is one fold task (folds = 1);
// a spec without cross_validation is one task on all rows (folds = 1,
// fold_tasks = 1, no validation).
struct TaskPlan {
  int folds = 1;
  int repeats = 1;
  bool refit = false;
  int fold_tasks = 1;
  int total = 1;  // fold_tasks + (refit ? 1 : 0)
};
// REQUIRES: CheckTrainingSpec(spec) is ok.
TaskPlan PlanTasks(const traind::v1::JobSpec& spec);

// PlanTasks(spec).total. REQUIRES: ValidateJobSpec(spec) is ok.
int TaskCount(const traind::v1::JobSpec& spec);

// The training and validation rows of task `task`, deterministic from
// spec.seed(): the same on every run, rank and retry. Folds of repeat r > 0
// are shuffled with a seed derived from (seed, r).
// Errors: InvalidArgumentError for a task outside [0, PlanTasks(spec).total);
// InvalidSpecError when the data cannot be split so (more folds than rows or
// groups).
absl::StatusOr<FoldRows> RowsForTask(const traind::v1::JobSpec& spec, const Dataset& data,
                                     int task);

// True when task `task` of `spec` is the refit task.
bool IsRefitTask(const traind::v1::JobSpec& spec, int task);

}  // namespace traind::engine

#endif  // TRAIND_WORKER_ENGINE_SPEC_VALIDATION_H_
