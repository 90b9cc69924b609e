// The scheduler on a fake launcher: slots, retries, cancellation, recovery
// after a restart, idempotent submits, priorities and workers' environment.
// (With GPUs: scheduler_gpu_test.cc.)
#include "server/scheduler/scheduler.h"

#include <signal.h>

#include <cmath>
#include <map>
#include <memory>
#include <string>

#include "gtest/gtest.h"
#include "server/store/job_store.h"
#include "server/testing/fake_clock.h"
#include "server/testing/fake_launcher.h"
#include "server/testing/scheduler_fixture.h"
#include "tests/testing/temp_dir.h"

namespace traind::server {
namespace {

using traind::v1::Failure;
using traind::v1::Job;
using traind::v1::JobEvent;
using traind::v1::Task;

TEST_F(SchedulerTest, RunsFoldsInSlotsAndSummarizesResult) {
  ASSERT_TRUE(scheduler_->Recover().ok());
  scheduler_->Start();
  auto job = scheduler_->Submit(ThreeFoldSpec());
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->tasks_size(), 3);

  ASSERT_TRUE(launcher_->WaitForLaunches(2));
  absl::SleepFor(absl::Milliseconds(50));
  ASSERT_EQ(launcher_->launched().size(), 2u) << "only two CPU slots";
  auto view = scheduler_->GetJob(job->id());
  ASSERT_TRUE(view.ok());
  EXPECT_EQ(view->state(), Job::RUNNING);
  EXPECT_EQ(view->tasks(2).state(), Task::QUEUED);
  EXPECT_EQ(view->tasks(2).wait_reason(), Task::RESOURCES);
  EXPECT_EQ(view->tasks(2).tasks_ahead(), 0);

  // Workers are started without a shell, with the attempt's identity.
  auto first = launcher_->launched()[0];
  EXPECT_EQ(first.request.argv[0], "/bin/true");
  EXPECT_EQ(first.Arg("attempt"), "1");
  EXPECT_EQ(first.Secret().size(), 32u);

  RunWorker(launcher_->launched()[0], 0.9);
  ASSERT_TRUE(launcher_->WaitForLaunches(3));
  RunWorker(launcher_->launched()[1], 1.0);
  RunWorker(launcher_->launched()[2], 0.8);

  auto done = scheduler_->GetJob(job->id());
  ASSERT_TRUE(done.ok());
  EXPECT_EQ(done->state(), Job::SUCCEEDED);
  const auto& result = done->result();
  EXPECT_TRUE(result.complete());
  ASSERT_EQ(result.folds_size(), 3);
  EXPECT_EQ(result.classes_size(), 2);
  // mean(0.9, 1.0, 0.8) = 0.9; population std = sqrt((0 + 0.01 + 0.01) / 3).
  EXPECT_NEAR(result.val().at("accuracy").mean(), 0.9, 1e-12);
  EXPECT_NEAR(result.val().at("accuracy").std(), std::sqrt(0.02 / 3), 1e-12);

