// The search controller's rules, one table per question (search_controller.h),
// with values derived by hand: ASHA's rungs at grace_epochs · η^k, a trial
// pruned below the (1 − 1/η) quantile of the fold-means recorded before it
// at a rung (numpy's linear interpolation).
#include "server/scheduler/search_controller.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "spec/loader.h"

namespace traind::server {
namespace {

using traind::v1::Job;
using traind::v1::JobSpec;
using traind::v1::Task;
using traind::v1::TrialResult;

// Three trials (learning rates 0.1, 0.01, 0.001) of a 2-fold CV, 9 epochs,
// the best refit: tasks 0–1 trial 0, 2–3 trial 1, 4–5 trial 2, 6 the refit.
// With ASHA (grace 1, η 3): rungs at epochs 1 and 3.
JobSpec Spec(bool search, bool asha, int max_concurrent_trials = 0) {
  std::string yaml = R"(
name: search
data: {path: /nonexistent.csv, label: y}
cross_validation: {folds: 2, refit: true}
model: {layers: [{dense: {units: 3}}]}
loss: {softmax_cross_entropy: {}}
optimizer: {adam: {learning_rate: 0.5}}
training: {epochs: 9}
metrics: {val: [loss, accuracy]}
)";
  if (search) {
    yaml += R"(search:
  space: [{path: optimizer.adam.learning_rate, values: [0.1, 0.01, 0.001]}]
  sampler: {grid: {}}
  metric: val.accuracy
  refit_best: true
)";
    yaml += "  max_concurrent_trials: " + std::to_string(max_concurrent_trials) + "\n";
    if (asha) yaml += "  asha: {grace_epochs: 1, reduction_factor: 3}\n";
  }
  absl::StatusOr<JobSpec> spec = spec::ParseJobSpec(yaml, "search.yaml");
  EXPECT_TRUE(spec.ok()) << spec.status();
  return spec.ok() ? *spec : JobSpec();
}

// A job of `spec` with its tasks in `states` (and epochs done).
Job JobOf(const JobSpec& spec, const std::vector<Task::State>& states,
          const std::vector<int>& epochs_done = {}) {
  Job job;
  *job.mutable_spec() = spec;
  job.set_id("j");
  for (size_t i = 0; i < states.size(); ++i) {
    Task* t = job.add_tasks();
    t->set_index(static_cast<int>(i));
    t->set_state(states[i]);
    if (i < epochs_done.size()) t->set_epochs_done(epochs_done[i]);
  }
  EXPECT_TRUE(SearchController::InitTrials(&job).ok());
  return job;
}

traind::v1::EpochMetrics Epoch(int task, int epoch, double accuracy) {
  traind::v1::EpochMetrics m;
  m.set_task(task);
  m.set_epoch(epoch);
  (*m.mutable_val())["accuracy"] = accuracy;
  (*m.mutable_val())["loss"] = 1 - accuracy;
  return m;
}

traind::v1::FoldResult Result(int epochs_run, double accuracy) {
  traind::v1::FoldResult r;
  r.set_epochs_run(epochs_run);
  (*r.mutable_val())["accuracy"] = accuracy;
  return r;
}

constexpr Task::State Q = Task::QUEUED;
constexpr Task::State R = Task::RUNNING;
constexpr Task::State S = Task::SUCCEEDED;
constexpr Task::State F = Task::FAILED;
constexpr Task::State P = Task::PRUNED;

TEST(SearchControllerTest, TrialOfEachTask) {
  struct Row {
    bool search;
    int task;
    int trial;
  } rows[] = {
      {false, 0, -1}, {false, 2, -1},                // a CV: no trials
      {true, 0, 0},   {true, 1, 0},   {true, 2, 1},  // folds of trials
      {true, 5, 2},   {true, 6, -1},                 // the refit of the best trial
  };
  for (const Row& r : rows) {
    SearchController c(Spec(r.search, false));
    EXPECT_EQ(c.TrialOf(r.task), r.trial) << "search=" << r.search << " task=" << r.task;
    EXPECT_EQ(c.IsTrialFold(r.task), r.trial >= 0);
  }
}

