// The scheduler running a search (spec.search) on a fake launcher: trial
// order, a failed trial ends alone, ranks and the best trial, the refit of
// the best trial's spec.
#include <memory>
#include <string>

#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "server/scheduler/scheduler.h"
#include "server/store/job_store.h"
#include "server/testing/fake_launcher.h"
#include "server/testing/test_scheduler.h"
#include "spec/loader.h"
#include "tests/testing/temp_dir.h"

namespace traind::server {
namespace {

using traind::v1::Failure;
using traind::v1::Job;
using traind::v1::Task;
using traind::v1::TrialResult;

traind::v1::JobSpec SearchSpec() {
  absl::StatusOr<traind::v1::JobSpec> spec = ParseJobSpec(R"(
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