  // Events: gaps-free sequence, 2 epochs per fold, the last one marked.
  auto events = Events(job->id());
  int epochs = 0;
  for (size_t i = 0; i < events.size(); ++i) {
    EXPECT_EQ(events[i].sequence(), static_cast<int64_t>(i + 1));
    EXPECT_EQ(events[i].last(), i + 1 == events.size());
    if (events[i].has_epoch()) ++epochs;
  }
  EXPECT_EQ(epochs, 6);
  EXPECT_EQ(events.back().job_state().state(), Job::SUCCEEDED);
  // Per-epoch metrics are in the store.
  auto stored = scheduler_->store()->ReadEpochs(job->id());
  ASSERT_TRUE(stored.ok());
  EXPECT_EQ(stored->size(), 6u);
}

// Each task's assignment names its artifacts and, unless turned off, its
// TensorBoard run directory: one per task, side by side under the job's
// tensorboard/ (what `tensorboard --logdir` overlays).
TEST_F(SchedulerTest, AssignmentsNameEachTasksTensorBoardDirectoryUnlessTurnedOff) {
  for (const bool on : {true, false}) {
    SCOPED_TRACE(on ? "tensorboard: true" : "tensorboard: false");
    Close();
    Open(/*slots=*/2, [on](SchedulerOptions* o) { o->tensorboard = on; });
    ASSERT_TRUE(scheduler_->Recover().ok());
    scheduler_->Start();
    auto job = scheduler_->Submit(ThreeFoldSpec());
    ASSERT_TRUE(job.ok()) << job.status();
    ASSERT_TRUE(launcher_->WaitForLaunches(2));
    for (const FakeLauncher::Launched& l : launcher_->launched()) {
      auto a = scheduler_->GetTask(CredentialsOf(l));
      ASSERT_TRUE(a.ok()) << a.status();
      // (The second scheduler also resumes the first one's job.)
      const std::string job_dir = dir_.path() + "/jobs/" + a->job_id();
      const std::string task_dir = "task-" + std::to_string(a->task());
      EXPECT_EQ(a->artifacts_dir(), job_dir + "/" + task_dir);
      EXPECT_EQ(a->tensorboard_dir(), on ? job_dir + "/tensorboard/" + task_dir : "");
    }
  }
}

TEST_F(SchedulerTest, RepeatedEpochReportIsStoredOnce) {
  ASSERT_TRUE(scheduler_->Recover().ok());
  scheduler_->Start();
  auto job = scheduler_->Submit(ThreeFoldSpec());
  ASSERT_TRUE(launcher_->WaitForLaunches(1));
  auto c = CredentialsOf(launcher_->launched()[0]);
  traind::v1::EpochMetrics m;
  m.set_epoch(1);
  (*m.mutable_train())["loss"] = 0.5;
  ASSERT_TRUE(scheduler_->ReportEpoch(c, m).ok());
  ASSERT_TRUE(scheduler_->ReportEpoch(c, m).ok());
  m.set_epoch(3);
  EXPECT_EQ(scheduler_->ReportEpoch(c, m).status().code(), absl::StatusCode::kInvalidArgument);
  auto stored = scheduler_->store()->ReadEpochs(job->id());
  ASSERT_TRUE(stored.ok());
  EXPECT_EQ(stored->size(), 1u);
  int epoch_events = 0;
  for (const auto& e : Events(job->id())) epoch_events += e.has_epoch();
  EXPECT_EQ(epoch_events, 1);
}

TEST_F(SchedulerTest, EpochsReportedInABatchAreStoredOnceInOrder) {
  ASSERT_TRUE(scheduler_->Recover().ok());
  scheduler_->Start();
  auto job = scheduler_->Submit(ThreeFoldSpec());
  ASSERT_TRUE(launcher_->WaitForLaunches(1));
  auto c = CredentialsOf(launcher_->launched()[0]);
  std::vector<traind::v1::EpochMetrics> m(4);
  for (int i = 0; i < 4; ++i) m[i].set_epoch(i + 1);
  ASSERT_TRUE(scheduler_->ReportEpochs(c, {&m[0], &m[1]}).ok());
  // A retried batch that overlaps what was stored: only the new epochs count.
  ASSERT_TRUE(scheduler_->ReportEpochs(c, {&m[1], &m[2], &m[3]}).ok());
  EXPECT_EQ(scheduler_->ReportEpochs(c, {&m[0], &m[3]}).status().code(), absl::StatusCode::kOk);
  auto stored = scheduler_->store()->ReadEpochs(job->id());
  ASSERT_EQ(stored->size(), 4u);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(stored->at(i).epoch(), i + 1);
  int epoch_events = 0;
  for (const auto& e : Events(job->id())) epoch_events += e.has_epoch();
  EXPECT_EQ(epoch_events, 4);
  traind::v1::EpochMetrics gap;
  gap.set_epoch(6);
  EXPECT_EQ(scheduler_->ReportEpochs(c, {&gap}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(SchedulerTest, RejectsWrongSecret) {
  ASSERT_TRUE(scheduler_->Recover().ok());
  scheduler_->Start();
  ASSERT_TRUE(scheduler_->Submit(ThreeFoldSpec()).ok());
  ASSERT_TRUE(launcher_->WaitForLaunches(2));
  auto c = CredentialsOf(launcher_->launched()[0]);
  c.set_secret(std::string(32, '0'));
  EXPECT_EQ(scheduler_->GetTask(c).status().code(), absl::StatusCode::kPermissionDenied);
  // A worker cannot speak for another task with its own secret.
  auto other = CredentialsOf(launcher_->launched()[0]);
  other.set_task(1);
  EXPECT_EQ(scheduler_->GetTask(other).status().code(), absl::StatusCode::kPermissionDenied);
}

TEST_F(SchedulerTest, CrashIsRetriedThenFailsTheJob) {
  ASSERT_TRUE(scheduler_->Recover().ok());
  scheduler_->Start();
  auto job = scheduler_->Submit(ThreeFoldSpec());
  ASSERT_TRUE(launcher_->WaitForLaunches(2));
  int pid = launcher_->launched()[0].pid;
  launcher_->Exit(pid, 0, SIGSEGV);  // attempt 1 of task 0 crashes
  ASSERT_TRUE(launcher_->WaitForLaunches(3));
  auto retry = launcher_->launched()[2];
  EXPECT_EQ(retry.Arg("task"), "0");
  EXPECT_EQ(retry.Arg("attempt"), "2");
  launcher_->Exit(retry.pid, 0, SIGSEGV);  // max_restarts = 1: no third attempt

  // Task 1 is still running: it is asked to stop, then exits.
  auto signals = launcher_->signals();
  ASSERT_FALSE(signals.empty());
  EXPECT_EQ(signals.back(), std::make_pair(launcher_->launched()[1].pid, SIGTERM));
  launcher_->Exit(launcher_->launched()[1].pid, 3);

  auto done = scheduler_->GetJob(job->id());
  ASSERT_TRUE(done.ok());
  EXPECT_EQ(done->state(), Job::FAILED);
  EXPECT_EQ(done->failure().reason(), Failure::WORKER_CRASHED);
  EXPECT_EQ(done->failure().signal(), SIGSEGV);
  EXPECT_NE(done->failure().message().find("fold 0"), std::string::npos);
  EXPECT_EQ(done->tasks(0).state(), Task::FAILED);
  EXPECT_EQ(done->tasks(0).attempts_size(), 2);
  EXPECT_EQ(done->tasks(1).state(), Task::CANCELLED);
  EXPECT_EQ(done->tasks(2).state(), Task::CANCELLED);
  EXPECT_EQ(launcher_->launched().size(), 3u);
}

TEST_F(SchedulerTest, ReportedDataErrorIsNotRetried) {
  ASSERT_TRUE(scheduler_->Recover().ok());
  scheduler_->Start();
  auto job = scheduler_->Submit(ThreeFoldSpec());
  ASSERT_TRUE(launcher_->WaitForLaunches(2));
  for (int i = 0; i < 2; ++i) {
    auto l = launcher_->launched()[i];
    traind::v1::ReportEventRequest failed;
    *failed.mutable_credentials() = CredentialsOf(l);
    failed.mutable_failed()->mutable_failure()->set_reason(Failure::DATA_ERROR);
    failed.mutable_failed()->mutable_failure()->set_message("x.csv:7: row has 3 fields");
    ASSERT_TRUE(scheduler_->ReportEvent(failed).ok());
    launcher_->Exit(l.pid, 1);
  }
  auto done = scheduler_->GetJob(job->id());
  ASSERT_TRUE(done.ok());
  EXPECT_EQ(done->state(), Job::FAILED);
  EXPECT_EQ(done->failure().reason(), Failure::DATA_ERROR);
  EXPECT_EQ(done->failure().message(), "fold 0: x.csv:7: row has 3 fields");
  EXPECT_EQ(launcher_->launched().size(), 2u);
}

TEST_F(SchedulerTest, CancelQueuedJobAtOnceAndRunningAfterWorkersStop) {
  Close();
  Open(/*slots=*/2, [this](SchedulerOptions* o) { o->clock = &clock_; });
  ASSERT_TRUE(scheduler_->Recover().ok());
  scheduler_->Start();
  auto running = scheduler_->Submit(ThreeFoldSpec());
  ASSERT_TRUE(launcher_->WaitForLaunches(2));
  // Both launches are recorded (a worker call waits for that), so the
  // cancel grace below runs on the fake clock from the cancel on.
  ASSERT_TRUE(scheduler_->GetTask(CredentialsOf(launcher_->launched()[1])).ok());
  auto queued = scheduler_->Submit(ThreeFoldSpec());
  ASSERT_TRUE(queued.ok());

  auto q = scheduler_->Cancel(queued->id(), false);
  ASSERT_TRUE(q.ok());
  EXPECT_EQ(q->state(), Job::CANCELLED);

  auto r = scheduler_->Cancel(running->id(), false);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->state(), Job::CANCELLING);
  EXPECT_EQ(r->tasks(2).state(), Task::CANCELLED);
  // Workers are told to stop; one ignores it and is killed after the grace.
  auto l0 = launcher_->launched()[0], l1 = launcher_->launched()[1];
  launcher_->Exit(l0.pid, 3);
  clock_.Advance(absl::Milliseconds(400));
  scheduler_->EnforceDeadlines();
  bool killed = false;
  for (auto [pid, sig] : launcher_->signals()) killed |= pid == l1.pid && sig == SIGKILL;
  EXPECT_TRUE(killed);
  launcher_->Exit(l1.pid, 0, SIGKILL);
  auto done = scheduler_->GetJob(running->id());
  ASSERT_TRUE(done.ok());
  EXPECT_EQ(done->state(), Job::CANCELLED);
  EXPECT_EQ(done->tasks(0).state(), Task::CANCELLED);
  EXPECT_EQ(done->tasks(1).state(), Task::CANCELLED);
  // Cancelling again changes nothing.
  auto again = scheduler_->Cancel(running->id(), true);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->state(), Job::CANCELLED);
  EXPECT_EQ(launcher_->launched().size(), 2u);
}

TEST_F(SchedulerTest, RestartRecoversRunningTasksAsLostAndKeepsFinishedFolds) {
  std::string job_id;
  {
    ASSERT_TRUE(scheduler_->Recover().ok());
    scheduler_->Start();
    auto job = scheduler_->Submit(ThreeFoldSpec());
    job_id = job->id();
    ASSERT_TRUE(launcher_->WaitForLaunches(2));
    RunWorker(launcher_->launched()[0], 0.9);
    ASSERT_TRUE(launcher_->WaitForLaunches(3));
    // Task 1 reported one epoch; then the daemon goes away.
    traind::v1::EpochMetrics m;
    m.set_epoch(1);
    ASSERT_TRUE(scheduler_->ReportEpoch(CredentialsOf(launcher_->launched()[1]), m).ok());
  }
  Close();
  Open();
  ASSERT_TRUE(scheduler_->Recover().ok());
  auto job = scheduler_->GetJob(job_id);
  ASSERT_TRUE(job.ok());
  EXPECT_EQ(job->tasks(0).state(), Task::SUCCEEDED);
  EXPECT_EQ(job->tasks(1).state(), Task::QUEUED);
  EXPECT_EQ(job->tasks(1).attempts(0).failure().reason(), Failure::LOST);
  scheduler_->Start();
  ASSERT_TRUE(launcher_->WaitForLaunches(2));
  auto relaunched = launcher_->launched();
  EXPECT_EQ(relaunched[0].Arg("task"), "1");
  EXPECT_EQ(relaunched[0].Arg("attempt"), "2");
  EXPECT_EQ(relaunched[1].Arg("task"), "2");
  EXPECT_EQ(relaunched[1].Arg("attempt"), "2");
  RunWorker(relaunched[0], 1.0);
  RunWorker(relaunched[1], 0.8);
  auto done = scheduler_->GetJob(job_id);
  ASSERT_TRUE(done.ok());
  EXPECT_EQ(done->state(), Job::SUCCEEDED);
  EXPECT_EQ(done->result().folds_size(), 3);
  // Event sequence continues without gaps across the restart.
  auto events = Events(job_id);
  for (size_t i = 0; i < events.size(); ++i) {
    EXPECT_EQ(events[i].sequence(), static_cast<int64_t>(i + 1));
  }
}

// What a stopping traind does before its health says NOT_SERVING: new jobs
// are refused at once (an idempotent retry too), while the running job's
// workers go on and finish it; Stop later ends the rest.
TEST_F(SchedulerTest, RefusingNewWorkRefusesSubmitsAtOnceAndLetsRunningTasksFinish) {
  ASSERT_TRUE(scheduler_->Recover().ok());
  scheduler_->Start();
  SubmitOptions keyed;
  keyed.idempotency_key = "k";
  auto job = scheduler_->Submit(ThreeFoldSpec(), keyed);
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_TRUE(launcher_->WaitForLaunches(2));
  scheduler_->RefuseNewWork();
  for (const SubmitOptions& options : {SubmitOptions{}, keyed}) {
    auto refused = scheduler_->Submit(ThreeFoldSpec(), options);
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnavailable) << refused.status();
  }
  RunWorker(launcher_->launched()[0], 0.9);
  RunWorker(launcher_->launched()[1], 0.9);
  ASSERT_TRUE(launcher_->WaitForLaunches(3));  // its queued fold still starts
  RunWorker(launcher_->launched()[2], 0.9);
  auto done = scheduler_->GetJob(job->id());
  ASSERT_TRUE(done.ok());
  EXPECT_EQ(done->state(), Job::SUCCEEDED);
  auto listed = scheduler_->ListJobs({});
  ASSERT_TRUE(listed.ok());
  EXPECT_EQ(listed->jobs_size(), 1);
  scheduler_->Stop();
}

TEST_F(SchedulerTest, IdempotentSubmitReturnsTheSameJobPerOwner) {
  ASSERT_TRUE(scheduler_->Recover().ok());
  SubmitOptions a;
  a.owner = "alice";
  a.idempotency_key = "k1";
  auto first = scheduler_->Submit(ThreeFoldSpec(), a);
  auto again = scheduler_->Submit(ThreeFoldSpec(), a);
  ASSERT_TRUE(first.ok() && again.ok());
  EXPECT_EQ(first->id(), again->id());
  EXPECT_EQ(first->owner(), "alice");
  SubmitOptions b = a;
  b.owner = "bob";  // keys are per owner
  auto other = scheduler_->Submit(ThreeFoldSpec(), b);
  ASSERT_TRUE(other.ok());
  EXPECT_NE(other->id(), first->id());
  auto no_key = scheduler_->Submit(ThreeFoldSpec(), SubmitOptions{});
  ASSERT_TRUE(no_key.ok());
  EXPECT_NE(no_key->id(), first->id());
  EXPECT_EQ(scheduler_->QueuedJobs("alice"), 1);
  EXPECT_EQ(scheduler_->QueuedJobs("local"), 1);
  // The key survives a restart.
  Close();
  Open();
  ASSERT_TRUE(scheduler_->Recover().ok());
  auto after = scheduler_->Submit(ThreeFoldSpec(), a);
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(after->id(), first->id());
  auto listed = scheduler_->ListJobs({});
  ASSERT_TRUE(listed.ok());
  EXPECT_EQ(listed->jobs_size(), 3);
}

// A retry of a submit that created its job gets the job back, even when the
// owner's queue is full by then (the first submit filled it); a new submit
// is refused.
TEST_F(SchedulerTest, IdempotentRetryAtTheQueueLimitReturnsItsJob) {
  ASSERT_TRUE(scheduler_->Recover().ok());
  SubmitOptions a;
  a.owner = "alice";
  a.idempotency_key = "k1";
  a.max_queued_jobs = 1;
  auto first = scheduler_->Submit(ThreeFoldSpec(), a);
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_EQ(scheduler_->QueuedJobs("alice"), 1);
  auto again = scheduler_->Submit(ThreeFoldSpec(), a);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->id(), first->id());
  // What the API looks up before it validates a retry's spec again.
  auto found = scheduler_->FindSubmitted("alice", "k1");
  ASSERT_TRUE(found.ok()) << found.status();
  ASSERT_TRUE(found->has_value());
  EXPECT_EQ((*found)->id(), first->id());
  EXPECT_FALSE(scheduler_->FindSubmitted("bob", "k1")->has_value());
  EXPECT_FALSE(scheduler_->FindSubmitted("alice", "")->has_value());
  // A new key, or none, is a new job: over the limit.
  for (const std::string key : {"k2", ""}) {
    SubmitOptions other = a;
    other.idempotency_key = key;
    auto refused = scheduler_->Submit(ThreeFoldSpec(), other);
    ASSERT_FALSE(refused.ok()) << key;
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
    EXPECT_NE(refused.status().message().find("limits.max_queued_jobs_per_user"), std::string::npos)
        << refused.status();
  }
  EXPECT_EQ(scheduler_->QueuedJobs("alice"), 1);
  // Another owner has a queue of its own.
  SubmitOptions b = a;
  b.owner = "bob";
  EXPECT_TRUE(scheduler_->Submit(ThreeFoldSpec(), b).ok());
  // After a restart the retry still finds its job at the limit.
  Close();
  Open();
  ASSERT_TRUE(scheduler_->Recover().ok());
  auto after = scheduler_->Submit(ThreeFoldSpec(), a);
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_EQ(after->id(), first->id());
}

