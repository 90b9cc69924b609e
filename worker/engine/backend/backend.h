// The compute interface under layers, losses and optimizers.
//
// Layers, the network, losses, optimizers and the fit loop call only this
// interface; a backend (backend/cpu: oneDNN) owns its device, stream and
// memory. Every method reports failures as absl::Status (device errors →
// DeviceError, allocation failures → OutOfMemoryError); none throws.
//
// Ops are enqueued in order on the backend's stream; methods that return
// values to the host (CopyToHost, SumOfSquares, LossKernel::ReadSlots) wait
// for them.
//
// Thread safety: a backend and its kernels are used by one thread at a time.
#ifndef TRAIND_WORKER_ENGINE_BACKEND_BACKEND_H_
#define TRAIND_WORKER_ENGINE_BACKEND_BACKEND_H_

#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "worker/engine/backend/activation_math.h"
#include "worker/engine/backend/loss_math.h"
#include "worker/engine/tensor.h"

namespace traind::engine {

// An activation (DenseActivation, activation_math.h: the enum, its formulas
// and DerivativeFromOutput) and its parameter.
struct ActivationFn {
  DenseActivation kind = DenseActivation::kLinear;
  float alpha = 0;
};

struct SgdStep;

// A dense layer's ops for one shape (batch, in, out), planned once and run many
// times (oneDNN primitives, cuBLAS handles and workspaces live here).
class DenseKernel {
 public:
  virtual ~DenseKernel() = default;

  // y = act(x w + b). Without bias, b is ignored (may be empty).
  // x: [batch, in], w: [in, out], b: [out] -> y: [batch, out]
  // REQUIRES: DerivativeFromOutput(activation) for a kernel used in training.
  virtual absl::Status Forward(const Tensor& x, const Tensor& w, const Tensor& b, Tensor* y) = 0;

  // Gradients from dy = dL/dy, given the forward pass's x and y.
  // dy: [batch, out] is overwritten with dL/d(x w + b) (the activation's
  // derivative applied, computed from y); dw: [in, out] = xᵀ dy; db: [out] =
  // column sums of dy unless db is null; dx: [batch, in] = dy wᵀ unless dx is
  // null. dw, db, dx are overwritten.
  virtual absl::Status Backward(const Tensor& x, const Tensor& w, const Tensor& y, Tensor* dy,
                                Tensor* dw, Tensor* db, Tensor* dx) = 0;

  // Whether BackwardUpdate runs: kernels whose threads each own rows of w
  // (the CPU backend's row-slab kernel) can take w's SGD-with-momentum update
  // into the backward pass.
  virtual bool UpdatesInBackward() const { return false; }
  // As Backward, except that w's gradient is never written: it goes straight
  // into SGD with momentum (PyTorch's formulation, dampening 0, not Nesterov),
  //   v = momentum·v + xᵀ dy + weight_decay·w;   w -= learning_rate·v,
  // `velocity` (v: [in, out]) accumulating the product in the weight-gradient
  // matmul itself, and each thread updating its rows of w right after its
  // last product that reads them. dy, db, dx as Backward. Unimplemented
  // unless UpdatesInBackward().
  virtual absl::Status BackwardUpdate(const Tensor& x, Tensor* w, const Tensor& y, Tensor* dy,
                                      Tensor* db, Tensor* dx, const SgdStep& sgd,
                                      Tensor* velocity) {
    return absl::UnimplementedError("this dense kernel does not update in its backward pass");
  }
};

// Image tensors. A batch of images is a [batch, C·H·W] tensor, each row one
// image in C, H, W order (NCHW, PyTorch's memory order), so that dense
// layers, activations, dropout and the losses see rows as they always do.
// A backend whose ChannelsLastImages() is true also plans kernels for
// channels-last images (options.channels_last: each row in H, W, C order,
// NHWC), which its primitives read and write without reordering; a network
// then keeps its images channels-last from one image layer to the next and
// converts only where a layer that needs C, H, W order begins
// (layers/channels_last.h).

// A 2-D convolution's geometry: y[n, f, i, j] = Σ_{c, p, q}
// x[n, g·C/G + c, i·sh + p·dh - pad_top, j·sw + q·dw - pad_left] ·
// w[f, c, p, q] + b[f], with g = f / (F/G) the group of output channel f,
// c < C/G, and x zero outside the image (PyTorch's Conv2d; dilation 1 is
// none). w: [F, (C/G)·kh·kw], each row one output channel's OIHW weights.
// Outputs of a sliding window: floor(span / stride) + 1 where span (the
// input less the window's extent, padding included) is >= 0, else 0.
inline int64_t WindowOut(int64_t span, int64_t stride) { return span < 0 ? 0 : span / stride + 1; }

struct Conv2dGeometry {
  int64_t batch = 0;
  int64_t in_channels = 0, in_height = 0, in_width = 0;
  int64_t out_channels = 0;
  int64_t kernel_height = 1, kernel_width = 1;
  int64_t stride_height = 1, stride_width = 1;
  int64_t pad_top = 0, pad_left = 0, pad_bottom = 0, pad_right = 0;
  int64_t dilation_height = 1, dilation_width = 1;
  int64_t groups = 1;

