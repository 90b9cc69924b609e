// The scheduler running a search (spec.search) on a fake launcher: trial
// order, a failed trial ends alone, ranks and the best trial, the refit of
// the best trial's spec.
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "server/scheduler/scheduler.h"
#include "server/store/job_store.h"
#include "server/testing/fake_launcher.h"
#include "server/testing/scheduler_fixture.h"
#include "spec/loader.h"
#include "tests/testing/temp_dir.h"

namespace traind::server {
namespace {

using traind::v1::Failure;
using traind::v1::Job;
using traind::v1::Task;
using traind::v1::TrialResult;

traind::v1::JobSpec SearchSpec() {
  absl::StatusOr<traind::v1::JobSpec> spec = spec::ParseJobSpec(R"(
name: search
data: {path: /nonexistent.csv, label: y}
cross_validation: {folds: 2}
model: {layers: [{dense: {units: 3}}]}
loss: {softmax_cross_entropy: {}}
optimizer: {adam: {learning_rate: 0.5}}
training: {epochs: 2}
metrics: {val: [loss, accuracy]}
search:
  space: [{path: optimizer.adam.learning_rate, values: [0.1, 0.01, 0.001]}]
  sampler: {grid: {}}
  metric: val.accuracy
  refit_best: true
)",
                                                                "search.yaml");
  EXPECT_TRUE(spec.ok()) << spec.status();
  return *spec;
}

class SchedulerSearchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto store = JobStore::Open(dir_.path() + "/traind.db");
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = *std::move(store);
    SchedulerOptions o = TestSchedulerOptions(dir_.path());
    o.cpu_slots = 1;  // one task at a time, in task order
    launcher_ = std::make_unique<FakeLauncher>();
    scheduler_ = std::make_unique<Scheduler>(o, store_.get(), launcher_.get());
    ASSERT_TRUE(scheduler_->Recover().ok());
    scheduler_->Start();
  }
  void TearDown() override {
    scheduler_.reset();
    launcher_.reset();
  }

  // The assignment of launch n, once it is there.
  traind::v1::TaskAssignment Assignment(size_t n) {
    EXPECT_TRUE(launcher_->WaitForLaunches(static_cast<int>(n + 1)));
    absl::StatusOr<traind::v1::TaskAssignment> a =
        scheduler_->GetTask(CredentialsOf(launcher_->launched()[n]));
    EXPECT_TRUE(a.ok()) << a.status();
    return a.ok() ? *a : traind::v1::TaskAssignment();
  }
  void Succeed(size_t n, double accuracy) {
    const FakeLauncher::Launched l = launcher_->launched()[n];
    traind::v1::ReportEventRequest finished;
    *finished.mutable_credentials() = CredentialsOf(l);
    finished.mutable_finished()->mutable_result()->set_best_epoch(2);
    finished.mutable_finished()->mutable_result()->set_epochs_run(2);
    (*finished.mutable_finished()->mutable_result()->mutable_val())["accuracy"] = accuracy;
    ASSERT_TRUE(scheduler_->ReportEvent(finished).ok());
    launcher_->Exit(l.pid, 0);
  }
  void Fail(size_t n) {
    const FakeLauncher::Launched l = launcher_->launched()[n];
    traind::v1::ReportEventRequest failed;
    *failed.mutable_credentials() = CredentialsOf(l);
    failed.mutable_failed()->mutable_failure()->set_reason(Failure::DIVERGED);
    failed.mutable_failed()->mutable_failure()->set_message("the loss became NaN at epoch 1");
    ASSERT_TRUE(scheduler_->ReportEvent(failed).ok());
    launcher_->Exit(l.pid, 1);
  }

  traind::testing::TempDir dir_{"traind-search"};
  std::unique_ptr<JobStore> store_;
  std::unique_ptr<FakeLauncher> launcher_;
  std::unique_ptr<Scheduler> scheduler_;
};

