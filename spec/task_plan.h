// The tasks a job spec expands to: folds × repeats, plus the refit task.
//
// Thread-safety: pure functions.
#ifndef TRAIND_SPEC_TASK_PLAN_H_
#define TRAIND_SPEC_TASK_PLAN_H_

#include "traind/v1/job.pb.h"

namespace traind::spec {

// The tasks a spec expands to.
//
// Task i < fold_tasks validates on fold i % folds of repeat i / folds. When
// refit, task fold_tasks is the refit task: it trains on all rows without
// validation and must run after every fold task succeeded. A holdout
// (validation_fraction) or a validation file is one fold task (folds = 1);
// a spec without cross_validation is one task on all rows (folds = 1,
// fold_tasks = 1, no validation).
//
// A search (spec.search, spec/search.h): every trial has the base spec's
// tasks_per_trial fold tasks, trial after trial (fold_tasks = trials ·
// tasks_per_trial); refit is search.refit_best, the refit of the best trial.
struct TaskPlan {
  int folds = 1;
  int repeats = 1;
  bool refit = false;
  int fold_tasks = 1;
  int total = 1;  // fold_tasks + (refit ? 1 : 0)
  int trials = 1;
  int tasks_per_trial = 1;
};
// REQUIRES: CheckTrainingSpec(spec) is ok.
TaskPlan PlanTasks(const traind::v1::JobSpec& spec);

// PlanTasks(spec).total. REQUIRES: ValidateJobSpec(spec) is ok.
int TaskCount(const traind::v1::JobSpec& spec);

// True when task `task` of `spec` is the refit task.
bool IsRefitTask(const traind::v1::JobSpec& spec, int task);

}  // namespace traind::spec

#endif  // TRAIND_SPEC_TASK_PLAN_H_
