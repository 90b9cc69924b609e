// Launches run without the scheduler's mutex: a slow launch blocks no other
// call, and a process that exits before its launch is recorded still ends
// its attempt.
#include <signal.h>

#include <filesystem>
#include <memory>
#include <string>

#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"
#include "server/scheduler/attempt_secrets.h"
#include "server/scheduler/scheduler.h"
#include "server/store/job_store.h"
#include "server/testing/fake_launcher.h"
#include "server/testing/scheduler_fixture.h"
#include "tests/testing/temp_dir.h"

namespace traind::server {
namespace {

using traind::v1::Failure;
using traind::v1::Job;
using traind::v1::Task;

class SchedulerLaunchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto store = JobStore::Open(dir_.Path("traind.db"));
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = *std::move(store);
    SchedulerOptions o = TestSchedulerOptions(dir_.path());
    o.attempt_key = kAttemptKey;
    scheduler_ = std::make_unique<Scheduler>(o, store_.get(), &launcher_);
    ASSERT_TRUE(scheduler_->Recover().ok());
  }
  void TearDown() override {
    launcher_.Release();
    launcher_.JoinExitThreads();
    scheduler_.reset();
  }
  traind::v1::JobSpec Spec(int folds) {
    traind::v1::JobSpec spec;
    spec.set_name("launch");
    spec.mutable_data()->set_path("/nonexistent.csv");
    if (folds > 1) spec.mutable_cross_validation()->set_folds(folds);
    spec.mutable_training()->set_epochs(1);
    return spec;
  }

  static constexpr char kAttemptKey[] = "launch-test-key";
  ::traind::testing::TempDir dir_{"traind-launch"};
  FakeLauncher launcher_;
  std::unique_ptr<JobStore> store_;
  std::unique_ptr<Scheduler> scheduler_;
};

TEST_F(SchedulerLaunchTest, ASlowLaunchBlocksNoOtherCall) {
  launcher_.Hold();
  scheduler_->Start();
  auto job = scheduler_->Submit(Spec(2));
  ASSERT_TRUE(job.ok());
  ASSERT_TRUE(launcher_.WaitForLaunchCalls(1));
  // The launch waits; the scheduler answers meanwhile.
  auto view = scheduler_->GetJob(job->id());
  ASSERT_TRUE(view.ok());
  EXPECT_EQ(view->state(), Job::QUEUED);
  EXPECT_TRUE(scheduler_->Submit(Spec(1)).ok());
  EXPECT_EQ(scheduler_->Stats().jobs_active, 2);
  EXPECT_TRUE(scheduler_->ListJobs({}).ok());
  launcher_.Release();
  ASSERT_TRUE(launcher_.WaitForLaunches(1));
  auto l = launcher_.launched()[0];
  traind::v1::AttemptCredentials c;
  c.set_job_id(l.Arg("job"));
  c.set_task(0);
  c.set_attempt(1);
  c.set_secret(l.Secret());
  ASSERT_TRUE(scheduler_->GetTask(c).ok()) << "a worker's call waits for the launch's record";
  view = scheduler_->GetJob(job->id());
  EXPECT_EQ(view->state(), Job::RUNNING);
  EXPECT_EQ(view->tasks(0).state(), Task::STARTING);
  EXPECT_EQ(view->tasks(0).attempts(0).pid(), l.pid);
}