TEST_F(SchedulerTest, HigherPriorityRunsFirstFifoWithin) {
  Close();
  Open(/*slots=*/1);
  ASSERT_TRUE(scheduler_->Recover().ok());
  auto spec = ThreeFoldSpec();
  spec.mutable_cross_validation()->set_folds(2);
  auto low = scheduler_->Submit(spec);
  spec.set_priority(5);
  auto high1 = scheduler_->Submit(spec);
  auto high2 = scheduler_->Submit(spec);
  ASSERT_TRUE(low.ok() && high1.ok() && high2.ok());
  auto view = scheduler_->GetJob(low->id());
  EXPECT_EQ(view->tasks(0).wait_reason(), Task::PRIORITY);
  EXPECT_EQ(view->tasks(0).tasks_ahead(), 4);
  scheduler_->Start();
  std::vector<std::string> order;
  for (size_t n = 1; n <= 6; ++n) {
    ASSERT_TRUE(launcher_->WaitForLaunches(n));
    auto l = launcher_->launched()[n - 1];
    order.push_back(l.Arg("job") + "/" + l.Arg("task"));
    RunWorker(l, 1.0);
  }
  EXPECT_EQ(order,
            (std::vector<std::string>{high1->id() + "/0", high1->id() + "/1", high2->id() + "/0",
                                      high2->id() + "/1", low->id() + "/0", low->id() + "/1"}));
}

