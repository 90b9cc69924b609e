// Deadlines on the scheduler's injected clock: heartbeats, the cancel grace
// and attempt times, without sleeping.
#include <signal.h>

#include <filesystem>
#include <memory>
#include <string>

#include "google/protobuf/util/time_util.h"
#include "gtest/gtest.h"
#include "server/scheduler/scheduler.h"
#include "server/store/job_store.h"
#include "server/testing/fake_clock.h"
#include "server/testing/fake_launcher.h"
#include "server/testing/scheduler_fixture.h"
#include "tests/testing/temp_dir.h"

namespace traind::server {
namespace {

using google::protobuf::util::TimeUtil;
using traind::v1::Failure;
using traind::v1::Job;
using traind::v1::Task;

class SchedulerClockTest : public ::testing::Test {
 protected:
  void SetUp() override { Open(absl::Seconds(30)); }
  // (Again) a started scheduler on the fake clock, with `heartbeat_timeout`
  // and a 10 s cancel grace.
  void Open(absl::Duration heartbeat_timeout) {
    scheduler_.reset();
    if (store_ == nullptr) {
      auto store = JobStore::Open(dir_.Path("traind.db"));
      ASSERT_TRUE(store.ok()) << store.status();
      store_ = *std::move(store);
    }
    SchedulerOptions o = TestSchedulerOptions(dir_.path());
    o.heartbeat_timeout = heartbeat_timeout;
    o.cancel_grace = absl::Seconds(10);
    o.clock = &clock_;
    scheduler_ = std::make_unique<Scheduler>(o, store_.get(), &launcher_);
    ASSERT_TRUE(scheduler_->Recover().ok());
    scheduler_->Start();
  }
  void TearDown() override { scheduler_.reset(); }

  bool Signalled(int pid, int sig) {
    for (auto [p, s] : launcher_.signals()) {
      if (p == pid && s == sig) return true;
    }
    return false;
  }
  // Moves the clock on and lets the scheduler look at its deadlines.
  void Advance(absl::Duration d) {
    clock_.Advance(d);
    scheduler_->EnforceDeadlines();
  }
  traind::v1::JobSpec OneTaskSpec() {
    traind::v1::JobSpec spec;
    spec.set_name("clock");
    spec.mutable_data()->set_path("/nonexistent.csv");
    spec.mutable_training()->set_epochs(1);
    return spec;
  }

  ::traind::testing::TempDir dir_{"traind-clock"};
  FakeClock clock_;
  FakeLauncher launcher_;
  std::unique_ptr<JobStore> store_;
  std::unique_ptr<Scheduler> scheduler_;
};

TEST_F(SchedulerClockTest, HeartbeatsKeepAWorkerAliveUntilItFallsSilent) {
  auto job = scheduler_->Submit(OneTaskSpec());
  ASSERT_TRUE(job.ok());
  ASSERT_TRUE(launcher_.WaitForLaunches(1));
  auto l = launcher_.launched()[0];
  ASSERT_TRUE(scheduler_->GetTask(CredentialsOf(l)).ok());  // the launch is recorded
  for (int i = 0; i < 10; ++i) {                            // five minutes of heartbeats every 29 s
    Advance(absl::Seconds(29));
    ASSERT_TRUE(scheduler_->Heartbeat(CredentialsOf(l)).ok());
  }
  Advance(absl::Seconds(30));
  EXPECT_TRUE(launcher_.signals().empty()) << "30 s of silence is within the timeout";
  Advance(absl::Seconds(1));
  ASSERT_TRUE(Signalled(l.pid, SIGKILL));
  EXPECT_EQ(launcher_.signals().size(), 1u);
  Advance(absl::Seconds(60));
  EXPECT_EQ(launcher_.signals().size(), 1u) << "killed once";
  launcher_.Exit(l.pid, 0, SIGKILL);
  auto view = scheduler_->GetJob(job->id());
  ASSERT_TRUE(view.ok());
  EXPECT_EQ(view->tasks(0).attempts(0).failure().reason(), Failure::TIMEOUT);
  EXPECT_NE(view->tasks(0).attempts(0).failure().message().find("31s"), std::string::npos)
      << view->tasks(0).attempts(0).failure().message();
  ASSERT_TRUE(launcher_.WaitForLaunches(2)) << "a hang is retried";
}

// Workers are told to say they are alive four times per timeout, at most
// every 2 s (their default): a timeout shorter than that default must not
// kill a worker that trains.
TEST(HeartbeatIntervalTest, AQuarterOfTheTimeoutAtMostTwoSeconds) {
  EXPECT_EQ(HeartbeatIntervalMs(absl::Seconds(30)), 2000);
  EXPECT_EQ(HeartbeatIntervalMs(absl::Seconds(8)), 2000);
  EXPECT_EQ(HeartbeatIntervalMs(absl::Seconds(6)), 1500);
  EXPECT_EQ(HeartbeatIntervalMs(absl::Milliseconds(1500)), 375);
  EXPECT_EQ(HeartbeatIntervalMs(absl::Milliseconds(2)), 1);
  EXPECT_EQ(HeartbeatIntervalMs(absl::ZeroDuration()), 1);
}

TEST_F(SchedulerClockTest, TheAssignmentCarriesTheHeartbeatInterval) {
  ASSERT_TRUE(scheduler_->Submit(OneTaskSpec()).ok());
  ASSERT_TRUE(launcher_.WaitForLaunches(1));
  absl::StatusOr<traind::v1::TaskAssignment> a =
      scheduler_->GetTask(CredentialsOf(launcher_.launched()[0]));
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->heartbeat_interval_ms(), 2000);  // 30 s: the default

