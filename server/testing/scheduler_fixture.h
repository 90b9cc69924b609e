// The scheduler tests' fixture: a scheduler on a fresh store in a temporary
// directory, with a fake launcher that plays the workers
// (scheduler_test.cc, scheduler_gpu_test.cc); and its helpers for tests
// with a fixture of their own: a scheduler's options on a test's directory,
// the credentials a fake-launched worker presents.
#ifndef TRAIND_SERVER_TESTING_SCHEDULER_FIXTURE_H_
#define TRAIND_SERVER_TESTING_SCHEDULER_FIXTURE_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "server/scheduler/scheduler.h"
#include "server/store/job_store.h"
#include "server/testing/fake_clock.h"
#include "server/testing/fake_launcher.h"
#include "tests/testing/temp_dir.h"
#include "traind/v1/worker_service.pb.h"

namespace traind::server {

// A scheduler's options for tests on `dir` (its store and worker socket
// live there): /bin/true as the worker, one CPU slot, one retry, a 10 ms
// stop grace. Tests change what they test.
inline SchedulerOptions TestSchedulerOptions(const std::string& dir) {
  SchedulerOptions o;
  o.state_dir = dir;
  o.worker_path = "/bin/true";
  o.worker_address = "unix:" + dir + "/worker.sock";
  o.cpu_slots = 1;
  o.max_restarts = 1;
  o.stop_grace = absl::Milliseconds(10);
  return o;
}

// The credentials the worker of launch `l` presents (job, task, attempt and
// secret from its argv and environment).
inline traind::v1::AttemptCredentials CredentialsOf(const FakeLauncher::Launched& l) {
  traind::v1::AttemptCredentials c;
  c.set_job_id(l.Arg("job"));
  c.set_task(std::stoi(l.Arg("task")));
  c.set_attempt(std::stoi(l.Arg("attempt")));
  c.set_secret(l.Secret());
  return c;
}

// Three folds of two epochs on a path no worker reads (the launcher is fake).
inline traind::v1::JobSpec ThreeFoldSpec() {
  traind::v1::JobSpec spec;
  spec.set_name("unit");
  spec.mutable_data()->set_path("/nonexistent.csv");
  spec.mutable_cross_validation()->set_folds(3);
  spec.mutable_training()->set_epochs(2);
  return spec;
}

class SchedulerTest : public ::testing::Test {
 protected:
  void SetUp() override { Open(); }

  // A scheduler on the test's store, with test-friendly timings; `tweak`
  // changes options before it is built.
  void Open(int slots = 2, std::function<void(SchedulerOptions*)> tweak = nullptr) {
    auto store = JobStore::Open(dir_.path() + "/traind.db");
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = *std::move(store);
    SchedulerOptions o = TestSchedulerOptions(dir_.path());
    o.cpu_slots = slots;
    o.cancel_grace = absl::Milliseconds(50);
    if (tweak) tweak(&o);
    launcher_ = std::make_unique<FakeLauncher>();
    scheduler_ = std::make_unique<Scheduler>(o, store_.get(), launcher_.get());
  }

  void Close() {
    scheduler_.reset();
    launcher_.reset();
    store_.reset();
  }

  // Plays a worker that trains `epochs` epochs and succeeds with `val_accuracy`.
  void RunWorker(const FakeLauncher::Launched& l, double val_accuracy, int epochs = 2) {
    auto c = CredentialsOf(l);
    ASSERT_TRUE(scheduler_->GetTask(c).ok());
    traind::v1::ReportEventRequest started;
    *started.mutable_credentials() = c;
    started.mutable_started()->add_classes("a");
    started.mutable_started()->add_classes("b");
    ASSERT_TRUE(scheduler_->ReportEvent(started).ok());
    for (int e = 1; e <= epochs; ++e) {
      traind::v1::EpochMetrics m;
      m.set_epoch(e);
      (*m.mutable_train())["loss"] = 1.0 / e;
      (*m.mutable_val())["accuracy"] = val_accuracy;
      ASSERT_TRUE(scheduler_->ReportEpoch(c, m).ok());
    }
    traind::v1::ReportEventRequest finished;
    *finished.mutable_credentials() = c;
    finished.mutable_finished()->mutable_result()->set_best_epoch(epochs);
    (*finished.mutable_finished()->mutable_result()->mutable_val())["accuracy"] = val_accuracy;
    ASSERT_TRUE(scheduler_->ReportEvent(finished).ok());
    launcher_->Exit(l.pid, 0);
  }

  std::vector<traind::v1::JobEvent> Events(const std::string& job_id) {
    auto events = scheduler_->store()->ReadEvents(job_id, 0, 10000);
    EXPECT_TRUE(events.ok());
    return *events;
  }

  // Tests of deadlines put the scheduler on this clock (SchedulerOptions::
  // clock) and advance it.
  FakeClock clock_;
  ::traind::testing::TempDir dir_{"traind-sched"};
  std::unique_ptr<JobStore> store_;
  std::unique_ptr<FakeLauncher> launcher_;
  std::unique_ptr<Scheduler> scheduler_;
};

}  // namespace traind::server

#endif  // TRAIND_SERVER_TESTING_SCHEDULER_FIXTURE_H_
