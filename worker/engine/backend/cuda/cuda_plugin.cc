// libtraind_cuda.so's entry point: the CUDA backend and the NCCL
// communicator behind the function table of cuda_plugin.h.
//
// Built with hidden visibility: this function is the module's only exported
// symbol, so its copies of the engine's helpers never interpose on the
// worker's (or the other way round).
#include "worker/engine/backend/cuda/cuda_plugin.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "base/status.h"
#include "worker/engine/backend/cuda/cuda_backend.h"
#include "worker/engine/backend/cuda/cuda_status.h"
#include "worker/engine/parallel/nccl_communicator.h"

#ifndef TRAIND_VERSION
#define TRAIND_VERSION "unknown"
#endif

namespace traind::engine {
namespace {

#define TRAIND_STRINGIFY_INNER_(x) #x
#define TRAIND_STRINGIFY_(x) TRAIND_STRINGIFY_INNER_(x)

// CUDART_VERSION: e.g. 13000; CUBLAS_VERSION: e.g. 130100; NCCL_VERSION_CODE: e.g. 22800.
constexpr char kBuildInfo[] =
    "traind " TRAIND_VERSION
    ", CUDA runtime " TRAIND_STRINGIFY_(CUDART_VERSION) " (static), cuBLAS " TRAIND_STRINGIFY_(
        CUBLAS_VERSION) ", NCCL " TRAIND_STRINGIFY_(NCCL_VERSION_CODE);

int DeviceCountImpl(std::string* reason) { return cuda::DeviceCount(reason); }

absl::Status CreateBackendImpl(int device, traind::v1::Precision precision,
                               std::unique_ptr<Backend>* backend) {
  CudaBackendOptions options;
  options.device = device;
  switch (precision) {
    case traind::v1::PRECISION_UNSPECIFIED:
    case traind::v1::FP32:
      options.precision = GemmPrecision::kFp32;
      break;
    case traind::v1::TF32:
      options.precision = GemmPrecision::kTf32;
      break;
    case traind::v1::BF16:
      options.precision = GemmPrecision::kBf16;
      break;
    default:
      return InvalidSpecError(
          absl::StrCat("training.precision: unknown value ", static_cast<int>(precision)));
  }
  absl::StatusOr<std::unique_ptr<Backend>> created = CreateCudaBackend(options);
  if (!created.ok()) return created.status();
  *backend = std::move(*created);
  return absl::OkStatus();
}

absl::Status NewUniqueIdImpl(std::string* unique_id) {
  absl::StatusOr<std::string> id = NewNcclUniqueId();
  if (!id.ok()) return id.status();
  *unique_id = std::move(*id);
  return absl::OkStatus();
}

absl::Status CreateCommunicatorImpl(Backend* backend, const std::string& unique_id, int rank,
                                    int size, double timeout_seconds,
                                    std::unique_ptr<Communicator>* communicator) {
  cudaStream_t stream = backend != nullptr ? CudaStreamOf(*backend) : nullptr;
  if (stream == nullptr) {
    return absl::InvalidArgumentError(
        "NCCL communicator: the backend was not made by this plugin's create_backend");
  }
  NcclCommunicatorOptions options;
  if (timeout_seconds > 0) options.timeout = absl::Seconds(timeout_seconds);
  absl::StatusOr<std::unique_ptr<NcclCommunicator>> created =
      NcclCommunicator::Create(unique_id, rank, size, stream, options);
  if (!created.ok()) return created.status();
  *communicator = std::move(*created);
  return absl::OkStatus();
}

constexpr CudaPluginApi kApi = {
    kCudaPluginAbiVersion,   sizeof(CudaPluginApi), kBuildInfo,
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
