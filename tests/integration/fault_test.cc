// The daemon keeps its promises: the real traind and real workers, killed,
// hung, stopped and restarted.
#include <dirent.h>
#include <signal.h>

#include <algorithm>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "spec/loader.h"
#include "tests/integration/testing/traind_process.h"
#include "tests/testing/procfs.h"
#include "tests/testing/tfevents_reader.h"

namespace traind::testing {
namespace {

using traind::v1::Failure;
using traind::v1::Job;
using traind::v1::JobEvent;
using traind::v1::Task;

// Epochs of an iris fold that take long enough (about a second here) for a
// test to kill, stop or hang the worker in the middle of its training.
constexpr int kLongEpochs = 10000;

bool ProcessAlive(int pid) {
  if (kill(pid, 0) != 0) return false;
  // A zombie is dead for our purposes.
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  std::getline(in, line);
  size_t close = line.rfind(')');
  return close == std::string::npos || line.size() < close + 2 || line[close + 2] != 'Z';
}

// Children of `pid` other than the worker zygote (`traind-worker --zygote`,
// which lives as long as traind), and how many of them are zombies.
std::pair<int, int> Children(int pid) {
  int children = 0, zombies = 0;
  for (const ProcChild& c : ChildrenOf(pid)) {
    const bool zygote =
        ProcCmdline(c.pid).find(std::string("--zygote") + '\0') != std::string::npos;
    if (c.state != 'Z' && zygote) continue;
    ++children;
    zombies += c.state == 'Z';
  }
  return {children, zombies};
}

int OpenFds(int pid) {
  int n = 0;
  DIR* d = opendir(("/proc/" + std::to_string(pid) + "/fd").c_str());
  if (d == nullptr) return -1;
  while (readdir(d) != nullptr) ++n;
  closedir(d);
  return n - 2;
}

class FaultTest : public ::testing::Test {
 protected:
  void StartDaemon(std::vector<std::string> args = {"--cpu-slots=1"}) {
    args_ = args;
    daemon_ = std::make_unique<TraindProcess>(dir_.path() + "/state", args);
    ASSERT_TRUE(daemon_->Start()) << daemon_->Log();
  }
  void Restart() {
    daemon_ = std::make_unique<TraindProcess>(dir_.path() + "/state", args_);
    ASSERT_TRUE(daemon_->Start()) << daemon_->Log();
  }
  void TearDown() override {
    if (daemon_ != nullptr) {
      daemon_->Stop();
      if (HasFailure()) std::cerr << "--- traind log ---\n" << daemon_->Log();
    }
  }

  Job Submit(const traind::v1::JobSpec& spec, const std::string& key = "") {
    absl::StatusOr<Job> job = SubmitJob(daemon_->stub(), spec, key);
    EXPECT_TRUE(job.ok()) << job.status();
    return job.ok() ? *job : Job();
  }
  Job Get(const std::string& id) { return GetJob(daemon_->stub(), id); }
  // Polls until `pred(job)` holds; false after `seconds`.
  template <typename Pred>
  bool WaitFor(const std::string& id, Pred pred, int seconds = 60) {
    for (int i = 0; i < seconds * 50; ++i) {
      if (pred(Get(id))) return true;
      usleep(20000);
    }
    return false;
  }

