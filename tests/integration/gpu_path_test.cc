// The worker's GPU path end to end without a GPU: the real traind, GPUs read
// from a file (--gpu-probe=file:PATH), and a copy of the real traind-worker
// beside a stand-in CUDA plugin (worker/testdata/cpu_backed_cuda_plugin.cc)
// that reports the GPUs traind gives it, trains on the CPU backend under
// another name and has no NCCL.
#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/integration/daemon.h"
#include "traind/spec_file.h"

namespace traind::testing {
namespace {

using traind::v1::Failure;
using traind::v1::Job;
using traind::v1::JobEvent;

constexpr int kFolds = 3;
constexpr int kEpochs = 20;

traind::v1::JobSpec IrisSpec() {
  auto spec = LoadJobSpecFile(SourceDir() + "/examples/iris-cv.yaml");
  EXPECT_TRUE(spec.ok()) << spec.status();
  spec->mutable_data()->set_path(SourceDir() + "/examples/data/iris.csv");
  spec->mutable_cross_validation()->set_folds(kFolds);
  spec->mutable_training()->set_epochs(kEpochs);
  return *spec;
}

traind::v1::JobSpec GpuSpec(int count) {
  traind::v1::JobSpec spec = IrisSpec();
  spec.mutable_resources()->set_device(traind::v1::GPU);
  spec.mutable_resources()->set_count(count);
  return spec;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

bool ProcessAlive(int pid) {
  if (kill(pid, 0) != 0) return false;
  // A zombie is dead for our purposes.
  std::string stat = ReadFile("/proc/" + std::to_string(pid) + "/stat");
  size_t close = stat.rfind(')');
  return close == std::string::npos || stat.size() < close + 2 || stat[close + 2] != 'Z';
}

bool Terminal(const Job& job) {
  return job.state() == Job::SUCCEEDED || job.state() == Job::FAILED ||
         job.state() == Job::CANCELLED;
}

class GpuPathTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // A copy, not a link: the worker finds its plugin beside /proc/self/exe,
    // which resolves links (the build tree's bin/ holds the real plugin).
    const std::string bin = dir_.path() + "/bin";
    std::filesystem::create_directories(bin);
    worker_ = bin + "/traind-worker";
    std::filesystem::copy_file(TRAIND_WORKER_PATH, worker_);
    std::filesystem::copy_file(TRAIND_CPU_BACKED_CUDA_PLUGIN_PATH, bin + "/libtraind_cuda.so");
    std::filesystem::permissions(worker_, std::filesystem::perms::owner_all);
  }
  void TearDown() override {
    if (daemon_ != nullptr) {
      daemon_->Stop();
      if (HasFailure()) std::cerr << "--- traind log ---\n" << daemon_->Log();
    }
  }

  // traind with `gpus` GPUs of 80 GiB, none of it in use.
  void StartDaemon(int gpus) {
    std::ofstream inventory(dir_.path() + "/gpus.txt");
    for (int i = 0; i < gpus; ++i) inventory << "GPU-fake-" << i << " " << (80ll << 30) << " 0\n";
    inventory.close();
    daemon_ = std::make_unique<Daemon>(
        dir_.path() + "/state",
        std::vector<std::string>{"--gpu-probe=file:" + dir_.path() + "/gpus.txt",
                                 "--worker=" + worker_, "--cpu-slots=1", "--worker-threads=1",
                                 "--max-restarts=0"});
    ASSERT_TRUE(daemon_->Start()) << daemon_->Log();
  }

  // Submits `spec` and waits until its job ends.
  Job Run(const traind::v1::JobSpec& spec, std::vector<JobEvent>* events) {
    absl::StatusOr<Job> job = SubmitJob(daemon_->stub(), spec);
    EXPECT_TRUE(job.ok()) << job.status();
    if (!job.ok()) return Job();
    grpc::Status s = WatchAll(daemon_->stub(), job->id(), 0, events, 240);
    EXPECT_TRUE(s.ok()) << s.error_message();
    Job done = GetJob(daemon_->stub(), job->id());
    for (int i = 0; i < 500 && !Terminal(done); ++i) {
      usleep(20000);
      done = GetJob(daemon_->stub(), job->id());
    }
    return done;
  }