TEST_F(SchedulerSearchTest, AFailedTrialEndsAloneTheBestIsRankedAndRefit) {
  absl::StatusOr<Job> job = scheduler_->Submit(SearchSpec());
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_EQ(job->tasks_size(), 3 * 2 + 1);
  ASSERT_EQ(job->result().trials_size(), 3);
  EXPECT_EQ(job->result().best_trial(), -1);
  EXPECT_EQ(job->result().trials(1).params().at("optimizer.adam.learning_rate"), "0.01");

  // Trial 0's first fold: its own spec, task 0 of it. It diverges: the
  // trial fails, its other fold is cancelled, the search goes on.
  traind::v1::TaskAssignment a = Assignment(0);
  EXPECT_EQ(a.task(), 0);
  EXPECT_EQ(a.spec().optimizer().adam().learning_rate(), 0.1);
  EXPECT_FALSE(a.spec().has_search());
  EXPECT_EQ(a.spec_task(), 0);
  Fail(0);
  a = Assignment(1);
  EXPECT_EQ(a.task(), 2);  // trial 1, fold 0
  EXPECT_EQ(a.spec().optimizer().adam().learning_rate(), 0.01);
  EXPECT_EQ(a.spec_task(), 0);
  EXPECT_EQ(a.fold(), 0);
  {
    // Its worker starts: the trials table says trial 1 runs, trial 0 failed.
    traind::v1::ReportEventRequest started;
    *started.mutable_credentials() = CredentialsOf(launcher_->launched()[1]);
    started.mutable_started();
    ASSERT_TRUE(scheduler_->ReportEvent(started).ok());
    absl::StatusOr<Job> view = scheduler_->GetJob(job->id());
    ASSERT_TRUE(view.ok());
    EXPECT_EQ(view->result().trials(0).state(), TrialResult::FAILED);
    EXPECT_EQ(view->result().trials(1).state(), TrialResult::RUNNING);
    EXPECT_EQ(view->result().trials(2).state(), TrialResult::QUEUED);
  }
  Succeed(1, 0.8);
  a = Assignment(2);
  EXPECT_EQ(a.task(), 3);  // trial 1, fold 1
  EXPECT_EQ(a.spec_task(), 1);
  Succeed(2, 0.9);
  a = Assignment(3);
  EXPECT_EQ(a.spec().optimizer().adam().learning_rate(), 0.001);
  Succeed(3, 0.9);
  Assignment(4);
  Succeed(4, 0.95);

  // The refit of the best trial (trial 2: 0.925 > 0.85): its spec, on all rows.
  a = Assignment(5);
  EXPECT_EQ(a.task(), 6);
  EXPECT_EQ(a.spec().optimizer().adam().learning_rate(), 0.001);
  EXPECT_TRUE(a.spec().cross_validation().refit());
  EXPECT_EQ(a.spec_task(), 2);  // the trial spec's refit task
  Succeed(5, 0);

  absl::StatusOr<Job> done = scheduler_->GetJob(job->id());
  ASSERT_TRUE(done.ok());
  EXPECT_EQ(done->state(), Job::SUCCEEDED);
  EXPECT_EQ(done->tasks(0).state(), Task::FAILED);
  EXPECT_EQ(done->tasks(1).state(), Task::CANCELLED);
  const traind::v1::JobResult& r = done->result();
  EXPECT_EQ(r.trials(0).state(), TrialResult::FAILED);
  EXPECT_EQ(r.trials(0).rank(), 0);
  EXPECT_EQ(r.trials(1).state(), TrialResult::SUCCEEDED);
  EXPECT_DOUBLE_EQ(r.trials(1).score(), 0.85);
  EXPECT_DOUBLE_EQ(r.trials(1).val().at("accuracy").std(), 0.05);
  EXPECT_EQ(r.trials(1).rank(), 2);
  EXPECT_DOUBLE_EQ(r.trials(2).score(), 0.925);
  EXPECT_EQ(r.trials(2).rank(), 1);
  EXPECT_EQ(r.trials(2).epochs_run(), 4);
  EXPECT_EQ(r.best_trial(), 2);
  ASSERT_EQ(r.folds_size(), 2);  // the best trial's
  EXPECT_EQ(r.folds(1).val().at("accuracy"), 0.95);
  EXPECT_DOUBLE_EQ(r.val().at("accuracy").mean(), 0.925);
  EXPECT_TRUE(r.has_refit());
  // The store has the same.
  absl::StatusOr<Job> stored = scheduler_->store()->LoadJob(job->id());
  ASSERT_TRUE(stored.ok());
  EXPECT_EQ(stored->result().best_trial(), 2);
}

