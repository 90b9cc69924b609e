#include "server/scheduler/placement.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace traind::server {
namespace {

using traind::v1::JobSpec;

bool IsGpuJob(const JobSpec& spec) { return spec.resources().device() == traind::v1::GPU; }

class LocalPlacement final : public Placement {
 public:
  LocalPlacement(int cpu_slots, bool worker_has_gpu_backend)
      : cpu_slots_(cpu_slots), gpu_backend_(worker_has_gpu_backend) {}

  absl::Status CheckGpuJob(const JobSpec& spec, int64_t gpu_memory_bytes,
                           const GpuPool& pool) const override {
    const int usable = gpu_backend_ ? pool.Usable() : 0;
    if (spec.resources().count() > usable) {
      return absl::InvalidArgumentError(
          absl::StrCat("spec.resources.count: ", spec.resources().count(),
                       " GPUs per task, but this server has ", usable, " usable"));
    }
    if (gpu_memory_bytes > pool.MaxTotalBytes()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "spec.resources: a task needs about ", gpu_memory_bytes,
          " bytes of GPU memory, but the largest usable GPU has ", pool.MaxTotalBytes()));
    }
    return absl::OkStatus();
  }

  int UsableGpus(const GpuPool& pool, std::string* why) const override {
    std::string reason;
    int usable = pool.Usable();
    if (pool.gpus().empty()) {
      reason = pool.unavailable();
    } else if (usable == 0) {
      reason = "every GPU is UNHEALTHY";
    } else if (!gpu_backend_) {
      reason = "traind-worker has no GPU backend (built without CUDA)";
      usable = 0;
    }
    if (why != nullptr) *why = reason;
    return usable;
  }

  bool PicksGpus(const JobSpec& spec) const override { return IsGpuJob(spec); }
  bool SlotFree(int running) const override { return running < cpu_slots_; }

  // A multi-GPU task runs one process (rank) per GPU; everything else one.
  int Ranks(const JobSpec& spec, int picked_gpus) const override {
    return std::max(1, picked_gpus);
  }

  // CPU tasks see no GPU. The ranks of a GPU task all see the task's GPUs,
  // in rank order, and rank r trains on the r-th: NCCL needs the peers
  // visible to use CUDA IPC / NVLink between the ranks' processes (with
  // only its own GPU visible, each falls back to host shared memory).
  // Other tasks' GPUs stay invisible.
  void SetDevices(const JobSpec& spec, const std::string& visible,
                  LaunchRequest* request) const override {
    request->env.push_back(absl::StrCat("CUDA_VISIBLE_DEVICES=", visible));
    request->gpus = 0;
  }

  bool HandlesAreClusterJobs() const override { return false; }
  bool WorkersOutliveTraind() const override { return false; }
  const char* HandleName() const override { return "pid"; }

 private:
  const int cpu_slots_;
  const bool gpu_backend_;
};

class ClusterPlacement final : public Placement {
 public:
  ClusterPlacement(int cpu_slots, int gpus_per_task)
      : cpu_slots_(cpu_slots), gpus_per_task_(gpus_per_task) {}

  absl::Status CheckGpuJob(const JobSpec& spec, int64_t gpu_memory_bytes,
                           const GpuPool& pool) const override {
    if (spec.resources().count() > gpus_per_task_) {
      return absl::InvalidArgumentError(
          absl::StrCat("spec.resources.count: ", spec.resources().count(),
                       " GPUs per task, but the cluster's nodes have ", gpus_per_task_,
                       " (slurm.gpus_per_node)"));
    }
    return absl::OkStatus();
  }

  int UsableGpus(const GpuPool& pool, std::string* why) const override {
    if (why != nullptr && gpus_per_task_ == 0) {
      *why = "the cluster has no GPUs (slurm.gpus_per_node is 0)";
    }
    return gpus_per_task_;
  }

  // The cluster places every task; cpu_slots bounds the tasks handed to it.
  bool PicksGpus(const JobSpec& spec) const override { return false; }
  bool SlotFree(int running) const override { return running < cpu_slots_; }

  // One cluster job: a GPU task's ranks are the GPUs it asks the cluster for.
  int Ranks(const JobSpec& spec, int picked_gpus) const override {
    return IsGpuJob(spec) ? std::max(1, spec.resources().count()) : 1;
  }

  // A cluster's GPU job sees the GPUs the cluster gave it.
  void SetDevices(const JobSpec& spec, const std::string& visible,
                  LaunchRequest* request) const override {
    request->gpus = IsGpuJob(spec) ? spec.resources().count() : 0;
    if (!IsGpuJob(spec)) request->env.push_back("CUDA_VISIBLE_DEVICES=");
  }

  bool HandlesAreClusterJobs() const override { return true; }
  bool WorkersOutliveTraind() const override { return true; }
  const char* HandleName() const override { return "slurm_job"; }

 private:
  const int cpu_slots_;
  const int gpus_per_task_;
};

}  // namespace

std::unique_ptr<Placement> Placement::Local(int cpu_slots, bool worker_has_gpu_backend) {
  return std::make_unique<LocalPlacement>(cpu_slots, worker_has_gpu_backend);
}

std::unique_ptr<Placement> Placement::Cluster(int cpu_slots, int gpus_per_task) {
  return std::make_unique<ClusterPlacement>(cpu_slots, gpus_per_task);
}

}  // namespace traind::server