TEST(SearchControllerTest, InitTrialsWritesTheTrialsTable) {
  const Job job = JobOf(Spec(true, false), std::vector<Task::State>(7, Q));
  ASSERT_EQ(job.result().trials_size(), 3);
  EXPECT_EQ(job.result().best_trial(), -1);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(job.result().trials(i).first_task(), 2 * i);
    EXPECT_EQ(job.result().trials(i).tasks(), 2);
    EXPECT_EQ(job.result().trials(i).state(), TrialResult::QUEUED);
  }
  EXPECT_EQ(job.result().trials(1).params().at("optimizer.adam.learning_rate"), "0.01");
  // Without a search: nothing.
  EXPECT_EQ(JobOf(Spec(false, false), {Q, Q, Q}).result().trials_size(), 0);
}

TEST(SearchControllerTest, AssignGivesEachTaskItsSpec) {
  struct Row {
    bool search;
    int task;
    int best_trial;
    double learning_rate;  // of the spec the worker trains
    int spec_task;
    bool refit;  // the spec refits (its refit task is spec_task)
  } rows[] = {
      {false, 1, -1, 0.5, 1, true},   // a CV's fold: the job's own spec
      {true, 0, -1, 0.1, 0, true},    // trial 0, fold 0
      {true, 3, -1, 0.01, 1, true},   // trial 1, fold 1
      {true, 4, -1, 0.001, 0, true},  // trial 2, fold 0
      {true, 6, 1, 0.01, 2, true},    // the refit of trial 1: its refit task
  };
  for (const Row& r : rows) {
    SearchController c(Spec(r.search, false));
    Job job = JobOf(Spec(r.search, false), std::vector<Task::State>(r.search ? 7 : 3, Q));
    job.mutable_result()->set_best_trial(r.best_trial);
    absl::StatusOr<SearchController::Assignment> a = c.Assign(job, r.task);
    ASSERT_TRUE(a.ok()) << a.status();
    EXPECT_DOUBLE_EQ(a->spec.optimizer().adam().learning_rate(), r.learning_rate)
        << "task " << r.task;
    EXPECT_EQ(a->spec_task, r.spec_task) << "task " << r.task;
    EXPECT_EQ(a->spec.cross_validation().refit(), r.refit);
    EXPECT_FALSE(a->spec.has_search());
    EXPECT_EQ(a->pause_after, 0);  // no ASHA
  }
}

TEST(SearchControllerTest, RefitMayStartTable) {
  struct Row {
    const char* what;
    bool search;
    std::vector<Task::State> states;
    int best_trial;
    int task;
    bool may_start;
  } rows[] = {
      {"a fold always may", false, {Q, Q, Q}, -1, 0, true},
      {"CV refit: a fold runs", false, {S, R, Q}, -1, 2, false},
      {"CV refit: a fold failed", false, {S, F, Q}, -1, 2, false},
      {"CV refit: every fold succeeded", false, {S, S, Q}, -1, 2, true},
      {"search refit: a trial's fold runs", true, {S, S, S, R, S, S, Q}, 0, 6, false},
      {"search refit: all ended, a best", true, {S, S, F, P, P, P, Q}, 0, 6, true},
      {"search refit: all ended, no best", true, {F, F, P, P, F, P, Q}, -1, 6, false},
      {"a search's fold always may", true, {Q, Q, Q, Q, Q, Q, Q}, -1, 5, true},
  };
  for (const Row& r : rows) {
    SearchController c(Spec(r.search, false));
    Job job = JobOf(Spec(r.search, false), r.states);
    job.mutable_result()->set_best_trial(r.best_trial);
    EXPECT_EQ(c.RefitMayStart(job, r.task), r.may_start) << r.what;
  }
}

