// Kernels of the CUDA backend for image tensors; contracts in
// cuda_image_kernels.h. The pooling kernels follow the CPU backend's
// (oneDNN's) definitions: max over the cells inside the image, the first
// maximum in row order; average over kh·kw or over the cells inside.
#include <cstdint>

#include "worker/engine/backend/cuda/cuda_image_kernels.h"
#include "worker/engine/backend/cuda/cuda_kernel_grid.cuh"

namespace traind::engine::cuda {
namespace {

__global__ void ChannelBiasActivationKernel(DenseActivation act, float alpha,
                                            const float* __restrict__ b, float* __restrict__ y,
                                            int64_t n, int64_t channels, int64_t plane) {
  GRID_STRIDE(i, n) {
    float z = y[i];
    if (b != nullptr) z += b[(i / plane) % channels];
    y[i] = activation_math::Activate(act, alpha, z);
  }
}

// One block per channel; thread t sums elements t, t + kThreads, ... of the
// channel's batch · plane values (image by image), then a fixed tree.
__global__ void ChannelSumKernel(const float* __restrict__ g, int64_t batch, int64_t channels,
                                 int64_t plane, float* __restrict__ out) {
  __shared__ double partial[kThreads];
  const int64_t c = blockIdx.x;
  const int64_t count = batch * plane;
  double sum = 0;
  for (int64_t e = threadIdx.x; e < count; e += kThreads) {
    const int64_t n = e / plane, p = e % plane;
    sum += g[(n * channels + c) * plane + p];
  }
  partial[threadIdx.x] = sum;
  __syncthreads();
  for (int half = kThreads / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) partial[threadIdx.x] += partial[threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x == 0) out[c] = static_cast<float>(partial[0]);
}

__global__ void Pad2dKernel(const float* __restrict__ x, int64_t images, int64_t h, int64_t w,
                            int64_t top, int64_t left, int64_t out_h, int64_t out_w,
                            float* __restrict__ y) {
  const int64_t n = images * out_h * out_w;
  GRID_STRIDE(i, n) {
    const int64_t image = i / (out_h * out_w), rem = i % (out_h * out_w);
    const int64_t r = rem / out_w - top, c = rem % out_w - left;
    y[i] = (r >= 0 && r < h && c >= 0 && c < w) ? x[(image * h + r) * w + c] : 0.0f;
  }
}

__global__ void Crop2dKernel(const float* __restrict__ dy, int64_t images, int64_t padded_h,
                             int64_t padded_w, int64_t top, int64_t left, int64_t h, int64_t w,
                             float* __restrict__ dx) {
  const int64_t n = images * h * w;
  GRID_STRIDE(i, n) {
    const int64_t image = i / (h * w), rem = i % (h * w);
    const int64_t r = rem / w, c = rem % w;
    dx[i] = dy[(image * padded_h + r + top) * padded_w + c + left];
  }
}

// The cells of window (oh, ow) inside the image: rows [h0, h1), columns
// [w0, w1).
struct Window {
  int64_t h0, h1, w0, w1;
};
__device__ __forceinline__ Window WindowAt(const PoolShape& s, int64_t oh, int64_t ow) {
  const int64_t hs = oh * s.stride_h - s.pad_top, ws = ow * s.stride_w - s.pad_left;
  Window win;
  win.h0 = hs < 0 ? 0 : hs;
  win.h1 = hs + s.kernel_h < s.in_h ? hs + s.kernel_h : s.in_h;
  win.w0 = ws < 0 ? 0 : ws;
  win.w1 = ws + s.kernel_w < s.in_w ? ws + s.kernel_w : s.in_w;
  return win;
}
__device__ __forceinline__ float Divisor(const PoolShape& s, const Window& win) {
  return s.kind == 1 ? static_cast<float>(s.kernel_h * s.kernel_w)
                     : static_cast<float>((win.h1 - win.h0) * (win.w1 - win.w0));
}

__global__ void PoolForwardKernel(PoolShape s, const float* __restrict__ x, float* __restrict__ y,
                                  int32_t* __restrict__ argmax) {
  const int64_t out_plane = s.out_h * s.out_w;
  const int64_t n = s.images * out_plane;
  GRID_STRIDE(i, n) {
    const int64_t image = i / out_plane, rem = i % out_plane;
    const Window win = WindowAt(s, rem / s.out_w, rem % s.out_w);
    const float* in = x + image * s.in_h * s.in_w;
    if (s.kind == 0) {
      int64_t best = win.h0 * s.in_w + win.w0;
      float value = in[best];
      for (int64_t r = win.h0; r < win.h1; ++r) {
        for (int64_t c = win.w0; c < win.w1; ++c) {
          const float v = in[r * s.in_w + c];
          if (v > value) {
            value = v;
            best = r * s.in_w + c;
          }
        }
      }
      y[i] = value;
      if (argmax != nullptr) argmax[i] = static_cast<int32_t>(best);
    } else {
      float sum = 0;
      for (int64_t r = win.h0; r < win.h1; ++r) {
        for (int64_t c = win.w0; c < win.w1; ++c) sum += in[r * s.in_w + c];
      }
      y[i] = sum / Divisor(s, win);
    }
  }
}

// First and one-past-last output index along an axis whose windows cover
// input cell `at`: o · stride - pad <= at < o · stride - pad + kernel.
__device__ __forceinline__ void Covering(int64_t at, int64_t stride, int64_t pad, int64_t kernel,
                                         int64_t outs, int64_t* first, int64_t* last) {
  const int64_t hi = at + pad;         // o · stride <= hi
  const int64_t lo = hi - kernel + 1;  // o · stride >= lo
  *first = lo <= 0 ? 0 : (lo + stride - 1) / stride;
  const int64_t l = hi / stride + 1;
  *last = l < outs ? l : outs;
}

__global__ void PoolBackwardKernel(PoolShape s, const float* __restrict__ dy,
                                   const int32_t* __restrict__ argmax, float* __restrict__ dx) {
  const int64_t in_plane = s.in_h * s.in_w, out_plane = s.out_h * s.out_w;
  const int64_t n = s.images * in_plane;
  GRID_STRIDE(i, n) {
    const int64_t image = i / in_plane, cell = i % in_plane;
    const int64_t r = cell / s.in_w, c = cell % s.in_w;
    int64_t oh0, oh1, ow0, ow1;
    Covering(r, s.stride_h, s.pad_top, s.kernel_h, s.out_h, &oh0, &oh1);
    Covering(c, s.stride_w, s.pad_left, s.kernel_w, s.out_w, &ow0, &ow1);
    const float* g = dy + image * out_plane;
    const int32_t* where = s.kind == 0 ? argmax + image * out_plane : nullptr;
    float sum = 0;
    for (int64_t oh = oh0; oh < oh1; ++oh) {
      for (int64_t ow = ow0; ow < ow1; ++ow) {
        const int64_t o = oh * s.out_w + ow;
        if (s.kind == 0) {
          if (where[o] == cell) sum += g[o];
        } else {
          sum += g[o] / Divisor(s, WindowAt(s, oh, ow));
        }
      }
    }
    dx[i] = sum;
  }
}

__global__ void TransposeBlocksKernel(const float* __restrict__ x, int64_t blocks, int64_t rows,
                                      int64_t cols, float* __restrict__ y) {
  const int64_t block = rows * cols;
  const int64_t n = blocks * block;
  GRID_STRIDE(i, n) {
    const int64_t b = i / block, rem = i % block;
    const int64_t c = rem / rows, r = rem % rows;  // y[b, c, r]
    y[i] = x[b * block + r * cols + c];
  }
}

}  // namespace

cudaError_t LaunchChannelBiasActivation(DenseActivation act, float alpha, const float* b, float* y,
                                        int64_t batch, int64_t channels, int64_t plane,
                                        cudaStream_t stream) {
  const int64_t n = batch * channels * plane;
  if (n == 0) return cudaSuccess;
  ChannelBiasActivationKernel<<<Blocks(n), kThreads, 0, stream>>>(act, alpha, b, y, n, channels,
                                                                  plane);
  return Launched();
}

cudaError_t LaunchChannelSum(const float* g, int64_t batch, int64_t channels, int64_t plane,
                             float* out, cudaStream_t stream) {
  if (channels == 0) return cudaSuccess;
  ChannelSumKernel<<<static_cast<unsigned>(channels), kThreads, 0, stream>>>(g, batch, channels,
                                                                             plane, out);
  return Launched();
}

cudaError_t LaunchPad2d(const float* x, int64_t images, int64_t h, int64_t w, int64_t top,
                        int64_t left, int64_t out_h, int64_t out_w, float* y, cudaStream_t stream) {
  const int64_t n = images * out_h * out_w;
  if (n == 0) return cudaSuccess;
  Pad2dKernel<<<Blocks(n), kThreads, 0, stream>>>(x, images, h, w, top, left, out_h, out_w, y);
  return Launched();
}

cudaError_t LaunchCrop2d(const float* dy, int64_t images, int64_t padded_h, int64_t padded_w,
                         int64_t top, int64_t left, int64_t h, int64_t w, float* dx,
                         cudaStream_t stream) {
  const int64_t n = images * h * w;
  if (n == 0) return cudaSuccess;
  Crop2dKernel<<<Blocks(n), kThreads, 0, stream>>>(dy, images, padded_h, padded_w, top, left, h, w,
                                                   dx);
  return Launched();
}

cudaError_t LaunchPoolForward(const PoolShape& s, const float* x, float* y, int32_t* argmax,
                              cudaStream_t stream) {
  const int64_t n = s.images * s.out_h * s.out_w;
  if (n == 0) return cudaSuccess;
  PoolForwardKernel<<<Blocks(n), kThreads, 0, stream>>>(s, x, y, argmax);
  return Launched();
}

cudaError_t LaunchPoolBackward(const PoolShape& s, const float* dy, const int32_t* argmax,
                               float* dx, cudaStream_t stream) {
  const int64_t n = s.images * s.in_h * s.in_w;
  if (n == 0) return cudaSuccess;
  PoolBackwardKernel<<<Blocks(n), kThreads, 0, stream>>>(s, dy, argmax, dx);
  return Launched();
}

cudaError_t LaunchTransposeBlocks(const float* x, int64_t blocks, int64_t rows, int64_t cols,
                                  float* y, cudaStream_t stream) {
  const int64_t n = blocks * rows * cols;
  if (n == 0) return cudaSuccess;
  TransposeBlocksKernel<<<Blocks(n), kThreads, 0, stream>>>(x, blocks, rows, cols, y);
  return Launched();
}

}  // namespace traind::engine::cuda
