// The worker's GPU path end to end without a GPU: the real traind, GPUs read
// from a file (--gpu-probe=file:PATH), and a copy of the real traind-worker
// beside a stand-in CUDA plugin (worker/testdata/cpu_backed_cuda_plugin.cc)
// that reports the GPUs traind gives it, trains on the CPU backend under
// another name and joins the ranks of a multi-GPU task over unix sockets in
// place of NCCL.
#include <dlfcn.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "spec/loader.h"
#include "spec/memory_estimate.h"
#include "tests/integration/testing/traind_process.h"
#include "worker/engine/backend/backend.h"
#include "worker/engine/backend/cuda/cuda_plugin.h"
#include "worker/engine/parallel/communicator.h"

namespace traind::testing {
namespace {

using traind::v1::Failure;
using traind::v1::Job;
using traind::v1::JobEvent;

constexpr int kFolds = 3;
constexpr int kEpochs = 20;
// Long enough for a rank to be killed mid-training.
constexpr int kLongEpochs = 400;
// Two ranks against one: the same fit up to float rounding (relative; the
// Iris folds differ by under 1e-8).
constexpr double kDataParallelTolerance = 1e-6;

// The example iris CV spec, shortened: kFolds folds of kEpochs epochs.
traind::v1::JobSpec ShortIrisCvSpec() {
  auto spec = spec::LoadJobSpecFile(SourceDir() + "/examples/iris-cv.yaml");
  EXPECT_TRUE(spec.ok()) << spec.status();
  spec->mutable_data()->set_path(SourceDir() + "/examples/data/iris.csv");
  spec->mutable_cross_validation()->set_folds(kFolds);
  spec->mutable_training()->set_epochs(kEpochs);
  return *spec;
}

traind::v1::JobSpec GpuSpec(int count) {
  traind::v1::JobSpec spec = ShortIrisCvSpec();
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
  void StartDaemon(int gpus, int max_restarts = 0) {
    std::ofstream inventory(dir_.path() + "/gpus.txt");
    for (int i = 0; i < gpus; ++i) inventory << "GPU-fake-" << i << " " << (80ll << 30) << " 0\n";
    inventory.close();
    daemon_ = std::make_unique<TraindProcess>(
        dir_.path() + "/state",
        std::vector<std::string>{"--gpu-probe=file:" + dir_.path() + "/gpus.txt",
                                 "--worker=" + worker_, "--cpu-slots=1", "--worker-threads=1",
                                 "--max-restarts=" + std::to_string(max_restarts)});
    ASSERT_TRUE(daemon_->Start()) << daemon_->Log();
  }

  // Waits (up to a minute) until `pred` holds for job `id`.
  template <typename Pred>
  bool WaitFor(const std::string& id, Pred pred) {
    for (int i = 0; i < 3000; ++i) {
      if (pred(GetJob(daemon_->stub(), id))) return true;
      usleep(20000);
    }
    return false;
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
  std::unique_ptr<TraindProcess> daemon_;
};

TEST_F(GpuPathTest, TheCopiedWorkerHasTheCudaBackend) {
  std::string out;
  // As traind runs it: without CUDA_VISIBLE_DEVICES.
  ASSERT_EQ(
      RunCommand("env -u CUDA_VISIBLE_DEVICES " + worker_ + " --capabilities 2>/dev/null", &out),
      0);
  // "cpu", maybe "cpu-bf16", then "cuda".
  EXPECT_TRUE(out.rfind("cpu ", 0) == 0 && out.size() > 5 &&
              out.compare(out.size() - 5, 5, "cuda\n") == 0)
      << out;
}

// Relative difference, as data_parallel_test.cc measures it.
bool Near(double expected, double actual, double tolerance) {
  return std::fabs(expected - actual) <= tolerance * (1.0 + std::fabs(expected));
}

// `got`'s folds have `want`'s best epochs and validation metrics, within
// `tolerance` (0: to the bit).
void ExpectSameFolds(const Job& want, const Job& got, double tolerance) {
  ASSERT_EQ(want.result().folds_size(), kFolds);
  ASSERT_EQ(got.result().folds_size(), kFolds);
  for (int f = 0; f < kFolds; ++f) {
    const auto& w = want.result().folds(f);
    const auto& g = got.result().folds(f);
    EXPECT_EQ(g.best_epoch(), w.best_epoch()) << "fold " << f;
    ASSERT_EQ(g.val_size(), 2) << "fold " << f;
    for (const auto& [name, value] : w.val()) {
      ASSERT_EQ(g.val().count(name), 1u) << name;
      if (tolerance == 0) {
        EXPECT_EQ(g.val().at(name), value) << "fold " << f << " val." << name;
      } else {
        EXPECT_TRUE(Near(value, g.val().at(name), tolerance))
            << "fold " << f << " val." << name << ": " << value << " vs " << g.val().at(name);
      }
    }
  }
}

// Every epoch of every fold of `job` was reported once, in order.
void ExpectEveryEpochOnce(const Job& job, const std::vector<JobEvent>& events) {
  std::map<int, std::vector<int>> epochs;
  for (const JobEvent& e : events) {
    if (e.has_epoch()) epochs[e.epoch().task()].push_back(e.epoch().epoch());
  }
  ASSERT_EQ(epochs.size(), static_cast<size_t>(kFolds));
  std::vector<int> want;
  for (int i = 1; i <= kEpochs; ++i) want.push_back(i);
  for (const auto& [task, seen] : epochs) {
    EXPECT_EQ(seen, want) << "task " << task;
    EXPECT_EQ(job.tasks(task).epochs_done(), kEpochs);
  }
}

TEST_F(GpuPathTest, AGpuJobTrainsThroughThePluginAsOnTheCpu) {
  StartDaemon(1);
  EXPECT_NE(daemon_->Log().find("worker backends=cpu,cuda"), std::string::npos);
  std::vector<JobEvent> cpu_events, gpu_events;
  const Job cpu = Run(ShortIrisCvSpec(), &cpu_events);
  ASSERT_EQ(cpu.state(), Job::SUCCEEDED) << cpu.DebugString();
  const Job gpu = Run(GpuSpec(1), &gpu_events);
  ASSERT_EQ(gpu.state(), Job::SUCCEEDED) << gpu.DebugString();

  // The stand-in computes with the CPU backend on as many threads: the same
  // numbers, to the bit.
  ExpectSameFolds(cpu, gpu, /*tolerance=*/0);
  ExpectEveryEpochOnce(gpu, gpu_events);

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

// A search places its GPU tasks by the largest trial's memory estimate (a
// trial may have wider layers or larger batches than the base spec).
TEST_F(GpuPathTest, ASearchIsPlacedByItsLargestTrialsMemoryEstimate) {
  StartDaemon(1);
  traind::v1::JobSpec spec = GpuSpec(1);
  spec.mutable_cross_validation()->set_folds(2);
  spec.mutable_training()->set_epochs(1);
  auto* dim = spec.mutable_search()->add_space();
  dim->set_path("model.layers[0].dense.units");
  dim->mutable_values()->add_values()->set_number_value(4);
  dim->mutable_values()->add_values()->set_number_value(4096);
  spec.mutable_search()->mutable_sampler()->mutable_grid();
  absl::StatusOr<Job> job = SubmitJob(daemon_->stub(), spec);
  ASSERT_TRUE(job.ok()) << job.status();
  traind::v1::JobSpec wide = spec;
  wide.clear_search();
  wide.mutable_model()->mutable_layers(0)->mutable_dense()->set_units(4096);
  traind::v1::JobSpec narrow = wide;
  narrow.mutable_model()->mutable_layers(0)->mutable_dense()->set_units(4);
  // iris: 4 features, 3 classes.
  const int64_t wide_bytes = spec::EstimateMemoryBytes(wide, 4, 3);
  EXPECT_GT(wide_bytes, spec::EstimateMemoryBytes(narrow, 4, 3));
  EXPECT_EQ(job->gpu_memory_bytes(), wide_bytes);
  std::vector<JobEvent> events;
  ASSERT_TRUE(WatchAll(daemon_->stub(), job->id(), 0, &events, 240).ok());
  EXPECT_EQ(GetJob(daemon_->stub(), job->id()).state(), Job::SUCCEEDED);
}

// Predict for a GPU job runs on an idle GPU through the plugin, with the
// numbers of a CPU predict; while every GPU trains, it runs on the CPU.
TEST_F(GpuPathTest, PredictForAGpuJobRunsOnAnIdleGpuElseOnTheCpu) {
  StartDaemon(1);
  std::vector<JobEvent> events;
  const Job gpu = Run(GpuSpec(1), &events);
  ASSERT_EQ(gpu.state(), Job::SUCCEEDED) << gpu.DebugString();
  const std::string iris = SourceDir() + "/examples/data/iris.csv";
  const std::string trainctl = BinDir() + "/trainctl --address " + daemon_->address();
  const std::string model = daemon_->state_dir() + "/jobs/" + gpu.id() + "/task-0/model.ckpt";
  std::string out, on_cpu;
  ASSERT_EQ(RunCommand(trainctl + " predict " + gpu.id() + " " + iris + " --task 0 -O " +
                           dir_.path() + "/gpu.csv 2>&1",
                       &out),
            0)
      << out;
  EXPECT_NE(out.find("with task-0/model.ckpt on gpu GPU-fake-0"), std::string::npos) << out;
  ASSERT_EQ(RunCommand("env -u CUDA_VISIBLE_DEVICES OMP_NUM_THREADS=1 " + worker_ + " --predict " +
                           model + " " + iris + " 2>/dev/null",
                       &on_cpu),
            0);
  EXPECT_EQ(ReadFile(dir_.path() + "/gpu.csv"), on_cpu);
  // The worker itself, told --device gpu, opens the plugin's device (or
  // says why not) instead of falling back to the CPU.
  ASSERT_EQ(RunCommand("CUDA_VISIBLE_DEVICES=GPU-fake-0 " + worker_ + " --predict " + model + " " +
                           iris + " --device gpu 2>&1 >/dev/null",
                       &out),
            0)
      << out;
  EXPECT_NE(out.find("predict on cuda stand-in"), std::string::npos) << out;
  ASSERT_NE(RunCommand("CUDA_VISIBLE_DEVICES= " + worker_ + " --predict " + model + " " + iris +
                           " --device gpu 2>&1 >/dev/null",
                       &out),
            0);
  EXPECT_NE(out.find("resources.device gpu"), std::string::npos) << out;

  // The only GPU busy with a long job: the predict runs on the CPU.
  traind::v1::JobSpec long_spec = GpuSpec(1);
  long_spec.mutable_training()->set_epochs(kLongEpochs * 10);
  absl::StatusOr<Job> busy = SubmitJob(daemon_->stub(), long_spec);
  ASSERT_TRUE(busy.ok()) << busy.status();
  ASSERT_TRUE(WaitFor(busy->id(), [](const Job& j) { return j.tasks(0).epochs_done() >= 1; }));
  ASSERT_EQ(RunCommand(trainctl + " predict " + gpu.id() + " " + iris + " --task 0 -O " +
                           dir_.path() + "/cpu.csv 2>&1",
                       &out),
            0)
      << out;
  EXPECT_NE(out.find("with task-0/model.ckpt on cpu"), std::string::npos) << out;
  EXPECT_EQ(ReadFile(dir_.path() + "/cpu.csv"), on_cpu);
  EXPECT_NE(daemon_->Log().find("device=cpu (no idle GPU)"), std::string::npos) << daemon_->Log();
  traind::v1::CancelJobRequest cancel;
  cancel.set_job_id(busy->id());
  traind::v1::Job cancelled;
  auto ctx = Ctx();
  EXPECT_TRUE(daemon_->stub()->CancelJob(ctx.get(), cancel, &cancelled).ok());
}

// The log of rank `rank` of an attempt whose rank 0 logs to `log_path`.
std::string RankLog(const std::string& log_path, int rank) {
  if (rank == 0) return log_path;
  const std::string stem = log_path.substr(0, log_path.size() - std::string(".log").size());
  return stem + ".rank-" + std::to_string(rank) + ".log";
}

TEST_F(GpuPathTest, TwoRanksTrainDataParallelAsOneRank) {
  StartDaemon(2);
  std::vector<JobEvent> one_events, two_events;
  const Job one = Run(GpuSpec(1), &one_events);
  ASSERT_EQ(one.state(), Job::SUCCEEDED) << one.DebugString();
  const Job two = Run(GpuSpec(2), &two_events);
  ASSERT_EQ(two.state(), Job::SUCCEEDED) << two.DebugString();

  // Each rank trains on half of every batch and the gradients are summed
  // across the ranks: the one-rank fit up to float rounding.
  ExpectSameFolds(one, two, kDataParallelTolerance);
  // Every epoch of every fold was reported once (by rank 0), in order.
  ExpectEveryEpochOnce(two, two_events);

  // Every task ran once as two ranks, each on its "GPU" with the
  // communicator, and both are gone.
  for (const auto& task : two.tasks()) {
    ASSERT_EQ(task.attempts_size(), 1);
    const auto& attempt = task.attempts(0);
    ASSERT_EQ(attempt.rank_pids_size(), 2) << attempt.DebugString();
    for (int pid : attempt.rank_pids()) EXPECT_FALSE(ProcessAlive(pid)) << "rank pid " << pid;
    for (int rank = 0; rank < 2; ++rank) {
      const std::string log = ReadFile(RankLog(attempt.log_path(), rank));
      EXPECT_NE(log.find("gpu ready in"), std::string::npos) << "rank " << rank << ":\n" << log;
      EXPECT_NE(log.find("cuda stand-in (computes on cpu"), std::string::npos) << log;
      EXPECT_NE(log.find("nccl ready: rank " + std::to_string(rank) + " of 2"), std::string::npos)
          << "rank " << rank << ":\n"
          << log;
      EXPECT_NE(log.find("task succeeded"), std::string::npos) << "rank " << rank << ":\n" << log;
      EXPECT_NE(log.find("gpu released in"), std::string::npos) << "rank " << rank << ":\n" << log;
    }
  }
}

TEST_F(GpuPathTest, ARankKilledMidTrainingFailsTheAttemptAndTheRetrySucceeds) {
  StartDaemon(2, /*max_restarts=*/1);
  traind::v1::JobSpec spec = GpuSpec(2);
  spec.mutable_cross_validation()->set_folds(2);
  spec.mutable_training()->set_epochs(kLongEpochs);
  absl::StatusOr<Job> job = SubmitJob(daemon_->stub(), spec);
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_TRUE(WaitFor(job->id(), [](const Job& j) { return j.tasks(0).epochs_done() >= 3; }));
  const Job running = GetJob(daemon_->stub(), job->id());
  ASSERT_EQ(running.tasks(0).attempts_size(), 1);
  const auto first = running.tasks(0).attempts(0);
  ASSERT_EQ(first.rank_pids_size(), 2) << first.DebugString();
  ASSERT_EQ(kill(first.rank_pids(1), SIGKILL), 0);

  std::vector<JobEvent> events;
  ASSERT_TRUE(WatchAll(daemon_->stub(), job->id(), 0, &events, 240).ok());
  Job done = GetJob(daemon_->stub(), job->id());
  for (int i = 0; i < 500 && !Terminal(done); ++i) {
    usleep(20000);
    done = GetJob(daemon_->stub(), job->id());
  }
  ASSERT_EQ(done.state(), Job::SUCCEEDED) << done.DebugString();

  // The attempt failed as a crash naming rank 1: its death by SIGKILL, or
  // rank 0's report of losing it when that reached traind first (traind then
  // stops rank 1 itself, and takes its exit for that stop).
  ASSERT_EQ(done.tasks(0).attempts_size(), 2) << done.tasks(0).DebugString();
  const auto& failed = done.tasks(0).attempts(0);
  EXPECT_EQ(failed.failure().reason(), Failure::WORKER_CRASHED) << failed.DebugString();
  const std::string& message = failed.failure().message();
  const bool crash = message.find("rank 1 (pid " + std::to_string(first.rank_pids(1)) +
                                  ") killed by signal 9") != std::string::npos;
  const bool lost = message.find("rank 0: stand-in NCCL: rank 1 closed its connection to rank 0") !=
                    std::string::npos;
  EXPECT_TRUE(crash || lost) << message;
  if (crash) {
    EXPECT_EQ(failed.failure().signal(), SIGKILL) << failed.DebugString();
  }
  for (int pid : failed.rank_pids()) EXPECT_FALSE(ProcessAlive(pid)) << "rank pid " << pid;

  // The retry formed a new group and trained to the end.
  const auto& retry = done.tasks(0).attempts(1);
  ASSERT_EQ(retry.rank_pids_size(), 2) << retry.DebugString();
  for (int pid : retry.rank_pids()) EXPECT_FALSE(ProcessAlive(pid)) << "rank pid " << pid;
  for (int rank = 0; rank < 2; ++rank) {
    const std::string log = ReadFile(RankLog(retry.log_path(), rank));
    EXPECT_NE(log.find("nccl ready: rank " + std::to_string(rank) + " of 2"), std::string::npos)
        << log;
  }
  EXPECT_EQ(done.tasks(0).epochs_done(), kLongEpochs);
  EXPECT_EQ(done.tasks(1).attempts_size(), 1);
  EXPECT_EQ(done.tasks(1).epochs_done(), kLongEpochs);
}

// The stand-in's "NCCL" on its own: the ranks of a group as threads of this
// process, loaded from the stand-in as the worker loads it.
class StandInNcclTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // One device each (the stand-in counts CUDA_VISIBLE_DEVICES).
    const char* visible = getenv("CUDA_VISIBLE_DEVICES");
    if (visible != nullptr) saved_visible_ = visible;
    had_visible_ = visible != nullptr;
    unsetenv("CUDA_VISIBLE_DEVICES");
    handle_ = dlopen(TRAIND_CPU_BACKED_CUDA_PLUGIN_PATH, RTLD_NOW | RTLD_LOCAL);
    ASSERT_NE(handle_, nullptr) << dlerror();
    auto entry = reinterpret_cast<engine::CudaPluginEntryPoint>(
        dlsym(handle_, engine::kCudaPluginEntryPoint));
    ASSERT_NE(entry, nullptr);
    api_ = entry(engine::kCudaPluginAbiVersion);
    ASSERT_NE(api_, nullptr);
  }
  void TearDown() override {
    if (had_visible_) setenv("CUDA_VISIBLE_DEVICES", saved_visible_.c_str(), 1);
    // The module stays loaded, as in the worker: the CPU backend's libraries
    // keep threads and static state.
  }

  struct Rank {
    std::unique_ptr<engine::Backend> backend;
    std::unique_ptr<engine::Communicator> comm;
    absl::Status created;
  };

  // A group of `size` ranks, each created on its own thread.
  std::vector<Rank> Group(int size, double timeout_seconds = 30) {
    std::string id;
    absl::Status s = api_->new_nccl_unique_id(&id);
    EXPECT_TRUE(s.ok()) << s;
    EXPECT_EQ(id.size(), 128u);
    std::vector<Rank> ranks(size);
    std::vector<std::thread> threads;
    for (int r = 0; r < size; ++r) {
      threads.emplace_back([&, r] {
        Rank& rank = ranks[r];
        rank.created = api_->create_backend(0, traind::v1::FP32, &rank.backend);
        if (!rank.created.ok()) return;
        rank.created = api_->create_nccl_communicator(rank.backend.get(), id, r, size,
                                                      timeout_seconds, &rank.comm);
      });
    }
    for (auto& t : threads) t.join();
    for (int r = 0; r < size; ++r) {
      EXPECT_TRUE(ranks[r].created.ok()) << "rank " << r << ": " << ranks[r].created;
      EXPECT_NE(ranks[r].comm, nullptr);
    }
    return ranks;
  }

  // Runs `fn(rank)` on one thread per rank; returns each rank's status.
  template <typename Fn>
  static std::vector<absl::Status> OnEveryRank(std::vector<Rank>& ranks, Fn fn) {
    std::vector<absl::Status> out(ranks.size());
    std::vector<std::thread> threads;
    for (size_t r = 0; r < ranks.size(); ++r) {
      threads.emplace_back([&, r] { out[r] = fn(static_cast<int>(r)); });
    }
    for (auto& t : threads) t.join();
    return out;
  }

  void* handle_ = nullptr;
  const engine::CudaPluginApi* api_ = nullptr;
  bool had_visible_ = false;
  std::string saved_visible_;
};

TEST_F(StandInNcclTest, EveryRankGetsTheSameSumsInRankOrder) {
  constexpr int kRanks = 3, kCount = 100000;  // more than a socket buffer holds
  std::vector<Rank> ranks = Group(kRanks);
  ASSERT_EQ(ranks.size(), static_cast<size_t>(kRanks));
  for (const Rank& r : ranks) ASSERT_NE(r.comm, nullptr);
  auto value = [](int rank, int i) { return 0.1f * static_cast<float>(rank + 1) / (i % 97 + 1); };
  std::vector<std::vector<float>> floats(kRanks, std::vector<float>(kCount));
  std::vector<std::vector<double>> doubles(kRanks, std::vector<double>(2));
  for (int r = 0; r < kRanks; ++r) {
    for (int i = 0; i < kCount; ++i) floats[r][i] = value(r, i);
    doubles[r] = {1.0 / (r + 3), static_cast<double>(r)};
  }
  std::vector<absl::Status> done = OnEveryRank(ranks, [&](int r) {
    for (int round = 0; round < 3; ++round) {  // consecutive collectives stay in step
      absl::Status s = ranks[r].comm->AllReduceSum(doubles[r].data(), 2);
      if (!s.ok()) return s;
    }
    return ranks[r].comm->AllReduceSum(floats[r].data(), kCount);
  });
  for (int r = 0; r < kRanks; ++r) {
    ASSERT_TRUE(done[r].ok()) << "rank " << r << ": " << done[r];
    EXPECT_EQ(ranks[r].comm->rank(), r);
    EXPECT_EQ(ranks[r].comm->size(), kRanks);
  }
  for (int i = 0; i < kCount; ++i) {
    float want = 0;
    for (int r = 0; r < kRanks; ++r) want += value(r, i);
    for (int r = 0; r < kRanks; ++r)
      ASSERT_EQ(floats[r][i], want) << "rank " << r << " [" << i << "]";
  }
  for (int r = 0; r < kRanks; ++r) EXPECT_EQ(doubles[r], doubles[0]) << "rank " << r;
}

TEST_F(StandInNcclTest, AnAbortReachesEveryRankWithItsReason) {
  std::vector<Rank> ranks = Group(3);
  for (const Rank& r : ranks) ASSERT_NE(r.comm, nullptr);
  ranks[1].comm->Abort("out of patience");
  std::vector<absl::Status> done = OnEveryRank(ranks, [&](int r) {
    double x = r;
    return ranks[r].comm->AllReduceSum(&x, 1);
  });
  for (int r = 0; r < 3; ++r) {
    EXPECT_TRUE(absl::IsAborted(done[r])) << "rank " << r << ": " << done[r];
    EXPECT_NE(done[r].message().find("rank 1 aborted: out of patience"), std::string::npos)
        << "rank " << r << ": " << done[r];
  }
}

TEST_F(StandInNcclTest, APeerGoneIsUnavailableNamingIt) {
  std::vector<Rank> ranks = Group(3);
  for (const Rank& r : ranks) ASSERT_NE(r.comm, nullptr);
  ranks[2].comm.reset();  // as when its process dies: its socket closes
  std::vector<absl::Status> done(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      float x = 1;
      done[r] = ranks[r].comm->AllReduceSum(&x, 1);
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < 2; ++r) {
    EXPECT_TRUE(absl::IsUnavailable(done[r])) << "rank " << r << ": " << done[r];
    EXPECT_NE(done[r].message().find("rank 2 closed its connection to rank 0"), std::string::npos)
        << "rank " << r << ": " << done[r];
  }
}

TEST_F(StandInNcclTest, ARankThatNeverJoinsTimesOut) {
  std::string id;
  ASSERT_TRUE(api_->new_nccl_unique_id(&id).ok());
  std::unique_ptr<engine::Backend> backend;
  ASSERT_TRUE(api_->create_backend(0, traind::v1::FP32, &backend).ok());
  std::unique_ptr<engine::Communicator> comm;
  absl::Status s = api_->create_nccl_communicator(backend.get(), id, 0, 2, 0.2, &comm);
  EXPECT_TRUE(absl::IsDeadlineExceeded(s)) << s;
  EXPECT_NE(s.message().find("rank(s) 1 did not join"), std::string::npos) << s;
  s = api_->create_nccl_communicator(backend.get(), id, 1, 2, 0.2, &comm);
  EXPECT_TRUE(absl::IsDeadlineExceeded(s)) << s;
  s = api_->create_nccl_communicator(backend.get(), "short", 0, 2, 0.2, &comm);
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
}

}  // namespace
}  // namespace traind::testing