  // A daemon whose timeout is shorter than the workers' default interval.
  Open(absl::Milliseconds(1500));
  const size_t launched = launcher_.launched().size();
  ASSERT_TRUE(scheduler_->Submit(OneTaskSpec()).ok());
  ASSERT_TRUE(launcher_.WaitForLaunches(launched + 1));
  a = scheduler_->GetTask(CredentialsOf(launcher_.launched().back()));
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->heartbeat_interval_ms(), 375);
}

TEST_F(SchedulerClockTest, ACancelledWorkerGetsItsGraceThenIsKilled) {
  auto job = scheduler_->Submit(OneTaskSpec());
  ASSERT_TRUE(launcher_.WaitForLaunches(1));
  auto l = launcher_.launched()[0];
  ASSERT_TRUE(scheduler_->Heartbeat(CredentialsOf(l)).ok());
  auto cancelling = scheduler_->Cancel(job->id(), /*force=*/false);
  ASSERT_TRUE(cancelling.ok());
  EXPECT_EQ(cancelling->state(), Job::CANCELLING);
  EXPECT_TRUE(Signalled(l.pid, SIGTERM));
  Advance(absl::Seconds(9));
  EXPECT_FALSE(Signalled(l.pid, SIGKILL)) << "within the grace";
  Advance(absl::Seconds(1));
  EXPECT_TRUE(Signalled(l.pid, SIGKILL));
  // Being stopped, it is not killed as silent as well.
  Advance(absl::Minutes(5));
  EXPECT_EQ(launcher_.signals().size(), 2u);
  launcher_.Exit(l.pid, 0, SIGKILL);
  auto done = scheduler_->GetJob(job->id());
  ASSERT_TRUE(done.ok());
  EXPECT_EQ(done->state(), Job::CANCELLED);
  EXPECT_EQ(done->tasks(0).state(), Task::CANCELLED);
}

TEST_F(SchedulerClockTest, AttemptAndJobTimesComeFromTheClock) {
  const absl::Time submitted = clock_.Now();
  auto job = scheduler_->Submit(OneTaskSpec());
  ASSERT_TRUE(job.ok());
  EXPECT_EQ(TimeUtil::TimestampToMicroseconds(job->create_time()), absl::ToUnixMicros(submitted));
  ASSERT_TRUE(launcher_.WaitForLaunches(1));
  auto l = launcher_.launched()[0];
  ASSERT_TRUE(scheduler_->GetTask(CredentialsOf(l)).ok());
  Advance(absl::Seconds(7));
  traind::v1::ReportEventRequest finished;
  *finished.mutable_credentials() = CredentialsOf(l);
  finished.mutable_finished()->mutable_result()->set_best_epoch(1);
  ASSERT_TRUE(scheduler_->ReportEvent(finished).ok());
  launcher_.Exit(l.pid, 0);
  auto done = scheduler_->GetJob(job->id());
  ASSERT_TRUE(done.ok());
  ASSERT_EQ(done->state(), Job::SUCCEEDED);
  const auto& a = done->tasks(0).attempts(0);
  EXPECT_EQ(TimeUtil::TimestampToMicroseconds(a.end_time()) -
                TimeUtil::TimestampToMicroseconds(a.start_time()),
            7'000'000);
  EXPECT_EQ(TimeUtil::TimestampToMicroseconds(done->end_time()),
            absl::ToUnixMicros(submitted + absl::Seconds(7)));
  EXPECT_GE(scheduler_->LastLoopTime(), submitted);
  EXPECT_LE(scheduler_->LastLoopTime(), clock_.Now());
}

}  // namespace
}  // namespace traind::server