TEST_F(SchedulerTest, MaxParallelTasksCapsAJob) {
  Close();
  Open(/*slots=*/4);
  ASSERT_TRUE(scheduler_->Recover().ok());
  auto spec = ThreeFoldSpec();
  spec.mutable_resources()->set_max_parallel_tasks(1);
  auto capped = scheduler_->Submit(spec);
  auto free = scheduler_->Submit(ThreeFoldSpec());
  ASSERT_TRUE(capped.ok() && free.ok());
  scheduler_->Start();
  ASSERT_TRUE(launcher_->WaitForLaunches(4));
  absl::SleepFor(absl::Milliseconds(50));
  int capped_running = 0;
  for (const auto& l : launcher_->launched()) capped_running += l.Arg("job") == capped->id();
  EXPECT_EQ(capped_running, 1);
  EXPECT_EQ(launcher_->launched().size(), 4u);
  auto view = scheduler_->GetJob(capped->id());
  EXPECT_EQ(view->tasks(1).wait_reason(), Task::JOB_LIMIT);
}

TEST_F(SchedulerTest, SilentWorkerIsKilledAsHungAndRetried) {
  Close();
  Open(/*slots=*/1, [this](SchedulerOptions* o) {
    o->heartbeat_timeout = absl::Milliseconds(300);
    o->clock = &clock_;
  });
  ASSERT_TRUE(scheduler_->Recover().ok());
  scheduler_->Start();
  auto spec = ThreeFoldSpec();
  spec.mutable_cross_validation()->set_folds(2);
  auto job = scheduler_->Submit(spec);
  ASSERT_TRUE(launcher_->WaitForLaunches(1));
  auto l = launcher_->launched()[0];
  // A heartbeat keeps it alive for a while...
  clock_.Advance(absl::Milliseconds(200));
  scheduler_->EnforceDeadlines();
  ASSERT_TRUE(scheduler_->Heartbeat(CredentialsOf(l)).ok());
  clock_.Advance(absl::Milliseconds(200));
  scheduler_->EnforceDeadlines();
  EXPECT_TRUE(launcher_->signals().empty());
  // ...then silence: killed.
  clock_.Advance(absl::Milliseconds(600));
  scheduler_->EnforceDeadlines();
  auto signals = launcher_->signals();
  ASSERT_EQ(signals.size(), 1u);
  EXPECT_EQ(signals[0], std::make_pair(l.pid, SIGKILL));
  launcher_->Exit(l.pid, 0, SIGKILL);
  ASSERT_TRUE(launcher_->WaitForLaunches(2));
  auto view = scheduler_->GetJob(job->id());
  ASSERT_TRUE(view.ok());
  EXPECT_EQ(view->tasks(0).attempts(0).failure().reason(), Failure::TIMEOUT);
  EXPECT_EQ(launcher_->launched()[1].Arg("attempt"), "2");
}

