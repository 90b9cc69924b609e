// Scheduler: what it does on the search controller's answers
// (search_controller.h) — a pruned trial's tasks stop, a promoted trial's
// folds go on.
#include <vector>

#include "base/log.h"
#include "server/scheduler/scheduler.h"

namespace traind::server {

using traind::v1::Task;

void Scheduler::PruneTrialLocked(LiveJob& lj, int trial) {
  StopTasksLocked(
      lj, false, [&](int i) { return lj.search.TrialOf(i) == trial; }, Task::PRUNED);
  JobChange change = ChangeLocked(lj);
  change.WriteJob();
  AggregateFoldResults(&lj.job);
  CommitLocked(lj, change);
}

void Scheduler::ActOnSearchLocked(LiveJob& lj,
                                  const std::vector<SearchController::Decision>& decisions) {
  for (const SearchController::Decision& d : decisions) {
    if (d.prune) {
      LogInfo("trial pruned job=%s trial=%d rung=%d", lj.job.id(), d.trial, d.rung);
      PruneTrialLocked(lj, d.trial);
      return;
    }
    LogInfo("trial promoted job=%s trial=%d rung=%d", lj.job.id(), d.trial, d.rung);
    wake_ = true;  // its folds waiting at the rung go on
  }
}

bool Scheduler::AtTrialLimitLocked(const LiveJob& lj, int task) {
  if (!lj.search.limits_trials()) return false;  // no list of running tasks to build
  std::vector<int> running;
  running.reserve(lj.attempts.size());
  for (const auto& [t, attempt] : lj.attempts) running.push_back(t);
  return lj.search.AtTrialLimit(lj.job, running, task);
}

}  // namespace traind::server