TEST_F(SchedulerSearchTest, TiesShareTheLowerRankAndEveryTrialFailingFailsTheJob) {
  absl::StatusOr<Job> job = scheduler_->Submit(SearchSpec());
  ASSERT_TRUE(job.ok()) << job.status();
  Assignment(0);
  Succeed(0, 0.5);
  Assignment(1);
  Succeed(1, 0.7);  // trial 0: 0.6
  Assignment(2);
  Succeed(2, 0.7);
  Assignment(3);
  Succeed(3, 0.5);  // trial 1: 0.6, a tie
  Assignment(4);
  Fail(4);  // trial 2 fails
  absl::StatusOr<traind::v1::TaskAssignment> refit = [&] {
    EXPECT_TRUE(launcher_->WaitForLaunches(6));
    return scheduler_->GetTask(CredentialsOf(launcher_->launched()[5]));
  }();
  ASSERT_TRUE(refit.ok());
  EXPECT_EQ(refit->task(), 6);  // the first of the tied trials is the best
  EXPECT_EQ(refit->spec().optimizer().adam().learning_rate(), 0.1);
  Succeed(5, 0);
  absl::StatusOr<Job> done = scheduler_->GetJob(job->id());
  ASSERT_TRUE(done.ok());
  EXPECT_EQ(done->state(), Job::SUCCEEDED);
  EXPECT_EQ(done->result().trials(0).rank(), 1);
  EXPECT_EQ(done->result().trials(1).rank(), 1);
  EXPECT_EQ(done->result().best_trial(), 0);
  EXPECT_EQ(done->result().trials(2).state(), TrialResult::FAILED);

  // A search whose every trial fails has failed.
  absl::StatusOr<Job> doomed = scheduler_->Submit(SearchSpec());
  ASSERT_TRUE(doomed.ok());
  for (size_t n = 6; n < 9; ++n) {
    Assignment(n);
    Fail(n);
  }
  absl::StatusOr<Job> failed = scheduler_->GetJob(doomed->id());
  ASSERT_TRUE(failed.ok());
  EXPECT_EQ(failed->state(), Job::FAILED);
  EXPECT_EQ(failed->failure().reason(), Failure::DIVERGED);
  EXPECT_EQ(failed->failure().message(),
            "every trial failed; the last, trial 2: the loss became NaN at epoch 1");
  EXPECT_EQ(failed->tasks(6).state(), Task::CANCELLED);  // no refit
}

traind::v1::JobSpec AshaSpec() {
  traind::v1::JobSpec spec = SearchSpec();
  spec.mutable_training()->set_epochs(10);
  spec.mutable_search()->set_refit_best(true);
  spec.mutable_search()->mutable_asha()->set_grace_epochs(1);
  spec.mutable_search()->mutable_asha()->set_reduction_factor(3);  // rungs 1, 3, 9
  return spec;
}

