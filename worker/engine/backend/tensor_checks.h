// Argument checks every backend makes on the tensors it is given.
#ifndef TRAIND_WORKER_ENGINE_BACKEND_TENSOR_CHECKS_H_
#define TRAIND_WORKER_ENGINE_BACKEND_TENSOR_CHECKS_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <tuple>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "worker/engine/backend/backend.h"
#include "worker/engine/tensor.h"

namespace traind::engine {

// `t` is a non-empty [rows, cols] tensor of `dtype`; `name` goes in the error.
inline absl::Status CheckShape(const Tensor& t, DType dtype, int64_t rows, int64_t cols,
                               absl::string_view name) {
  if (t.empty() || t.dtype() != dtype || t.rows() != rows || t.cols() != cols) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: expected a [%d, %d] tensor, got [%d, %d]%s", name, rows, cols,
                        t.rows(), t.cols(), t.empty() ? " (empty)" : ""));
  }
  return absl::OkStatus();
}

// `a` and `b` are float tensors of the same number of elements.
inline absl::Status CheckSameSize(const Tensor& a, const Tensor& b, absl::string_view what) {
  if (a.size() != b.size() || a.dtype() != DType::kF32 || b.dtype() != DType::kF32) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: tensor sizes differ (%d vs %d)", what, a.size(), b.size()));
  }
  return absl::OkStatus();
}

// The arguments of a dense kernel's forward pass, for a kernel built for
// [batch, in] -> [batch, out] (`bias`: whether it has a bias).
inline absl::Status CheckDenseForwardArgs(const Tensor& x, const Tensor& w, const Tensor& b,
                                          const Tensor& y, int64_t batch, int64_t in, int64_t out,
                                          bool bias) {
  if (absl::Status s = CheckShape(x, DType::kF32, batch, in, "dense forward x"); !s.ok()) return s;
  if (absl::Status s = CheckShape(w, DType::kF32, in, out, "dense forward w"); !s.ok()) return s;
  if (bias) {
    if (absl::Status s = CheckShape(b, DType::kF32, 1, out, "dense forward b"); !s.ok()) return s;
  }
  return CheckShape(y, DType::kF32, batch, out, "dense forward y");
}

// The arguments of a dense kernel's backward pass (`db`, `dx` may be null).
inline absl::Status CheckDenseBackwardArgs(const Tensor& x, const Tensor& w, const Tensor& y,
                                           const Tensor& dy, const Tensor& dw, const Tensor* db,
                                           const Tensor* dx, int64_t batch, int64_t in,
                                           int64_t out) {
  for (auto [t, rows, cols, name] :
       {std::tuple{&x, batch, in, "dense backward x"}, std::tuple{&w, in, out, "dense backward w"},
        std::tuple{&y, batch, out, "dense backward y"},
        std::tuple{&dy, batch, out, "dense backward dy"},
        std::tuple{&dw, in, out, "dense backward dw"}}) {
    if (absl::Status s = CheckShape(*t, DType::kF32, rows, cols, name); !s.ok()) return s;
  }
  if (db != nullptr) {
    if (absl::Status s = CheckShape(*db, DType::kF32, 1, out, "dense backward db"); !s.ok()) {
      return s;
    }
  }
  if (dx != nullptr) return CheckShape(*dx, DType::kF32, batch, in, "dense backward dx");
  return absl::OkStatus();
}

// Batch norm of x: [batch, n]: y is [batch, n], every statistic [n].
inline absl::Status CheckBatchNormArgs(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                       const Tensor& running_mean, const Tensor& running_var,
                                       const Tensor& mean, const Tensor& rstd, const Tensor& y) {
  if (absl::Status s = CheckShape(y, DType::kF32, x.rows(), x.cols(), "batch norm y"); !s.ok()) {
    return s;
  }
  for (const Tensor* t : {&gamma, &beta, &running_mean, &running_var, &mean, &rstd}) {
    if (t->size() != x.cols()) {
      return absl::InvalidArgumentError("batch norm: a statistic is not [n]");
    }
  }
  return absl::OkStatus();
}

