// The scheduler on a state directory whose file system fills up: a real
// SQLite store on a 4 MiB tmpfs (mounted in a mount namespace of the test's
// own, so nothing outlives the test process).
#include <sys/mount.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "server/metrics/server_metrics.h"
#include "server/scheduler/scheduler.h"
#include "server/store/job_store.h"
#include "server/testing/fake_launcher.h"
#include "server/testing/scheduler_fixture.h"
#include "tests/testing/full_disk.h"
#include "tests/testing/temp_dir.h"

namespace traind::server {
namespace {

using traind::v1::Job;
using traind::v1::JobEvent;
using traind::v1::Task;

using ::traind::testing::FillUp;
using ::traind::testing::MountSmallTmpfs;

traind::v1::EpochMetrics Epoch(int e) {
  traind::v1::EpochMetrics m;
  m.set_epoch(e);
  // Wide rows, so that the store needs new pages soon.
  for (int i = 0; i < 64; ++i) {
    (*m.mutable_train())[absl::StrCat("metric_with_a_long_name_", i)] = 1.0 / (e + i);
  }
  return m;
}

traind::v1::JobSpec Spec(int folds) {
  traind::v1::JobSpec spec;
  spec.set_name("disk");
  spec.mutable_data()->set_path("/nonexistent.csv");
  if (folds > 0) spec.mutable_cross_validation()->set_folds(folds);
  spec.mutable_training()->set_epochs(1000);
  return spec;
}

// Plays a worker of launch `l` through its start.
void Start(Scheduler* s, const FakeLauncher::Launched& l) {
  const traind::v1::AttemptCredentials c = CredentialsOf(l);
  ASSERT_TRUE(s->GetTask(c).ok());
  traind::v1::ReportEventRequest started;
  *started.mutable_credentials() = c;
  started.mutable_started()->set_epochs_total(1000);
  absl::StatusOr<bool> reported = s->ReportEvent(started);
  ASSERT_TRUE(reported.ok()) << reported.status();
}

void Finish(Scheduler* s, FakeLauncher* launcher, const FakeLauncher::Launched& l) {
  traind::v1::ReportEventRequest finished;
  *finished.mutable_credentials() = CredentialsOf(l);
  finished.mutable_finished()->mutable_result()->set_best_epoch(1);
  ASSERT_TRUE(s->ReportEvent(finished).ok());
  launcher->Exit(l.pid, 0);
}

absl::Status AwaitStoreStatus(Scheduler* s, bool ok, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  absl::Status status = s->StoreStatus();
  while (status.ok() != ok && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(5));
    status = s->StoreStatus();
  }
  return status;
}

// A full disk: the store degrades (no abort), new jobs are refused with
// UNAVAILABLE and the reason, nothing new starts, the worker's report is
// acknowledged only once stored, reads are served; deleting a finished job
// frees its files first and so brings the store back, and everything that
// waited is stored in order, nothing lost.
TEST(SchedulerDiskFullTest, AFullDiskPausesRecordingRefusesNewJobsAndRecovers) {
  traind::testing::TempDir dir("traind-full");
  const std::string state = dir.path() + "/state";
  std::filesystem::create_directory(state);
  if (std::string why = MountSmallTmpfs(state, 4 << 20); !why.empty()) {
    GTEST_SKIP() << "needs a tmpfs of its own: " << why;
  }
  {
    auto store = JobStore::Open(state + "/traind.db");
    ASSERT_TRUE(store.ok()) << store.status();
    FakeLauncher launcher;
    SchedulerOptions o = TestSchedulerOptions(state);
    o.cpu_slots = 1;
    o.store_retry_interval = absl::Milliseconds(20);
    Scheduler scheduler(o, store->get(), &launcher);
    ServerMetrics metrics("test", 1, absl::Now());
    metrics.Attach(&scheduler);
    ASSERT_TRUE(scheduler.Recover().ok());
    scheduler.Start();

    // A finished job with a model of 1 MiB.
    absl::StatusOr<Job> old = scheduler.Submit(Spec(0));
    ASSERT_TRUE(old.ok()) << old.status();
    ASSERT_TRUE(launcher.WaitForLaunches(1));
    Start(&scheduler, launcher.launched()[0]);
    {
      std::filesystem::create_directories(state + "/jobs/" + old->id() + "/task-0");
      std::ofstream model(state + "/jobs/" + old->id() + "/task-0/model.bin");
      model << std::string(1 << 20, 'm');
    }
    Finish(&scheduler, &launcher, launcher.launched()[0]);

    // A running three-fold job (one slot: one task at a time).
    absl::StatusOr<Job> job = scheduler.Submit(Spec(3));
    ASSERT_TRUE(job.ok()) << job.status();
    ASSERT_TRUE(launcher.WaitForLaunches(2));
    const FakeLauncher::Launched worker = launcher.launched()[1];
    Start(&scheduler, worker);
    const traind::v1::AttemptCredentials c = CredentialsOf(worker);
    ASSERT_TRUE(scheduler.ReportEpoch(c, Epoch(1)).ok());
    ASSERT_TRUE(scheduler.store() != nullptr);  // stored
    ASSERT_TRUE(scheduler.StoreStatus().ok());

    ASSERT_GT(FillUp(state + "/filler"), 0);
    // Epochs go on until one finds no space.
    int epoch = 1;
    while (scheduler.StoreStatus().ok() && epoch < 5000) {
      ASSERT_TRUE(scheduler.ReportEpoch(c, Epoch(++epoch)).ok());
      scheduler.store();  // stored, or the store degraded
    }
    const absl::Status degraded = scheduler.StoreStatus();
    ASSERT_EQ(degraded.code(), absl::StatusCode::kResourceExhausted) << degraded;
    EXPECT_TRUE(absl::StrContains(degraded.message(), "traind.db")) << degraded;
    EXPECT_TRUE(absl::StrContains(degraded.message(), "free space on the state directory"))
        << degraded;

    // The worker's report is not acknowledged while it is not stored; more
    // reports are taken in memory, in order.
    std::atomic<bool> acknowledged{false};
    scheduler.WhenStored([&] { acknowledged = true; });
    ASSERT_TRUE(scheduler.ReportEpoch(c, Epoch(++epoch)).ok());
    const int last_epoch = epoch;

    // New jobs are refused, saying why.
    absl::StatusOr<Job> refused = scheduler.Submit(Spec(2));
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnavailable);
    EXPECT_TRUE(absl::StrContains(refused.status().message(), "cannot record new jobs"))
        << refused.status();
    EXPECT_TRUE(absl::StrContains(refused.status().message(), "disk is full")) << refused.status();

    // Reads are served: the live job from memory, the list from the store.
    absl::StatusOr<Job> view = scheduler.GetJob(job->id());
    ASSERT_TRUE(view.ok()) << view.status();
    EXPECT_EQ(view->tasks(0).epochs_done(), last_epoch);
    traind::v1::ListJobsRequest list;
    absl::StatusOr<traind::v1::ListJobsResponse> jobs = scheduler.ListJobs(list);
    ASSERT_TRUE(jobs.ok()) << jobs.status();
    EXPECT_EQ(jobs->jobs_size(), 2);
    EXPECT_TRUE(absl::StrContains(metrics.Scrape(), "\ntraind_store_writable 0\n"));

    // The fold ends; the next one does not start while nothing can be recorded.
    traind::v1::ReportEventRequest finished;
    *finished.mutable_credentials() = c;
    finished.mutable_finished()->mutable_result()->set_best_epoch(1);
    ASSERT_TRUE(scheduler.ReportEvent(finished).ok());
    launcher.Exit(worker.pid, 0);
    absl::SleepFor(absl::Milliseconds(300));
    EXPECT_EQ(launcher.launched().size(), 2u);
    EXPECT_FALSE(acknowledged.load());
    EXPECT_EQ(scheduler.StoreStatus().code(), absl::StatusCode::kResourceExhausted);

    // Deleting the finished job frees its files, and the store takes writes again.
    absl::StatusOr<int64_t> freed = scheduler.Delete(old->id(), false);
    ASSERT_TRUE(freed.ok()) << freed.status();
    EXPECT_GE(*freed, 1 << 20);
    EXPECT_FALSE(std::filesystem::exists(state + "/jobs/" + old->id()));
    EXPECT_TRUE(AwaitStoreStatus(&scheduler, true, absl::Seconds(10)).ok());
    EXPECT_TRUE(acknowledged.load());
    EXPECT_TRUE(absl::StrContains(metrics.Scrape(), "\ntraind_store_writable 1\n"));
    ASSERT_TRUE(launcher.WaitForLaunches(3));  // the next fold starts

    // Everything that waited is stored, in order, nothing lost.
    JobStore* stored = scheduler.store();
    absl::StatusOr<std::vector<traind::v1::EpochMetrics>> epochs = stored->ReadEpochs(job->id());
    ASSERT_TRUE(epochs.ok()) << epochs.status();
    ASSERT_EQ(static_cast<int>(epochs->size()), last_epoch);
    for (int i = 0; i < last_epoch; ++i) EXPECT_EQ((*epochs)[i].epoch(), i + 1);
    absl::StatusOr<std::vector<JobEvent>> events = stored->ReadEvents(job->id(), 0, 100000);
    ASSERT_TRUE(events.ok()) << events.status();
    for (size_t i = 0; i < events->size(); ++i) {
      EXPECT_EQ((*events)[i].sequence(), static_cast<int64_t>(i + 1));
    }
    absl::StatusOr<Job> stored_job = stored->LoadJob(job->id());
    ASSERT_TRUE(stored_job.ok()) << stored_job.status();
    EXPECT_EQ(stored_job->tasks(0).state(), Task::SUCCEEDED);
    absl::StatusOr<bool> has_old = stored->HasJob(old->id());
    ASSERT_TRUE(has_old.ok());
    EXPECT_FALSE(*has_old);

    // And new jobs are taken again.
    std::filesystem::remove(state + "/filler");
    absl::StatusOr<Job> again = scheduler.Submit(Spec(2));
    EXPECT_TRUE(again.ok()) << again.status();
    scheduler.Stop();
    metrics.Detach();
  }
  umount2(state.c_str(), MNT_DETACH);
}

}  // namespace
}  // namespace traind::server
