// The CUDA backend: cuBLAS GEMMs plus the kernels of cuda_kernels.cu.
//
// Tensors live in device memory (MemorySpace::kDevice): the caller moves
// data only through CopyFromHost / CopyToHost / GatherRows / GatherLabels.
// Every op is enqueued on the backend's one stream; only the ops that return
// values to the host (CopyToHost, SoftmaxCrossEntropy, SumOfSquares) wait
// for it. Scratch memory (pinned staging, reduction buffers) grows to the
// largest shape seen and is then reused, so a steady-state step allocates
// nothing.
//
// Results match the CPU backend within float tolerance (same formulas, same
// double-precision accumulations; GEMM summation order differs). Dropout
// masks are bit-identical with the CPU backend's for the same seed.
//
// Thread safety: as Backend (one thread at a time).
#ifndef TRAIND_WORKER_ENGINE_BACKEND_CUDA_CUDA_BACKEND_H_
#define TRAIND_WORKER_ENGINE_BACKEND_CUDA_CUDA_BACKEND_H_

#include <cuda_runtime_api.h>

#include <memory>

#include "absl/status/statusor.h"
#include "worker/engine/backend/backend.h"

namespace traind::engine {

struct CudaBackendOptions {
  // The CUDA device ordinal (within CUDA_VISIBLE_DEVICES).
  int device = 0;
  // Let cuBLAS run f32 GEMMs on TF32 tensor cores (10-bit mantissa inputs):
  // faster, less exact. Off by default: results then match the CPU backend.
  bool allow_tf32 = false;
};

// Selects the device, creates a stream, a cuBLAS handle and its workspace.
// FailedPrecondition when no device exists (no driver, none visible);
// DeviceError / OutOfMemoryError when the device cannot be set up.
absl::StatusOr<std::unique_ptr<Backend>> CreateCudaBackend(const CudaBackendOptions& options = {});

// The stream a backend made by CreateCudaBackend enqueues on (for the NCCL
// communicator: collectives are ordered with the backend's ops). nullptr for
// any other backend.
cudaStream_t CudaStreamOf(Backend& backend);

}  // namespace traind::engine

#endif  // TRAIND_WORKER_ENGINE_BACKEND_CUDA_CUDA_BACKEND_H_