// A worker's call that comes before its launch is recorded is handed over
// (AfterLaunchRecorded), never waited for on the caller's thread (a gRPC
// reactor), and made once the launch is recorded.
TEST_F(SchedulerLaunchTest, AWorkerCallBeforeItsLaunchIsRecordedIsDeferredNotWaitedFor) {
  launcher_.Hold();
  scheduler_->Start();
  auto job = scheduler_->Submit(Spec(1));
  ASSERT_TRUE(job.ok());
  ASSERT_TRUE(launcher_.WaitForLaunchCalls(1));
  traind::v1::AttemptCredentials c;
  c.set_job_id(job->id());
  c.set_task(0);
  c.set_attempt(1);
  c.set_secret(AttemptSecret(kAttemptKey, job->id(), 0, 1));
  absl::Notification answered;
  absl::StatusOr<traind::v1::TaskAssignment> task;
  ASSERT_TRUE(scheduler_->AfterLaunchRecorded(c, [&] {
    task = scheduler_->GetTask(c);  // on the dispatch thread, without the mutex
    answered.Notify();
  })) << "the attempt is being launched: the call is kept";
  EXPECT_FALSE(answered.WaitForNotificationWithTimeout(absl::Milliseconds(100)))
      << "not before the launch is recorded";
  // Another attempt's credentials, or a job that is not launching: call now.
  traind::v1::AttemptCredentials other = c;
  other.set_attempt(2);
  EXPECT_FALSE(scheduler_->AfterLaunchRecorded(other, [] {}));
  other.set_job_id("nojob");
  EXPECT_FALSE(scheduler_->AfterLaunchRecorded(other, [] {}));
  launcher_.Release();
  ASSERT_TRUE(answered.WaitForNotificationWithTimeout(absl::Seconds(10)));
  ASSERT_TRUE(task.ok()) << task.status();
  EXPECT_EQ(task->job_id(), job->id());
  EXPECT_EQ(task->attempt(), 1);
  EXPECT_FALSE(scheduler_->AfterLaunchRecorded(c, [] {})) << "recorded: call now";
}

TEST_F(SchedulerLaunchTest, ACancelDuringTheLaunchStopsTheWorkerOnceItIsRecorded) {
  launcher_.Hold();
  scheduler_->Start();
  auto job = scheduler_->Submit(Spec(1));
  ASSERT_TRUE(launcher_.WaitForLaunchCalls(1));
  auto cancelling = scheduler_->Cancel(job->id(), /*force=*/true);
  ASSERT_TRUE(cancelling.ok());
  EXPECT_EQ(cancelling->state(), Job::CANCELLING);
  launcher_.Release();
  ASSERT_TRUE(launcher_.WaitForLaunches(1));
  auto l = launcher_.launched()[0];
  traind::v1::AttemptCredentials c;
  c.set_job_id(job->id());
  c.set_attempt(1);
  c.set_secret(l.Secret());
  auto stop = scheduler_->Heartbeat(c);
  ASSERT_TRUE(stop.ok());
  EXPECT_TRUE(*stop);
  bool killed = false;
  for (auto [pid, sig] : launcher_.signals()) killed |= pid == l.pid && sig == SIGKILL;
  EXPECT_TRUE(killed) << "a forced cancel kills";
  launcher_.Exit(l.pid, 0, SIGKILL);
  auto done = scheduler_->GetJob(job->id());
  ASSERT_TRUE(done.ok());
  EXPECT_EQ(done->state(), Job::CANCELLED);
  EXPECT_EQ(done->tasks(0).state(), Task::CANCELLED);
}

TEST_F(SchedulerLaunchTest, AnExitBeforeTheLaunchIsRecordedEndsTheAttempt) {
  launcher_.set_exit_at_once(true);
  scheduler_->Start();
  auto job = scheduler_->Submit(Spec(1));
  ASSERT_TRUE(launcher_.WaitForLaunches(2)) << "the crash is retried";
  // The retry's exit may still be on its way: the job ends either way.
  for (int i = 0; i < 100; ++i) {
    auto view = scheduler_->GetJob(job->id());
    ASSERT_TRUE(view.ok());
    if (view->state() == Job::FAILED) break;
    absl::SleepFor(absl::Milliseconds(20));
  }
  auto done = scheduler_->GetJob(job->id());
  ASSERT_TRUE(done.ok());
  EXPECT_EQ(done->state(), Job::FAILED);
  ASSERT_EQ(done->tasks(0).attempts_size(), 2);
  EXPECT_EQ(done->tasks(0).attempts(0).failure().reason(), Failure::WORKER_CRASHED);
  EXPECT_EQ(done->tasks(0).attempts(0).failure().exit_code(), 1);
  EXPECT_EQ(done->tasks(0).attempts(1).failure().reason(), Failure::WORKER_CRASHED);
  launcher_.JoinExitThreads();
  EXPECT_EQ(launcher_.launched().size(), 2u) << "max_restarts = 1";
}

}  // namespace
}  // namespace traind::server