  // 0 when the window does not fit.
  int64_t out_height() const {
    return WindowOut(in_height + pad_top + pad_bottom - dilation_height * (kernel_height - 1) - 1,
                     stride_height);
  }
  int64_t out_width() const {
    return WindowOut(in_width + pad_left + pad_right - dilation_width * (kernel_width - 1) - 1,
                     stride_width);
  }
  int64_t in_size() const { return in_channels * in_height * in_width; }
  int64_t out_size() const { return out_channels * out_height() * out_width(); }
  int64_t weight_cols() const { return in_channels / groups * kernel_height * kernel_width; }
};

// A convolution's ops for one geometry, planned once and run many times.
class Conv2dKernel {
 public:
  virtual ~Conv2dKernel() = default;
  // y = act(conv(x, w) + b). x: [batch, C·H·W], w: [F, (C/G)·kh·kw], b: [F]
  // (ignored without bias) -> y: [batch, F·OH·OW].
  // REQUIRES: DerivativeFromOutput(activation) for a kernel used in training.
  virtual absl::Status Forward(const Tensor& x, const Tensor& w, const Tensor& b, Tensor* y) = 0;
  // As DenseKernel::Backward: dy is overwritten with dL/d(conv + b) (the
  // activation's derivative applied, from y); dw = dL/dw; db: [F] = dL/db
  // unless null; dx: [batch, C·H·W] = dL/dx unless null.
  virtual absl::Status Backward(const Tensor& x, const Tensor& w, const Tensor& y, Tensor* dy,
                                Tensor* dw, Tensor* db, Tensor* dx) = 0;
};

// Options of a convolution kernel.
struct Conv2dKernelOptions {
  ActivationFn activation;
  bool bias = true;
  bool channels_last = false;  // x, y, dy, dx NHWC (see "Image tensors")
};

// Pooling over windows of each channel: y[n, c, i, j] = max or mean of x[n,
// c, i·sh + p - pad_top, j·sw + q - pad_left] over p < kh, q < kw. Max
// ignores the padding (PyTorch's MaxPool2d); average divides by kh·kw,
// padding counted as zeros (kAverage, PyTorch's count_include_pad), or by the
// cells inside the image (kAverageExcludePadding).
enum class PoolKind { kMax, kAverage, kAverageExcludePadding };

struct Pool2dGeometry {
  int64_t batch = 0;
  int64_t channels = 0, in_height = 0, in_width = 0;
  int64_t kernel_height = 1, kernel_width = 1;
  int64_t stride_height = 1, stride_width = 1;
  int64_t pad_top = 0, pad_left = 0, pad_bottom = 0, pad_right = 0;