// A [size] statistic (any rank) of f32.
inline absl::Status CheckStatistic(const Tensor& t, int64_t size, const char* what) {
  if (t.dtype() != DType::kF32 || t.size() != size) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: expected %d f32 values, got %d", what, size, t.size()));
  }
  return absl::OkStatus();
}

// The global row count of a batch-norm step across ranks, of which this
// rank has `batch` rows.
inline absl::Status CheckCount(int64_t count, int64_t batch) {
  if (count <= 0 || count < batch) {
    return absl::InvalidArgumentError(
        absl::StrFormat("batch norm: %d rows in all, %d on this rank", count, batch));
  }
  return absl::OkStatus();
}

// Backend::SgdUpdateMany's tensor lists: one length, each velocity (when
// `momentum`) and parameter the size of its gradient.
inline absl::Status CheckSgdManyArgs(bool momentum, absl::Span<const Tensor* const> grads,
                                     absl::Span<Tensor* const> velocities,
                                     absl::Span<Tensor* const> params) {
  if (grads.size() != params.size() ||
      (!velocities.empty() && velocities.size() != params.size())) {
    return absl::InvalidArgumentError("SgdUpdate: tensor lists of different lengths");
  }
  for (size_t i = 0; i < params.size(); ++i) {
    if (absl::Status s = CheckSameSize(*grads[i], *params[i], "SgdUpdate"); !s.ok()) return s;
    if (!momentum) continue;
    if (velocities.empty() || velocities[i] == nullptr) {
      return absl::InvalidArgumentError("SgdUpdate: momentum without velocity");
    }
    if (absl::Status s = CheckSameSize(*grads[i], *velocities[i], "SgdUpdate"); !s.ok()) return s;
  }
  return absl::OkStatus();
}

// Backend::AdamUpdateMany's tensor lists: one length, each m, v and
// parameter the size of its gradient.
inline absl::Status CheckAdamManyArgs(absl::Span<const Tensor* const> grads,
                                      absl::Span<Tensor* const> m, absl::Span<Tensor* const> v,
                                      absl::Span<Tensor* const> params) {
  if (grads.size() != params.size() || m.size() != params.size() || v.size() != params.size()) {
    return absl::InvalidArgumentError("AdamUpdate: tensor lists of different lengths");
  }
  for (size_t i = 0; i < params.size(); ++i) {
    for (const Tensor* t : {params[i], m[i], v[i]}) {
      if (absl::Status s = CheckSameSize(*grads[i], *t, "AdamUpdate"); !s.ok()) return s;
    }
  }
  return absl::OkStatus();
}

// Backend::Copy's arguments: one dtype, one number of elements.
inline absl::Status CheckCopyArgs(const Tensor& src, const Tensor& dst) {
  if (src.dtype() != dst.dtype() || src.size() != dst.size()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("Copy: source [%d, %d] and destination [%d, %d] differ in type or size",
                        src.rows(), src.cols(), dst.rows(), dst.cols()));
  }
  return absl::OkStatus();
}

// Backend::CreateLossKernel's options.
inline absl::Status CheckLossKernelOptions(const LossKernelOptions& o) {
  if (o.width < 1 || o.max_batch < 1 || o.slots < 1) {
    return absl::InvalidArgumentError(
        absl::StrFormat("loss kernel: width %d, max_batch %d, slots %d (each must be >= 1)",
                        o.width, o.max_batch, o.slots));
  }
  const bool weighted =
      o.kind == LossKind::kSoftmaxCrossEntropy || o.kind == LossKind::kSigmoidBinaryCrossEntropy;
  if (!o.weights.empty() && (!weighted || static_cast<int64_t>(o.weights.size()) != o.width)) {
    return absl::InvalidArgumentError(absl::StrFormat("loss kernel: %d weights for width %d%s",
                                                      o.weights.size(), o.width,
                                                      weighted ? "" : " (this loss takes none)"));
  }
  for (size_t i = 0; i < o.weights.size(); ++i) {
    if (!(o.weights[i] >= 0) || !std::isfinite(o.weights[i])) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "loss kernel: weight %d is %g (must be finite and >= 0)", i, o.weights[i]));
    }
  }
  if (!(o.label_smoothing >= 0 && o.label_smoothing < 1)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("loss kernel: label_smoothing %g is not in [0, 1)", o.label_smoothing));
  }
  if (o.kind == LossKind::kHuber && !(o.huber_delta > 0)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("loss kernel: huber delta %g is not > 0", o.huber_delta));
  }
  return absl::OkStatus();
}

