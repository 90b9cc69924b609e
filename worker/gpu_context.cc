#include "worker/gpu_context.h"

#include <cstdlib>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "base/log.h"
#include "base/status.h"
#include "worker/task_failure.h"

namespace traind::worker {

void GpuContext::Release() {
  if (backend == nullptr && communicator == nullptr) return;
  const absl::Time start = absl::Now();
  communicator.reset();
  backend.reset();
  LogLine(
      absl::StrFormat("gpu released in %.0f ms", absl::ToDoubleMilliseconds(absl::Now() - start)));
}

absl::Status OpenGpu(const traind::v1::JobSpec& spec, int device, GpuContext* gpu) {
  const absl::Time start = absl::Now();
  absl::StatusOr<std::unique_ptr<CudaPlugin>> plugin = CudaPlugin::LoadDefault();
  if (!plugin.ok()) return AsTaskFailure(plugin.status(), "resources.device gpu");
  gpu->plugin = std::move(*plugin);
  const absl::Time loaded = absl::Now();
  std::string reason;
  const int count = gpu->plugin->DeviceCount(&reason);
  if (count <= device) {
    const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
    if (count > 0) reason = absl::StrCat(count, " visible, this rank needs device ", device);
    return traind::DeviceError(
        absl::StrCat("resources.device gpu: ", reason,
                     " (CUDA_VISIBLE_DEVICES=", visible != nullptr ? visible : "unset", ")"));
  }
  absl::StatusOr<std::unique_ptr<engine::Backend>> backend =
      gpu->plugin->CreateBackend(device, spec.training().precision());
  if (!backend.ok()) return AsTaskFailure(backend.status(), "creating the CUDA backend");
  gpu->backend = std::move(*backend);
  const absl::Time ready = absl::Now();
  LogLine(absl::StrFormat(
      "gpu ready in %.0f ms (plugin load %.0f ms, CUDA context and cuBLAS %.0f ms): %s; %s",
      absl::ToDoubleMilliseconds(ready - start), absl::ToDoubleMilliseconds(loaded - start),
      absl::ToDoubleMilliseconds(ready - loaded), gpu->backend->name(), gpu->plugin->build_info()));
  return absl::OkStatus();
}

absl::Status ConnectRanks(int rank, int world_size, const NcclIdExchange& exchange,
                          GpuContext* gpu) {
  // Rank 0 makes the NCCL id and posts it; the others get it.
  std::string posted;
  if (rank == 0) {
    absl::StatusOr<std::string> id = gpu->plugin->NewNcclUniqueId();
    if (!id.ok()) return AsTaskFailure(id.status(), "NCCL unique id");
    posted = std::move(*id);
  }
  absl::StatusOr<std::string> unique_id = exchange(posted);
  if (!unique_id.ok()) {
    return AsRankFailure(unique_id.status(),
                         absl::StrCat("NCCL rendezvous through traind failed",
                                      rank == 0 ? "" : " (waiting for rank 0)"));
  }
  absl::StatusOr<std::unique_ptr<engine::Communicator>> communicator =
      gpu->plugin->CreateCommunicator(gpu->backend.get(), *unique_id, rank, world_size,
                                      absl::ToDoubleSeconds(kRankTimeout));
  if (!communicator.ok()) return AsRankFailure(communicator.status(), "NCCL communicator");
  gpu->communicator = std::move(*communicator);
  LogLine(absl::StrCat("nccl ready: rank ", rank, " of ", world_size));
  return absl::OkStatus();
}

}  // namespace traind::worker