class SchedulerAshaTest : public SchedulerSearchTest {
 protected:
  // Launch n: checks the task and where it pauses, resumes after `from`
  // (a checkpoint), reports epochs from + 1 .. to at `accuracy`, then pauses
  // there (stops as on request), or finishes when `finish`.
  void Attempt(size_t n, int task, int pause_after, int from, int to, double accuracy,
               bool finish = false) {
    SCOPED_TRACE(absl::StrCat("launch ", n, " task ", task));
    traind::v1::TaskAssignment a = Assignment(n);
    ASSERT_EQ(a.task(), task);
    EXPECT_EQ(a.pause_after_epoch(), pause_after);
    const traind::v1::AttemptCredentials c = CredentialsOf(launcher_->launched()[n]);
    if (from > 0) {
      traind::v1::ReportEventRequest resumed;
      *resumed.mutable_credentials() = c;
      resumed.mutable_resumed()->set_completed_epochs(from);
      ASSERT_TRUE(scheduler_->ReportEvent(resumed).ok());
    }
    for (int e = from + 1; e <= to; ++e) {
      traind::v1::EpochMetrics m;
      m.set_epoch(e);
      (*m.mutable_val())["accuracy"] = accuracy;
      ASSERT_TRUE(scheduler_->ReportEpoch(c, m).ok());
    }
    if (finish) {
      traind::v1::ReportEventRequest finished;
      *finished.mutable_credentials() = c;
      finished.mutable_finished()->mutable_result()->set_best_epoch(to);
      finished.mutable_finished()->mutable_result()->set_epochs_run(to);
      (*finished.mutable_finished()->mutable_result()->mutable_val())["accuracy"] = accuracy;
      ASSERT_TRUE(scheduler_->ReportEvent(finished).ok());
      launcher_->Exit(launcher_->launched()[n].pid, 0);
      return;
    }
    Stopped(n);
  }
  // The worker of launch n stopped on request (a pause, or a prune's stop).
  void Stopped(size_t n) {
    traind::v1::ReportEventRequest stopped;
    *stopped.mutable_credentials() = CredentialsOf(launcher_->launched()[n]);
    stopped.mutable_failed()->mutable_failure()->set_reason(Failure::CANCELLED);
    stopped.mutable_failed()->mutable_failure()->set_message("stopped on request");
    ASSERT_TRUE(scheduler_->ReportEvent(stopped).ok());
    launcher_->Exit(launcher_->launched()[n].pid, 1);
  }
};

