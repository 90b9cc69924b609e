// The CUDA backend's loss kernel (LaunchLoss), planned once: its
// parameters, scratch, slots and bad-class-code record live on the device.
// Made by CudaBackend::CreateLossKernel.
//
// Thread safety: as the backend (one thread at a time).
#ifndef TRAIND_WORKER_ENGINE_BACKEND_CUDA_CUDA_LOSS_KERNEL_H_
#define TRAIND_WORKER_ENGINE_BACKEND_CUDA_CUDA_LOSS_KERNEL_H_

#include <memory>

#include "absl/status/statusor.h"
#include "worker/engine/backend/backend.h"
#include "worker/engine/backend/cuda/cuda_raii.h"

namespace traind::engine {

// A loss kernel enqueuing on `stream` (shared: it stays valid for the
// kernel's lifetime). InvalidArgument for options the backend contract
// refuses or too large to address; OutOfMemoryError when its device or
// pinned memory cannot be allocated.
absl::StatusOr<std::unique_ptr<LossKernel>> CreateCudaLossKernel(
    std::shared_ptr<const cuda::Stream> stream, const LossKernelOptions& options);

}  // namespace traind::engine

#endif  // TRAIND_WORKER_ENGINE_BACKEND_CUDA_CUDA_LOSS_KERNEL_H_