TEST_F(SchedulerTest, RefitRunsAfterEveryFoldSucceeded) {
  Close();
  Open(/*slots=*/4);
  ASSERT_TRUE(scheduler_->Recover().ok());
  auto spec = ThreeFoldSpec();
  spec.mutable_cross_validation()->set_folds(2);
  spec.mutable_cross_validation()->set_refit(true);
  auto job = scheduler_->Submit(spec);
  ASSERT_TRUE(job.ok());
  ASSERT_EQ(job->tasks_size(), 3);
  scheduler_->Start();
  ASSERT_TRUE(launcher_->WaitForLaunches(2));
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_EQ(launcher_->launched().size(), 2u);
  EXPECT_EQ(scheduler_->GetJob(job->id())->tasks(2).wait_reason(), Task::DEPENDENCY);
  RunWorker(launcher_->launched()[0], 0.9);
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_EQ(launcher_->launched().size(), 2u) << "the refit waits for every fold";
  RunWorker(launcher_->launched()[1], 0.7);
  ASSERT_TRUE(launcher_->WaitForLaunches(3));
  auto refit = launcher_->launched()[2];
  EXPECT_EQ(refit.Arg("task"), "2");
  RunWorker(refit, 0.0);
  auto done = scheduler_->GetJob(job->id());
  ASSERT_EQ(done->state(), Job::SUCCEEDED);
  // The summary is over the folds only; the refit has its own place.
  EXPECT_EQ(done->result().folds_size(), 2);
  EXPECT_NEAR(done->result().val().at("accuracy").mean(), 0.8, 1e-12);
  EXPECT_TRUE(done->result().has_refit());
}

