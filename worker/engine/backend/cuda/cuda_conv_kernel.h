// The CUDA backend's convolution and pooling kernels. Made by
// CudaBackend::CreateConv2dKernel / CreatePool2dKernel.
//
// Convolutions run on cuDNN (its legacy convolution API, NCHW float
// tensors, as backend.h lays images out): forward, backward data and
// backward filter, each with an algorithm chosen once per geometry from
// cuDNN's heuristics (cudnnGet*Algorithm_v7, not cudnnFind*: a choice
// by timing could differ between two runs of the same fold, and an
// interrupted fold resumes bit-identically only with the same algorithms),
// deterministic algorithms only for the backward passes, within a workspace
// no larger than the unfolded input (what spec/memory_estimate.cc counts),
// allocated when the kernel is made. fp32: CUDNN_FMA_MATH (no TF32, results
// within float tolerance of the CPU backend); tf32 and bf16 precision:
// CUDNN_DEFAULT_MATH (TF32 tensor cores; fp32 storage). The bias and the
// activation follow in one kernel; the bias gradient is a deterministic
// per-channel sum. cuDNN pads symmetrically only: an asymmetric padding
// ("same" with an even kernel or a stride) is applied explicitly into a
// padded copy of x (and dx cropped from its padded gradient), as PyTorch
// does.
//
// Pooling runs on the backend's own kernels (cuda_image_kernels.h) rather
// than cuDNN's, whose pooling descriptor has one padding per axis and whose
// max-pool backward re-reads x and y: these take any padding, keep where
// each maximum was (int32 per output) and sum gradients without atomics.
//
// Thread safety: as the backend (one thread at a time).
#ifndef TRAIND_WORKER_ENGINE_BACKEND_CUDA_CUDA_CONV_KERNEL_H_
#define TRAIND_WORKER_ENGINE_BACKEND_CUDA_CUDA_CONV_KERNEL_H_

#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <memory>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "worker/engine/backend/backend.h"
#include "worker/engine/backend/cuda/cuda_backend.h"

namespace traind::engine {

namespace cuda {

// OkStatus for CUDNN_STATUS_SUCCESS; CUDNN_STATUS_ALLOC_FAILED ->
// OutOfMemoryError; any other -> DeviceError naming `call`.
absl::Status CudnnStatus(cudnnStatus_t status, absl::string_view call);

// A cuDNN handle bound to a stream.
class CudnnHandle {
 public:
  CudnnHandle() = default;
  static absl::StatusOr<CudnnHandle> Create(cudaStream_t stream);
  cudnnHandle_t get() const { return handle_.get(); }

 private:
  struct Destroy {
    void operator()(cudnnContext* h) const { (void)cudnnDestroy(h); }
  };
  std::unique_ptr<cudnnContext, Destroy> handle_;
};

}  // namespace cuda

// What a convolution needs of the backend. Not owned: they outlive every
// kernel made with them.
struct ConvContext {
  cudnnHandle_t cudnn;
  cudaStream_t stream;
  GemmPrecision precision;
};

// REQUIRES: CheckConv2dGeometry / CheckPool2dGeometry ok (the backend
// checks). OutOfMemoryError when a buffer cannot be allocated; DeviceError
// when cuDNN has no algorithm for the geometry.
absl::StatusOr<std::unique_ptr<Conv2dKernel>> CreateCudaConv2dKernel(
    const ConvContext& context, const Conv2dGeometry& geometry, const Conv2dKernelOptions& options);
absl::StatusOr<std::unique_ptr<Pool2dKernel>> CreateCudaPool2dKernel(cudaStream_t stream,
                                                                     const Pool2dGeometry& geometry,
                                                                     PoolKind kind);

// The workspace a convolution may take: the unfolded input (batch · OH · OW
// · C · kh · kw floats), as spec/memory_estimate.cc counts it.
int64_t ConvWorkspaceCap(const Conv2dGeometry& geometry);

}  // namespace traind::engine

#endif  // TRAIND_WORKER_ENGINE_BACKEND_CUDA_CUDA_CONV_KERNEL_H_
