// What a GPU task trains with: the CUDA plugin, a backend on this process's
// GPU and, with several ranks, the NCCL communicator.
//
// Under traind, CUDA_VISIBLE_DEVICES names the task's GPU (or the task's GPUs
// in rank order: rank r trains on visible device r). Nothing here talks to
// the daemon: the NCCL id exchange is given as a function.
#ifndef TRAIND_WORKER_GPU_CONTEXT_H_
#define TRAIND_WORKER_GPU_CONTEXT_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "traind/v1/job.pb.h"
#include "worker/cuda_plugin_loader.h"
#include "worker/engine/backend/backend.h"
#include "worker/engine/parallel/communicator.h"

namespace traind::worker {

// How long ranks wait for each other: rank 0's NCCL id through the daemon,
// and the NCCL communicator's initialization (and every collective).
inline constexpr absl::Duration kRankTimeout = absl::Minutes(2);

// Owns the plugin, the backend and the communicator. Release() (and the
// destructor) destroys the communicator first (NCCL finalize), then the
// backend (its memory, streams, cuBLAS handles); the plugin stays loaded
// until the process exits. Not copyable; used by one thread.
struct GpuContext {
  std::unique_ptr<CudaPlugin> plugin;
  std::unique_ptr<engine::Backend> backend;
  std::unique_ptr<engine::Communicator> communicator;  // null: one rank

  GpuContext() = default;
  GpuContext(const GpuContext&) = delete;
  GpuContext& operator=(const GpuContext&) = delete;
  ~GpuContext() { Release(); }

  // Logs how long the release took (the teardown part of a GPU task's cost).
  // Not an error to call twice.
  void Release();
};

// Loads the plugin and creates the backend for `spec` on visible device
// `device`. Logs how long each part took (the per-task cost of a GPU task).
// Errors carry a failure kind (DEVICE_ERROR unless the plugin gave one).
// REQUIRES: gpu is empty.
absl::Status OpenGpu(const traind::v1::JobSpec& spec, int device, GpuContext* gpu);

// Exchanges rank 0's NCCL unique id: rank 0 passes its id, every other rank
// an empty string; returns the id of rank 0 (waiting for it at most
// kRankTimeout).
using NcclIdExchange = std::function<absl::StatusOr<std::string>(const std::string& posted)>;

// Several ranks: rank 0 makes the NCCL id, `exchange` gives it to every rank,
// and each creates its communicator on gpu->backend. A peer that failed or
// never came is an error without a failure kind (see AsRankFailure).
// REQUIRES: OpenGpu succeeded on `gpu`; world_size > 1.
absl::Status ConnectRanks(int rank, int world_size, const NcclIdExchange& exchange,
                          GpuContext* gpu);

}  // namespace traind::worker

#endif  // TRAIND_WORKER_GPU_CONTEXT_H_