TEST_F(SchedulerTest, ResumedAttemptContinuesItsEpochCount) {
  ASSERT_TRUE(scheduler_->Recover().ok());
  scheduler_->Start();
  auto job = scheduler_->Submit(ThreeFoldSpec());
  ASSERT_TRUE(launcher_->WaitForLaunches(1));
  auto c = CredentialsOf(launcher_->launched()[0]);
  traind::v1::ReportEventRequest resumed;
  *resumed.mutable_credentials() = c;
  resumed.mutable_resumed()->set_completed_epochs(7);
  ASSERT_TRUE(scheduler_->ReportEvent(resumed).ok());
  traind::v1::EpochMetrics m;
  m.set_epoch(8);
  ASSERT_TRUE(scheduler_->ReportEpoch(c, m).ok());
  m.set_epoch(1);  // before the checkpoint: already reported by an earlier attempt
  ASSERT_TRUE(scheduler_->ReportEpoch(c, m).ok());
  EXPECT_EQ(scheduler_->GetJob(job->id())->tasks(0).epochs_done(), 8);
  auto stored = scheduler_->store()->ReadEpochs(job->id());
  ASSERT_EQ(stored->size(), 1u);
  EXPECT_EQ(stored->at(0).epoch(), 8);
  bool saw_resume = false;
  for (const auto& e : Events(job->id())) {
    saw_resume |= e.has_task_state() && e.task_state().resumed_epochs() == 7;
  }
  EXPECT_TRUE(saw_resume);
}

