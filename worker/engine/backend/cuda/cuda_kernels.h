// The CUDA backend's kernels, as plain launch functions.
//
// Compiled by nvcc (cuda_kernels.cu) for sm_90 + PTX; this header has no
// Abseil or engine includes (but the self-contained activation_math.h and
// loss_math.h) so nvcc
// never parses them. Every function enqueues its work on `stream` and
// returns the launch status (cudaGetLastError after the launch); none
// synchronizes.
//
// All matrices are dense and row-major. Reductions are deterministic: a
// fixed launch shape and a fixed summation order, in double where the CPU
// backend sums in double.
#ifndef TRAIND_WORKER_ENGINE_BACKEND_CUDA_CUDA_KERNELS_H_
#define TRAIND_WORKER_ENGINE_BACKEND_CUDA_CUDA_KERNELS_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "worker/engine/backend/activation_math.h"
#include "worker/engine/backend/loss_math.h"

namespace traind::engine::cuda {

// Blocks of the first stage of SumOfSquares and of LaunchLoss's sum:
// `partials` holds this many doubles.
inline constexpr int kSumPartials = 256;

// A class code outside [0, width) seen by LaunchLoss: the first one since
// the record was reset (all bytes 0xff: row -1).
struct LossBadCode {
  long long row;  // its row within the launch's batch, or -1: none
  int32_t code;
  int32_t unused;
};

cudaError_t LaunchFill(float value, float* p, int64_t n, cudaStream_t stream);

// y[r, :] = act(y[r, :] + b) (b may be null). y: [rows, cols], b: [cols]
cudaError_t LaunchBiasActivation(DenseActivation act, float alpha, const float* b, float* y,
                                 int64_t rows, int64_t cols, cudaStream_t stream);
// y = act(x), elementwise (may alias).
cudaError_t LaunchActivationForward(DenseActivation act, float alpha, const float* x, float* y,
                                    int64_t n, cudaStream_t stream);
// dx = dy ⊙ act'(x) given y = act(x) (dx may alias dy).
cudaError_t LaunchActivationBackward(DenseActivation act, float alpha, const float* x,
                                     const float* y, const float* dy, float* dx, int64_t n,
                                     cudaStream_t stream);
// g *= act'(·) computed from y alone (as the CPU dense kernel does, z = 0).
cudaError_t LaunchActivationGradFromOutput(DenseActivation act, float alpha, const float* y,
                                           float* g, int64_t n, cudaStream_t stream);
// out[j] = Σ_r x[r, j] (in double, rows in a fixed order). x: [rows, cols]
cudaError_t LaunchColumnSum(const float* x, int64_t rows, int64_t cols, float* out,
                            cudaStream_t stream);

// mask[i] = u_i < rate ? 0 : keep with u_i the i-th draw of Rng(seed)
// (SplitMix64, bit-identical with the CPU backend); y = x ⊙ mask.
// `threshold` = ceil(rate · 2^53): u_i < rate <=> (draw_i >> 11) < threshold.
cudaError_t LaunchDropout(uint64_t seed, uint64_t threshold, float keep, const float* x,
                          float* mask, float* y, int64_t n, cudaStream_t stream);
cudaError_t LaunchMultiply(const float* a, const float* b, float* out, int64_t n,
                           cudaStream_t stream);
cudaError_t LaunchScale(float factor, float* p, int64_t n, cudaStream_t stream);
cudaError_t LaunchClip(float limit, float* p, int64_t n, cudaStream_t stream);

// x: [batch, n]; gamma, beta, running_*, mean, rstd: [n].
cudaError_t LaunchBatchNormForward(bool training, float momentum, float epsilon, const float* x,
                                   int64_t batch, int64_t n, const float* gamma, const float* beta,
                                   float* running_mean, float* running_var, float* mean,
                                   float* rstd, float* y, cudaStream_t stream);
// dx may be null.
cudaError_t LaunchBatchNormBackward(const float* x, int64_t batch, int64_t n, const float* gamma,
                                    const float* mean, const float* rstd, const float* dy,
                                    float* dgamma, float* dbeta, float* dx, cudaStream_t stream);
// Batch norm across ranks (Backend::BatchNormSquaredDeviations etc.):
// x, dy, dx: [batch, n] (batch may be 0); statistics [n]; sums: [2n].
cudaError_t LaunchBatchNormSquaredDeviations(const float* x, int64_t batch, int64_t n,
                                             const float* sum, int64_t count, float* mean,
                                             float* sq, cudaStream_t stream);
cudaError_t LaunchBatchNormForwardFromMoments(float momentum, float epsilon, int64_t count,
                                              const float* x, int64_t batch, int64_t n,
                                              const float* gamma, const float* beta,
                                              const float* mean, const float* sq,
                                              float* running_mean, float* running_var, float* rstd,
                                              float* y, cudaStream_t stream);
cudaError_t LaunchBatchNormBackwardSums(const float* x, int64_t batch, int64_t n, const float* mean,
                                        const float* rstd, const float* dy, float* dgamma,
                                        float* dbeta, float* sums, cudaStream_t stream);
cudaError_t LaunchBatchNormBackwardData(const float* x, int64_t batch, int64_t n,
                                        const float* gamma, const float* mean, const float* rstd,
                                        const float* dy, const float* sums, int64_t count,
                                        float* dx, cudaStream_t stream);
// x: [batch, n]; mean, rstd: [batch]; gamma, beta: [n].
cudaError_t LaunchLayerNormForward(float epsilon, const float* x, int64_t batch, int64_t n,
                                   const float* gamma, const float* beta, float* mean, float* rstd,
                                   float* y, cudaStream_t stream);
cudaError_t LaunchLayerNormBackward(const float* x, int64_t batch, int64_t n, const float* gamma,
                                    const float* mean, const float* rstd, const float* dy,
                                    float* dgamma, float* dbeta, float* dx, cudaStream_t stream);

// *out = Σ p[i]² in double. partials: kSumPartials doubles of scratch.
cudaError_t LaunchSumOfSquares(const float* p, int64_t n, double* partials, double* out,
                               cudaStream_t stream);

// A loss (loss_math.h) of `batch` rows of outputs: [batch, p.width] against
// classes: [batch] (kSoftmaxCrossEntropy) or values: [batch, p.width] (the
// others; the unused one may be null): one thread per row (softmax
// cross-entropy, loss_math::SoftmaxCrossEntropyRow) or per element
// (loss_math::ElementLoss) writes its value to scratch, then *slot = their
// sum (0 for batch 0) in an order that depends on batch only. grad, pred:
// [batch, p.width] or null. scratch: LossScratchDoubles(batch, p.width)
// doubles or more (the partial sums, then the values).
// A row whose class code is outside [0, width) is left out (value 0, its
// grad and pred rows 0) and, when bad->row < 0, recorded in *bad.
inline int64_t LossScratchDoubles(int64_t batch, int64_t width) {
  return batch * width + kSumPartials;
}
// The gradient is scaled by *grad_scale_at (device memory, read when the
// kernels run) unless it is null, else by grad_scale.
cudaError_t LaunchLoss(const LossParams& p, const float* outputs, const int32_t* classes,
                       const float* values, int64_t batch, double grad_scale,
                       const double* grad_scale_at, float* grad, float* pred, double* scratch,
                       double* slot, LossBadCode* bad, cudaStream_t stream);
// *at = value, on the stream (a kernel: the value travels with the launch).
cudaError_t LaunchStoreDouble(double* at, double value, cudaStream_t stream);

// Optimizer steps; scalars prepared on the host exactly as the CPU backend
// prepares them. The *Many launches update several tensors in one launch
// with the same per-element formulas (bit-identical results).
cudaError_t LaunchSgd(float lr, float wd, float momentum, bool nesterov, const float* g,
                      float* v /*null without momentum*/, float* w, int64_t n, cudaStream_t stream);
cudaError_t LaunchAdam(float step_size, float sqrt_bc2, float b1, float b2, float one_minus_b1,
                       float one_minus_b2, float eps, float l2, float decay, const float* g,
                       float* m, float* v, float* w, int64_t n, cudaStream_t stream);
cudaError_t LaunchRmsProp(float lr, float alpha, float one_minus_alpha, float eps, float momentum,
                          float wd, const float* g, float* s, float* b /*may be null*/, float* w,
                          int64_t n, cudaStream_t stream);

// One tensor of a multi-tensor optimizer step (device pointers).
struct MultiTensorEntry {
  const float* grad;
  float* state1;  // SGD: velocity (null without momentum); Adam: m
  float* state2;  // Adam: v; SGD: unused (null)
  float* param;
};

// Elements of one tensor updated by one block of a multi-tensor launch.
inline constexpr int64_t kMultiTensorChunk = 4096;

// A run of at most kMultiTensorChunk elements of entries[tensor]: one block.
struct MultiTensorChunk {
  int32_t tensor;
  int32_t count;
  int64_t start;
};

// entries: [tensors], chunks: [num_chunks], both in device memory.
cudaError_t LaunchSgdMany(float lr, float wd, float momentum, bool nesterov,
                          const MultiTensorEntry* entries, const MultiTensorChunk* chunks,
                          int64_t num_chunks, cudaStream_t stream);
cudaError_t LaunchAdamMany(float step_size, float sqrt_bc2, float b1, float b2, float one_minus_b1,
                           float one_minus_b2, float eps, float l2, float decay,
                           const MultiTensorEntry* entries, const MultiTensorChunk* chunks,
                           int64_t num_chunks, cudaStream_t stream);

// bf16 GEMM inputs. `dst` holds bfloat16 bit patterns (round to nearest even).
cudaError_t LaunchToBf16(const float* src, uint16_t* dst, int64_t n, cudaStream_t stream);
// LaunchActivationGradFromOutput, then g16 = bf16(g) in the same pass.
cudaError_t LaunchActivationGradFromOutputBf16(DenseActivation act, float alpha, const float* y,
                                               float* g, uint16_t* g16, int64_t n,
                                               cudaStream_t stream);

}  // namespace traind::engine::cuda

#endif  // TRAIND_WORKER_ENGINE_BACKEND_CUDA_CUDA_KERNELS_H_