// LossKernel::Compute's arguments for a kernel of options `o`.
inline absl::Status CheckLossComputeArgs(const LossKernelOptions& o, const Tensor& outputs,
                                         const Tensor& targets, const Tensor* grad,
                                         const Tensor* predictions, int64_t slot) {
  const int64_t batch = outputs.rows();
  if (outputs.dtype() != DType::kF32 || outputs.cols() != o.width || batch < 0 ||
      batch > o.max_batch || (batch > 0 && outputs.empty())) {
    return absl::InvalidArgumentError(
        absl::StrFormat("loss: outputs [%d, %d], expected [batch <= %d, %d]", batch, outputs.cols(),
                        o.max_batch, o.width));
  }
  if (o.kind == LossKind::kSoftmaxCrossEntropy) {
    if (targets.dtype() != DType::kS32 || targets.size() != batch) {
      return absl::InvalidArgumentError(
          absl::StrFormat("loss: targets must be %d class codes (s32)", batch));
    }
  } else if (targets.dtype() != DType::kF32 || targets.size() != batch * o.width) {
    return absl::InvalidArgumentError(
        absl::StrFormat("loss: targets must be [%d, %d] values (f32)", batch, o.width));
  }
  for (auto [t, name] :
       {std::pair{grad, "loss grad"}, std::pair{predictions, "loss predictions"}}) {
    if (t == nullptr || batch == 0) continue;
    if (absl::Status s = CheckShape(*t, DType::kF32, batch, o.width, name); !s.ok()) return s;
  }
  if (slot < 0 || slot >= o.slots) {
    return absl::InvalidArgumentError(
        absl::StrFormat("loss: slot %d is not in [0, %d)", slot, o.slots));
  }
  return absl::OkStatus();
}

// LossKernel::ReadSlots' range for a kernel of `slots` slots.
inline absl::Status CheckLossSlots(int64_t slots, int64_t first, int64_t count) {
  if (first < 0 || count < 0 || first + count > slots) {
    return absl::InvalidArgumentError(
        absl::StrFormat("loss: slots [%d, %d) are not in [0, %d)", first, first + count, slots));
  }
  return absl::OkStatus();
}

// The arguments of the batch-norm ops across ranks (Backend::BatchNorm*):
// one check per op, shared by the backends.
inline absl::Status CheckBatchNormSquaredDeviationsArgs(const Tensor& x, const Tensor& sum,
                                                        int64_t count, const Tensor& mean,
                                                        const Tensor& sq) {
  if (absl::Status s = CheckCount(count, x.rows()); !s.ok()) return s;
  for (const Tensor* t : {&sum, &mean, &sq}) {
    if (absl::Status s = CheckStatistic(*t, x.cols(), "batch norm statistic"); !s.ok()) return s;
  }
  return absl::OkStatus();
}

inline absl::Status CheckBatchNormFromMomentsArgs(int64_t count, const Tensor& x,
                                                  const Tensor& gamma, const Tensor& beta,
                                                  const Tensor& mean, const Tensor& sq,
                                                  const Tensor& running_mean,
                                                  const Tensor& running_var, const Tensor& rstd,
                                                  const Tensor& y) {
  if (absl::Status s = CheckCount(count, x.rows()); !s.ok()) return s;
  if (absl::Status s = CheckBatchNormArgs(x, gamma, beta, running_mean, running_var, mean, rstd, y);
      !s.ok()) {
    return s;
  }
  return CheckStatistic(sq, x.cols(), "batch norm sq");
}

