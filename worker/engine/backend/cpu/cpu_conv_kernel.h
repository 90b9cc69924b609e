// The CPU backend's convolution and pooling kernels: oneDNN convolution and
// pooling primitives (forward, backward data, backward weights) planned once
// per geometry on plain NCHW tensors (reordered into the layouts the
// primitives choose) or on NHWC tensors (options.channels_last: read and
// written as they are, no reorder), the bias and an activation whose
// derivative needs only y fused into the forward convolution (post-op).
// Made by the CPU backend's CreateConv2dKernel and CreatePool2dKernel.
//
// Thread safety: as the backend (one thread at a time); oneDNN runs on the
// process's OpenMP threads.
#ifndef TRAIND_WORKER_ENGINE_BACKEND_CPU_CPU_CONV_KERNEL_H_
#define TRAIND_WORKER_ENGINE_BACKEND_CPU_CPU_CONV_KERNEL_H_

#include <memory>

#include "absl/status/statusor.h"
#include "oneapi/dnnl/dnnl.hpp"
#include "worker/engine/backend/backend.h"

namespace traind::engine::cpu {

// `engine` and `stream` are not owned: they outlive the kernel.
// REQUIRES: CheckConv2dGeometry(geometry) / CheckPool2dGeometry(geometry) ok
// (the backend checks). DeviceError / OutOfMemoryError when oneDNN cannot
// plan it.
// `bf16`: the products in bf16 (images, weights and output gradients read as
// bf16, f32 accumulation and results), for training.precision: bf16.
absl::StatusOr<std::unique_ptr<Conv2dKernel>> CreateCpuConv2dKernel(
    const dnnl::engine& engine, const dnnl::stream& stream, const Conv2dGeometry& geometry,
    const Conv2dKernelOptions& options, bool bf16 = false);
absl::StatusOr<std::unique_ptr<Pool2dKernel>> CreateCpuPool2dKernel(
    const dnnl::engine& engine, const dnnl::stream& stream, const Pool2dGeometry& geometry,
    const Pool2dKernelOptions& options);

}  // namespace traind::engine::cpu

#endif  // TRAIND_WORKER_ENGINE_BACKEND_CPU_CPU_CONV_KERNEL_H_