TEST(SearchControllerTest, TrialLimitTable) {
  struct Row {
    int max_concurrent_trials;
    std::vector<int> running;
    int task;
    bool at_limit;
  } rows[] = {
      {0, {0, 2, 4}, 1, false},  // no limit
      {1, {}, 2, false},         // nothing runs
      {1, {0}, 1, false},        // its own trial runs: its other fold may start
      {1, {0}, 2, true},         // another trial runs
      {2, {0}, 2, false},        // room for a second trial
      {2, {0, 3}, 4, true},      // trials 0 and 1 run
      {1, {0}, 6, false},        // the refit is no trial
  };
  for (const Row& r : rows) {
    SearchController c(Spec(true, false, r.max_concurrent_trials));
    const Job job =
        JobOf(Spec(true, false, r.max_concurrent_trials), std::vector<Task::State>(7, Q));
    EXPECT_EQ(c.AtTrialLimit(job, r.running, r.task), r.at_limit)
        << "max " << r.max_concurrent_trials << " task " << r.task;
  }
  // Not a search: never.
  SearchController cv(Spec(false, false));
  EXPECT_FALSE(cv.AtTrialLimit(JobOf(Spec(false, false), {Q, Q, Q}), {0}, 1));
}

// A step of an ASHA script and the decisions it must complete.
struct Step {
  enum Kind { kEpoch, kFoldEnd } kind;
  int task;
  int epoch;  // the epoch reported; kFoldEnd: the last epoch the fold ran
  double accuracy;
  std::vector<SearchController::Decision> want;
};

void ExpectDecisions(const std::vector<SearchController::Decision>& got,
                     const std::vector<SearchController::Decision>& want, size_t step) {
  ASSERT_EQ(got.size(), want.size()) << "step " << step;
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].trial, want[i].trial) << "step " << step;
    EXPECT_EQ(got[i].rung, want[i].rung) << "step " << step;
    EXPECT_EQ(got[i].prune, want[i].prune) << "step " << step;
  }
}

// Runs `steps` live, then the same as stored events through Replay: both
// end with the same pruned trials.
std::vector<int> RunScript(const std::vector<Step>& steps) {
  SearchController live(Spec(true, true));
  std::vector<traind::v1::JobEvent> events;
  for (size_t i = 0; i < steps.size(); ++i) {
    const Step& s = steps[i];
    traind::v1::JobEvent e;
    if (s.kind == Step::kEpoch) {
      *e.mutable_epoch() = Epoch(s.task, s.epoch, s.accuracy);
      ExpectDecisions(live.RecordEpoch(s.task, e.epoch()), s.want, i);
    } else {
      e.mutable_task_state()->set_task(s.task);
      e.mutable_task_state()->set_state(Task::SUCCEEDED);
      *e.mutable_task_state()->mutable_result() = Result(s.epoch, s.accuracy);
      ExpectDecisions(live.RecordFoldEnd(s.task, s.epoch, e.task_state().result()), s.want, i);
    }
    events.push_back(e);
  }
  SearchController replayed(Spec(true, true));
  replayed.Replay(events);
  EXPECT_EQ(replayed.PrunedTrials(), live.PrunedTrials());
  return live.PrunedTrials();
}

TEST(SearchControllerTest, AshaDecisionsAtRungs) {
  using D = SearchController::Decision;
  const std::vector<Step> steps = {
      // Rung 1. Trial 0: fold-mean 0.6, the first there: promoted once its
      // second fold reports.
      {Step::kEpoch, 0, 1, 0.5, {}},
      {Step::kEpoch, 1, 1, 0.7, {D{0, 1, false}}},
      // Trial 1: 0.2 below the 66.7th percentile of {0.6} (0.6): pruned.
      {Step::kEpoch, 2, 1, 0.2, {}},
      {Step::kEpoch, 3, 1, 0.2, {D{1, 1, true}}},
      // Trial 2: 0.9 against {0.2, 0.6}: 0.2 + ⅔·0.4 ≈ 0.467: promoted.
      {Step::kEpoch, 4, 1, 0.9, {}},
      {Step::kEpoch, 5, 1, 0.9, {D{2, 1, false}}},
      // An epoch that is no rung decides nothing.
      {Step::kEpoch, 0, 2, 0.1, {}},
      // Rung 3. Trial 0's fold 0 stopped early after epoch 2 at 0.8: it
      // counts at rung 3; fold 1 reports 0.6 there: mean 0.7, the first.
      {Step::kFoldEnd, 0, 2, 0.8, {}},
      {Step::kEpoch, 1, 3, 0.6, {D{0, 3, false}}},
      // A second report of a fold at a rung does not count again.
      {Step::kEpoch, 1, 3, 0.0, {}},
      // Trial 2: 0.5 against {0.7}: pruned.
      {Step::kEpoch, 4, 3, 0.5, {}},
      {Step::kEpoch, 5, 3, 0.5, {D{2, 3, true}}},
  };
  EXPECT_EQ(RunScript(steps), (std::vector<int>{1, 2}));
}