  // Checks the metric history: per (task, attempt) each epoch once and in
  // order, from the first epoch or from the one after the checkpoint the
  // attempt resumed from; each task's last attempt reported every epoch up
  // to the last, and an attempt resumed after epoch k follows one that
  // reported epoch k. Returns the epochs each (task, attempt) resumed after.
  std::map<std::pair<int, int>, int> ExpectCompleteHistory(const std::vector<JobEvent>& events,
                                                           const Job& job, int epochs) {
    std::map<std::pair<int, int>, std::vector<int>> seen;
    std::map<std::pair<int, int>, int> resumed;
    for (const JobEvent& e : events) {
      if (e.has_epoch()) seen[{e.epoch().task(), e.epoch().attempt()}].push_back(e.epoch().epoch());
      if (e.has_task_state() && e.task_state().resumed_epochs() > 0) {
        resumed[{e.task_state().task(), e.task_state().attempt()}] =
            e.task_state().resumed_epochs();
      }
    }
    for (const auto& [key, list] : seen) {
      const int first = resumed.count(key) ? resumed[key] + 1 : 1;
      for (size_t i = 0; i < list.size(); ++i) {
        EXPECT_EQ(list[i], first + static_cast<int>(i))
            << "task " << key.first << " attempt " << key.second
            << ": epochs out of order or twice";
      }
    }
    for (const auto& [key, after] : resumed) {
      int before = 0;  // the most any earlier attempt of the task reported
      for (const auto& [k, list] : seen) {
        if (k.first == key.first && k.second < key.second && !list.empty()) {
          before = std::max(before, list.back());
        }
      }
      EXPECT_GE(before, after) << "task " << key.first << " attempt " << key.second
                               << " resumed after epoch " << after << " that no attempt reported";
    }
    for (const Task& t : job.tasks()) {
      const int last = t.attempts(t.attempts_size() - 1).number();
      const auto key = std::make_pair(t.index(), last);
      const int first = resumed.count(key) ? resumed[key] + 1 : 1;
      const std::vector<int>& list = seen[key];
      EXPECT_EQ(list.size(), static_cast<size_t>(epochs - first + 1))
          << "task " << t.index() << " attempt " << last;
      if (!list.empty()) {
        EXPECT_EQ(list.back(), epochs) << "task " << t.index();
      }
    }
    for (size_t i = 0; i < events.size(); ++i) {
      EXPECT_EQ(events[i].sequence(), static_cast<int64_t>(i + 1));
    }
    return resumed;
  }

  // Checks each task's TensorBoard run after retries: one event file, every
  // epoch once, each with the metrics of the last attempt that reported it
  // (a resumed attempt keeps what came before its checkpoint; a fresh one
  // starts the run over).
  void ExpectTensorBoardRuns(const std::vector<JobEvent>& events, const Job& job, int epochs) {
    // task -> epoch -> the latest attempt's report of it.
    std::map<int, std::map<int, traind::v1::EpochMetrics>> latest;
    for (const JobEvent& e : events) {
      if (!e.has_epoch()) continue;
      traind::v1::EpochMetrics& m = latest[e.epoch().task()][e.epoch().epoch()];
      if (e.epoch().attempt() >= m.attempt()) m = e.epoch();
    }
    for (const Task& t : job.tasks()) {
      SCOPED_TRACE("task " + std::to_string(t.index()));
      const std::vector<std::string> files =
          EventFilesIn(daemon_->state_dir() + "/jobs/" + job.id() + "/tensorboard/task-" +
                       std::to_string(t.index()));
      ASSERT_EQ(files.size(), 1u);
      const TfEventFile file = ParseTfEvents(ReadBytes(files[0]));
      EXPECT_EQ(file.error, "");
      ASSERT_FALSE(file.events.empty());
      EXPECT_EQ(file.events[0].file_version, "brain.Event:2");
      std::map<int64_t, std::map<std::string, float>> steps;
      for (size_t i = 1; i < file.events.size(); ++i) {
        const TfEvent& e = file.events[i];
        ASSERT_EQ(e.values.size(), 1u);
        ASSERT_TRUE(steps[e.step].emplace(e.values[0].first, e.values[0].second).second)
            << "step " << e.step << " " << e.values[0].first << " twice";
      }
      ASSERT_EQ(steps.size(), static_cast<size_t>(epochs));
      for (const auto& [epoch, m] : latest[t.index()]) {
        const std::map<std::string, float>& got = steps[epoch];
        ASSERT_EQ(got.size(), static_cast<size_t>(m.train_size() + m.val_size() + 1))
            << "epoch " << epoch;
        for (const auto& [k, v] : m.train()) {
          ASSERT_EQ(got.at("train/" + k), static_cast<float>(v))
              << "epoch " << epoch << " of attempt " << m.attempt();
        }
        for (const auto& [k, v] : m.val()) {
          ASSERT_EQ(got.at("val/" + k), static_cast<float>(v))
              << "epoch " << epoch << " of attempt " << m.attempt();
        }
      }
    }
  }

