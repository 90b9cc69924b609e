// Scheduler: hyperparameter searches (spec.search) — the trials of a new
// job, max_concurrent_trials, and ASHA's rungs (spec/search.h, asha.h).
#include <set>
#include <utility>
#include <vector>

#include "base/log.h"
#include "server/scheduler/scheduler.h"
#include "spec/search.h"
#include "spec/task_plan.h"

namespace traind::server {

using traind::v1::Job;
using traind::v1::JobSpec;
using traind::v1::Task;

absl::Status Scheduler::InitSearch(LiveJob* lj) {
  const JobSpec& spec = lj->job.spec();
  Job& job = lj->job;
  lj->asha = AshaRungs::ForJob(spec);
  if (!spec.has_search()) return absl::OkStatus();
  // The trials' values, once (validated at submit: every trial is valid).
  const spec::TaskPlan plan = spec::PlanTasks(spec);
  job.mutable_result()->set_best_trial(-1);
  for (int i = 0; i < plan.trials; ++i) {
    absl::StatusOr<spec::Trial> trial = spec::MakeTrial(spec, i);
    if (!trial.ok()) return trial.status();
    traind::v1::TrialResult* tr = job.mutable_result()->add_trials();
    tr->set_trial(i);
    tr->set_state(traind::v1::TrialResult::QUEUED);
    tr->set_first_task(i * plan.tasks_per_trial);
    tr->set_tasks(plan.tasks_per_trial);
    for (const auto& [path, value] : trial->params) (*tr->mutable_params())[path] = value;
    if (trial->spec.training().epochs() != spec.training().epochs()) {  // a searched field
      for (int k = 0; k < plan.tasks_per_trial; ++k) {
        job.mutable_tasks(i * plan.tasks_per_trial + k)
            ->set_epochs_total(trial->spec.training().epochs());
      }
    }
  }
  return absl::OkStatus();
}

bool Scheduler::AtRungLocked(const LiveJob& lj, int task) {
  if (!lj.asha.has_value()) return false;
  const spec::SearchTask where = spec::LocateSearchTask(lj.job.spec(), task);
  return where.trial >= 0 && lj.asha->WaitsAtRung(where.trial, lj.job.tasks(task).epochs_done());
}

void Scheduler::PruneTrialLocked(LiveJob& lj, int trial) {
  const int per_trial = spec::PlanTasks(lj.job.spec()).tasks_per_trial;
  StopTasksLocked(
      lj, false, [&](int i) { return i / per_trial == trial; }, Task::PRUNED);
  JobChange change = ChangeLocked(lj);
  change.WriteJob();
  AggregateFoldResults(&lj.job);
  CommitLocked(lj, change);
}

void Scheduler::RecordRungLocked(LiveJob& lj, int task, const traind::v1::EpochMetrics& m, bool act,
                                 std::optional<double> final_value) {
  if (!lj.asha.has_value()) return;
  const spec::SearchTask where = spec::LocateSearchTask(lj.job.spec(), task);
  if (where.trial < 0) return;
  std::vector<std::pair<int, double>> reports;  // (epoch, value)
  if (final_value.has_value()) {
    // A fold that ended before a rung (early stopping) stands at its score.
    for (int r : lj.asha->rungs()) {
      if (r > m.epoch()) reports.emplace_back(r, *final_value);
    }
  } else {
    auto it = m.val().find(lj.asha->key());
    if (it == m.val().end()) return;
    reports.emplace_back(m.epoch(), it->second);
  }
  for (const auto& [epoch, value] : reports) {
    const AshaRungs::Decision d = lj.asha->Record(where.trial, where.spec_task, epoch, value);
    if (d == AshaRungs::Decision::kNone || !act) continue;
    if (d == AshaRungs::Decision::kPrune) {
      LogInfo("trial pruned job=%s trial=%d rung=%d", lj.job.id(), where.trial, epoch);
      PruneTrialLocked(lj, where.trial);
      return;
    }
    LogInfo("trial promoted job=%s trial=%d rung=%d", lj.job.id(), where.trial, epoch);
    wake_ = true;  // its folds waiting at the rung go on
  }
}

bool Scheduler::AtTrialLimitLocked(const LiveJob& lj, int task) {
  const traind::v1::JobSpec& spec = lj.job.spec();
  if (!spec.has_search() || spec.search().max_concurrent_trials() <= 0) return false;
  const int per_trial = spec::PlanTasks(spec).tasks_per_trial;
  const int trials = static_cast<int>(lj.job.result().trials_size());
  const int trial = task / per_trial;
  if (trial >= trials) return false;  // the refit of the best trial
  std::set<int> running;
  for (const auto& [t, attempt] : lj.attempts) {
    if (t / per_trial < trials) running.insert(t / per_trial);
  }
  return running.count(trial) == 0 &&
         static_cast<int>(running.size()) >= spec.search().max_concurrent_trials();
}

}  // namespace traind::server