TEST(SearchControllerTest, AFoldEndingBeforeTwoRungsStopsAtItsPrune) {
  using D = SearchController::Decision;
  const std::vector<Step> steps = {
      {Step::kEpoch, 0, 1, 0.6, {}},
      {Step::kEpoch, 1, 1, 0.6, {D{0, 1, false}}},
      // Both folds of trial 1 ended after epoch 0 at 0.1 (early stopping):
      // each counts at rungs 1 and 3. At rung 1 (mean 0.1 against {0.6})
      // the trial is pruned, and nothing of it is decided at rung 3.
      {Step::kFoldEnd, 2, 0, 0.1, {}},
      {Step::kFoldEnd, 3, 0, 0.1, {D{1, 1, true}}},
      // So trial 2 is the first at rung 3: promoted whatever its mean.
      {Step::kEpoch, 4, 1, 0.9, {}},
      {Step::kEpoch, 5, 1, 0.9, {D{2, 1, false}}},
      {Step::kEpoch, 4, 3, 0.05, {}},
      {Step::kEpoch, 5, 3, 0.05, {D{2, 3, false}}},
  };
  EXPECT_EQ(RunScript(steps), (std::vector<int>{1}));
}

TEST(SearchControllerTest, AtRungAndPauseAfter) {
  SearchController c(Spec(true, true));
  // Trial 0's fold 0 has done 1 epoch (rung 1), undecided: it waits there
  // and a fold of it is told to pause after epoch 1.
  Job job = JobOf(Spec(true, true), {Q, R, Q, Q, Q, Q, Q}, {1, 0, 0, 0, 0, 0, 0});
  EXPECT_TRUE(c.AtRung(job, 0));
  EXPECT_FALSE(c.AtRung(job, 1));  // no epoch done yet
  ASSERT_TRUE(c.Assign(job, 1).ok());
  EXPECT_EQ(c.Assign(job, 1)->pause_after, 1);
  c.RecordEpoch(0, Epoch(0, 1, 0.5));
  c.RecordEpoch(1, Epoch(1, 1, 0.5));  // promoted at rung 1
  EXPECT_FALSE(c.AtRung(job, 0));
  EXPECT_EQ(c.Assign(job, 0)->pause_after, 3);  // the next rung
  EXPECT_EQ(c.Assign(job, 2)->pause_after, 1);  // trial 1: still rung 1
  job.mutable_result()->set_best_trial(0);
  absl::StatusOr<SearchController::Assignment> refit = c.Assign(job, 6);
  ASSERT_TRUE(refit.ok()) << refit.status();
  EXPECT_EQ(refit->pause_after, 0);  // the refit never pauses
  // Without ASHA: nothing waits.
  SearchController plain(Spec(true, false));
  EXPECT_FALSE(plain.AtRung(job, 0));
  EXPECT_FALSE(plain.needs_history());
  EXPECT_TRUE(c.needs_history());
}

TEST(SearchControllerTest, EveryTrialFailed) {
  Job job = JobOf(Spec(true, false), std::vector<Task::State>(7, Q));
  EXPECT_FALSE(SearchController::EveryTrialFailed(job));
  for (auto& tr : *job.mutable_result()->mutable_trials()) tr.set_state(TrialResult::FAILED);
  EXPECT_TRUE(SearchController::EveryTrialFailed(job));
  job.mutable_result()->mutable_trials(1)->set_state(TrialResult::PRUNED);
  EXPECT_FALSE(SearchController::EveryTrialFailed(job));
  EXPECT_FALSE(SearchController::EveryTrialFailed(JobOf(Spec(false, false), {Q, Q, Q})));
}

}  // namespace
}  // namespace traind::server