  // 0 when the window does not fit.
  int64_t out_height() const {
    return WindowOut(in_height + pad_top + pad_bottom - kernel_height, stride_height);
  }
  int64_t out_width() const {
    return WindowOut(in_width + pad_left + pad_right - kernel_width, stride_width);
  }
  int64_t in_size() const { return channels * in_height * in_width; }
  int64_t out_size() const { return channels * out_height() * out_width(); }
};

// Options of a pooling kernel.
struct Pool2dKernelOptions {
  PoolKind kind = PoolKind::kMax;
  bool channels_last = false;  // x, y, dy, dx NHWC (see "Image tensors")
};

// A pooling's ops for one geometry. A training Forward keeps what its
// Backward needs (max: where each maximum was) until the next training
// Forward.
class Pool2dKernel {
 public:
  virtual ~Pool2dKernel() = default;
  // x: [batch, C·H·W] -> y: [batch, C·OH·OW]
  virtual absl::Status Forward(bool training, const Tensor& x, Tensor* y) = 0;
  // dy: [batch, C·OH·OW] -> dx: [batch, C·H·W] (overwritten), for the last
  // training Forward.
  virtual absl::Status Backward(const Tensor& dy, Tensor* dx) = 0;
};

// Options of a loss kernel.
struct LossKernelOptions {
  LossKind kind = LossKind::kSoftmaxCrossEntropy;
  int64_t width = 1;      // outputs per row (classes for softmax cross-entropy)
  int64_t max_batch = 1;  // rows per Compute, at most
  int64_t slots = 1;      // value slots (see LossKernel)
  // Softmax cross-entropy: class weights; sigmoid BCE: pos_weight. [width],
  // or empty for all 1. Copied to the backend's device by CreateLossKernel.
  std::vector<double> weights;
  double label_smoothing = 0;  // softmax cross-entropy, in [0, 1)
  double huber_delta = 1;      // huber, > 0
};

// loss_math.h's parameters of `o`: weights point into o.weights (null when
// empty), weight_total is their sum (width when empty).
inline LossParams ParamsOf(const LossKernelOptions& o) {
  LossParams p;
  p.kind = o.kind;
  p.width = o.width;
  p.weights = o.weights.empty() ? nullptr : o.weights.data();
  p.weight_total = static_cast<double>(o.width);
  if (!o.weights.empty()) {
    p.weight_total = 0;
    for (double w : o.weights) p.weight_total += w;
  }
  p.label_smoothing = o.label_smoothing;
  p.huber_delta = o.huber_delta;
  return p;
}

// A loss for one output width, planned once (its parameters placed on the
// backend's device) and run on every batch where the model's outputs are:
// no host synchronization per batch. Each Compute writes the batch's loss
// sum to one of `slots` value slots, which ReadSlots copies to the host
// (the one place that waits).
class LossKernel {
 public:
  virtual ~LossKernel() = default;

  // outputs: [batch, width], 0 <= batch <= max_batch; targets: class codes
  // [batch] (s32, softmax cross-entropy) or values [batch, width] (f32).
  // Slot `slot` = Σ over the rows of the loss (class-weighted, smoothed, in
  // double; loss_math.h); grad: [batch, width] = grad_scale d(slot)/d
  // outputs unless null (grad_scale kStoredGradScale: the scale stored by
  // StoreGradScale); predictions: [batch, width] (class probabilities,
  // label probabilities or values) unless null. A class code outside
  // [0, width) is reported by Compute or, at the latest, by ReadSlots.
  virtual absl::Status Compute(const Tensor& outputs, const Tensor& targets, double grad_scale,
                               Tensor* grad, Tensor* predictions, int64_t slot) = 0;

  // values[i] = slot first + i, for i in [0, count); waits for the
  // backend's stream.
  virtual absl::Status ReadSlots(int64_t first, int64_t count, double* values) = 0;

  // Slot `to` = slot `from`, on the backend's stream.
  virtual absl::Status CopySlot(int64_t from, int64_t to) = 0;