// Rungs at epochs 1, 3 and 9; fold-means (val.accuracy) of trial 0: 0.6,
// trial 1: 0.5, trial 2: 0.8. Folds pause at each rung until their trial's
// other fold gets there; trial 1 (0.5 < the 66.7th percentile of {0.6})
// is pruned at rung 1; trial 2 (0.8 against {0.6, 0.5}: cutoff ≈ 0.567) goes
// on; the refit trains the best.
TEST_F(SchedulerAshaTest, FoldsPauseAtRungsPoorTrialsArePrunedTheRestResume) {
  absl::StatusOr<Job> job = scheduler_->Submit(AshaSpec());
  ASSERT_TRUE(job.ok()) << job.status();
  Attempt(0, 0, 1, 0, 1, 0.6);  // trial 0 fold 0 waits at rung 1
  absl::StatusOr<Job> view = scheduler_->GetJob(job->id());
  ASSERT_TRUE(view.ok());
  EXPECT_EQ(view->tasks(0).state(), Task::QUEUED);
  EXPECT_EQ(view->tasks(0).wait_reason(), Task::RUNG);
  Attempt(1, 1, 1, 0, 1, 0.6);  // trial 0 promoted at rung 1
  Attempt(2, 0, 3, 1, 3, 0.6);  // resumed after epoch 1, to rung 3
  Attempt(3, 1, 3, 1, 3, 0.6);
  Attempt(4, 0, 9, 3, 9, 0.6);
  Attempt(5, 1, 9, 3, 9, 0.6);
  Attempt(6, 0, 0, 9, 10, 0.6, /*finish=*/true);  // no rung left
  Attempt(7, 1, 0, 9, 10, 0.6, /*finish=*/true);
  Attempt(8, 2, 1, 0, 1, 0.5);  // trial 1 fold 0 waits at rung 1
  // Trial 1's fold 1 completes the rung: pruned; the waiting fold ends PRUNED,
  // the running one is stopped and ends PRUNED too.
  {
    traind::v1::TaskAssignment a = Assignment(9);
    ASSERT_EQ(a.task(), 3);
    traind::v1::EpochMetrics m;
    m.set_epoch(1);
    (*m.mutable_val())["accuracy"] = 0.5;
    absl::StatusOr<bool> stop = scheduler_->ReportEpoch(CredentialsOf(launcher_->launched()[9]), m);
    ASSERT_TRUE(stop.ok());
    view = scheduler_->GetJob(job->id());
    ASSERT_TRUE(view.ok());
    EXPECT_EQ(view->tasks(2).state(), Task::PRUNED);
    Stopped(9);
  }
  Attempt(10, 4, 1, 0, 1, 0.8);
  Attempt(11, 5, 1, 0, 1, 0.8);  // promoted at rung 1
  Attempt(12, 4, 3, 1, 3, 0.8);
  Attempt(13, 5, 3, 1, 3, 0.8);  // promoted at rung 3 (against {0.6})
  Attempt(14, 4, 9, 3, 9, 0.8);
  Attempt(15, 5, 9, 3, 9, 0.8);
  Attempt(16, 4, 0, 9, 10, 0.8, true);
  Attempt(17, 5, 0, 9, 10, 0.8, true);
  // The refit of the best trial (2).
  traind::v1::TaskAssignment refit = Assignment(18);
  EXPECT_EQ(refit.task(), 6);
  EXPECT_EQ(refit.spec().optimizer().adam().learning_rate(), 0.001);
  EXPECT_EQ(refit.pause_after_epoch(), 0);
  Succeed(18, 0);

  absl::StatusOr<Job> done = scheduler_->GetJob(job->id());
  ASSERT_TRUE(done.ok());
  EXPECT_EQ(done->state(), Job::SUCCEEDED) << done->failure().DebugString();
  EXPECT_EQ(done->tasks(3).state(), Task::PRUNED);
  const traind::v1::JobResult& r = done->result();
  EXPECT_EQ(r.trials(0).state(), TrialResult::SUCCEEDED);
  EXPECT_EQ(r.trials(1).state(), TrialResult::PRUNED);
  EXPECT_EQ(r.trials(1).rank(), 0);
  EXPECT_EQ(r.trials(1).epochs_run(), 2);  // one epoch per fold
  EXPECT_EQ(r.trials(2).state(), TrialResult::SUCCEEDED);
  EXPECT_EQ(r.trials(2).rank(), 1);
  EXPECT_EQ(r.trials(0).rank(), 2);
  EXPECT_EQ(r.best_trial(), 2);
  // Every fold that went on was resumed from its rung: 4 attempts each.
  EXPECT_EQ(done->tasks(0).attempts_size(), 4);
  EXPECT_EQ(done->tasks(2).attempts_size(), 1);
}

