// The CUDA backend's dense kernel: y = act(x w + b) and its backward pass,
// planned once per shape (cuBLASLt plan, bf16 scratch) on the backend's
// cuBLAS handles, workspace and stream. Made by CudaBackend::CreateDenseKernel.
//
// Thread safety: as the backend (one thread at a time).
#ifndef TRAIND_WORKER_ENGINE_BACKEND_CUDA_CUDA_DENSE_KERNEL_H_
#define TRAIND_WORKER_ENGINE_BACKEND_CUDA_CUDA_DENSE_KERNEL_H_

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "worker/engine/backend/backend.h"
#include "worker/engine/backend/cuda/cuda_backend.h"

namespace traind::engine {

// What the device needs of the backend to run a dense kernel. Not owned:
// the handles, stream and workspace outlive every kernel made with them.
struct GemmContext {
  cublasHandle_t cublas;
  cublasLtHandle_t cublas_lt;
  cudaStream_t stream;
  void* workspace;
  size_t workspace_bytes;
  GemmPrecision precision;
  bool use_cublaslt;
};

// A dense kernel for [batch, in] -> [batch, out]. REQUIRES: batch, in and
// out in [1, 2^31) (the backend checks). OutOfMemoryError when its bf16
// scratch cannot be allocated.
absl::StatusOr<std::unique_ptr<DenseKernel>> CreateCudaDenseKernel(
    const GemmContext& context, int64_t batch, int64_t in, int64_t out,
    const DenseKernelOptions& options);

}  // namespace traind::engine

#endif  // TRAIND_WORKER_ENGINE_BACKEND_CUDA_CUDA_DENSE_KERNEL_H_
