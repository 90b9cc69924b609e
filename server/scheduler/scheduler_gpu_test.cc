// The scheduler with GPUs (a fake device probe): placement, draining,
// out-of-memory retries on another GPU, and multi-GPU tasks' ranks.
#include <signal.h>

#include <functional>
#include <memory>
#include <string>

#include "gtest/gtest.h"
#include "server/scheduler/scheduler.h"
#include "server/store/job_store.h"
#include "server/testing/fake_clock.h"
#include "server/testing/fake_device_probe.h"
#include "server/testing/fake_launcher.h"
#include "server/testing/scheduler_fixture.h"
#include "tests/testing/temp_dir.h"

namespace traind::server {
namespace {

using traind::v1::Failure;
using traind::v1::Job;
using traind::v1::Task;

class GpuSchedulerTest : public SchedulerTest {
 protected:
  static constexpr int64_t kGiB = 1ll << 30;
  void SetUp() override {
    probe_.Set({FakeGpu("GPU-0", 80 * kGiB, kGiB / 2), FakeGpu("GPU-1", 80 * kGiB, kGiB / 2)});
    OpenWithGpus();
  }
  // The scheduler goes before probe_ (its loop polls the probe).
  void TearDown() override { Close(); }
  // (Again) a scheduler with the two fake GPUs, an 800 ms drain timeout and
  // `tweak`'s other options, recovered.
  void OpenWithGpus(std::function<void(SchedulerOptions*)> tweak = nullptr) {
    Close();
    Open(/*slots=*/4, [&](SchedulerOptions* o) {
      o->gpu_probe = &probe_;
      o->worker_has_gpu_backend = true;
      o->gpu.drain_timeout = absl::Milliseconds(800);
      if (tweak) tweak(o);
    });
    ASSERT_TRUE(scheduler_->Recover().ok());
  }
  // The scheduler again, on clock_ (drain timeouts then pass only when the
  // test advances it).
  void UseFakeClock() {
    OpenWithGpus([this](SchedulerOptions* o) { o->clock = &clock_; });
  }
  // Polls `done` every 10 ms for up to 10 s (the scheduler's loop acts on
  // its own thread).
  template <typename Done>
  static bool WaitUntil(Done done) {
    for (int i = 0; i < 1000; ++i) {
      if (done()) return true;
      absl::SleepFor(absl::Milliseconds(10));
    }
    return done();
  }
  // A 2-fold job whose tasks take both GPUs (1 GiB each).
  absl::StatusOr<Job> SubmitTwoGpuJob() {
    SubmitOptions o;
    o.gpu_memory_bytes = kGiB;
    auto spec = GpuSpec(2);
    spec.mutable_resources()->set_count(2);
    return scheduler_->Submit(spec, o);
  }
  traind::v1::JobSpec GpuSpec(int folds) {
    auto spec = ThreeFoldSpec();
    spec.mutable_cross_validation()->set_folds(folds);
    spec.mutable_resources()->set_device(traind::v1::GPU);
    spec.mutable_resources()->set_count(1);
    return spec;
  }
  static std::string Env(const FakeLauncher::Launched& l, const std::string& name) {
    for (const auto& e : l.request.env) {
      if (e.rfind(name + "=", 0) == 0) return e.substr(name.size() + 1);
    }
    return "<unset>";
  }
  FakeDeviceProbe probe_;
};

TEST_F(GpuSchedulerTest, RejectsJobsThatCanNeverFit) {
  SubmitOptions o;
  o.gpu_memory_bytes = kGiB;
  auto spec = GpuSpec(2);
  spec.mutable_resources()->set_count(3);
  auto too_many = scheduler_->Submit(spec, o);
  EXPECT_EQ(too_many.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(too_many.status().message().find("spec.resources.count"), std::string::npos);
  o.gpu_memory_bytes = 81 * kGiB;
  auto too_big = scheduler_->Submit(GpuSpec(2), o);
  EXPECT_EQ(too_big.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(too_big.status().message().find(std::to_string(81 * kGiB)), std::string::npos)
      << too_big.status();
  EXPECT_NE(too_big.status().message().find(std::to_string(80 * kGiB)), std::string::npos);
  EXPECT_EQ(scheduler_->ListJobs({})->jobs_size(), 0);
}

TEST_F(GpuSchedulerTest, ReusesAGpuOnlyAfterItDrains) {
  // On the fake clock, which stands still: a GPU drains for as long as the
  // test looks at it, however slowly the machine runs.
  UseFakeClock();
  SubmitOptions o;
  o.gpu_memory_bytes = 10 * kGiB;
  auto job = scheduler_->Submit(GpuSpec(3), o);
  ASSERT_TRUE(job.ok()) << job.status();
  auto cpu_job = scheduler_->Submit(ThreeFoldSpec());
  scheduler_->Start();
  // Two GPU tasks (one per GPU) and the CPU tasks in their own slots.
  ASSERT_TRUE(launcher_->WaitForLaunches(5));
  absl::SleepFor(absl::Milliseconds(50));
  std::vector<FakeLauncher::Launched> gpu_tasks;
  for (const auto& l : launcher_->launched()) {
    if (l.Arg("job") == job->id()) {
      gpu_tasks.push_back(l);
    } else {
      EXPECT_EQ(Env(l, "CUDA_VISIBLE_DEVICES"), "") << "CPU tasks see no GPU";
    }
  }
  ASSERT_EQ(gpu_tasks.size(), 2u);
  EXPECT_EQ(Env(gpu_tasks[0], "CUDA_VISIBLE_DEVICES"), "GPU-0");
  EXPECT_EQ(Env(gpu_tasks[1], "CUDA_VISIBLE_DEVICES"), "GPU-1");

  // Task 0 finishes, but its process still holds GPU-0.
  probe_.SetUsage(0, 20 * kGiB, {{gpu_tasks[0].pid, 19 * kGiB}});
  RunWorker(gpu_tasks[0], 0.9);
  ASSERT_TRUE(WaitUntil([&] {
    auto view = scheduler_->GetJob(job->id());
    return view.ok() && view->tasks(2).wait_reason() == Task::DEVICE_DRAINING;
  })) << "task 2 never waited for GPU-0 to drain";
  auto view = scheduler_->GetJob(job->id());
  EXPECT_EQ(view->tasks(2).state(), Task::QUEUED);
  std::string why;
  auto gpus = scheduler_->Gpus(&why);
  EXPECT_EQ(gpus[0].state, GpuPool::State::kDraining);
  EXPECT_EQ(gpus[1].state, GpuPool::State::kBusy);

  // Released: task 2 goes onto GPU-0.
  probe_.SetUsage(0, kGiB / 2, {});
  ASSERT_TRUE(launcher_->WaitForLaunches(6));
  auto third = launcher_->launched().back();
  EXPECT_EQ(third.Arg("task"), "2");
  EXPECT_EQ(Env(third, "CUDA_VISIBLE_DEVICES"), "GPU-0");
}

TEST_F(GpuSchedulerTest, AGpuThatNeverDrainsIsReportedAndAvoided) {
  UseFakeClock();
  SubmitOptions o;
  o.gpu_memory_bytes = 10 * kGiB;
  auto job = scheduler_->Submit(GpuSpec(3), o);
  scheduler_->Start();
  ASSERT_TRUE(launcher_->WaitForLaunches(2));
  auto l0 = launcher_->launched()[0];
  auto l1 = launcher_->launched()[1];
  probe_.SetUsage(0, 30 * kGiB, {});  // leaked memory, no process
  RunWorker(l0, 0.9);
  clock_.Advance(absl::Milliseconds(1200));  // past the 800 ms drain timeout
  std::string why;
  ASSERT_TRUE(WaitUntil([&] {
    return scheduler_->Gpus(&why)[0].state == GpuPool::State::kUnhealthy;
  })) << "the scheduler's next look at the GPUs did not find GPU-0 past its drain timeout";
  EXPECT_EQ(scheduler_->UsableGpus(), 1);
  EXPECT_EQ(launcher_->launched().size(), 2u) << "nothing placed on the unhealthy GPU";
  // GPU-1 frees up normally: task 2 runs there.
  RunWorker(l1, 0.9);
  ASSERT_TRUE(launcher_->WaitForLaunches(3));
  EXPECT_EQ(Env(launcher_->launched()[2], "CUDA_VISIBLE_DEVICES"), "GPU-1");
  bool reported = false;
  for (const auto& e : Events(job->id())) {
    if (e.has_device()) {
      reported = true;
      EXPECT_EQ(e.device().device_id(), "gpu0");
      EXPECT_EQ(e.device().state(), "UNHEALTHY");
    }
  }
  EXPECT_TRUE(reported);
}

TEST_F(GpuSchedulerTest, OutOfMemoryIsRetriedOnlyOnAnotherGpu) {
  SubmitOptions o;
  o.gpu_memory_bytes = kGiB;
  auto spec = GpuSpec(2);
  spec.mutable_resources()->set_max_parallel_tasks(1);
  auto job = scheduler_->Submit(spec, o);
  scheduler_->Start();
  auto fail_oom = [&](const FakeLauncher::Launched& l) {
    traind::v1::ReportEventRequest failed;
    *failed.mutable_credentials() = CredentialsOf(l);
    failed.mutable_failed()->mutable_failure()->set_reason(Failure::OUT_OF_MEMORY);
    failed.mutable_failed()->mutable_failure()->set_message("needed 90 GiB, 79 GiB free");
    ASSERT_TRUE(scheduler_->ReportEvent(failed).ok());
    launcher_->Exit(l.pid, 1);
  };
  ASSERT_TRUE(launcher_->WaitForLaunches(1));
  auto first = launcher_->launched()[0];
  EXPECT_EQ(Env(first, "CUDA_VISIBLE_DEVICES"), "GPU-0");
  fail_oom(first);
  // GPU-0 drains at once (the fake probe shows it idle), but the retry goes
  // to GPU-1: on GPU-0 it would fail the same way.
  ASSERT_TRUE(launcher_->WaitForLaunches(2));
  auto second = launcher_->launched()[1];
  EXPECT_EQ(second.Arg("task"), "0");
  EXPECT_EQ(second.Arg("attempt"), "2");
  EXPECT_EQ(Env(second, "CUDA_VISIBLE_DEVICES"), "GPU-1");
  fail_oom(second);
  // No GPU left where it has not run out of memory: the job fails.
  auto view = scheduler_->GetJob(job->id());
  EXPECT_EQ(view->tasks(0).state(), Task::FAILED);
  EXPECT_EQ(view->failure().reason(), Failure::OUT_OF_MEMORY);
}

TEST_F(SchedulerTest, OutOfMemoryOnTheCpuIsNotRetried) {
  ASSERT_TRUE(scheduler_->Recover().ok());
  scheduler_->Start();
  auto job = scheduler_->Submit(ThreeFoldSpec());
  ASSERT_TRUE(launcher_->WaitForLaunches(2));
  auto l = launcher_->launched()[0];
  traind::v1::ReportEventRequest failed;
  *failed.mutable_credentials() = CredentialsOf(l);
  failed.mutable_failed()->mutable_failure()->set_reason(Failure::OUT_OF_MEMORY);
  ASSERT_TRUE(scheduler_->ReportEvent(failed).ok());
  launcher_->Exit(l.pid, 1);
  auto view = scheduler_->GetJob(job->id());
  EXPECT_EQ(view->tasks(0).state(), Task::FAILED);
  EXPECT_EQ(view->tasks(0).attempts_size(), 1);
}

TEST_F(GpuSchedulerTest, MultiGpuTaskRunsOneRankPerGpuAndMeetsAtRendezvous) {
  auto job = SubmitTwoGpuJob();
  ASSERT_TRUE(job.ok()) << job.status();
  scheduler_->Start();
  ASSERT_TRUE(launcher_->WaitForLaunches(2));
  absl::SleepFor(absl::Milliseconds(50));
  ASSERT_EQ(launcher_->launched().size(), 2u) << "task 1 waits for both GPUs";
  auto r0 = launcher_->launched()[0], r1 = launcher_->launched()[1];
  EXPECT_EQ(r0.Arg("rank"), "0");
  EXPECT_EQ(r1.Arg("rank"), "1");
  EXPECT_EQ(r1.Arg("world-size"), "2");
  EXPECT_EQ(r0.Arg("task"), r1.Arg("task"));
  // Both ranks see the task's GPUs in rank order (rank r trains on the
  // r-th), so that NCCL can reach the peer's GPU directly.
  EXPECT_EQ(Env(r0, "CUDA_VISIBLE_DEVICES"), "GPU-0,GPU-1");
  EXPECT_EQ(Env(r1, "CUDA_VISIBLE_DEVICES"), "GPU-0,GPU-1");
  EXPECT_EQ(r0.Secret(), r1.Secret());
  auto c0 = CredentialsOf(r0), c1 = CredentialsOf(r1);
  c1.set_rank(1);
  auto assignment = scheduler_->GetTask(c1);
  ASSERT_TRUE(assignment.ok());
  EXPECT_EQ(assignment->rank(), 1);
  EXPECT_EQ(assignment->world_size(), 2);
  auto bad = c1;
  bad.set_rank(2);
  EXPECT_EQ(scheduler_->GetTask(bad).status().code(), absl::StatusCode::kPermissionDenied);

  // Rank 1 asks first and waits; rank 0 posts; both get the id.
  absl::StatusOr<std::string> got1 = absl::UnknownError("not called");
  bool called1 = false;
  scheduler_->Rendezvous(c1, 2, "", [&](absl::StatusOr<std::string> id) {
    called1 = true;
    got1 = id;
  });
  EXPECT_FALSE(called1);
  absl::StatusOr<std::string> got0 = absl::UnknownError("not called");
  scheduler_->Rendezvous(c0, 2, "nccl-id-bytes",
                         [&](absl::StatusOr<std::string> id) { got0 = id; });
  ASSERT_TRUE(called1);
  EXPECT_EQ(*got1, "nccl-id-bytes");
  EXPECT_EQ(*got0, "nccl-id-bytes");

  // Only rank 0's metrics are stored.
  traind::v1::EpochMetrics m;
  m.set_epoch(1);
  ASSERT_TRUE(scheduler_->ReportEpoch(c1, m).ok());
  EXPECT_EQ(scheduler_->store()->ReadEpochs(job->id())->size(), 0u);
  RunWorker(r0, 0.9);  // rank 0 reports and exits
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_EQ(scheduler_->GetJob(job->id())->tasks(0).state(), Task::RUNNING)
      << "the attempt ends when every rank has exited";
  launcher_->Exit(r1.pid, 0);
  auto view = scheduler_->GetJob(job->id());
  EXPECT_EQ(view->tasks(0).state(), Task::SUCCEEDED);
  EXPECT_EQ(view->tasks(0).attempts(0).rank_pids_size(), 2);
  // Both GPUs drain (no process, memory at baseline): task 1 gets both.
  ASSERT_TRUE(launcher_->WaitForLaunches(4));
  EXPECT_EQ(launcher_->launched()[2].Arg("task"), "1");
}

TEST_F(GpuSchedulerTest, ADeadRankStopsItsPeersAndTheAttemptIsRetried) {
  auto job = SubmitTwoGpuJob();
  scheduler_->Start();
  ASSERT_TRUE(launcher_->WaitForLaunches(2));
  auto r0 = launcher_->launched()[0], r1 = launcher_->launched()[1];
  auto c1 = CredentialsOf(r1);
  c1.set_rank(1);
  bool aborted = false;
  scheduler_->Rendezvous(c1, 2, "", [&](absl::StatusOr<std::string> id) { aborted = !id.ok(); });
  launcher_->Exit(r1.pid, 0, SIGSEGV);
  auto signals = launcher_->signals();
  ASSERT_FALSE(signals.empty());
  EXPECT_EQ(signals.back(), std::make_pair(r0.pid, SIGKILL)) << "the surviving rank is stopped";
  launcher_->Exit(r0.pid, 0, SIGKILL);
  EXPECT_TRUE(aborted) << "a rank waiting at the rendezvous is released";
  auto view = scheduler_->GetJob(job->id());
  const auto& f = view->tasks(0).attempts(0).failure();
  EXPECT_EQ(f.reason(), Failure::WORKER_CRASHED);
  EXPECT_NE(f.message().find("rank 1"), std::string::npos) << f.message();
  EXPECT_EQ(f.signal(), SIGSEGV);
  ASSERT_TRUE(launcher_->WaitForLaunches(4));
  EXPECT_EQ(launcher_->launched()[2].Arg("attempt"), "2");
}

// A 2-rank attempt of a 2-fold GPU job on the test's two GPUs: its ranks'
// launches and credentials.
struct TwoRanks {
  FakeLauncher::Launched r0, r1;
  traind::v1::AttemptCredentials c0, c1;
};

class MultiGpuSchedulerTest : public GpuSchedulerTest {
 protected:
  std::string Start2RankJob(TwoRanks* ranks) {
    auto job = SubmitTwoGpuJob();
    EXPECT_TRUE(job.ok()) << job.status();
    scheduler_->Start();
    EXPECT_TRUE(launcher_->WaitForLaunches(2));
    ranks->r0 = launcher_->launched()[0];
    ranks->r1 = launcher_->launched()[1];
    ranks->c0 = CredentialsOf(ranks->r0);
    ranks->c1 = CredentialsOf(ranks->r1);
    ranks->c1.set_rank(1);
    return job.ok() ? job->id() : "";
  }
  void ReportFailure(const traind::v1::AttemptCredentials& c, Failure::Reason reason,
                     const std::string& message) {
    traind::v1::ReportEventRequest failed;
    *failed.mutable_credentials() = c;
    failed.mutable_failed()->mutable_failure()->set_reason(reason);
    failed.mutable_failed()->mutable_failure()->set_message(message);
    ASSERT_TRUE(scheduler_->ReportEvent(failed).ok());
  }
  bool Signalled(int pid, int sig) {
    for (const auto& s : launcher_->signals()) {
      if (s == std::make_pair(pid, sig)) return true;
    }
    return false;
  }
};

TEST_F(MultiGpuSchedulerTest, ARankThatFailsStopsItsPeersAndTheAttemptEnds) {
  TwoRanks t;
  const std::string id = Start2RankJob(&t);
  // Rank 1 fails on its own (a device error: not retried) and exits 1.
  ReportFailure(t.c1, Failure::DEVICE_ERROR, "CUDA: an illegal memory access");
  EXPECT_TRUE(Signalled(t.r0.pid, SIGKILL)) << "rank 0 is stopped at once";
  EXPECT_FALSE(Signalled(t.r1.pid, SIGKILL)) << "the failing rank exits by itself";
  launcher_->Exit(t.r1.pid, 1);
  EXPECT_EQ(scheduler_->GetJob(id)->tasks(0).state(), Task::STARTING)
      << "the attempt ends when every rank has exited";
  launcher_->Exit(t.r0.pid, 0, SIGKILL);
  auto view = scheduler_->GetJob(id);
  ASSERT_TRUE(view.ok());
  EXPECT_EQ(view->tasks(0).state(), Task::FAILED);
  const auto& f = view->tasks(0).attempts(0).failure();
  EXPECT_EQ(f.reason(), Failure::DEVICE_ERROR) << "the first failure is kept";
  EXPECT_NE(f.message().find("rank 1: CUDA"), std::string::npos) << f.message();
  EXPECT_EQ(view->state(), Job::FAILED);
}

// The rank that reported the failure is left to release its device (NCCL
// finalize, its CUDA context) even when its killed peer's exit comes first.
TEST_F(MultiGpuSchedulerTest, TheRankThatReportedIsNotKilledWhenItsPeerExitsFirst) {
  TwoRanks t;
  const std::string id = Start2RankJob(&t);
  ReportFailure(t.c1, Failure::DEVICE_ERROR, "CUDA: an illegal memory access");
  ASSERT_TRUE(Signalled(t.r0.pid, SIGKILL));
  launcher_->Exit(t.r0.pid, 0, SIGKILL);  // the peer goes first
  EXPECT_FALSE(Signalled(t.r1.pid, SIGKILL)) << "rank 1 is on its way out by itself";
  launcher_->Exit(t.r1.pid, 1);
  auto view = scheduler_->GetJob(id);
  ASSERT_TRUE(view.ok());
  EXPECT_EQ(view->tasks(0).state(), Task::FAILED);
  EXPECT_EQ(view->tasks(0).attempts(0).failure().reason(), Failure::DEVICE_ERROR);
}

TEST_F(MultiGpuSchedulerTest, AnUncleanRankExitStopsThePeersAfterAReportedFailure) {
  TwoRanks t;
  const std::string id = Start2RankJob(&t);
  // Rank 1 reports a crash-like failure (its peer connection broke, say) and
  // exits 1: rank 0 is killed and the attempt is retried.
  ReportFailure(t.c1, Failure::WORKER_CRASHED, "NCCL: remote process exited");
  launcher_->Exit(t.r1.pid, 1);
  EXPECT_TRUE(Signalled(t.r0.pid, SIGKILL));
  launcher_->Exit(t.r0.pid, 0, SIGKILL);
  auto view = scheduler_->GetJob(id);
  ASSERT_TRUE(view.ok());
  EXPECT_EQ(view->tasks(0).attempts(0).failure().reason(), Failure::WORKER_CRASHED);
  EXPECT_NE(view->tasks(0).attempts(0).failure().message().find("rank 1:"), std::string::npos);
  // Both GPUs drain: the retry runs both ranks again.
  ASSERT_TRUE(launcher_->WaitForLaunches(4));
  EXPECT_EQ(launcher_->launched()[2].Arg("attempt"), "2");
  EXPECT_EQ(launcher_->launched()[3].Arg("attempt"), "2");
}

TEST_F(MultiGpuSchedulerTest, AFailedRankThatStaysIsKilledByTheHeartbeatTimeout) {
  OpenWithGpus([this](SchedulerOptions* o) {
    o->heartbeat_timeout = absl::Milliseconds(300);
    o->clock = &clock_;
  });
  TwoRanks t;
  const std::string id = Start2RankJob(&t);
  ReportFailure(t.c1, Failure::DATA_ERROR, "data.csv:3: not a number");
  launcher_->Exit(t.r0.pid, 0, SIGKILL);
  // Rank 1 reported but never exits, and goes silent: killed anyway.
  clock_.Advance(absl::Milliseconds(400));
  scheduler_->EnforceDeadlines();
  ASSERT_TRUE(Signalled(t.r1.pid, SIGKILL));
  launcher_->Exit(t.r1.pid, 0, SIGKILL);
  auto view = scheduler_->GetJob(id);
  ASSERT_TRUE(view.ok());
  EXPECT_EQ(view->tasks(0).state(), Task::FAILED);
  EXPECT_EQ(view->tasks(0).attempts(0).failure().reason(), Failure::DATA_ERROR)
      << "the first failure stays the attempt's";
}

TEST_F(MultiGpuSchedulerTest, ACrashedPeerIsTheFailureRatherThanTheSurvivorsDeviceError) {
  TwoRanks t;
  const std::string id = Start2RankJob(&t);
  // Rank 0 sees its peer go (reported as a device error) before traind
  // learns that rank 1 crashed.
  ReportFailure(t.c0, Failure::DEVICE_ERROR, "NCCL: ncclAllReduce: remote process exited");
  launcher_->Exit(t.r1.pid, 0, SIGSEGV);
  launcher_->Exit(t.r0.pid, 1);
  auto view = scheduler_->GetJob(id);
  ASSERT_TRUE(view.ok());
  const auto& f = view->tasks(0).attempts(0).failure();
  EXPECT_EQ(f.reason(), Failure::WORKER_CRASHED);
  EXPECT_NE(f.message().find("rank 1"), std::string::npos) << f.message();
  EXPECT_EQ(f.signal(), SIGSEGV);
  ASSERT_TRUE(launcher_->WaitForLaunches(4)) << "a crash is retried";
  EXPECT_EQ(launcher_->launched()[2].Arg("attempt"), "2");
}

TEST_F(MultiGpuSchedulerTest, RankZeroExitingBeforeItsIdReleasesTheWaitingRanksAtOnce) {
  TwoRanks t;
  const std::string id = Start2RankJob(&t);
  absl::StatusOr<std::string> got1 = absl::UnknownError("not called");
  bool called1 = false;
  scheduler_->Rendezvous(t.c1, 2, "", [&](absl::StatusOr<std::string> r) {
    called1 = true;
    got1 = r;
  });
  ASSERT_FALSE(called1);
  // Rank 0 dies before posting the NCCL id.
  launcher_->Exit(t.r0.pid, 1);
  ASSERT_TRUE(called1) << "the waiting rank is released when rank 0 exits, not at its timeout";
  EXPECT_EQ(got1.status().code(), absl::StatusCode::kAborted) << got1.status();
  EXPECT_TRUE(Signalled(t.r1.pid, SIGKILL));
  // A rank that comes later gets the error at once.
  bool late = false;
  scheduler_->Rendezvous(t.c1, 2, "", [&](absl::StatusOr<std::string> r) { late = !r.ok(); });
  EXPECT_TRUE(late);
  launcher_->Exit(t.r1.pid, 0, SIGKILL);
  auto view = scheduler_->GetJob(id);
  ASSERT_TRUE(view.ok());
  const auto& f = view->tasks(0).attempts(0).failure();
  EXPECT_EQ(f.reason(), Failure::WORKER_CRASHED);
  EXPECT_NE(f.message().find("rank 0"), std::string::npos) << f.message();
  ASSERT_TRUE(launcher_->WaitForLaunches(4));
}

TEST_F(MultiGpuSchedulerTest, AReportedFailureReleasesTheRendezvousAtOnce) {
  TwoRanks t;
  Start2RankJob(&t);
  bool called1 = false;
  absl::Status got1;
  scheduler_->Rendezvous(t.c1, 2, "", [&](absl::StatusOr<std::string> r) {
    called1 = true;
    got1 = r.status();
  });
  ASSERT_FALSE(called1);
  // Rank 0 fails making the id (still running: it exits after reporting).
  ReportFailure(t.c0, Failure::DEVICE_ERROR, "NCCL: ncclGetUniqueId: system error");
  ASSERT_TRUE(called1);
  EXPECT_EQ(got1.code(), absl::StatusCode::kAborted);
  EXPECT_NE(got1.message().find("ncclGetUniqueId"), std::string::npos) << got1;
  launcher_->Exit(t.r0.pid, 1);
  launcher_->Exit(t.r1.pid, 0, SIGKILL);
}

TEST_F(SchedulerTest, GpusWithoutAWorkerGpuBackendAcceptNoGpuJob) {
  FakeDeviceProbe probe;
  probe.Set({FakeGpu("GPU-0", 80ll << 30, 0)});
  Close();
  Open(2, [&](SchedulerOptions* o) {
    o->gpu_probe = &probe;
    o->worker_has_gpu_backend = false;
  });
  ASSERT_TRUE(scheduler_->Recover().ok());
  std::string why;
  EXPECT_EQ(scheduler_->UsableGpus(&why), 0);
  EXPECT_NE(why.find("no GPU backend"), std::string::npos) << why;
  EXPECT_EQ(scheduler_->Gpus(nullptr).size(), 1u);  // still listed
  auto spec = ThreeFoldSpec();
  spec.mutable_resources()->set_device(traind::v1::GPU);
  spec.mutable_resources()->set_count(1);
  EXPECT_EQ(scheduler_->Submit(spec).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace traind::server
