// The search controller of one job: which trial each task belongs to, what
// a trial's task trains, when a task may start (search.max_concurrent_trials,
// ASHA's rungs, the refit of the best trial or of a CV), and ASHA's
// decisions as epochs come in (docs/architecture.md, "Scheduler").
//
// For a job without spec.search every answer is the plain one: no trials,
// the job's own spec, nothing waits but a CV's refit for its folds.
//
//   question                      search with ASHA          search           CV / train
//   TrialOf(task)                 trial, -1 for the refit   same             -1
//   IsTrialFold(task)             not the refit             same             false
//   Assign(job, task)             trial spec, pause epoch   trial spec       job spec
//   AtRung(job, task)             waits for its decision    false            false
//   AtTrialLimit(job, run, task)  max_concurrent_trials     same             false
//   RefitMayStart(job, task)      every task ended, a best  same             every fold succeeded
//   RecordEpoch / RecordFoldEnd   promote or prune          nothing          nothing
//
// The scheduler acts on the answers (stops a pruned trial's tasks, wakes the
// dispatcher on a promotion); the controller holds no lock and does no I/O.
// Thread-safety: none (the scheduler's mutex guards it).
#ifndef TRAIND_SERVER_SCHEDULER_SEARCH_CONTROLLER_H_
#define TRAIND_SERVER_SCHEDULER_SEARCH_CONTROLLER_H_

#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "server/scheduler/asha.h"
#include "spec/task_plan.h"
#include "traind/v1/job.pb.h"

namespace traind::server {

class SearchController {
 public:
  SearchController() = default;  // a job without a search or refit
  explicit SearchController(const traind::v1::JobSpec& spec);

  // A new job: its trials table (each trial's params and tasks) and the
  // epochs_total of tasks whose trial searches training.epochs. No-op
  // without a search.
  static absl::Status InitTrials(traind::v1::Job* job);

  bool searching() const { return searching_; }
  // ASHA's rungs are rebuilt from the job's stored events on recovery.
  bool needs_history() const { return asha_.has_value(); }

  // The trial `task` belongs to; -1 without a search and for the refit of
  // the best trial.
  int TrialOf(int task) const;
  // A fold of a trial: its failure ends its trial, not the job.
  bool IsTrialFold(int task) const { return TrialOf(task) >= 0; }
  bool TrialPruned(int trial) const { return asha_.has_value() && asha_->Pruned(trial); }
  // Every trial failed (the job fails with them).
  static bool EveryTrialFailed(const traind::v1::Job& job);

  // What the worker of `task` trains.
  struct Assignment {
    traind::v1::JobSpec spec;
    int spec_task = 0;    // the task within `spec`
    int pause_after = 0;  // ASHA: stop after this epoch (0: never)
  };
  absl::StatusOr<Assignment> Assign(const traind::v1::Job& job, int task) const;

  // ASHA: a fold of a trial that has done its epochs up to a rung and waits
  // for its trial's decision there.
  bool AtRung(const traind::v1::Job& job, int task) const;
  // `task`'s trial would pass search.max_concurrent_trials, given the tasks
  // running now.
  bool AtTrialLimit(const traind::v1::Job& job, const std::vector<int>& running, int task) const;
  bool limits_trials() const { return max_concurrent_trials_ > 0; }
  // True for every task but a refit; a refit trains on all rows once every
  // fold has succeeded (a CV), or every trial has ended with a best one (a
  // search).
  bool RefitMayStart(const traind::v1::Job& job, int task) const;

  // An ASHA decision a report completed.
  struct Decision {
    int trial = 0;
    int rung = 0;        // the epoch
    bool prune = false;  // else promote
  };
  // An epoch of `task` reported; returns the decisions it completed, in
  // order (nothing after a prune: the trial is done).
  std::vector<Decision> RecordEpoch(int task, const traind::v1::EpochMetrics& m);
  // `task` succeeded after `last_epoch` epochs with `result`: a fold that
  // ended (early stopping) before later rungs counts at its score there.
  std::vector<Decision> RecordFoldEnd(int task, int last_epoch,
                                      const traind::v1::FoldResult& result);
  // Recovery: the job's stored events, in order, through the same rules
  // (decisions are not acted on again; trials pruned are in PrunedTrials).
  void Replay(const std::vector<traind::v1::JobEvent>& events);
  std::vector<int> PrunedTrials() const;

 private:
  std::vector<Decision> Record(int task, const std::vector<std::pair<int, double>>& reports);

  spec::TaskPlan plan_;
  bool searching_ = false;
  int max_concurrent_trials_ = 0;  // 0: no limit
  std::optional<AshaRungs> asha_;
};

}  // namespace traind::server

#endif  // TRAIND_SERVER_SCHEDULER_SEARCH_CONTROLLER_H_