  TempDir dir_;
  std::vector<std::string> args_;
  std::unique_ptr<TraindProcess> daemon_;
};

TEST_F(FaultTest, DaemonKilledMidJobComesBackAndFinishesWithoutRerunningFolds) {
  StartDaemon();
  const int epochs = kLongEpochs;
  Job job = Submit(IrisExampleSpec(3, epochs));
  // A watcher follows the job until the daemon dies.
  std::vector<JobEvent> before;
  std::thread watcher([&] { WatchAll(daemon_->stub(), job.id(), 0, &before, 120); });
  ASSERT_TRUE(WaitFor(job.id(), [](const Job& j) {
    return j.tasks(0).state() == Task::SUCCEEDED && j.tasks(1).epochs_done() >= 5;
  }));
  Job mid = Get(job.id());
  const int worker = mid.tasks(1).attempts(0).pid();
  ASSERT_TRUE(ProcessAlive(worker));
  ASSERT_EQ(daemon_->Stop(SIGKILL) & 0x7f, SIGKILL);
  watcher.join();
  // The worker dies with the daemon (parent-death signal).
  for (int i = 0; i < 100 && ProcessAlive(worker); ++i) usleep(20000);
  EXPECT_FALSE(ProcessAlive(worker)) << "worker " << worker << " outlived the daemon";

  Restart();
  // Resume the watch from the last event seen: nothing missed, nothing twice.
  ASSERT_FALSE(before.empty());
  std::vector<JobEvent> after;
  ASSERT_TRUE(WatchAll(daemon_->stub(), job.id(), before.back().sequence(), &after, 120).ok());
  std::vector<JobEvent> all = before;
  all.insert(all.end(), after.begin(), after.end());
  Job done = Get(job.id());
  ASSERT_EQ(done.state(), Job::SUCCEEDED) << done.DebugString();
  EXPECT_EQ(done.tasks(0).attempts_size(), 1) << "a finished fold ran again";
  ASSERT_EQ(done.tasks(1).attempts_size(), 2);
  EXPECT_EQ(done.tasks(1).attempts(0).failure().reason(), Failure::LOST);
  ExpectCompleteHistory(all, done, epochs);
  EXPECT_TRUE(all.back().last());
}

TEST_F(FaultTest, KilledWorkerIsRetriedAndTheJobSucceeds) {
  StartDaemon();
  const int epochs = kLongEpochs;
  Job job = Submit(IrisExampleSpec(2, epochs));
  ASSERT_TRUE(WaitFor(job.id(), [](const Job& j) { return j.tasks(0).epochs_done() >= 3; }));
  const int worker = Get(job.id()).tasks(0).attempts(0).pid();
  ASSERT_EQ(kill(worker, SIGKILL), 0);
  std::vector<JobEvent> events;
  ASSERT_TRUE(WatchAll(daemon_->stub(), job.id(), 0, &events, 120).ok());
  Job done = Get(job.id());
  ASSERT_EQ(done.state(), Job::SUCCEEDED) << done.DebugString();
  ASSERT_EQ(done.tasks(0).attempts_size(), 2);
  const auto& f = done.tasks(0).attempts(0).failure();
  EXPECT_EQ(f.reason(), Failure::WORKER_CRASHED);
  EXPECT_EQ(f.signal(), SIGKILL);
  EXPECT_NE(f.message().find("signal 9"), std::string::npos) << f.message();
  EXPECT_EQ(done.tasks(1).attempts_size(), 1);
  ExpectCompleteHistory(events, done, epochs);
  // No checkpoint: the retry started the run over, in the same file.
  ExpectTensorBoardRuns(events, done, epochs);
}

TEST_F(FaultTest, HungWorkerIsKilledAndRetried) {
  StartDaemon({"--cpu-slots=1", "--heartbeat-timeout=1.5"});
  const int epochs = kLongEpochs;
  Job job = Submit(IrisExampleSpec(2, epochs));
  ASSERT_TRUE(WaitFor(job.id(), [](const Job& j) { return j.tasks(0).epochs_done() >= 3; }));
  const int worker = Get(job.id()).tasks(0).attempts(0).pid();
  ASSERT_EQ(kill(worker, SIGSTOP), 0);  // alive, silent
  std::vector<JobEvent> events;
  ASSERT_TRUE(WatchAll(daemon_->stub(), job.id(), 0, &events, 120).ok());
  Job done = Get(job.id());
  ASSERT_EQ(done.state(), Job::SUCCEEDED) << done.DebugString();
  ASSERT_EQ(done.tasks(0).attempts_size(), 2);
  EXPECT_EQ(done.tasks(0).attempts(0).failure().reason(), Failure::TIMEOUT);
  EXPECT_FALSE(ProcessAlive(worker));
  ExpectCompleteHistory(events, done, epochs);
}

TEST_F(FaultTest, SigtermStopsWithinTheGraceAndTheNextStartResumes) {
  StartDaemon({"--cpu-slots=1", "--stop-grace=5"});
  const int epochs = kLongEpochs;
  Job job = Submit(IrisExampleSpec(2, epochs));
  ASSERT_TRUE(WaitFor(job.id(), [](const Job& j) { return j.tasks(0).epochs_done() >= 3; }));
  const int worker = Get(job.id()).tasks(0).attempts(0).pid();
  absl::Time t0 = absl::Now();
  int status = daemon_->Stop(SIGTERM);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  EXPECT_LT(absl::Now() - t0, absl::Seconds(8));
  EXPECT_FALSE(ProcessAlive(worker));
  Restart();
  std::vector<JobEvent> events;
  ASSERT_TRUE(WatchAll(daemon_->stub(), job.id(), 0, &events, 120).ok());
  Job done = Get(job.id());
  ASSERT_EQ(done.state(), Job::SUCCEEDED) << done.DebugString();
  EXPECT_EQ(done.tasks(0).attempts(0).failure().reason(), Failure::LOST);
  // The stopped worker checkpointed within the grace; the next attempt
  // continued from there.
  std::map<std::pair<int, int>, int> resumed = ExpectCompleteHistory(events, done, epochs);
  EXPECT_GE(resumed[std::make_pair(0, 2)], 3) << "task 0 attempt 2 did not resume";
  // Its TensorBoard run continues after the checkpoint's epoch.
  ExpectTensorBoardRuns(events, done, epochs);
}

TEST_F(FaultTest, QueuedJobCancelsAtOnceAndIdempotentResubmitReturnsTheSameJob) {
  StartDaemon();
  Job running = Submit(IrisExampleSpec(2, 100000), "first");
  Job again = Submit(IrisExampleSpec(2, 100000), "first");
  EXPECT_EQ(again.id(), running.id());
  Job queued = Submit(IrisExampleSpec(2, 10), "second");
  EXPECT_NE(queued.id(), running.id());
  ASSERT_TRUE(WaitFor(running.id(), [](const Job& j) { return j.state() == Job::RUNNING; }));
  Job q = Get(queued.id());
  EXPECT_EQ(q.tasks(0).wait_reason(), Task::RESOURCES);
  EXPECT_GE(q.tasks(0).tasks_ahead(), 1);

  traind::v1::CancelJobRequest c;
  c.set_job_id(queued.id());
  Job cancelled;
  auto ctx = Ctx();
  ASSERT_TRUE(daemon_->stub()->CancelJob(ctx.get(), c, &cancelled).ok());
  EXPECT_EQ(cancelled.state(), Job::CANCELLED);
  for (const Task& t : cancelled.tasks()) EXPECT_EQ(t.attempts_size(), 0);

  c.set_job_id(running.id());
  c.set_force(true);
  auto ctx2 = Ctx();
  ASSERT_TRUE(daemon_->stub()->CancelJob(ctx2.get(), c, &cancelled).ok());
  ASSERT_TRUE(WaitFor(running.id(), [](const Job& j) { return j.state() == Job::CANCELLED; }));
  traind::v1::ListJobsRequest lreq;
  traind::v1::ListJobsResponse list;
  auto ctx3 = Ctx();
  ASSERT_TRUE(daemon_->stub()->ListJobs(ctx3.get(), lreq, &list).ok());
  EXPECT_EQ(list.jobs_size(), 2);
}

TEST_F(FaultTest, SoakOfSmallJobsKeepsMemoryDescriptorsAndChildrenFlat) {
  // 160 jobs queue at once: above the default per-user limit of queued jobs.
  StartDaemon({"--cpu-slots=2", "--max-queued-jobs-per-user=0"});
  auto spec = IrisExampleSpec(2, 1);
  auto run_batch = [&](int n) {
    std::vector<std::string> ids;
    for (int i = 0; i < n; ++i) ids.push_back(Submit(spec).id());
    for (const std::string& id : ids) {
      std::vector<JobEvent> events;
      ASSERT_TRUE(WatchAll(daemon_->stub(), id, 0, &events, 120).ok());
      ASSERT_EQ(events.back().job_state().state(), Job::SUCCEEDED) << id;
    }
  };
  run_batch(40);  // warm up: caches, the store, gRPC's threads
  const int pid = daemon_->pid();
  const int64_t rss0 = ProcStatusKiB(pid, "VmRSS");
  const int fds0 = OpenFds(pid);
  run_batch(160);
  usleep(300000);
  const int64_t rss1 = ProcStatusKiB(pid, "VmRSS");
  const int fds1 = OpenFds(pid);
  auto [children, zombies] = Children(pid);
  EXPECT_EQ(children, 0);
  EXPECT_EQ(zombies, 0);
  EXPECT_LE(fds1, fds0 + 2) << "file descriptors grew from " << fds0 << " to " << fds1;
  EXPECT_LT(rss1 - rss0, 16 * 1024) << "RSS grew from " << rss0 << " KiB to " << rss1 << " KiB";
  std::cerr << "soak: 200 jobs, 400 workers; RSS " << rss0 << " -> " << rss1 << " KiB, fds " << fds0
            << " -> " << fds1 << "\n";
}

}  // namespace
}  // namespace traind::testing