  // Compute's grad_scale standing for the scale stored on the device: an
  // op graph records Compute once, and each replay uses the scale stored
  // before it.
  static constexpr double kStoredGradScale = -std::numeric_limits<double>::infinity();
  // Stores `scale` (initially 0) for the Computes enqueued after it that are
  // given kStoredGradScale, on the backend's stream.
  virtual absl::Status StoreGradScale(double scale) = 0;
};

// A recorded sequence of a backend's ops (Backend::Capture), replayed as one
// launch: on a GPU, a CUDA graph. Replays use the tensors and values the
// ops were recorded with; the tensors' contents are read when it runs.
class OpGraph {
 public:
  virtual ~OpGraph() = default;
  // Enqueues the recorded ops, in order, on the backend's stream.
  virtual absl::Status Launch() = 0;
};

// Adam's constants for one step (PyTorch's formulation).
struct AdamStep {
  double learning_rate = 0;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double epsilon = 1e-8;
  int64_t step = 1;  // 1-based
  double weight_decay = 0;
  // AdamW: w -= lr weight_decay w before the step; else g += weight_decay w.
  bool decoupled = false;
};

// Adam's constants of one step as the update kernels take them: computed in
// double and cast to float once, as PyTorch does with its Python float
// arguments (every backend uses these, so their results agree).
struct AdamScalars {
  float step_size, sqrt_bc2, b1, b2, one_minus_b1, one_minus_b2, eps, l2, decay;
};
inline AdamScalars AdamScalarsOf(const AdamStep& step) {
  const double bias_correction1 = 1.0 - std::pow(step.beta1, static_cast<double>(step.step));
  const double bias_correction2 = 1.0 - std::pow(step.beta2, static_cast<double>(step.step));
  AdamScalars a;
  a.step_size = static_cast<float>(step.learning_rate / bias_correction1);
  a.sqrt_bc2 = static_cast<float>(std::sqrt(bias_correction2));
  a.b1 = static_cast<float>(step.beta1);
  a.b2 = static_cast<float>(step.beta2);
  a.one_minus_b1 = static_cast<float>(1.0 - step.beta1);
  a.one_minus_b2 = static_cast<float>(1.0 - step.beta2);
  a.eps = static_cast<float>(step.epsilon);
  a.l2 = step.decoupled ? 0.0f : static_cast<float>(step.weight_decay);
  a.decay =
      step.decoupled ? static_cast<float>(1.0 - step.learning_rate * step.weight_decay) : 1.0f;
  return a;
}

// SGD's constants (PyTorch's formulation, dampening 0).
struct SgdStep {
  double learning_rate = 0;
  double momentum = 0;
  bool nesterov = false;
  double weight_decay = 0;
  // False on the first step: PyTorch then sets v = g instead of momentum v + g.
  // (With v starting at 0 the two agree.)
};

// RMSprop's constants (PyTorch's formulation, not centered).
struct RmsPropStep {
  double learning_rate = 0;
  double alpha = 0.99;
  double epsilon = 1e-8;
  double momentum = 0;
  double weight_decay = 0;
};

// Options of a dense kernel.
struct DenseKernelOptions {
  ActivationFn activation;
  bool bias = true;
};

// Where a backend computes: what a spec's resources.device must name.
enum class BackendDevice { kCpu, kGpu };

class Backend {
 public:
  virtual ~Backend() = default;

  virtual std::string name() const = 0;
  virtual BackendDevice device() const = 0;

  // An uninitialized tensor of shape [n] (rank 1) or [rows, cols] (rank 2).
  virtual absl::StatusOr<Tensor> Allocate1d(DType dtype, int64_t n) = 0;
  virtual absl::StatusOr<Tensor> Allocate2d(DType dtype, int64_t rows, int64_t cols) = 0;

  // Host <-> tensor copies of dst->bytes() / src.bytes() bytes.
  virtual absl::Status CopyFromHost(const void* src, Tensor* dst) = 0;
  virtual absl::Status CopyToHost(const Tensor& src, void* dst) = 0;
  // dst = src (same dtype and number of elements), on the backend's stream.
  virtual absl::Status Copy(const Tensor& src, Tensor* dst) = 0;
  virtual absl::Status Fill(float value, Tensor* dst) = 0;