  TempDir dir_;
  std::string worker_;
  std::unique_ptr<Daemon> daemon_;
};

TEST_F(GpuPathTest, TheCopiedWorkerHasTheCudaBackend) {
  std::string out;
  // As traind runs it: without CUDA_VISIBLE_DEVICES.
  ASSERT_EQ(
      RunCommand("env -u CUDA_VISIBLE_DEVICES " + worker_ + " --capabilities 2>/dev/null", &out),
      0);
  EXPECT_EQ(out, "cpu cuda\n");
}

TEST_F(GpuPathTest, AGpuJobTrainsThroughThePluginAsOnTheCpu) {
  StartDaemon(1);
  EXPECT_NE(daemon_->Log().find("worker backends=cpu,cuda"), std::string::npos);
  std::vector<JobEvent> cpu_events, gpu_events;
  const Job cpu = Run(IrisSpec(), &cpu_events);
  ASSERT_EQ(cpu.state(), Job::SUCCEEDED) << cpu.DebugString();
  const Job gpu = Run(GpuSpec(1), &gpu_events);
  ASSERT_EQ(gpu.state(), Job::SUCCEEDED) << gpu.DebugString();

  // The stand-in computes with the CPU backend on as many threads: the same
  // numbers, to the bit.
  ASSERT_EQ(gpu.result().folds_size(), kFolds);
  ASSERT_EQ(cpu.result().folds_size(), kFolds);
  for (int f = 0; f < kFolds; ++f) {
    const auto& g = gpu.result().folds(f);
    const auto& c = cpu.result().folds(f);
    EXPECT_EQ(g.best_epoch(), c.best_epoch()) << "fold " << f;
    ASSERT_EQ(g.val_size(), 2) << "fold " << f;
    for (const auto& [name, value] : c.val()) {
      ASSERT_EQ(g.val().count(name), 1u) << name;
      EXPECT_EQ(g.val().at(name), value) << "fold " << f << " val." << name;
    }
  }

  // Every epoch of every fold was reported, in order.
  std::map<int, std::vector<int>> epochs;
  for (const JobEvent& e : gpu_events) {
    if (e.has_epoch()) epochs[e.epoch().task()].push_back(e.epoch().epoch());
  }
  ASSERT_EQ(epochs.size(), static_cast<size_t>(kFolds));
  for (const auto& [task, seen] : epochs) {
    std::vector<int> want;
    for (int i = 1; i <= kEpochs; ++i) want.push_back(i);
    EXPECT_EQ(seen, want) << "task " << task;
    EXPECT_EQ(gpu.tasks(task).epochs_done(), kEpochs);
  }

  // Each task opened the "GPU" through the plugin and released it.
  for (const auto& task : gpu.tasks()) {
    ASSERT_EQ(task.attempts_size(), 1);
    const std::string log = ReadFile(task.attempts(0).log_path());
    EXPECT_NE(log.find("gpu ready in"), std::string::npos) << log;
    EXPECT_NE(log.find("cuda stand-in (computes on cpu"), std::string::npos) << log;
    EXPECT_NE(log.find("CPU-backed CUDA stand-in"), std::string::npos) << log;
    EXPECT_NE(log.find("gpu released in"), std::string::npos) << log;
  }
  const std::string cpu_log = ReadFile(cpu.tasks(0).attempts(0).log_path());
  EXPECT_EQ(cpu_log.find("gpu ready"), std::string::npos) << cpu_log;
}

TEST_F(GpuPathTest, TwoRanksWithoutNcclFailClearlyAndLeaveNoRank) {
  StartDaemon(2);
  std::vector<JobEvent> events;
  const Job job = Run(GpuSpec(2), &events);
  ASSERT_EQ(job.state(), Job::FAILED) << job.DebugString();
  EXPECT_EQ(job.failure().reason(), Failure::DEVICE_ERROR) << job.failure().DebugString();
  EXPECT_NE(job.failure().message().find("NCCL"), std::string::npos) << job.failure().message();
  EXPECT_NE(job.failure().message().find("no NCCL in this stand-in"), std::string::npos)
      << job.failure().message();
  ASSERT_GE(job.tasks(0).attempts_size(), 1);
  const auto& attempt = job.tasks(0).attempts(0);
  ASSERT_EQ(attempt.rank_pids_size(), 2) << attempt.DebugString();
  for (int pid : attempt.rank_pids()) EXPECT_FALSE(ProcessAlive(pid)) << "rank pid " << pid;
  // Rank 0 reported its failure and then released its device by itself:
  // traind stops the other rank, not the one already on its way out.
  const std::string log = ReadFile(attempt.log_path());
  EXPECT_NE(log.find("gpu ready in"), std::string::npos) << log;
  EXPECT_NE(log.find("gpu released in"), std::string::npos) << log;
}

}  // namespace
}  // namespace traind::testing
