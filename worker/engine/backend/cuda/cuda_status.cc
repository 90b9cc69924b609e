#include "worker/engine/backend/cuda/cuda_status.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace traind::engine::cuda {

absl::Status DeviceOutOfMemory(absl::string_view call, size_t needed_bytes) {
  size_t free_bytes = 0, total_bytes = 0;
  const cudaError_t info = cudaMemGetInfo(&free_bytes, &total_bytes);
  (void)cudaGetLastError();
  std::string message = absl::StrCat(call, ": out of device memory");
  if (needed_bytes > 0)
    absl::StrAppend(&message, absl::StrFormat("; needed %d bytes", needed_bytes));
  if (info == cudaSuccess) {
    absl::StrAppend(&message, absl::StrFormat("; %d bytes free of %d", free_bytes, total_bytes));
  } else {
    absl::StrAppend(&message, "; free bytes unknown (", cudaGetErrorName(info), ")");
  }
  return OutOfMemoryError(message);
}

absl::Status CudaStatus(cudaError_t error, absl::string_view call, size_t needed_bytes) {
  if (error == cudaSuccess) return absl::OkStatus();
  // Non-sticky errors stay in the runtime's last-error slot; clear it.
  (void)cudaGetLastError();
  if (error == cudaErrorMemoryAllocation) return DeviceOutOfMemory(call, needed_bytes);
  return DeviceError(
      absl::StrCat(call, ": ", cudaGetErrorName(error), ": ", cudaGetErrorString(error)));
}

absl::Status CublasStatus(cublasStatus_t status, absl::string_view call, size_t needed_bytes) {
  if (status == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  if (status == CUBLAS_STATUS_ALLOC_FAILED) return DeviceOutOfMemory(call, needed_bytes);
  return DeviceError(
      absl::StrCat(call, ": ", cublasGetStatusName(status), ": ", cublasGetStatusString(status)));
}

int DeviceCount(std::string* reason) {
  int count = 0;
  const cudaError_t error = cudaGetDeviceCount(&count);
  (void)cudaGetLastError();
  if (error != cudaSuccess) {
    if (reason != nullptr) {
      *reason = absl::StrCat("no CUDA device: cudaGetDeviceCount: ", cudaGetErrorName(error), " (",
                             cudaGetErrorString(error), ")");
    }
    return 0;
  }
  if (count == 0 && reason != nullptr) *reason = "no CUDA device: cudaGetDeviceCount returned 0";
  return count;
}

}  // namespace traind::engine::cuda