  // dst[i, :] = src[rows[i], :] for a host matrix src: [*, cols].
  // dst: [rows.size(), cols]
  virtual absl::Status GatherRows(const float* src, int64_t cols, absl::Span<const int64_t> rows,
                                  Tensor* dst) = 0;
  // dst[i] = src[rows[i]]. dst: [rows.size()] (s32)
  virtual absl::Status GatherLabels(const int32_t* src, absl::Span<const int64_t> rows,
                                    Tensor* dst) = 0;

  // Plans a dense layer's ops for one batch size.
  virtual absl::StatusOr<std::unique_ptr<DenseKernel>> CreateDenseKernel(
      int64_t batch, int64_t in, int64_t out, const DenseKernelOptions& options) = 0;
  absl::StatusOr<std::unique_ptr<DenseKernel>> CreateDenseKernel(int64_t batch, int64_t in,
                                                                 int64_t out,
                                                                 DenseActivation activation) {
    DenseKernelOptions options;
    options.activation.kind = activation;
    return CreateDenseKernel(batch, in, out, options);
  }

  // Plans a convolution (Conv2dKernel) or a pooling (Pool2dKernel).
  // InvalidArgument for a geometry with a size < 1, channels not divisible
  // by the groups, or an output smaller than 1×1. A backend without them
  // answers Unimplemented, naming itself.
  virtual absl::StatusOr<std::unique_ptr<Conv2dKernel>> CreateConv2dKernel(
      const Conv2dGeometry& geometry, const Conv2dKernelOptions& options) {
    return absl::UnimplementedError(name() + ": no conv2d kernels");
  }
  virtual absl::StatusOr<std::unique_ptr<Pool2dKernel>> CreatePool2dKernel(
      const Pool2dGeometry& geometry, const Pool2dKernelOptions& options) {
    return absl::UnimplementedError(name() + ": no pooling kernels");
  }
  absl::StatusOr<std::unique_ptr<Pool2dKernel>> CreatePool2dKernel(const Pool2dGeometry& geometry,
                                                                   PoolKind kind) {
    Pool2dKernelOptions options;
    options.kind = kind;
    return CreatePool2dKernel(geometry, options);
  }
  // True when its image kernels take channels-last tensors (see "Image
  // tensors"), where its primitives run without reordering.
  virtual bool ChannelsLastImages() const { return false; }

  // y = f(x), elementwise. x, y: same size (may alias).
  virtual absl::Status ActivationForward(const ActivationFn& f, const Tensor& x, Tensor* y) = 0;
  // dx = dy ⊙ f'(x), given the forward pass's x and y = f(x). dx may alias dy.
  virtual absl::Status ActivationBackward(const ActivationFn& f, const Tensor& x, const Tensor& y,
                                          const Tensor& dy, Tensor* dx) = 0;

  // Inverted dropout: mask[i] = 0 with probability rate, else 1 / (1 - rate),
  // drawn from a PRNG seeded with `seed`; y = x ⊙ mask. x, mask, y: one size.
  virtual absl::Status DropoutForward(float rate, uint64_t seed, const Tensor& x, Tensor* mask,
                                      Tensor* y) = 0;
  // out = a ⊙ b (may alias either).
  virtual absl::Status Multiply(const Tensor& a, const Tensor& b, Tensor* out) = 0;
  // y = x with each of `blocks` consecutive [rows, cols] matrices transposed
  // to [cols, rows] (an image's NCHW <-> NHWC: blocks N, rows C, cols H·W).
  // x and y: blocks · rows · cols f32 values, not aliased. Default:
  // Unimplemented (backends without image layers).
  virtual absl::Status TransposeBlocks(const Tensor& x, int64_t blocks, int64_t rows, int64_t cols,
                                       Tensor* y) {
    return absl::UnimplementedError(name() + ": no TransposeBlocks");
  }