// A restart in the middle: the rungs' decisions are rebuilt from the stored
// epochs, so a fold waiting at a rung still waits and the next decision
// compares with what was recorded before the restart.
TEST_F(SchedulerAshaTest, ARestartRebuildsTheRungsFromTheStoredEpochs) {
  absl::StatusOr<Job> job = scheduler_->Submit(AshaSpec());
  ASSERT_TRUE(job.ok()) << job.status();
  Attempt(0, 0, 1, 0, 1, 0.6);
  Attempt(1, 1, 1, 0, 1, 0.6);  // trial 0 promoted at rung 1 with 0.6
  Attempt(2, 0, 3, 1, 3, 0.6);  // trial 0 fold 0 waits at rung 3
  // A new scheduler on the same store.
  scheduler_.reset();
  launcher_ = std::make_unique<FakeLauncher>();
  SchedulerOptions o = TestSchedulerOptions(dir_.path());
  o.cpu_slots = 1;
  scheduler_ = std::make_unique<Scheduler>(o, store_.get(), launcher_.get());
  ASSERT_TRUE(scheduler_->Recover().ok());
  scheduler_->Start();
  absl::StatusOr<Job> view = scheduler_->GetJob(job->id());
  ASSERT_TRUE(view.ok());
  EXPECT_EQ(view->tasks(0).wait_reason(), Task::RUNG);
  // Fold 1 goes first (fold 0 waits for it at rung 3), from its rung-1 checkpoint.
  Attempt(0, 1, 3, 1, 3, 0.6);  // trial 0 promoted at rung 3
  Attempt(1, 0, 9, 3, 9, 0.6);
  Attempt(2, 1, 9, 3, 9, 0.6);
  Attempt(3, 0, 0, 9, 10, 0.6, true);
  Attempt(4, 1, 0, 9, 10, 0.6, true);
  Attempt(5, 2, 1, 0, 1, 0.5);
  {
    // 0.5 against the 0.6 recorded before the restart: pruned.
    traind::v1::TaskAssignment a = Assignment(6);
    ASSERT_EQ(a.task(), 3);
    traind::v1::EpochMetrics m;
    m.set_epoch(1);
    (*m.mutable_val())["accuracy"] = 0.5;
    ASSERT_TRUE(scheduler_->ReportEpoch(CredentialsOf(launcher_->launched()[6]), m).ok());
    Stopped(6);
  }
  view = scheduler_->GetJob(job->id());
  ASSERT_TRUE(view.ok());
  EXPECT_EQ(view->tasks(2).state(), Task::PRUNED);
  EXPECT_EQ(view->tasks(3).state(), Task::PRUNED);
}

TEST(SchedulerSearchLimitTest, AtMostMaxConcurrentTrialsRunAtOnce) {
  traind::testing::TempDir dir("traind-search-limit");
  auto store = JobStore::Open(dir.path() + "/traind.db");
  ASSERT_TRUE(store.ok()) << store.status();
  SchedulerOptions o = TestSchedulerOptions(dir.path());
  o.cpu_slots = 4;
  FakeLauncher launcher;
  Scheduler scheduler(o, store->get(), &launcher);
  ASSERT_TRUE(scheduler.Recover().ok());
  scheduler.Start();
  traind::v1::JobSpec spec = SearchSpec();
  spec.mutable_search()->set_max_concurrent_trials(1);
  absl::StatusOr<Job> job = scheduler.Submit(spec);
  ASSERT_TRUE(job.ok()) << job.status();
  // Four slots, but trial 0's two folds alone start.
  ASSERT_TRUE(launcher.WaitForLaunches(2));
  absl::SleepFor(absl::Milliseconds(300));
  ASSERT_EQ(launcher.launched().size(), 2u);
  absl::StatusOr<Job> view = scheduler.GetJob(job->id());
  ASSERT_TRUE(view.ok());
  EXPECT_EQ(view->tasks(2).state(), Task::QUEUED);
  EXPECT_EQ(view->tasks(2).wait_reason(), Task::JOB_LIMIT);
  // One of trial 0's folds ends: still trial 0 running, trial 1 waits.
  auto finish = [&](size_t n) {
    const FakeLauncher::Launched l = launcher.launched()[n];
    traind::v1::ReportEventRequest finished;
    *finished.mutable_credentials() = CredentialsOf(l);
    (*finished.mutable_finished()->mutable_result()->mutable_val())["accuracy"] = 0.5;
    ASSERT_TRUE(scheduler.ReportEvent(finished).ok());
    launcher.Exit(l.pid, 0);
  };
  finish(0);
  absl::SleepFor(absl::Milliseconds(300));
  EXPECT_EQ(launcher.launched().size(), 2u);
  finish(1);
  // Trial 0 is done: trial 1's two folds start together.
  ASSERT_TRUE(launcher.WaitForLaunches(4));
  EXPECT_EQ(launcher.launched()[2].Arg("task"), "2");
  EXPECT_EQ(launcher.launched()[3].Arg("task"), "3");
  scheduler.Stop();
}

}  // namespace
}  // namespace traind::server
