#include "spec/task_plan.h"

#include <algorithm>

#include "spec/checks.h"
#include "spec/search.h"

namespace traind::spec {

using traind::v1::JobSpec;

TaskPlan PlanTasks(const JobSpec& spec) {
  TaskPlan plan;
  if (!HasValidation(spec)) return plan;
  const auto& cv = spec.cross_validation();
  if (cv.folds() > 0) {
    plan.folds = cv.folds();
    plan.repeats = std::max(1, cv.repeats());
  }
  plan.refit = cv.refit();
  plan.fold_tasks = plan.folds * plan.repeats;
  plan.tasks_per_trial = plan.fold_tasks;
  if (spec.has_search()) {
    plan.trials = static_cast<int>(SearchTrials(spec));
    plan.refit = spec.search().refit_best();
    plan.fold_tasks = plan.trials * plan.tasks_per_trial;
  }
  plan.total = plan.fold_tasks + (plan.refit ? 1 : 0);
  return plan;
}

int TaskCount(const JobSpec& spec) { return PlanTasks(spec).total; }

bool IsRefitTask(const JobSpec& spec, int task) {
  const TaskPlan plan = PlanTasks(spec);
  return plan.refit && task == plan.fold_tasks;
}

}  // namespace traind::spec