namespace traind::testing {
namespace {

// The real daemon with GPUs read from a file (--gpu-probe=file:PATH) and a
// stand-in worker: a GPU whose memory never comes back is not used again.
TEST_F(FaultTest, AGpuThatNeverDrainsIsMarkedUnhealthyAndNotUsed) {
  const int64_t gib = 1ll << 30;
  const std::string gpus = dir_.path() + "/gpus.txt";
  auto write_gpus = [&](int64_t used, const std::string& processes) {
    std::ofstream(gpus) << "GPU-fake-0 " << 80 * gib << " " << used << " " << processes << "\n";
  };
  write_gpus(gib / 2, "");
  StartDaemon({"--gpu-probe=file:" + gpus, "--gpu-drain-timeout=1",
               "--worker=" + SourceDir() + "/tests/integration/fake_gpu_worker.sh",
               "--max-restarts=0"});
  traind::v1::ListDevicesResponse devices;
  {
    auto ctx = Ctx();
    ASSERT_TRUE(daemon_->stub()->ListDevices(ctx.get(), {}, &devices).ok());
  }
  ASSERT_EQ(devices.devices_size(), 2);
  EXPECT_EQ(devices.devices(1).id(), "gpu0");
  EXPECT_EQ(devices.devices(1).uuid(), "GPU-fake-0");
  EXPECT_EQ(devices.devices(1).state(), traind::v1::Device::IDLE);

  auto spec = IrisExampleSpec(2, 5);
  spec.mutable_resources()->set_device(traind::v1::GPU);
  spec.mutable_resources()->set_count(1);
  Job job = Submit(spec);
  ASSERT_TRUE(WaitFor(job.id(), [](const Job& j) {
    return j.tasks(0).attempts_size() > 0 && j.tasks(0).attempts(0).pid() > 0;
  }));
  const int worker = Get(job.id()).tasks(0).attempts(0).pid();
  // The worker holds 20 GiB; after it exits the memory stays in use.
  write_gpus(20 * gib, std::to_string(worker) + ":" + std::to_string(19 * gib));
  ASSERT_TRUE(WaitFor(job.id(), [](const Job& j) { return j.state() == Job::FAILED; }));
  write_gpus(20 * gib, "");  // the process is gone; its memory is not back
  traind::v1::Device gpu;
  for (int i = 0; i < 150; ++i) {
    auto ctx = Ctx();
    devices.Clear();
    ASSERT_TRUE(daemon_->stub()->ListDevices(ctx.get(), {}, &devices).ok());
    gpu = devices.devices(1);
    if (gpu.state() == traind::v1::Device::UNHEALTHY) break;
    usleep(20000);
  }
  ASSERT_EQ(gpu.state(), traind::v1::Device::UNHEALTHY) << gpu.DebugString();
  EXPECT_NE(gpu.note().find("did not drain"), std::string::npos) << gpu.note();
  EXPECT_NE(devices.gpu_note().find("UNHEALTHY"), std::string::npos) << devices.gpu_note();
  EXPECT_NE(daemon_->Log().find("gpu0 UNHEALTHY"), std::string::npos);
  // Only one task ever ran on it: the second fold was not placed there.
  Job done = Get(job.id());
  EXPECT_EQ(done.tasks(1).attempts_size(), 0);
  // A new GPU job is refused, saying why.
  traind::v1::SubmitJobRequest req;
  *req.mutable_spec() = spec;
  Job refused;
  auto ctx = Ctx();
  grpc::Status s = daemon_->stub()->SubmitJob(ctx.get(), req, &refused);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("UNHEALTHY"), std::string::npos) << s.error_message();
}

}  // namespace
}  // namespace traind::testing