// Every worker starts from SchedulerOptions::worker_env (traind's oneDNN
// settings among it), then gets its own secret, threads and GPUs.
TEST_F(SchedulerTest, WorkersStartFromTheConfiguredEnvironment) {
  Close();
  Open(/*slots=*/2, [](SchedulerOptions* o) {
    o->worker_env = {"PATH=/usr/bin:/bin", "LANG=C.UTF-8", "ONEDNN_MAX_CPU_ISA=AVX2"};
    o->worker_threads = 3;
  });
  ASSERT_TRUE(scheduler_->Submit(ThreeFoldSpec()).ok());
  scheduler_->Start();
  ASSERT_TRUE(launcher_->WaitForLaunches(2));
  for (const FakeLauncher::Launched& l : launcher_->launched()) {
    std::map<std::string, int> names;
    for (const std::string& e : l.request.env) ++names[e.substr(0, e.find('='))];
    for (const auto& [name, count] : names) EXPECT_EQ(count, 1) << name << " set twice";
    EXPECT_EQ(names.size(), 7u);
    auto value = [&](const std::string& name) {
      for (const std::string& e : l.request.env) {
        if (e.rfind(name + "=", 0) == 0) return e.substr(name.size() + 1);
      }
      return std::string("<unset>");
    };
    EXPECT_EQ(value("ONEDNN_MAX_CPU_ISA"), "AVX2");
    EXPECT_EQ(value("PATH"), "/usr/bin:/bin");
    EXPECT_EQ(value("OMP_NUM_THREADS"), "3");
    EXPECT_EQ(value("CUDA_VISIBLE_DEVICES"), "");
    EXPECT_NE(value("TRAIND_WORKER_SECRET"), "<unset>");
  }
}

TEST_F(SchedulerTest, UnknownJobIsNotFound) {
  ASSERT_TRUE(scheduler_->Recover().ok());
  EXPECT_EQ(scheduler_->GetJob("nope").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(scheduler_->Cancel("nope", false).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(scheduler_->GetResult("nope").status().code(), absl::StatusCode::kNotFound);
  int64_t last;
  bool terminal;
  EXPECT_EQ(scheduler_->JobEventsState("nope", &last, &terminal).code(),
            absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace traind::server