inline absl::Status CheckBatchNormBackwardSumsArgs(const Tensor& x, const Tensor& mean,
                                                   const Tensor& rstd, const Tensor& dy,
                                                   const Tensor& dgamma, const Tensor& dbeta,
                                                   const Tensor& sums) {
  const int64_t n = x.cols();
  if (absl::Status s = CheckShape(dy, DType::kF32, x.rows(), n, "batch norm dy"); !s.ok()) {
    return s;
  }
  for (const Tensor* t : {&mean, &rstd, &dgamma, &dbeta}) {
    if (absl::Status s = CheckStatistic(*t, n, "batch norm statistic"); !s.ok()) return s;
  }
  return CheckStatistic(sums, 2 * n, "batch norm sums");
}

inline absl::Status CheckBatchNormBackwardDataArgs(const Tensor& x, const Tensor& gamma,
                                                   const Tensor& mean, const Tensor& rstd,
                                                   const Tensor& dy, const Tensor& sums,
                                                   int64_t count, const Tensor& dx) {
  const int64_t batch = x.rows(), n = x.cols();
  if (absl::Status s = CheckCount(count, batch); !s.ok()) return s;
  if (absl::Status s = CheckShape(dy, DType::kF32, batch, n, "batch norm dy"); !s.ok()) return s;
  if (absl::Status s = CheckShape(dx, DType::kF32, batch, n, "batch norm dx"); !s.ok()) return s;
  for (const Tensor* t : {&gamma, &mean, &rstd}) {
    if (absl::Status s = CheckStatistic(*t, n, "batch norm statistic"); !s.ok()) return s;
  }
  return CheckStatistic(sums, 2 * n, "batch norm sums");
}

// A convolution's geometry is one a kernel can be planned for.
inline absl::Status CheckConv2dGeometry(const Conv2dGeometry& g) {
  if (g.batch < 1 || g.in_channels < 1 || g.in_height < 1 || g.in_width < 1 || g.out_channels < 1 ||
      g.kernel_height < 1 || g.kernel_width < 1 || g.stride_height < 1 || g.stride_width < 1 ||
      g.dilation_height < 1 || g.dilation_width < 1 || g.groups < 1 || g.pad_top < 0 ||
      g.pad_left < 0 || g.pad_bottom < 0 || g.pad_right < 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "conv2d: bad geometry (batch %d, %d×%d×%d in, %d out, kernel %d×%d, stride %d×%d, "
        "dilation %d×%d, groups %d, padding %d,%d,%d,%d)",
        g.batch, g.in_channels, g.in_height, g.in_width, g.out_channels, g.kernel_height,
        g.kernel_width, g.stride_height, g.stride_width, g.dilation_height, g.dilation_width,
        g.groups, g.pad_top, g.pad_left, g.pad_bottom, g.pad_right));
  }
  if (g.in_channels % g.groups != 0 || g.out_channels % g.groups != 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("conv2d: %d in and %d out channels are not divisible by %d groups",
                        g.in_channels, g.out_channels, g.groups));
  }
  if (g.out_height() < 1 || g.out_width() < 1) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "conv2d: kernel %d×%d (dilation %d×%d) on a %d×%d input with padding leaves no output",
        g.kernel_height, g.kernel_width, g.dilation_height, g.dilation_width, g.in_height,
        g.in_width));
  }
  return absl::OkStatus();
}

