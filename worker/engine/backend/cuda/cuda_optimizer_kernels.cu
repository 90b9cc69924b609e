// The optimizers' kernels of the CUDA backend (SGD, Adam, RMSprop; per
// tensor and multi-tensor). See cuda_kernels.h for the contracts; the
// formulas mirror the CPU backend's (backend/cpu/cpu_backend.cc) element for
// element, with the scalars prepared on the host exactly as it does.
#include <cstdint>

#include "worker/engine/backend/cuda/cuda_kernel_grid.cuh"
#include "worker/engine/backend/cuda/cuda_kernels.h"

namespace traind::engine::cuda {
namespace {

// One element of an SGD step (shared by the per-tensor and multi-tensor kernels).
__device__ __forceinline__ void SgdElement(float lr, float wd, float mu, bool nesterov,
                                           const float* g, float* v, float* w, int64_t i) {
  if (v == nullptr) {
    w[i] -= lr * (g[i] + wd * w[i]);
  } else if (nesterov) {
    const float gi = g[i] + wd * w[i];
    v[i] = mu * v[i] + gi;
    w[i] -= lr * (gi + mu * v[i]);
  } else {
    v[i] = mu * v[i] + (g[i] + wd * w[i]);
    w[i] -= lr * v[i];
  }
}

__global__ void SgdKernel(float lr, float wd, float mu, bool nesterov, const float* g, float* v,
                          float* w, int64_t n) {
  GRID_STRIDE(i, n) SgdElement(lr, wd, mu, nesterov, g, v, w, i);
}

// One element of an Adam step.
__device__ __forceinline__ void AdamElement(float step_size, float sqrt_bc2, float b1, float b2,
                                            float one_minus_b1, float one_minus_b2, float eps,
                                            float l2, float decay, const float* g, float* m,
                                            float* v, float* w, int64_t i) {
  w[i] *= decay;
  const float gi = g[i] + l2 * w[i];
  m[i] = b1 * m[i] + one_minus_b1 * gi;
  v[i] = b2 * v[i] + one_minus_b2 * gi * gi;
  w[i] -= step_size * (m[i] / (sqrtf(v[i]) / sqrt_bc2 + eps));
}

__global__ void AdamKernel(float step_size, float sqrt_bc2, float b1, float b2, float one_minus_b1,
                           float one_minus_b2, float eps, float l2, float decay, const float* g,
                           float* m, float* v, float* w, int64_t n) {
  GRID_STRIDE(i, n) {
    AdamElement(step_size, sqrt_bc2, b1, b2, one_minus_b1, one_minus_b2, eps, l2, decay, g, m, v, w,
                i);
  }
}

// Multi-tensor steps: block b updates chunks[b], a run of one tensor.
__global__ void SgdManyKernel(float lr, float wd, float mu, bool nesterov,
                              const MultiTensorEntry* __restrict__ entries,
                              const MultiTensorChunk* __restrict__ chunks) {
  const MultiTensorChunk c = chunks[blockIdx.x];
  const MultiTensorEntry e = entries[c.tensor];
  const int64_t end = c.start + c.count;
  for (int64_t i = c.start + threadIdx.x; i < end; i += blockDim.x) {
    SgdElement(lr, wd, mu, nesterov, e.grad, e.state1, e.param, i);
  }
}

__global__ void AdamManyKernel(float step_size, float sqrt_bc2, float b1, float b2,
                               float one_minus_b1, float one_minus_b2, float eps, float l2,
                               float decay, const MultiTensorEntry* __restrict__ entries,
                               const MultiTensorChunk* __restrict__ chunks) {
  const MultiTensorChunk c = chunks[blockIdx.x];
  const MultiTensorEntry e = entries[c.tensor];
  const int64_t end = c.start + c.count;
  for (int64_t i = c.start + threadIdx.x; i < end; i += blockDim.x) {
    AdamElement(step_size, sqrt_bc2, b1, b2, one_minus_b1, one_minus_b2, eps, l2, decay, e.grad,
                e.state1, e.state2, e.param, i);
  }
}

__global__ void RmsPropKernel(float lr, float alpha, float one_minus_alpha, float eps, float mu,
                              float wd, const float* g, float* s, float* b, float* w, int64_t n) {
  GRID_STRIDE(i, n) {
    const float gi = g[i] + wd * w[i];
    s[i] = alpha * s[i] + one_minus_alpha * gi * gi;
    const float update = gi / (sqrtf(s[i]) + eps);
    if (b != nullptr) {
      b[i] = mu * b[i] + update;
      w[i] -= lr * b[i];
    } else {
      w[i] -= lr * update;
    }
  }
}

}  // namespace

cudaError_t LaunchSgd(float lr, float wd, float momentum, bool nesterov, const float* g, float* v,
                      float* w, int64_t n, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  SgdKernel<<<Blocks(n), kThreads, 0, stream>>>(lr, wd, momentum, nesterov, g, v, w, n);
  return Launched();
}

cudaError_t LaunchAdam(float step_size, float sqrt_bc2, float b1, float b2, float one_minus_b1,
                       float one_minus_b2, float eps, float l2, float decay, const float* g,
                       float* m, float* v, float* w, int64_t n, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  AdamKernel<<<Blocks(n), kThreads, 0, stream>>>(step_size, sqrt_bc2, b1, b2, one_minus_b1,
                                                 one_minus_b2, eps, l2, decay, g, m, v, w, n);
  return Launched();
}

cudaError_t LaunchRmsProp(float lr, float alpha, float one_minus_alpha, float eps, float momentum,
                          float wd, const float* g, float* s, float* b, float* w, int64_t n,
                          cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  RmsPropKernel<<<Blocks(n), kThreads, 0, stream>>>(lr, alpha, one_minus_alpha, eps, momentum, wd,
                                                    g, s, b, w, n);
  return Launched();
}

cudaError_t LaunchSgdMany(float lr, float wd, float momentum, bool nesterov,
                          const MultiTensorEntry* entries, const MultiTensorChunk* chunks,
                          int64_t num_chunks, cudaStream_t stream) {
  if (num_chunks <= 0) return cudaSuccess;
  if (num_chunks > INT32_MAX) return cudaErrorInvalidValue;
  SgdManyKernel<<<static_cast<unsigned>(num_chunks), kThreads, 0, stream>>>(
      lr, wd, momentum, nesterov, entries, chunks);
  return Launched();
}

cudaError_t LaunchAdamMany(float step_size, float sqrt_bc2, float b1, float b2, float one_minus_b1,
                           float one_minus_b2, float eps, float l2, float decay,
                           const MultiTensorEntry* entries, const MultiTensorChunk* chunks,
                           int64_t num_chunks, cudaStream_t stream) {
  if (num_chunks <= 0) return cudaSuccess;
  if (num_chunks > INT32_MAX) return cudaErrorInvalidValue;
  AdamManyKernel<<<static_cast<unsigned>(num_chunks), kThreads, 0, stream>>>(
      step_size, sqrt_bc2, b1, b2, one_minus_b1, one_minus_b2, eps, l2, decay, entries, chunks);
  return Launched();
}

}  // namespace traind::engine::cuda
