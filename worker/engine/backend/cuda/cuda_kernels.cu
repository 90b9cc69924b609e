// Kernels of the CUDA backend, but the optimizers' (cuda_optimizer_kernels.cu).
// See cuda_kernels.h for the contracts. The activations and losses are the
// CPU backend's own formulas (backend/activation_math.h, backend/loss_math.h);
// the rest mirror backend/cpu/cpu_backend.cc line for line where the CPU
// backend fixes an order or a precision.
#include <cuda_bf16.h>

#include <cstdint>
#include <cstring>

#include "worker/engine/backend/cuda/cuda_kernel_grid.cuh"
#include "worker/engine/backend/cuda/cuda_kernels.h"

namespace traind::engine::cuda {
namespace {

__device__ __forceinline__ uint64_t MixBits(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

__global__ void FillKernel(float value, float* p, int64_t n) { GRID_STRIDE(i, n) p[i] = value; }

__global__ void BiasActivationKernel(DenseActivation act, float alpha, const float* __restrict__ b,
                                     float* __restrict__ y, int64_t rows, int64_t cols) {
  const int64_t n = rows * cols;
  GRID_STRIDE(i, n) {
    float z = y[i];
    if (b != nullptr) z += b[i % cols];
    y[i] = activation_math::Activate(act, alpha, z);
  }
}

__global__ void ActivationForwardKernel(DenseActivation act, float alpha, const float* x, float* y,
                                        int64_t n) {
  GRID_STRIDE(i, n) y[i] = activation_math::Activate(act, alpha, x[i]);
}

__global__ void ActivationBackwardKernel(DenseActivation act, float alpha, const float* x,
                                         const float* y, const float* dy, float* dx, int64_t n) {
  GRID_STRIDE(i, n) dx[i] = dy[i] * activation_math::Derivative(act, alpha, x[i], y[i]);
}

__global__ void ActivationGradFromOutputKernel(DenseActivation act, float alpha, const float* y,
                                               float* g, int64_t n) {
  GRID_STRIDE(i, n) g[i] *= activation_math::Derivative(act, alpha, 0.0f, y[i]);
}

// Column reductions: a block of 32 x kRowLanes threads owns 32 columns;
// lane (tx, ty) sums rows ty, ty + kRowLanes, ...; the lanes' sums are then
// added in ty order. Fixed shape, fixed order: deterministic.
constexpr int kRowLanes = 8;

__device__ __forceinline__ double ReduceRowLanes(double v, double (*shared)[32]) {
  shared[threadIdx.y][threadIdx.x] = v;
  __syncthreads();
  double sum = 0;
  for (int k = 0; k < kRowLanes; ++k) sum += shared[k][threadIdx.x];
  __syncthreads();
  return sum;
}

__global__ void ColumnSumKernel(const float* __restrict__ x, int64_t rows, int64_t cols,
                                float* __restrict__ out) {
  __shared__ double shared[kRowLanes][32];
  const int64_t j = static_cast<int64_t>(blockIdx.x) * 32 + threadIdx.x;
  double sum = 0;
  if (j < cols) {
    for (int64_t r = threadIdx.y; r < rows; r += kRowLanes) sum += x[r * cols + j];
  }
  sum = ReduceRowLanes(sum, shared);
  if (j < cols && threadIdx.y == 0) out[j] = static_cast<float>(sum);
}

__global__ void DropoutKernel(uint64_t seed, uint64_t threshold, float keep, const float* x,
                              float* mask, float* y, int64_t n) {
  GRID_STRIDE(i, n) {
    // The i-th output of SplitMix64 seeded with `seed` (Rng::Next).
    const uint64_t draw = MixBits(seed + static_cast<uint64_t>(i + 1) * 0x9E3779B97F4A7C15ULL);
    const float m = (draw >> 11) < threshold ? 0.0f : keep;
    mask[i] = m;
    y[i] = x[i] * m;
  }
}

__global__ void MultiplyKernel(const float* a, const float* b, float* out, int64_t n) {
  GRID_STRIDE(i, n) out[i] = a[i] * b[i];
}

__global__ void ScaleKernel(float factor, float* p, int64_t n) { GRID_STRIDE(i, n) p[i] *= factor; }

__global__ void ClipKernel(float limit, float* p, int64_t n) {
  GRID_STRIDE(i, n) p[i] = fminf(limit, fmaxf(-limit, p[i]));
}

__global__ void BatchNormForwardKernel(bool training, float momentum, float epsilon,
                                       const float* __restrict__ x, int64_t batch, int64_t n,
                                       const float* __restrict__ gamma,
                                       const float* __restrict__ beta, float* running_mean,
                                       float* running_var, float* mean, float* rstd,
                                       float* __restrict__ y) {
  __shared__ double shared[kRowLanes][32];
  __shared__ float stats[2][32];
  const int64_t j = static_cast<int64_t>(blockIdx.x) * 32 + threadIdx.x;
  const bool valid = j < n;
  if (training) {
    double sum = 0;
    if (valid) {
      for (int64_t r = threadIdx.y; r < batch; r += kRowLanes) sum += x[r * n + j];
    }
    const double m = ReduceRowLanes(sum, shared) / static_cast<double>(batch);
    double sq = 0;
    if (valid) {
      for (int64_t r = threadIdx.y; r < batch; r += kRowLanes) {
        const double d = x[r * n + j] - m;
        sq += d * d;
      }
    }
    sq = ReduceRowLanes(sq, shared);
    if (valid && threadIdx.y == 0) {
      const double var = sq / static_cast<double>(batch);
      const double unbiased = batch > 1 ? sq / static_cast<double>(batch - 1) : var;
      const float mu = static_cast<float>(m);
      const float rs = static_cast<float>(1.0 / sqrt(var + epsilon));
      mean[j] = mu;
      rstd[j] = rs;
      running_mean[j] = (1.0f - momentum) * running_mean[j] + momentum * mu;
      running_var[j] = (1.0f - momentum) * running_var[j] + momentum * static_cast<float>(unbiased);
      stats[0][threadIdx.x] = mu;
      stats[1][threadIdx.x] = rs;
    }
  } else if (valid && threadIdx.y == 0) {
    const float mu = running_mean[j];
    const float rs = 1.0f / sqrtf(running_var[j] + epsilon);
    mean[j] = mu;
    rstd[j] = rs;
    stats[0][threadIdx.x] = mu;
    stats[1][threadIdx.x] = rs;
  }
  __syncthreads();
  if (!valid) return;
  const float mu = stats[0][threadIdx.x], rs = stats[1][threadIdx.x];
  const float g = gamma[j], b = beta[j];
  for (int64_t r = threadIdx.y; r < batch; r += kRowLanes) {
    y[r * n + j] = g * (x[r * n + j] - mu) * rs + b;
  }
}

// Column j's Σ dy and Σ dy·x̂ over the batch (x̂ = (x - mu)·rs), summed in
// double in a fixed order; every thread of the block takes part (lanes of
// columns past n add nothing).
__device__ void ColumnGradientSums(const float* __restrict__ x, int64_t batch, int64_t n, int64_t j,
                                   bool valid, float mu, float rs, const float* __restrict__ dy,
                                   double (&shared)[kRowLanes][32], double* sum_dy,
                                   double* sum_dy_xhat) {
  double a = 0, b = 0;
  if (valid) {
    for (int64_t r = threadIdx.y; r < batch; r += kRowLanes) {
      const double xhat = (x[r * n + j] - mu) * rs;
      a += dy[r * n + j];
      b += dy[r * n + j] * xhat;
    }
  }
  *sum_dy = ReduceRowLanes(a, shared);
  *sum_dy_xhat = ReduceRowLanes(b, shared);
}

__global__ void BatchNormBackwardKernel(const float* __restrict__ x, int64_t batch, int64_t n,
                                        const float* __restrict__ gamma,
                                        const float* __restrict__ mean,
                                        const float* __restrict__ rstd,
                                        const float* __restrict__ dy, float* dgamma, float* dbeta,
                                        float* dx) {
  __shared__ double shared[kRowLanes][32];
  const int64_t j = static_cast<int64_t>(blockIdx.x) * 32 + threadIdx.x;
  const bool valid = j < n;
  const float mu = valid ? mean[j] : 0.0f, rs = valid ? rstd[j] : 0.0f;
  double sum_dy, sum_dy_xhat;
  ColumnGradientSums(x, batch, n, j, valid, mu, rs, dy, shared, &sum_dy, &sum_dy_xhat);
  if (!valid) return;
  if (threadIdx.y == 0) {
    dgamma[j] = static_cast<float>(sum_dy_xhat);
    dbeta[j] = static_cast<float>(sum_dy);
  }
  if (dx == nullptr) return;
  const double scale = gamma[j] * rs / static_cast<double>(batch);
  for (int64_t r = threadIdx.y; r < batch; r += kRowLanes) {
    const double xhat = (x[r * n + j] - mu) * rs;
    dx[r * n + j] = static_cast<float>(
        scale * (static_cast<double>(batch) * dy[r * n + j] - sum_dy - xhat * sum_dy_xhat));
  }
}

__global__ void BatchNormSquaredDeviationsKernel(const float* __restrict__ x, int64_t batch,
                                                 int64_t n, const float* __restrict__ sum,
                                                 int64_t count, float* mean, float* sq) {
  __shared__ double shared[kRowLanes][32];
  const int64_t j = static_cast<int64_t>(blockIdx.x) * 32 + threadIdx.x;
  const bool valid = j < n;
  const float mu = valid ? static_cast<float>(sum[j] / static_cast<double>(count)) : 0.0f;
  double s = 0;
  if (valid) {
    for (int64_t r = threadIdx.y; r < batch; r += kRowLanes) {
      const double d = static_cast<double>(x[r * n + j]) - mu;
      s += d * d;
    }
  }
  s = ReduceRowLanes(s, shared);
  if (valid && threadIdx.y == 0) {
    mean[j] = mu;
    sq[j] = static_cast<float>(s);
  }
}

__global__ void BatchNormForwardFromMomentsKernel(
    float momentum, float epsilon, int64_t count, const float* __restrict__ x, int64_t batch,
    int64_t n, const float* __restrict__ gamma, const float* __restrict__ beta,
    const float* __restrict__ mean, const float* __restrict__ sq, float* running_mean,
    float* running_var, float* rstd, float* __restrict__ y) {
  __shared__ float shared_rstd[32];
  const int64_t j = static_cast<int64_t>(blockIdx.x) * 32 + threadIdx.x;
  const bool valid = j < n;
  if (valid && threadIdx.y == 0) {
    const double s = sq[j];
    const double var = s / static_cast<double>(count);
    const double unbiased = count > 1 ? s / static_cast<double>(count - 1) : var;
    const float rs = static_cast<float>(1.0 / sqrt(var + epsilon));
    rstd[j] = rs;
    running_mean[j] = (1.0f - momentum) * running_mean[j] + momentum * mean[j];
    running_var[j] = (1.0f - momentum) * running_var[j] + momentum * static_cast<float>(unbiased);
    shared_rstd[threadIdx.x] = rs;
  }
  __syncthreads();
  if (!valid) return;
  const float mu = mean[j], rs = shared_rstd[threadIdx.x];
  const float g = gamma[j], b = beta[j];
  for (int64_t r = threadIdx.y; r < batch; r += kRowLanes) {
    y[r * n + j] = g * (x[r * n + j] - mu) * rs + b;
  }
}

__global__ void BatchNormBackwardSumsKernel(const float* __restrict__ x, int64_t batch, int64_t n,
                                            const float* __restrict__ mean,
                                            const float* __restrict__ rstd,
                                            const float* __restrict__ dy, float* dgamma,
                                            float* dbeta, float* sums) {
  __shared__ double shared[kRowLanes][32];
  const int64_t j = static_cast<int64_t>(blockIdx.x) * 32 + threadIdx.x;
  const bool valid = j < n;
  const float mu = valid ? mean[j] : 0.0f, rs = valid ? rstd[j] : 0.0f;
  double sum_dy, sum_dy_xhat;
  ColumnGradientSums(x, batch, n, j, valid, mu, rs, dy, shared, &sum_dy, &sum_dy_xhat);
  if (valid && threadIdx.y == 0) {
    dgamma[j] = sums[n + j] = static_cast<float>(sum_dy_xhat);
    dbeta[j] = sums[j] = static_cast<float>(sum_dy);
  }
}

__global__ void BatchNormBackwardDataKernel(
    const float* __restrict__ x, int64_t batch, int64_t n, const float* __restrict__ gamma,
    const float* __restrict__ mean, const float* __restrict__ rstd, const float* __restrict__ dy,
    const float* __restrict__ sums, int64_t count, float* __restrict__ dx) {
  const double c = static_cast<double>(count);
  GRID_STRIDE(i, batch * n) {
    const int64_t j = i % n;
    const float rs = rstd[j];
    const double scale = gamma[j] * rs / c;
    const double xhat = (x[i] - mean[j]) * rs;
    dx[i] =
        static_cast<float>(scale * (c * dy[i] - static_cast<double>(sums[j]) - xhat * sums[n + j]));
  }
}

// Row kernels: one warp per row, kWarpsPerBlock rows per block.
constexpr int kWarpsPerBlock = 8;

__device__ __forceinline__ double WarpSum(double v) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

__global__ void LayerNormForwardKernel(float epsilon, const float* __restrict__ x, int64_t batch,
                                       int64_t n, const float* __restrict__ gamma,
                                       const float* __restrict__ beta, float* mean, float* rstd,
                                       float* __restrict__ y) {
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.y;
  if (r >= batch) return;
  const int lane = threadIdx.x;
  const float* row = x + r * n;
  double sum = 0;
  for (int64_t j = lane; j < n; j += 32) sum += row[j];
  const double m = WarpSum(sum) / static_cast<double>(n);
  double sq = 0;
  for (int64_t j = lane; j < n; j += 32) sq += (row[j] - m) * (row[j] - m);
  sq = WarpSum(sq);
  const float mu = static_cast<float>(m);
  const float rs = static_cast<float>(1.0 / sqrt(sq / static_cast<double>(n) + epsilon));
  if (lane == 0) {
    mean[r] = mu;
    rstd[r] = rs;
  }
  for (int64_t j = lane; j < n; j += 32) y[r * n + j] = gamma[j] * (row[j] - mu) * rs + beta[j];
}

__global__ void LayerNormBackwardDataKernel(const float* __restrict__ x, int64_t batch, int64_t n,
                                            const float* __restrict__ gamma,
                                            const float* __restrict__ mean,
                                            const float* __restrict__ rstd,
                                            const float* __restrict__ dy, float* __restrict__ dx) {
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.y;
  if (r >= batch) return;
  const int lane = threadIdx.x;
  const float mu = mean[r], rs = rstd[r];
  double sum_gh = 0, sum_gh_xhat = 0;
  for (int64_t j = lane; j < n; j += 32) {
    const float xhat = (x[r * n + j] - mu) * rs;
    const float gh = dy[r * n + j] * gamma[j];
    sum_gh += gh;
    sum_gh_xhat += gh * xhat;
  }
  sum_gh = WarpSum(sum_gh);
  sum_gh_xhat = WarpSum(sum_gh_xhat);
  for (int64_t j = lane; j < n; j += 32) {
    const double xhat = (x[r * n + j] - mu) * rs;
    const double gh = dy[r * n + j] * gamma[j];
    dx[r * n + j] = static_cast<float>(rs / static_cast<double>(n) *
                                       (static_cast<double>(n) * gh - sum_gh - xhat * sum_gh_xhat));
  }
}

// dgamma[j] = Σ_r dy x̂, dbeta[j] = Σ_r dy (column reduction, x̂ from the row statistics).
__global__ void LayerNormBackwardParamsKernel(const float* __restrict__ x, int64_t batch, int64_t n,
                                              const float* __restrict__ mean,
                                              const float* __restrict__ rstd,
                                              const float* __restrict__ dy, float* dgamma,
                                              float* dbeta) {
  __shared__ double shared[kRowLanes][32];
  const int64_t j = static_cast<int64_t>(blockIdx.x) * 32 + threadIdx.x;
  double sg = 0, sb = 0;
  if (j < n) {
    for (int64_t r = threadIdx.y; r < batch; r += kRowLanes) {
      const float xhat = (x[r * n + j] - mean[r]) * rstd[r];
      sg += dy[r * n + j] * xhat;
      sb += dy[r * n + j];
    }
  }
  sg = ReduceRowLanes(sg, shared);
  sb = ReduceRowLanes(sb, shared);
  if (j < n && threadIdx.y == 0) {
    dgamma[j] = static_cast<float>(sg);
    dbeta[j] = static_cast<float>(sb);
  }
}

// Block-wide sum of one double per thread (kThreads threads), in a fixed tree order.
__device__ double BlockSum(double v) {
  __shared__ double shared[kThreads];
  shared[threadIdx.x] = v;
  __syncthreads();
  for (int stride = kThreads / 2; stride > 0; stride >>= 1) {
    if (threadIdx.x < stride) shared[threadIdx.x] += shared[threadIdx.x + stride];
    __syncthreads();
  }
  const double sum = shared[0];
  __syncthreads();
  return sum;
}

__global__ void SumOfSquaresPartialKernel(const float* __restrict__ p, int64_t n,
                                          double* partials) {
  double sum = 0;
  GRID_STRIDE(i, n) sum += static_cast<double>(p[i]) * p[i];
  sum = BlockSum(sum);
  if (threadIdx.x == 0) partials[blockIdx.x] = sum;
}

__global__ void SumPartialsKernel(const double* partials, double* out) {
  double v = threadIdx.x < kSumPartials ? partials[threadIdx.x] : 0.0;
  v = BlockSum(v);
  if (threadIdx.x == 0) *out = v;
}

// Losses (loss_math.h). Softmax cross-entropy: one thread per row; a row
// whose class code is out of range is not computed (nothing is read with
// its code) and adds 0.
__global__ void LossRowsKernel(LossParams p, const float* __restrict__ outputs,
                               const int32_t* __restrict__ classes, int64_t batch,
                               double scale_value, const double* scale_at, float* grad, float* pred,
                               double* __restrict__ values) {
  const int64_t w = p.width;
  GRID_STRIDE(r, batch) {
    const int32_t y = classes[r];
    float* g = grad != nullptr ? grad + r * w : nullptr;
    float* q = pred != nullptr ? pred + r * w : nullptr;
    if (y < 0 || y >= w) {
      values[r] = 0;
      for (int64_t j = 0; j < w; ++j) {
        if (g != nullptr) g[j] = 0.0f;
        if (q != nullptr) q[j] = 0.0f;
      }
      continue;
    }
    const double scale = scale_at != nullptr ? *scale_at : scale_value;
    values[r] = loss_math::SoftmaxCrossEntropyRow(p, outputs + r * w, y, scale, g, q);
  }
}

// The elementwise losses: one thread per element.
__global__ void LossElementsKernel(LossParams p, const float* __restrict__ outputs,
                                   const float* __restrict__ targets, int64_t n, double scale_value,
                                   const double* scale_at, float* grad, float* pred,
                                   double* __restrict__ values) {
  GRID_STRIDE(i, n) {
    const double scale = scale_at != nullptr ? *scale_at : scale_value;
    values[i] = loss_math::ElementLoss(p, i % p.width, outputs[i], targets[i], scale,
                                       grad != nullptr ? grad + i : nullptr,
                                       pred != nullptr ? pred + i : nullptr);
  }
}

// First stage of a loss sum: kSumPartials blocks (a fixed grid).
__global__ void SumValuesPartialKernel(const double* __restrict__ values, int64_t n,
                                       double* partials) {
  double sum = 0;
  GRID_STRIDE(i, n) sum += values[i];
  sum = BlockSum(sum);
  if (threadIdx.x == 0) partials[blockIdx.x] = sum;
}

// Second stage, one block: *slot = Σ partials; with classes, the first row
// whose code is outside [0, width) goes to *bad unless it holds one.
__global__ void LossFinishKernel(const double* __restrict__ partials, double* slot,
                                 const int32_t* __restrict__ classes, int64_t batch, int64_t width,
                                 LossBadCode* bad) {
  __shared__ long long first_bad[kThreads];
  double v = threadIdx.x < kSumPartials ? partials[threadIdx.x] : 0.0;
  v = BlockSum(v);
  long long mine = -1;
  if (classes != nullptr) {
    for (int64_t r = threadIdx.x; r < batch; r += kThreads) {
      const int32_t y = classes[r];
      if (y < 0 || y >= width) {
        mine = r;  // this thread's first; its later rows are larger
        break;
      }
    }
  }
  first_bad[threadIdx.x] = mine;
  __syncthreads();
  if (threadIdx.x == 0) {
    *slot = v;
    long long b = -1;
    for (int t = 0; t < kThreads; ++t) {
      if (first_bad[t] >= 0 && (b < 0 || first_bad[t] < b)) b = first_bad[t];
    }
    if (b >= 0 && bad->row < 0) {
      bad->code = classes[b];
      bad->row = b;
    }
  }
}

__device__ __forceinline__ uint16_t Bf16Bits(float x) {
  const __nv_bfloat16 b = __float2bfloat16_rn(x);
  uint16_t bits;
  memcpy(&bits, &b, sizeof(bits));
  return bits;
}

__global__ void ToBf16Kernel(const float* __restrict__ src, uint16_t* __restrict__ dst, int64_t n) {
  GRID_STRIDE(i, n) dst[i] = Bf16Bits(src[i]);
}

__global__ void ActivationGradFromOutputBf16Kernel(DenseActivation act, float alpha, const float* y,
                                                   float* g, uint16_t* g16, int64_t n) {
  GRID_STRIDE(i, n) {
    const float v = act == DenseActivation::kLinear
                        ? g[i]
                        : g[i] * activation_math::Derivative(act, alpha, 0.0f, y[i]);
    g[i] = v;
    g16[i] = Bf16Bits(v);
  }
}

// Threads per block of the loss rows kernel: small blocks, so that a batch
// of a few thousand rows (one thread each) spreads over the SMs.
constexpr int kLossRowThreads = 32;

inline unsigned ColumnBlocks(int64_t cols) { return static_cast<unsigned>((cols + 31) / 32); }
inline unsigned RowBlocks(int64_t rows) {
  return static_cast<unsigned>((rows + kWarpsPerBlock - 1) / kWarpsPerBlock);
}

}  // namespace

cudaError_t LaunchFill(float value, float* p, int64_t n, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  FillKernel<<<Blocks(n), kThreads, 0, stream>>>(value, p, n);
  return Launched();
}

cudaError_t LaunchBiasActivation(DenseActivation act, float alpha, const float* b, float* y,
                                 int64_t rows, int64_t cols, cudaStream_t stream) {
  if (rows * cols <= 0 || (b == nullptr && act == DenseActivation::kLinear)) return cudaSuccess;
  BiasActivationKernel<<<Blocks(rows * cols), kThreads, 0, stream>>>(act, alpha, b, y, rows, cols);
  return Launched();
}

cudaError_t LaunchActivationForward(DenseActivation act, float alpha, const float* x, float* y,
                                    int64_t n, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  ActivationForwardKernel<<<Blocks(n), kThreads, 0, stream>>>(act, alpha, x, y, n);
  return Launched();
}

cudaError_t LaunchActivationBackward(DenseActivation act, float alpha, const float* x,
                                     const float* y, const float* dy, float* dx, int64_t n,
                                     cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  ActivationBackwardKernel<<<Blocks(n), kThreads, 0, stream>>>(act, alpha, x, y, dy, dx, n);
  return Launched();
}

cudaError_t LaunchActivationGradFromOutput(DenseActivation act, float alpha, const float* y,
                                           float* g, int64_t n, cudaStream_t stream) {
  if (n <= 0 || act == DenseActivation::kLinear) return cudaSuccess;
  ActivationGradFromOutputKernel<<<Blocks(n), kThreads, 0, stream>>>(act, alpha, y, g, n);
  return Launched();
}

cudaError_t LaunchColumnSum(const float* x, int64_t rows, int64_t cols, float* out,
                            cudaStream_t stream) {
  if (cols <= 0) return cudaSuccess;
  ColumnSumKernel<<<ColumnBlocks(cols), dim3(32, kRowLanes), 0, stream>>>(x, rows, cols, out);
  return Launched();
}

cudaError_t LaunchDropout(uint64_t seed, uint64_t threshold, float keep, const float* x,
                          float* mask, float* y, int64_t n, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  DropoutKernel<<<Blocks(n), kThreads, 0, stream>>>(seed, threshold, keep, x, mask, y, n);
  return Launched();
}

cudaError_t LaunchMultiply(const float* a, const float* b, float* out, int64_t n,
                           cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  MultiplyKernel<<<Blocks(n), kThreads, 0, stream>>>(a, b, out, n);
  return Launched();
}

cudaError_t LaunchScale(float factor, float* p, int64_t n, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  ScaleKernel<<<Blocks(n), kThreads, 0, stream>>>(factor, p, n);
  return Launched();
}

cudaError_t LaunchClip(float limit, float* p, int64_t n, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  ClipKernel<<<Blocks(n), kThreads, 0, stream>>>(limit, p, n);
  return Launched();
}

cudaError_t LaunchBatchNormForward(bool training, float momentum, float epsilon, const float* x,
                                   int64_t batch, int64_t n, const float* gamma, const float* beta,
                                   float* running_mean, float* running_var, float* mean,
                                   float* rstd, float* y, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  BatchNormForwardKernel<<<ColumnBlocks(n), dim3(32, kRowLanes), 0, stream>>>(
      training, momentum, epsilon, x, batch, n, gamma, beta, running_mean, running_var, mean, rstd,
      y);
  return Launched();
}

cudaError_t LaunchBatchNormBackward(const float* x, int64_t batch, int64_t n, const float* gamma,
                                    const float* mean, const float* rstd, const float* dy,
                                    float* dgamma, float* dbeta, float* dx, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  BatchNormBackwardKernel<<<ColumnBlocks(n), dim3(32, kRowLanes), 0, stream>>>(
      x, batch, n, gamma, mean, rstd, dy, dgamma, dbeta, dx);
  return Launched();
}

cudaError_t LaunchBatchNormSquaredDeviations(const float* x, int64_t batch, int64_t n,
                                             const float* sum, int64_t count, float* mean,
                                             float* sq, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  BatchNormSquaredDeviationsKernel<<<ColumnBlocks(n), dim3(32, kRowLanes), 0, stream>>>(
      x, batch, n, sum, count, mean, sq);
  return Launched();
}

cudaError_t LaunchBatchNormForwardFromMoments(float momentum, float epsilon, int64_t count,
                                              const float* x, int64_t batch, int64_t n,
                                              const float* gamma, const float* beta,
                                              const float* mean, const float* sq,
                                              float* running_mean, float* running_var, float* rstd,
                                              float* y, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  BatchNormForwardFromMomentsKernel<<<ColumnBlocks(n), dim3(32, kRowLanes), 0, stream>>>(
      momentum, epsilon, count, x, batch, n, gamma, beta, mean, sq, running_mean, running_var, rstd,
      y);
  return Launched();
}

cudaError_t LaunchBatchNormBackwardSums(const float* x, int64_t batch, int64_t n, const float* mean,
                                        const float* rstd, const float* dy, float* dgamma,
                                        float* dbeta, float* sums, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  BatchNormBackwardSumsKernel<<<ColumnBlocks(n), dim3(32, kRowLanes), 0, stream>>>(
      x, batch, n, mean, rstd, dy, dgamma, dbeta, sums);
  return Launched();
}

cudaError_t LaunchBatchNormBackwardData(const float* x, int64_t batch, int64_t n,
                                        const float* gamma, const float* mean, const float* rstd,
                                        const float* dy, const float* sums, int64_t count,
                                        float* dx, cudaStream_t stream) {
  if (batch <= 0 || n <= 0) return cudaSuccess;
  BatchNormBackwardDataKernel<<<Blocks(batch * n), kThreads, 0, stream>>>(
      x, batch, n, gamma, mean, rstd, dy, sums, count, dx);
  return Launched();
}

cudaError_t LaunchLayerNormForward(float epsilon, const float* x, int64_t batch, int64_t n,
                                   const float* gamma, const float* beta, float* mean, float* rstd,
                                   float* y, cudaStream_t stream) {
  if (batch <= 0) return cudaSuccess;
  LayerNormForwardKernel<<<RowBlocks(batch), dim3(32, kWarpsPerBlock), 0, stream>>>(
      epsilon, x, batch, n, gamma, beta, mean, rstd, y);
  return Launched();
}

cudaError_t LaunchLayerNormBackward(const float* x, int64_t batch, int64_t n, const float* gamma,
                                    const float* mean, const float* rstd, const float* dy,
                                    float* dgamma, float* dbeta, float* dx, cudaStream_t stream) {
  if (n > 0) {
    LayerNormBackwardParamsKernel<<<ColumnBlocks(n), dim3(32, kRowLanes), 0, stream>>>(
        x, batch, n, mean, rstd, dy, dgamma, dbeta);
    if (cudaError_t e = Launched(); e != cudaSuccess) return e;
  }
  if (dx != nullptr && batch > 0) {
    LayerNormBackwardDataKernel<<<RowBlocks(batch), dim3(32, kWarpsPerBlock), 0, stream>>>(
        x, batch, n, gamma, mean, rstd, dy, dx);
    return Launched();
  }
  return cudaSuccess;
}

cudaError_t LaunchSumOfSquares(const float* p, int64_t n, double* partials, double* out,
                               cudaStream_t stream) {
  // A fixed grid (not sized by n): the summation order depends on n only.
  SumOfSquaresPartialKernel<<<kSumPartials, kThreads, 0, stream>>>(p, n, partials);
  if (cudaError_t e = Launched(); e != cudaSuccess) return e;
  SumPartialsKernel<<<1, kThreads, 0, stream>>>(partials, out);
  return Launched();
}

__global__ void StoreDoubleKernel(double* at, double value) { *at = value; }

cudaError_t LaunchStoreDouble(double* at, double value, cudaStream_t stream) {
  StoreDoubleKernel<<<1, 1, 0, stream>>>(at, value);
  return Launched();
}

cudaError_t LaunchLoss(const LossParams& p, const float* outputs, const int32_t* classes,
                       const float* values, int64_t batch, double grad_scale,
                       const double* grad_scale_at, float* grad, float* pred, double* scratch,
                       double* slot, LossBadCode* bad, cudaStream_t stream) {
  const bool rows = p.kind == LossKind::kSoftmaxCrossEntropy;
  const int64_t n = rows ? batch : batch * p.width;
  double* partials = scratch;
  double* row_values = scratch + kSumPartials;
  if (n > 0) {
    if (rows) {
      int64_t blocks = (batch + kLossRowThreads - 1) / kLossRowThreads;
      if (blocks > kMaxBlocks) blocks = kMaxBlocks;
      LossRowsKernel<<<static_cast<unsigned>(blocks), kLossRowThreads, 0, stream>>>(
          p, outputs, classes, batch, grad_scale, grad_scale_at, grad, pred, row_values);
    } else {
      LossElementsKernel<<<Blocks(n), kThreads, 0, stream>>>(p, outputs, values, n, grad_scale,
                                                             grad_scale_at, grad, pred, row_values);
    }
    if (cudaError_t e = Launched(); e != cudaSuccess) return e;
  }
  // A fixed grid (not sized by n): the summation order depends on n only.
  SumValuesPartialKernel<<<kSumPartials, kThreads, 0, stream>>>(row_values, n, partials);
  if (cudaError_t e = Launched(); e != cudaSuccess) return e;
  LossFinishKernel<<<1, kThreads, 0, stream>>>(partials, slot, rows ? classes : nullptr, batch,
                                               p.width, bad);
  return Launched();
}

cudaError_t LaunchToBf16(const float* src, uint16_t* dst, int64_t n, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  ToBf16Kernel<<<Blocks(n), kThreads, 0, stream>>>(src, dst, n);
  return Launched();
}

cudaError_t LaunchActivationGradFromOutputBf16(DenseActivation act, float alpha, const float* y,
                                               float* g, uint16_t* g16, int64_t n,
                                               cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  ActivationGradFromOutputBf16Kernel<<<Blocks(n), kThreads, 0, stream>>>(act, alpha, y, g, g16, n);
  return Launched();
}

}  // namespace traind::engine::cuda