// A convolution kernel's arguments have its geometry's shapes (b only with
// a bias; db and dx unless null), and a backward pass's activation is one
// whose derivative needs only y. Every backend's Conv2dKernel checks these.
inline absl::Status CheckConv2dForwardArgs(const Conv2dGeometry& g, bool bias, const Tensor& x,
                                           const Tensor& w, const Tensor& b, const Tensor& y) {
  TRAIND_RETURN_IF_ERROR(CheckShape(x, DType::kF32, g.batch, g.in_size(), "conv2d x"));
  TRAIND_RETURN_IF_ERROR(CheckShape(w, DType::kF32, g.out_channels, g.weight_cols(), "conv2d w"));
  TRAIND_RETURN_IF_ERROR(CheckShape(y, DType::kF32, g.batch, g.out_size(), "conv2d y"));
  if (bias) TRAIND_RETURN_IF_ERROR(CheckShape(b, DType::kF32, 1, g.out_channels, "conv2d b"));
  return absl::OkStatus();
}
inline absl::Status CheckConv2dBackwardArgs(const Conv2dGeometry& g, const ActivationFn& f,
                                            const Tensor& x, const Tensor& w, const Tensor& y,
                                            const Tensor& dy, const Tensor& dw, const Tensor* db,
                                            const Tensor* dx) {
  if (!DerivativeFromOutput(f.kind)) {
    return absl::FailedPreconditionError(
        "conv2d backward: the fused activation's derivative needs its input");
  }
  TRAIND_RETURN_IF_ERROR(CheckShape(x, DType::kF32, g.batch, g.in_size(), "conv2d x"));
  TRAIND_RETURN_IF_ERROR(CheckShape(w, DType::kF32, g.out_channels, g.weight_cols(), "conv2d w"));
  TRAIND_RETURN_IF_ERROR(CheckShape(y, DType::kF32, g.batch, g.out_size(), "conv2d y"));
  TRAIND_RETURN_IF_ERROR(CheckShape(dy, DType::kF32, g.batch, g.out_size(), "conv2d dy"));
  TRAIND_RETURN_IF_ERROR(CheckShape(dw, DType::kF32, g.out_channels, g.weight_cols(), "conv2d dw"));
  if (db != nullptr) {
    TRAIND_RETURN_IF_ERROR(CheckShape(*db, DType::kF32, 1, g.out_channels, "conv2d db"));
  }
  if (dx != nullptr) {
    TRAIND_RETURN_IF_ERROR(CheckShape(*dx, DType::kF32, g.batch, g.in_size(), "conv2d dx"));
  }
  return absl::OkStatus();
}

// A pooling's geometry is one a kernel can be planned for: every window
// starts inside the image (padding smaller than the kernel, as PyTorch
// requires: at most half of it).
inline absl::Status CheckPool2dGeometry(const Pool2dGeometry& g) {
  if (g.batch < 1 || g.channels < 1 || g.in_height < 1 || g.in_width < 1 || g.kernel_height < 1 ||
      g.kernel_width < 1 || g.stride_height < 1 || g.stride_width < 1 || g.pad_top < 0 ||
      g.pad_left < 0 || g.pad_bottom < 0 || g.pad_right < 0 ||
      2 * std::max(g.pad_top, g.pad_bottom) > g.kernel_height ||
      2 * std::max(g.pad_left, g.pad_right) > g.kernel_width) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "pool2d: bad geometry (batch %d, %d×%d×%d in, kernel %d×%d, stride %d×%d, padding "
        "%d,%d,%d,%d; padding at most half the kernel)",
        g.batch, g.channels, g.in_height, g.in_width, g.kernel_height, g.kernel_width,
        g.stride_height, g.stride_width, g.pad_top, g.pad_left, g.pad_bottom, g.pad_right));
  }
  if (g.out_height() < 1 || g.out_width() < 1) {
    return absl::InvalidArgumentError(
        absl::StrFormat("pool2d: kernel %d×%d on a %d×%d input leaves no output", g.kernel_height,
                        g.kernel_width, g.in_height, g.in_width));
  }
  return absl::OkStatus();
}

}  // namespace traind::engine

#endif  // TRAIND_WORKER_ENGINE_BACKEND_TENSOR_CHECKS_H_