  // Batch normalization over the rows of x: [batch, n].
  // Training: statistics of the batch (biased variance for y), running
  // statistics updated with `momentum` (unbiased variance); evaluation: the
  // running statistics. y = gamma (x - mean) rstd + beta. mean, rstd: [n] are
  // saved for the backward pass.
  virtual absl::Status BatchNormForward(bool training, float momentum, float epsilon,
                                        const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                        Tensor* running_mean, Tensor* running_var, Tensor* mean,
                                        Tensor* rstd, Tensor* y) = 0;
  // Gradients of the training-mode forward pass. dy: [batch, n] ->
  // dgamma, dbeta: [n], dx: [batch, n] (unless null).
  virtual absl::Status BatchNormBackward(const Tensor& x, const Tensor& gamma, const Tensor& mean,
                                         const Tensor& rstd, const Tensor& dy, Tensor* dgamma,
                                         Tensor* dbeta, Tensor* dx) = 0;
  // Batch normalization across ranks (data parallelism), in steps between
  // which the caller sums the per-column partial results over the ranks;
  // `count` is the number of rows of all ranks together (> 0). Each rank's
  // x: [batch, n] may have 0 rows. Partial sums are taken per column in
  // double, rows in order, and rounded to float.
  //
  // Forward: sum: [n] = Σ_r x[r, :].
  virtual absl::Status BatchNormColumnSums(const Tensor& x, Tensor* sum) = 0;
  // From the global sum: mean: [n] = sum / count; sq: [n] =
  // Σ_r (x[r, :] - mean)².
  virtual absl::Status BatchNormSquaredDeviations(const Tensor& x, const Tensor& sum, int64_t count,
                                                  Tensor* mean, Tensor* sq) = 0;
  // From the global sq: var = sq / count (biased, for y) and rstd =
  // 1 / sqrt(var + epsilon); running statistics updated with `momentum` from
  // mean and the unbiased sq / (count - 1) (var when count == 1), as
  // BatchNormForward's training mode; y = gamma (x - mean) rstd + beta.
  // With the global statistics of one rank's x, the results equal
  // BatchNormForward's within float rounding.
  virtual absl::Status BatchNormForwardFromMoments(float momentum, float epsilon, int64_t count,
                                                   const Tensor& x, const Tensor& gamma,
                                                   const Tensor& beta, const Tensor& mean,
                                                   const Tensor& sq, Tensor* running_mean,
                                                   Tensor* running_var, Tensor* rstd,
                                                   Tensor* y) = 0;
  // Backward, with x̂ = (x - mean) rstd: dbeta: [n] = Σ_r dy[r, :] and
  // dgamma: [n] = Σ_r dy[r, :] x̂[r, :] (this rank's rows), and the same
  // sums as sums: [2n] = [dbeta, dgamma] for the caller to sum over ranks.
  virtual absl::Status BatchNormBackwardSums(const Tensor& x, const Tensor& mean,
                                             const Tensor& rstd, const Tensor& dy, Tensor* dgamma,
                                             Tensor* dbeta, Tensor* sums) = 0;
  // From the global sums: dx: [batch, n] = gamma rstd / count
  // (count dy - sums[0, n) - x̂ sums[n, 2n)).
  virtual absl::Status BatchNormBackwardData(const Tensor& x, const Tensor& gamma,
                                             const Tensor& mean, const Tensor& rstd,
                                             const Tensor& dy, const Tensor& sums, int64_t count,
                                             Tensor* dx) = 0;
  // Layer normalization of each row of x: [batch, n]; mean, rstd: [batch].
  virtual absl::Status LayerNormForward(float epsilon, const Tensor& x, const Tensor& gamma,
                                        const Tensor& beta, Tensor* mean, Tensor* rstd,
                                        Tensor* y) = 0;
  virtual absl::Status LayerNormBackward(const Tensor& x, const Tensor& gamma, const Tensor& mean,
                                         const Tensor& rstd, const Tensor& dy, Tensor* dgamma,
                                         Tensor* dbeta, Tensor* dx) = 0;

  // Σ t[i]² in double, in a fixed order.
  virtual absl::StatusOr<double> SumOfSquares(const Tensor& t) = 0;
  // t *= factor.
  virtual absl::Status Scale(float factor, Tensor* t) = 0;
  // t = clamp(t, -limit, limit).
  virtual absl::Status ClipByValue(float limit, Tensor* t) = 0;

