#include "server/scheduler/search_controller.h"

#include <set>
#include <utility>

#include "server/store/job_states.h"
#include "spec/search.h"

namespace traind::server {

using traind::v1::Job;
using traind::v1::JobSpec;
using traind::v1::Task;
using traind::v1::TrialResult;

SearchController::SearchController(const JobSpec& spec)
    : plan_(spec::PlanTasks(spec)),
      searching_(spec.has_search()),
      max_concurrent_trials_(spec.has_search() ? spec.search().max_concurrent_trials() : 0),
      asha_(AshaRungs::ForJob(spec)) {}

absl::Status SearchController::InitTrials(Job* job) {
  const JobSpec& spec = job->spec();
  if (!spec.has_search()) return absl::OkStatus();
  // The trials' values, once (validated at submit: every trial is valid).
  const spec::TaskPlan plan = spec::PlanTasks(spec);
  job->mutable_result()->set_best_trial(-1);
  for (int i = 0; i < plan.trials; ++i) {
    absl::StatusOr<spec::Trial> trial = spec::MakeTrial(spec, i);
    if (!trial.ok()) return trial.status();
    TrialResult* tr = job->mutable_result()->add_trials();
    tr->set_trial(i);
    tr->set_state(TrialResult::QUEUED);
    tr->set_first_task(i * plan.tasks_per_trial);
    tr->set_tasks(plan.tasks_per_trial);
    for (const auto& [path, value] : trial->params) (*tr->mutable_params())[path] = value;
    if (trial->spec.training().epochs() != spec.training().epochs()) {  // a searched field
      for (int k = 0; k < plan.tasks_per_trial; ++k) {
        job->mutable_tasks(i * plan.tasks_per_trial + k)
            ->set_epochs_total(trial->spec.training().epochs());
      }
    }
  }
  return absl::OkStatus();
}

int SearchController::TrialOf(int task) const {
  if (!searching_ || task < 0 || task >= plan_.fold_tasks) return -1;
  return task / plan_.tasks_per_trial;
}

bool SearchController::EveryTrialFailed(const Job& job) {
  if (job.result().trials().empty()) return false;
  for (const TrialResult& tr : job.result().trials()) {
    if (tr.state() != TrialResult::FAILED) return false;
  }
  return true;
}

absl::StatusOr<SearchController::Assignment> SearchController::Assign(const Job& job,
                                                                      int task) const {
  Assignment a;
  if (!searching_) {
    a.spec = job.spec();
    a.spec_task = task;
    return a;
  }
  const int trial = TrialOf(task);
  if (trial >= 0) {
    absl::StatusOr<spec::Trial> made = spec::MakeTrial(job.spec(), trial);
    if (!made.ok()) return made.status();
    a.spec = std::move(made->spec);
    a.spec_task = task % plan_.tasks_per_trial;
    if (asha_.has_value()) a.pause_after = asha_->PauseAfter(trial);
    return a;
  }
  absl::StatusOr<std::pair<JobSpec, int>> refit =
      spec::RefitBestSpec(job.spec(), job.result().best_trial());
  if (!refit.ok()) return refit.status();
  a.spec = std::move(refit->first);
  a.spec_task = refit->second;
  return a;
}

bool SearchController::AtRung(const Job& job, int task) const {
  if (!asha_.has_value()) return false;
  const int trial = TrialOf(task);
  return trial >= 0 && asha_->WaitsAtRung(trial, job.tasks(task).epochs_done());
}

bool SearchController::AtTrialLimit(const Job& job, const std::vector<int>& running,
                                    int task) const {
  if (max_concurrent_trials_ <= 0) return false;
  const int trial = TrialOf(task);
  if (trial < 0 || trial >= job.result().trials_size()) return false;  // the refit
  std::set<int> running_trials;
  for (int t : running) {
    if (const int r = TrialOf(t); r >= 0) running_trials.insert(r);
  }
  return running_trials.count(trial) == 0 &&
         static_cast<int>(running_trials.size()) >= max_concurrent_trials_;
}

bool SearchController::RefitMayStart(const Job& job, int task) const {
  if (!plan_.refit || task != plan_.fold_tasks) return true;
  for (const Task& t : job.tasks()) {
    if (t.index() == task) continue;
    // A search refits its best trial once every trial has ended; a CV
    // refits once every fold succeeded.
    if (searching_ ? !IsTerminal(t.state()) : t.state() != Task::SUCCEEDED) return false;
  }
  return !searching_ || job.result().best_trial() >= 0;
}

std::vector<SearchController::Decision> SearchController::Record(
    int task, const std::vector<std::pair<int, double>>& reports) {
  std::vector<Decision> out;
  const int trial = TrialOf(task);
  if (!asha_.has_value() || trial < 0) return out;
  const int fold = task % plan_.tasks_per_trial;
  for (const auto& [epoch, value] : reports) {
    const AshaRungs::Decision d = asha_->Record(trial, fold, epoch, value);
    if (d == AshaRungs::Decision::kNone) continue;
    out.push_back(Decision{trial, epoch, d == AshaRungs::Decision::kPrune});
    if (out.back().prune) break;
  }
  return out;
}

std::vector<SearchController::Decision> SearchController::RecordEpoch(
    int task, const traind::v1::EpochMetrics& m) {
  if (!asha_.has_value()) return {};
  auto it = m.val().find(asha_->key());
  if (it == m.val().end()) return {};
  return Record(task, {{m.epoch(), it->second}});
}

std::vector<SearchController::Decision> SearchController::RecordFoldEnd(
    int task, int last_epoch, const traind::v1::FoldResult& result) {
  if (!asha_.has_value()) return {};
  auto it = result.val().find(asha_->key());
  if (it == result.val().end()) return {};
  std::vector<std::pair<int, double>> reports;
  for (int r : asha_->rungs()) {
    if (r > last_epoch) reports.emplace_back(r, it->second);
  }
  return Record(task, reports);
}

void SearchController::Replay(const std::vector<traind::v1::JobEvent>& events) {
  for (const traind::v1::JobEvent& e : events) {
    if (e.has_epoch()) {
      RecordEpoch(e.epoch().task(), e.epoch());
    } else if (e.has_task_state() && e.task_state().state() == Task::SUCCEEDED &&
               e.task_state().has_result()) {
      RecordFoldEnd(e.task_state().task(), e.task_state().result().epochs_run(),
                    e.task_state().result());
    }
  }
}

std::vector<int> SearchController::PrunedTrials() const {
  std::vector<int> out;
  for (int trial = 0; asha_.has_value() && trial < plan_.trials; ++trial) {
    if (asha_->Pruned(trial)) out.push_back(trial);
  }
  return out;
}

}  // namespace traind::server
