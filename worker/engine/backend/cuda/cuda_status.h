// CUDA and cuBLAS statuses as engine statuses, and the device probe.
//
// The one place where CUDA runtime and cuBLAS return codes become
// absl::Status: allocation failures (cudaErrorMemoryAllocation,
// CUBLAS_STATUS_ALLOC_FAILED) -> OutOfMemoryError with the bytes asked for
// and the bytes free on the device; every other failure -> DeviceError
// naming the call.
#ifndef TRAIND_WORKER_ENGINE_BACKEND_CUDA_CUDA_STATUS_H_
#define TRAIND_WORKER_ENGINE_BACKEND_CUDA_CUDA_STATUS_H_

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "base/status.h"

namespace traind::engine::cuda {

// OkStatus for cudaSuccess; otherwise a typed failure naming `call`.
// `needed_bytes`: the size of the allocation that failed (0: not known).
// Clears the runtime's last error so that a non-sticky failure does not leak
// into the next check.
absl::Status CudaStatus(cudaError_t error, absl::string_view call, size_t needed_bytes = 0);
absl::Status CublasStatus(cublasStatus_t status, absl::string_view call, size_t needed_bytes = 0);

// The OutOfMemoryError of a failed allocation of `needed_bytes` by `call`,
// with the device's free and total bytes where cudaMemGetInfo can tell them.
absl::Status DeviceOutOfMemory(absl::string_view call, size_t needed_bytes);

// The number of CUDA devices this process can use. 0 when there is no
// driver (cudaErrorInsufficientDriver), no device (cudaErrorNoDevice) or
// CUDA_VISIBLE_DEVICES hides them all; `reason`, when not null, then says
// why in words.
int DeviceCount(std::string* reason = nullptr);

}  // namespace traind::engine::cuda

// Returns a typed failure from the enclosing function when a CUDA runtime
// call fails. The message names the call as written.
#define TRAIND_CUDA_RETURN_IF_ERROR(call) \
  TRAIND_RETURN_IF_ERROR(::traind::engine::cuda::CudaStatus((call), #call))
#define TRAIND_CUBLAS_RETURN_IF_ERROR(call) \
  TRAIND_RETURN_IF_ERROR(::traind::engine::cuda::CublasStatus((call), #call))
// A kernel launch of cuda_kernels.h (which returns the launch status).
#define TRAIND_LAUNCH(call) \
  TRAIND_RETURN_IF_ERROR(::traind::engine::cuda::CudaStatus((call), #call))

#endif  // TRAIND_WORKER_ENGINE_BACKEND_CUDA_CUDA_STATUS_H_