  // Records the ops `record` enqueues, instead of running them, into an
  // OpGraph (on a GPU: stream capture into a CUDA graph). The ops recorded
  // must only read and write tensors (no host copies, no values returned
  // to the host, no allocation, no planning of kernels): such a call fails
  // the capture. Errors: Unimplemented where the backend has no graphs
  // (the default; the CPU backend runs its ops as they come); the error of
  // `record` or of the recording.
  virtual absl::StatusOr<std::unique_ptr<OpGraph>> Capture(
      const std::function<absl::Status()>& record) {
    (void)record;
    return absl::UnimplementedError(name() + ": no op graphs");
  }

  // Plans a loss (LossKernel). Errors: InvalidArgument for options out of
  // range (width, max_batch, slots < 1; weights not [width] or negative;
  // smoothing outside [0, 1); delta <= 0).
  virtual absl::StatusOr<std::unique_ptr<LossKernel>> CreateLossKernel(
      const LossKernelOptions& options) = 0;

  // PyTorch's SGD: v = momentum v + g; w -= lr v. With momentum == 0,
  // velocity may be null and w -= lr g. All tensors have one size.
  absl::Status SgdUpdate(float learning_rate, float momentum, const Tensor& grad, Tensor* velocity,
                         Tensor* param) {
    SgdStep step;
    step.learning_rate = learning_rate;
    step.momentum = momentum;
    return SgdUpdate(step, grad, velocity, param);
  }
  // With weight decay: g' = g + weight_decay w; v = momentum v + g';
  // w -= lr (nesterov ? g' + momentum v : v). grad is not modified.
  virtual absl::Status SgdUpdate(const SgdStep& step, const Tensor& grad, Tensor* velocity,
                                 Tensor* param) = 0;

  // SgdUpdate of several tensors in one call: for each i, grads[i],
  // velocities[i] (velocities may be empty when momentum == 0) and params[i]
  // have one size. A backend may fuse them into one pass; results equal
  // those of SgdUpdate tensor by tensor (the default).
  virtual absl::Status SgdUpdateMany(const SgdStep& step, absl::Span<const Tensor* const> grads,
                                     absl::Span<Tensor* const> velocities,
                                     absl::Span<Tensor* const> params) {
    for (size_t i = 0; i < params.size(); ++i) {
      absl::Status s =
          SgdUpdate(step, *grads[i], velocities.empty() ? nullptr : velocities[i], params[i]);
      if (!s.ok()) return s;
    }
    return absl::OkStatus();
  }

  // PyTorch's Adam: m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g²;
  // w -= (lr / (1 - b1^t)) m / (sqrt(v) / sqrt(1 - b2^t) + eps).
  virtual absl::Status AdamUpdate(const AdamStep& step, const Tensor& grad, Tensor* m, Tensor* v,
                                  Tensor* param) = 0;
  // AdamUpdate of several tensors in one call (as SgdUpdateMany).
  virtual absl::Status AdamUpdateMany(const AdamStep& step, absl::Span<const Tensor* const> grads,
                                      absl::Span<Tensor* const> m, absl::Span<Tensor* const> v,
                                      absl::Span<Tensor* const> params) {
    for (size_t i = 0; i < params.size(); ++i) {
      absl::Status s = AdamUpdate(step, *grads[i], m[i], v[i], params[i]);
      if (!s.ok()) return s;
    }
    return absl::OkStatus();
  }

  // PyTorch's RMSprop: g' = g + wd w; s = alpha s + (1 - alpha) g'²;
  // with momentum: b = momentum b + g' / (sqrt(s) + eps), w -= lr b;
  // else w -= lr g' / (sqrt(s) + eps). buffer may be null without momentum.
  virtual absl::Status RmsPropUpdate(const RmsPropStep& step, const Tensor& grad,
                                     Tensor* square_avg, Tensor* buffer, Tensor* param) = 0;
};

}  // namespace traind::engine

#endif  // TRAIND_WORKER_ENGINE_BACKEND_BACKEND_H_
