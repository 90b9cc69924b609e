// The CUDA backend's kernels for image tensors (NCHW, as backend.h lays
// them out), as plain launch functions: what the convolution kernel adds to
// cuDNN's convolutions (per-channel bias and activation, bias gradient,
// explicit asymmetric padding), the pooling kernels, and the block
// transposes of BatchNorm over image channels.
//
// Compiled by nvcc (cuda_image_kernels.cu); no Abseil or engine includes but
// activation_math.h. Each function enqueues its work on `stream` and
// returns the launch status; none synchronizes. Every reduction has a fixed
// shape and order (deterministic), in double where the CPU backend sums in
// double.
#ifndef TRAIND_WORKER_ENGINE_BACKEND_CUDA_CUDA_IMAGE_KERNELS_H_
#define TRAIND_WORKER_ENGINE_BACKEND_CUDA_CUDA_IMAGE_KERNELS_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "worker/engine/backend/activation_math.h"

namespace traind::engine::cuda {

// y[n, c, p] = act(y[n, c, p] + b[c]) (b may be null). y: [batch, channels,
// plane].
cudaError_t LaunchChannelBiasActivation(DenseActivation act, float alpha, const float* b, float* y,
                                        int64_t batch, int64_t channels, int64_t plane,
                                        cudaStream_t stream);

// out[c] = Σ_n Σ_p g[n, c, p], in double, in a fixed order. g: [batch,
// channels, plane].
cudaError_t LaunchChannelSum(const float* g, int64_t batch, int64_t channels, int64_t plane,
                             float* out, cudaStream_t stream);

// Explicit padding of `images` planes x: [images, h, w] into y: [images,
// h + top + bottom, w + left + right], zeros around; and its inverse for
// gradients, dx[i, r, c] = dy[i, r + top, c + left].
cudaError_t LaunchPad2d(const float* x, int64_t images, int64_t h, int64_t w, int64_t top,
                        int64_t left, int64_t out_h, int64_t out_w, float* y, cudaStream_t stream);
cudaError_t LaunchCrop2d(const float* dy, int64_t images, int64_t padded_h, int64_t padded_w,
                         int64_t top, int64_t left, int64_t h, int64_t w, float* dx,
                         cudaStream_t stream);

// A pooling over planes, as backend.h's Pool2dGeometry (images = batch ·
// channels).
struct PoolShape {
  int64_t images;
  int64_t in_h, in_w, out_h, out_w;
  int64_t kernel_h, kernel_w, stride_h, stride_w, pad_top, pad_left;
  // 0 max (padding ignored), 1 average over kh·kw (padding counted as
  // zeros), 2 average over the cells inside the image.
  int kind;
};

// y: [images, out_h, out_w]. Max: argmax[i] = the input cell (h·in_w + w)
// of y[i]'s maximum, the first one in row order on ties (argmax may be null
// for inference).
cudaError_t LaunchPoolForward(const PoolShape& s, const float* x, float* y, int32_t* argmax,
                              cudaStream_t stream);
// dx: [images, in_h, in_w] = Σ over the windows covering each cell (in
// window order; no atomics) of dy's share: max, the windows whose maximum
// it is; average, dy / the window's divisor.
cudaError_t LaunchPoolBackward(const PoolShape& s, const float* dy, const int32_t* argmax,
                               float* dx, cudaStream_t stream);

// y = x with each of `blocks` [rows, cols] matrices transposed to [cols,
// rows].
cudaError_t LaunchTransposeBlocks(const float* x, int64_t blocks, int64_t rows, int64_t cols,
                                  float* y, cudaStream_t stream);

}  // namespace traind::engine::cuda

#endif  // TRAIND_WORKER_ENGINE_BACKEND_CUDA_CUDA_IMAGE_KERNELS_H_
