// The CUDA backend: cuBLASLt / cuBLAS GEMMs plus the kernels of
// cuda_kernels.cu. Built into the CUDA plugin (cuda_plugin.h), never linked
// into traind-worker itself.
//
// Tensors live in device memory (MemorySpace::kDevice): the caller moves
// data only through CopyFromHost / CopyToHost / GatherRows / GatherLabels.
// Every op is enqueued on the backend's one stream; only the ops that return
// values to the host (CopyToHost, SumOfSquares, LossKernel::ReadSlots) wait
// for it. Uploads are staged through a ring of pinned buffers, each reused
// only once its copy has completed, so they never wait for the device in the
// steady state. Scratch memory (staging, reduction buffers, multi-tensor
// tables) grows to the largest shape seen and is then reused, and dense and
// loss kernels allocate their workspaces when created, so a steady-state
// step allocates nothing.
//
// Results match the CPU backend within float tolerance (same formulas, same
// double-precision accumulations; GEMM summation order differs) in
// GemmPrecision::kFp32. Dropout masks are bit-identical with the CPU
// backend's for the same seed.
//
// SgdUpdateMany / AdamUpdateMany run as one kernel launch over every tensor:
// the table of their pointers and sizes lives in device memory and is
// uploaded only when the list of tensors changes.
//
// Thread safety: as Backend (one thread at a time).
#ifndef TRAIND_WORKER_ENGINE_BACKEND_CUDA_CUDA_BACKEND_H_
#define TRAIND_WORKER_ENGINE_BACKEND_CUDA_CUDA_BACKEND_H_

#include <cuda_runtime_api.h>

#include <memory>

#include "absl/status/statusor.h"
#include "worker/engine/backend/backend.h"

namespace traind::engine {

// Arithmetic of the dense layers' matrix multiplications. Weights,
// optimizer state, activations and every other op stay fp32.
enum class GemmPrecision {
  kFp32,  // fp32 inputs and accumulation: results match the CPU backend
  kTf32,  // fp32 storage, TF32 tensor-core products (10-bit mantissa inputs)
  kBf16,  // x, w and gradients rounded to bf16 for the products; fp32
          // accumulation and fp32 outputs (the fp32 weights are the master copy)
};

struct CudaBackendOptions {
  // The CUDA device ordinal (within CUDA_VISIBLE_DEVICES).
  int device = 0;
  GemmPrecision precision = GemmPrecision::kFp32;
  // Dense forward passes through cuBLASLt with the bias and the activation
  // fused into the GEMM's epilogue where cuBLASLt has that activation (bias,
  // ReLU; GELU only when precision is not kFp32, since cuBLASLt's GELU is
  // the tanh approximation and the spec's is the erf form). False, or a
  // shape cuBLASLt has no algorithm for: cuBLAS GEMM + one fused
  // bias/activation kernel.
  bool use_cublaslt = true;
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
