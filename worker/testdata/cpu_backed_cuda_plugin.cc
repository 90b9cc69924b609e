// A stand-in for libtraind_cuda.so that computes on the CPU backend, for
// end-to-end tests of the worker's GPU path on machines without a GPU
// (tests/integration/gpu_path_test.cc). It reports the devices of
// CUDA_VISIBLE_DEVICES (one when unset); its backends are CPU backends under
// another name (engine::Fit refuses a GPU job on a backend whose name starts
// with "cpu") that record op graphs as CUDA stream capture does
// (worker/engine/testing/graph_recording_backend.h), so the GPU path's step
// graphs run; its "NCCL" joins the ranks' processes over unix sockets
// (unix_socket_communicator.h), so a multi-GPU task trains data-parallel.
//
// Built like the real plugin: hidden visibility, only the entry point
// exported, the CPU backend and the engine's error helpers compiled in.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "base/status.h"
#include "worker/engine/backend/backend.h"
#include "worker/engine/backend/cpu/cpu_backend.h"
#include "worker/engine/backend/cuda/cuda_plugin.h"
#include "worker/engine/testing/graph_recording_backend.h"
#include "worker/testdata/unix_socket_communicator.h"

namespace traind::spec {

// cpu_backend.cc's precision check, which lives in spec/checks.cc (whose
// protobuf code must not be linked twice into one process). The stand-in
// trains in fp32 only.
absl::Status CheckCpuPrecision(traind::v1::Precision precision, bool) {
  if (precision == traind::v1::PRECISION_UNSPECIFIED || precision == traind::v1::FP32) {
    return absl::OkStatus();
  }
  return InvalidSpecError("training.precision: the CPU-backed CUDA stand-in trains in fp32 only");
}

}  // namespace traind::spec

namespace traind::engine {
namespace {

// As CUDA counts them: the entries of CUDA_VISIBLE_DEVICES (traind gives a
// multi-GPU task's ranks all of its GPUs), one device when it is unset.
int DeviceCountImpl(std::string* reason) {
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  if (visible == nullptr) return 1;
  if (*visible == '\0') {
    if (reason != nullptr) *reason = "CUDA_VISIBLE_DEVICES is empty";
    return 0;
  }
  return 1 + static_cast<int>(std::count(visible, visible + std::strlen(visible), ','));
}

absl::Status CreateBackendImpl(int device, traind::v1::Precision precision,
                               std::unique_ptr<Backend>* backend) {
  if (device < 0 || device >= DeviceCountImpl(nullptr)) {
    return absl::FailedPreconditionError(absl::StrCat("no device ", device));
  }
  absl::StatusOr<std::unique_ptr<Backend>> cpu = CreateCpuBackend(precision);
  if (!cpu.ok()) return cpu.status();
  const std::string name = "cuda stand-in (computes on " + (*cpu)->name() + ")";
  *backend = testing::NewGraphRecordingBackend(std::move(*cpu), name);
  return absl::OkStatus();
}

absl::Status NewUniqueIdImpl(std::string* unique_id) {
  absl::StatusOr<std::string> id = testdata::NewUnixSocketUniqueId();
  if (!id.ok()) return id.status();
  *unique_id = std::move(*id);
  return absl::OkStatus();
}

absl::Status CreateCommunicatorImpl(Backend* backend, const std::string& unique_id, int rank,
                                    int size, double timeout_seconds,
                                    std::unique_ptr<Communicator>* communicator) {
  if (dynamic_cast<testing::GraphRecordingBackend*>(backend) == nullptr) {
    return absl::InvalidArgumentError(
        "stand-in NCCL: the backend was not made by this plugin's create_backend");
  }
  absl::StatusOr<std::unique_ptr<Communicator>> created = testdata::CreateUnixSocketCommunicator(
      unique_id, rank, size,
      timeout_seconds > 0 ? absl::Seconds(timeout_seconds) : absl::Seconds(120));
  if (!created.ok()) return created.status();
  *communicator = std::move(*created);
  return absl::OkStatus();
}

constexpr CudaPluginApi kApi = {
    kCudaPluginAbiVersion,   sizeof(CudaPluginApi), "CPU-backed CUDA stand-in (tests)",
    &DeviceCountImpl,        &CreateBackendImpl,    &NewUniqueIdImpl,
    &CreateCommunicatorImpl,
};

}  // namespace
}  // namespace traind::engine

extern "C" __attribute__((visibility("default"))) const traind::engine::CudaPluginApi*
traind_cuda_plugin_v1(uint32_t abi_version) {
  if (abi_version != traind::engine::kCudaPluginAbiVersion) return nullptr;
  return &traind::engine::kApi;
}
