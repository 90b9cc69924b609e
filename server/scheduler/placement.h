// Placement: where task attempts run, and what follows from it, for the
// scheduler to ask instead of branching on its launcher.
//
//                        on this machine (local)         in a cluster (Slurm)
//   who places a task    traind: CPU slots, GPU pool     the cluster; cpu_slots bounds
//                                                        the tasks traind hands it
//   usable GPUs          the pool's healthy GPUs         as many as a node has
//                        (none without a GPU backend)    (slurm.gpus_per_node)
//   a GPU task's ranks   one process per GPU             one cluster job, its own ranks
//   its GPUs, to a rank  CUDA_VISIBLE_DEVICES            a GPU count for the cluster
//   a handle             a process id                    a cluster job id
//   on traind's stop     workers are stopped (grace)     they run on; adopted at the
//                                                        next start
//
// Thread-safety: immutable after creation.
#ifndef TRAIND_SERVER_SCHEDULER_PLACEMENT_H_
#define TRAIND_SERVER_SCHEDULER_PLACEMENT_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "server/devices/gpu_pool.h"
#include "server/launch/launcher.h"
#include "traind/v1/job.pb.h"

namespace traind::server {

class Placement {
 public:
  // On this machine: `cpu_slots` CPU tasks at once, GPU tasks on the pool's
  // GPUs when the worker has a GPU backend.
  static std::unique_ptr<Placement> Local(int cpu_slots, bool worker_has_gpu_backend);
  // In a cluster: at most `cpu_slots` tasks handed to it at once; a GPU task
  // asks for up to `gpus_per_task` GPUs of one node.
  static std::unique_ptr<Placement> Cluster(int cpu_slots, int gpus_per_task);

  virtual ~Placement() = default;

  // Submit: whether a GPU job can ever be placed (INVALID_ARGUMENT naming
  // the field and the limit). `pool`: this machine's GPUs (local only).
  virtual absl::Status CheckGpuJob(const traind::v1::JobSpec& spec, int64_t gpu_memory_bytes,
                                   const GpuPool& pool) const = 0;
  // GPUs a GPU job may use; `*why` (if given) when none.
  virtual int UsableGpus(const GpuPool& pool, std::string* why) const = 0;
  // Dispatch: whether traind picks the task's GPUs from its pool.
  virtual bool PicksGpus(const traind::v1::JobSpec& spec) const = 0;
  // Dispatch: whether a task that needs no GPU of the pool may start, with
  // `running` tasks (without GPUs of the pool) running.
  virtual bool SlotFree(int running) const = 0;
  // The processes (ranks) of an attempt given `picked_gpus` GPUs.
  virtual int Ranks(const traind::v1::JobSpec& spec, int picked_gpus) const = 0;
  // Sets a rank's devices: the GPUs it sees (`visible`, CUDA UUIDs), or the
  // GPUs the cluster is asked for.
  virtual void SetDevices(const traind::v1::JobSpec& spec, const std::string& visible,
                          LaunchRequest* request) const = 0;
  // Whether the launcher's handles are cluster jobs (Attempt.slurm_job_id,
  // events' slurm_job_id) rather than process ids (Attempt.pid, rank_pids).
  virtual bool HandlesAreClusterJobs() const = 0;
  // Whether workers run on without traind: not stopped with it, adopted
  // at the next start.
  virtual bool WorkersOutliveTraind() const = 0;
  // "pid" or "slurm_job", for logs.
  virtual const char* HandleName() const = 0;
};

}  // namespace traind::server

#endif  // TRAIND_SERVER_SCHEDULER_PLACEMENT_H_
