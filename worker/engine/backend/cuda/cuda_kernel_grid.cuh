// Launch shapes shared by the CUDA backend's .cu files (nvcc only).
#ifndef TRAIND_WORKER_ENGINE_BACKEND_CUDA_CUDA_KERNEL_GRID_CUH_
#define TRAIND_WORKER_ENGINE_BACKEND_CUDA_CUDA_KERNEL_GRID_CUH_

#include <cuda_runtime_api.h>

#include <cstdint>

namespace traind::engine::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 8192;

// Grid of a grid-stride elementwise loop over n items.
inline int Blocks(int64_t n) {
  int64_t b = (n + kThreads - 1) / kThreads;
  if (b < 1) b = 1;
  if (b > kMaxBlocks) b = kMaxBlocks;
  return static_cast<int>(b);
}

inline cudaError_t Launched() { return cudaGetLastError(); }

#define GRID_STRIDE(i, n)                                                                \
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); \
       i += static_cast<int64_t>(blockDim.x) * gridDim.x)

}  // namespace
}  // namespace traind::engine::cuda

#endif  // TRAIND_WORKER_ENGINE_BACKEND_CUDA_CUDA_KERNEL_GRID_CUH_
