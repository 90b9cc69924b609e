#include "worker/engine/backend/cpu/cpu_backend.h"

#include <omp.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <new>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/random.h"
#include "base/status.h"
#include "oneapi/dnnl/dnnl.hpp"
#include "spec/checks.h"
#include "worker/engine/backend/activation_math.h"
#include "worker/engine/backend/cpu/cpu_conv_kernel.h"
#include "worker/engine/backend/cpu/cpu_dense_kernel.h"
#include "worker/engine/backend/cpu/cpu_parallel.h"
#include "worker/engine/backend/cpu/onednn_status.h"
#include "worker/engine/backend/tensor_checks.h"

namespace traind::engine {
namespace {

using cpu::FreeAligned;
using cpu::FromDnnl;
using cpu::kAlignment;
using cpu::ParallelFor;
using cpu::SlabBegin;

// body(t, i0, i1) over elements [i0, i1) of tensors[t], for all tensors: in
// one parallel region when there are enough elements (each large tensor split
// evenly across the threads, as a per-tensor loop would; small ones whole, to
// one thread each), else on this thread.
template <typename Body>
void ForEachSegment(absl::Span<Tensor* const> tensors, Body body) {
  int64_t total = 0;
  for (const Tensor* t : tensors) total += t->size();
  if (!cpu::Forks(total)) {
    for (size_t t = 0; t < tensors.size(); ++t) body(t, 0, tensors[t]->size());
    return;
  }
  constexpr int64_t kSplit = 4096;  // smaller tensors are not split
#pragma omp parallel
  {
    const int64_t threads = omp_get_num_threads();
    const int64_t thread = omp_get_thread_num();
    int64_t small = 0;
    for (size_t t = 0; t < tensors.size(); ++t) {
      const int64_t n = tensors[t]->size();
      if (n < kSplit) {
        if (small++ % threads == thread) body(t, 0, n);
        continue;
      }
      const int64_t chunk = ((n + threads - 1) / threads + 15) & ~int64_t{15};
      const int64_t begin = std::min(n, chunk * thread);
      const int64_t end = std::min(n, begin + chunk);
      if (begin < end) body(t, begin, end);
    }
  }
}

// Batch normalization's arithmetic, shared by the one-device and the
// across-ranks ops.
//
// out = gamma (in - mu) rs + beta, row by row. in, out: [batch, n].
void ApplyBatchNorm(const float* in, int64_t batch, int64_t n, const float* mu, const float* rs,
                    const float* g, const float* b, float* out) {
  for (int64_t r = 0; r < batch; ++r) {
#pragma omp simd
    for (int64_t j = 0; j < n; ++j) out[r * n + j] = g[j] * (in[r * n + j] - mu[j]) * rs[j] + b[j];
  }
}

// Column j's Σ dy and Σ dy x̂ (x̂ = (x - mu) rs), in double, rows in order.
void BatchNormColumnGradientSums(const float* in, const float* dy, int64_t batch, int64_t n,
                                 int64_t j, float mu, float rs, double* sum_dy,
                                 double* sum_dy_xhat) {
  double s = 0, sx = 0;
  for (int64_t r = 0; r < batch; ++r) {
    const double xhat = (in[r * n + j] - mu) * rs;
    s += dy[r * n + j];
    sx += dy[r * n + j] * xhat;
  }
  *sum_dy = s;
  *sum_dy_xhat = sx;
}

// Column j of dx = gamma rs / count (count dy - Σ dy - x̂ Σ dy x̂).
void BatchNormColumnDx(const float* in, const float* dy, int64_t batch, int64_t n, int64_t j,
                       float mu, float rs, float gamma, double count, double sum_dy,
                       double sum_dy_xhat, float* dx) {
  const double scale = gamma * rs / count;
  for (int64_t r = 0; r < batch; ++r) {
    const double xhat = (in[r * n + j] - mu) * rs;
    dx[r * n + j] =
        static_cast<float>(scale * (count * dy[r * n + j] - sum_dy - xhat * sum_dy_xhat));
  }
}

// A loss on the host: loss_math.h's arithmetic, rows in order.
class CpuLossKernel final : public LossKernel {
 public:
  explicit CpuLossKernel(LossKernelOptions options)
      : options_(std::move(options)),
        params_(ParamsOf(options_)),
        slots_(static_cast<size_t>(options_.slots), 0.0),
        terms_(static_cast<size_t>(options_.max_batch * options_.width)) {}

  absl::Status Compute(const Tensor& outputs, const Tensor& targets, double grad_scale,
                       Tensor* grad, Tensor* predictions, int64_t slot) override {
    TRAIND_RETURN_IF_ERROR(
        CheckLossComputeArgs(options_, outputs, targets, grad, predictions, slot));
    const int64_t batch = outputs.rows();
    const bool classes = options_.kind == LossKind::kSoftmaxCrossEntropy;
    if (classes) {
      const int32_t* y = targets.s32();
      for (int64_t r = 0; r < batch; ++r) {
        if (y[r] < 0 || y[r] >= options_.width) {
          return absl::InvalidArgumentError(absl::StrFormat(
              "loss: class code %d of row %d is not in [0, %d)", y[r], r, options_.width));
        }
      }
    }
    const double scale = grad_scale == kStoredGradScale ? stored_scale_ : grad_scale;
    const float* z = outputs.f32();
    const int32_t* y = classes ? targets.s32() : nullptr;
    const float* values = classes ? nullptr : targets.f32();
    float* g = grad != nullptr && batch > 0 ? grad->f32() : nullptr;
    float* pred = predictions != nullptr && batch > 0 ? predictions->f32() : nullptr;
    const int64_t w = options_.width;
    if (!cpu::Forks(batch * w, kParallelLossElements - 1)) {
      slots_[static_cast<size_t>(slot)] =
          loss_math::SumOnHost(params_, z, batch, y, values, scale, g, pred);
      return absl::OkStatus();
    }
    // The threads compute their rows' values, then one thread sums them in
    // SumOnHost's order: the same value, bit for bit, whatever the threads.
    double* terms = terms_.data();
#pragma omp parallel
    {
      const int64_t threads = omp_get_num_threads(), t = omp_get_thread_num();
      const int64_t r1 = SlabBegin(batch, threads, t + 1);
      for (int64_t r = SlabBegin(batch, threads, t); r < r1; ++r) {
        const int64_t at = r * w;
        if (classes) {
          terms[r] = loss_math::SoftmaxCrossEntropyRow(params_, z + at, y[r], scale,
                                                       g != nullptr ? g + at : nullptr,
                                                       pred != nullptr ? pred + at : nullptr);
          continue;
        }
        for (int64_t i = at; i < at + w; ++i) {
          terms[i] = loss_math::ElementLoss(params_, i - at, z[i], values[i], scale,
                                            g != nullptr ? g + i : nullptr,
                                            pred != nullptr ? pred + i : nullptr);
        }
      }
    }
    double sum = 0;
    for (int64_t i = 0, n = classes ? batch : batch * w; i < n; ++i) sum += terms[i];
    slots_[static_cast<size_t>(slot)] = sum;
    return absl::OkStatus();
  }

  absl::Status ReadSlots(int64_t first, int64_t count, double* values) override {
    TRAIND_RETURN_IF_ERROR(CheckLossSlots(options_.slots, first, count));
    std::copy_n(slots_.begin() + first, count, values);
    return absl::OkStatus();
  }

  absl::Status StoreGradScale(double scale) override {
    stored_scale_ = scale;
    return absl::OkStatus();
  }

  absl::Status CopySlot(int64_t from, int64_t to) override {
    TRAIND_RETURN_IF_ERROR(CheckLossSlots(options_.slots, from, 1));
    TRAIND_RETURN_IF_ERROR(CheckLossSlots(options_.slots, to, 1));
    slots_[static_cast<size_t>(to)] = slots_[static_cast<size_t>(from)];
    return absl::OkStatus();
  }

 private:
  // Batches of at least this many outputs are computed by all the threads
  // (softmax cross-entropy: 3 exp per output; 128 × 10 took 0.03 ms on one).
  static constexpr int64_t kParallelLossElements = 512;

  const LossKernelOptions options_;
  LossParams params_;
  std::vector<double> slots_;
  std::vector<double> terms_;  // [max_batch · width]: the rows' or elements' values
  double stored_scale_ = 0;
};

class CpuBackend final : public Backend {
 public:
  CpuBackend(dnnl::engine engine, dnnl::stream stream, traind::v1::Precision precision,
             cpu::CpuGemmConfig gemm)
      : engine_(std::move(engine)),
        stream_(std::move(stream)),
        precision_(precision),
        gemm_(gemm) {}

  std::string name() const override {
    return precision_ == traind::v1::BF16 ? "cpu (oneDNN, bf16 matmuls and convolutions)"
                                          : "cpu (oneDNN)";
  }
  BackendDevice device() const override { return BackendDevice::kCpu; }

  absl::StatusOr<Tensor> Allocate1d(DType dtype, int64_t n) override {
    return AllocateImpl(dtype, 1, n, 1);
  }
  absl::StatusOr<Tensor> Allocate2d(DType dtype, int64_t rows, int64_t cols) override {
    return AllocateImpl(dtype, rows, cols, 2);
  }

  absl::Status CopyFromHost(const void* src, Tensor* dst) override {
    if (dst->bytes() > 0) std::memcpy(dst->raw(), src, dst->bytes());
    return absl::OkStatus();
  }
  absl::Status CopyToHost(const Tensor& src, void* dst) override {
    if (src.bytes() > 0) std::memcpy(dst, src.raw(), src.bytes());
    return absl::OkStatus();
  }
  absl::Status Copy(const Tensor& src, Tensor* dst) override {
    TRAIND_RETURN_IF_ERROR(CheckCopyArgs(src, *dst));
    if (src.bytes() > 0) std::memmove(dst->raw(), src.raw(), src.bytes());
    return absl::OkStatus();
  }
  absl::Status Fill(float value, Tensor* dst) override {
    if (dst->dtype() != DType::kF32) return absl::InvalidArgumentError("Fill: not an f32 tensor");
    std::fill(dst->f32(), dst->f32() + dst->size(), value);
    return absl::OkStatus();
  }

  absl::Status GatherRows(const float* src, int64_t cols, absl::Span<const int64_t> rows,
                          Tensor* dst) override {
    const int64_t n = static_cast<int64_t>(rows.size());
    TRAIND_RETURN_IF_ERROR(CheckShape(*dst, DType::kF32, n, cols, "GatherRows dst"));
    float* out = dst->f32();
    // Rows of a shuffled epoch are scattered over the dataset, mostly not in
    // any cache: the threads fetch them in parallel.
    const auto copy = [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) {
        std::memcpy(out + i * cols, src + rows[static_cast<size_t>(i)] * cols,
                    static_cast<size_t>(cols) * sizeof(float));
      }
    };
    if (cpu::Forks(n * cols)) {
#pragma omp parallel
      {
        const int64_t threads = omp_get_num_threads(), t = omp_get_thread_num();
        copy(SlabBegin(n, threads, t), SlabBegin(n, threads, t + 1));
      }
    } else {
      copy(0, n);
    }
    return absl::OkStatus();
  }

  absl::Status GatherLabels(const int32_t* src, absl::Span<const int64_t> rows,
                            Tensor* dst) override {
    if (dst->dtype() != DType::kS32 || dst->size() != static_cast<int64_t>(rows.size())) {
      return absl::InvalidArgumentError("GatherLabels: dst is not an s32 tensor of rows.size()");
    }
    int32_t* out = dst->s32();
    for (size_t i = 0; i < rows.size(); ++i) out[i] = src[rows[i]];
    return absl::OkStatus();
  }

  absl::StatusOr<std::unique_ptr<DenseKernel>> CreateDenseKernel(
      int64_t batch, int64_t in, int64_t out, const DenseKernelOptions& options) override {
    if (batch <= 0 || in <= 0 || out <= 0) {
      return absl::InvalidArgumentError(
          absl::StrFormat("CreateDenseKernel: bad shape batch %d, in %d, out %d", batch, in, out));
    }
    return cpu::CreateCpuDenseKernel(engine_, stream_, precision_, batch, in, out, options, gemm_);
  }

  absl::StatusOr<std::unique_ptr<Conv2dKernel>> CreateConv2dKernel(
      const Conv2dGeometry& geometry, const Conv2dKernelOptions& options) override {
    TRAIND_RETURN_IF_ERROR(CheckConv2dGeometry(geometry));
    return cpu::CreateCpuConv2dKernel(engine_, stream_, geometry, options,
                                      precision_ == traind::v1::BF16);
  }

  using Backend::CreatePool2dKernel;
  absl::StatusOr<std::unique_ptr<Pool2dKernel>> CreatePool2dKernel(
      const Pool2dGeometry& geometry, const Pool2dKernelOptions& options) override {
    TRAIND_RETURN_IF_ERROR(CheckPool2dGeometry(geometry));
    return cpu::CreateCpuPool2dKernel(engine_, stream_, geometry, options);
  }

  // oneDNN's JIT convolutions and poolings read and write NHWC as it is.
  bool ChannelsLastImages() const override { return true; }

  absl::StatusOr<std::unique_ptr<LossKernel>> CreateLossKernel(
      const LossKernelOptions& options) override {
    TRAIND_RETURN_IF_ERROR(CheckLossKernelOptions(options));
    try {
      return std::unique_ptr<LossKernel>(new CpuLossKernel(options));
    } catch (const std::bad_alloc&) {
      return OutOfMemoryError(
          absl::StrFormat("loss kernel: cannot allocate %d slots", options.slots));
    }
  }

  absl::Status SgdUpdate(const SgdStep& step, const Tensor& grad, Tensor* velocity,
                         Tensor* param) override {
    const Tensor* grads[] = {&grad};
    Tensor* params[] = {param};
    Tensor* velocities[] = {velocity};
    return SgdUpdateMany(
        step, grads,
        velocity != nullptr ? absl::Span<Tensor* const>(velocities) : absl::Span<Tensor* const>(),
        params);
  }

  absl::Status SgdUpdateMany(const SgdStep& step, absl::Span<const Tensor* const> grads,
                             absl::Span<Tensor* const> velocities,
                             absl::Span<Tensor* const> params) override {
    const bool momentum = step.momentum != 0.0;
    TRAIND_RETURN_IF_ERROR(CheckSgdManyArgs(momentum, grads, velocities, params));
    const float lr = static_cast<float>(step.learning_rate);
    const float wd = static_cast<float>(step.weight_decay);
    const float mu = static_cast<float>(step.momentum);
    const bool nesterov = step.nesterov;
    ForEachSegment(params, [&](size_t t, int64_t i0, int64_t i1) {
      float* w = params[t]->f32();
      const float* g = grads[t]->f32();
      if (!momentum) {
#pragma omp simd
        for (int64_t i = i0; i < i1; ++i) w[i] -= lr * (g[i] + wd * w[i]);
        return;
      }
      float* v = velocities[t]->f32();
      if (nesterov) {
#pragma omp simd
        for (int64_t i = i0; i < i1; ++i) {
          const float gi = g[i] + wd * w[i];
          v[i] = mu * v[i] + gi;
          w[i] -= lr * (gi + mu * v[i]);
        }
      } else {
#pragma omp simd
        for (int64_t i = i0; i < i1; ++i) {
          v[i] = mu * v[i] + (g[i] + wd * w[i]);
          w[i] -= lr * v[i];
        }
      }
    });
    return absl::OkStatus();
  }

  absl::Status RmsPropUpdate(const RmsPropStep& step, const Tensor& grad, Tensor* square_avg,
                             Tensor* buffer, Tensor* param) override {
    TRAIND_RETURN_IF_ERROR(CheckSameSize(grad, *param, "RmsPropUpdate"));
    TRAIND_RETURN_IF_ERROR(CheckSameSize(grad, *square_avg, "RmsPropUpdate"));
    if (step.momentum > 0) {
      if (buffer == nullptr) return absl::InvalidArgumentError("RmsPropUpdate: no momentum buffer");
      TRAIND_RETURN_IF_ERROR(CheckSameSize(grad, *buffer, "RmsPropUpdate"));
    }
    const int64_t n = param->size();
    float* w = param->f32();
    float* s = square_avg->f32();
    float* b = step.momentum > 0 ? buffer->f32() : nullptr;
    const float* g = grad.f32();
    const float lr = static_cast<float>(step.learning_rate);
    const float alpha = static_cast<float>(step.alpha);
    const float one_minus_alpha = static_cast<float>(1.0 - step.alpha);
    const float eps = static_cast<float>(step.epsilon);
    const float mu = static_cast<float>(step.momentum);
    const float wd = static_cast<float>(step.weight_decay);
    ParallelFor(n, [&](int64_t i0, int64_t i1) {
#pragma omp simd
      for (int64_t i = i0; i < i1; ++i) {
        const float gi = g[i] + wd * w[i];
        s[i] = alpha * s[i] + one_minus_alpha * gi * gi;
        const float update = gi / (std::sqrt(s[i]) + eps);
        if (b != nullptr) {
          b[i] = mu * b[i] + update;
          w[i] -= lr * b[i];
        } else {
          w[i] -= lr * update;
        }
      }
    });
    return absl::OkStatus();
  }

  absl::Status AdamUpdate(const AdamStep& step, const Tensor& grad, Tensor* m, Tensor* v,
                          Tensor* param) override {
    const Tensor* grads[] = {&grad};
    Tensor* ms[] = {m};
    Tensor* vs[] = {v};
    Tensor* params[] = {param};
    return AdamUpdateMany(step, grads, ms, vs, params);
  }

  absl::Status AdamUpdateMany(const AdamStep& step, absl::Span<const Tensor* const> grads,
                              absl::Span<Tensor* const> m, absl::Span<Tensor* const> v,
                              absl::Span<Tensor* const> params) override {
    TRAIND_RETURN_IF_ERROR(CheckAdamManyArgs(grads, m, v, params));
    const AdamScalars a = AdamScalarsOf(step);
    const float step_size = a.step_size, sqrt_bc2 = a.sqrt_bc2, b1 = a.b1, b2 = a.b2;
    const float one_minus_b1 = a.one_minus_b1, one_minus_b2 = a.one_minus_b2, eps = a.eps;
    const float l2 = a.l2, decay = a.decay;
    ForEachSegment(params, [&](size_t t, int64_t i0, int64_t i1) {
      float* w = params[t]->f32();
      float* mm = m[t]->f32();
      float* vv = v[t]->f32();
      const float* g = grads[t]->f32();
#pragma omp simd
      for (int64_t i = i0; i < i1; ++i) {
        w[i] *= decay;
        const float gi = g[i] + l2 * w[i];
        mm[i] = b1 * mm[i] + one_minus_b1 * gi;
        vv[i] = b2 * vv[i] + one_minus_b2 * gi * gi;
        // w -= lr/bc1 · m / (sqrt(v)/sqrt(bc2) + eps)
        w[i] -= step_size * (mm[i] / (std::sqrt(vv[i]) / sqrt_bc2 + eps));
      }
    });
    return absl::OkStatus();
  }

  absl::Status ActivationForward(const ActivationFn& f, const Tensor& x, Tensor* y) override {
    TRAIND_RETURN_IF_ERROR(CheckSameSize(x, *y, "ActivationForward"));
    const int64_t n = x.size();
    const float* in = x.f32();
    float* out = y->f32();
    const DenseActivation kind = f.kind;
    const float alpha = f.alpha;
    ParallelFor(n, [&](int64_t i0, int64_t i1) {
#pragma omp simd
      for (int64_t i = i0; i < i1; ++i) out[i] = activation_math::Activate(kind, alpha, in[i]);
    });
    return absl::OkStatus();
  }

  absl::Status ActivationBackward(const ActivationFn& f, const Tensor& x, const Tensor& y,
                                  const Tensor& dy, Tensor* dx) override {
    TRAIND_RETURN_IF_ERROR(CheckSameSize(x, y, "ActivationBackward"));
    TRAIND_RETURN_IF_ERROR(CheckSameSize(x, dy, "ActivationBackward"));
    TRAIND_RETURN_IF_ERROR(CheckSameSize(x, *dx, "ActivationBackward"));
    const int64_t n = x.size();
    const float* z = x.f32();
    const float* out = y.f32();
    const float* g = dy.f32();
    float* d = dx->f32();
    const DenseActivation kind = f.kind;
    const float alpha = f.alpha;
    ParallelFor(n, [&](int64_t i0, int64_t i1) {
#pragma omp simd
      for (int64_t i = i0; i < i1; ++i) {
        d[i] = g[i] * activation_math::Derivative(kind, alpha, z[i], out[i]);
      }
    });
    return absl::OkStatus();
  }

  absl::Status DropoutForward(float rate, uint64_t seed, const Tensor& x, Tensor* mask,
                              Tensor* y) override {
    TRAIND_RETURN_IF_ERROR(CheckSameSize(x, *mask, "DropoutForward"));
    TRAIND_RETURN_IF_ERROR(CheckSameSize(x, *y, "DropoutForward"));
    const int64_t n = x.size();
    float* m = mask->f32();
    const float keep = 1.0f / (1.0f - rate);
    // Serial: the mask depends on the seed only, never on the thread count.
    Rng rng(seed);
    for (int64_t i = 0; i < n; ++i) m[i] = rng.Uniform() < rate ? 0.0f : keep;
    return Multiply(x, *mask, y);
  }

  absl::Status Multiply(const Tensor& a, const Tensor& b, Tensor* out) override {
    TRAIND_RETURN_IF_ERROR(CheckSameSize(a, b, "Multiply"));
    TRAIND_RETURN_IF_ERROR(CheckSameSize(a, *out, "Multiply"));
    const int64_t n = a.size();
    const float* pa = a.f32();
    const float* pb = b.f32();
    float* po = out->f32();
    ParallelFor(n, [&](int64_t i0, int64_t i1) {
#pragma omp simd
      for (int64_t i = i0; i < i1; ++i) po[i] = pa[i] * pb[i];
    });
    return absl::OkStatus();
  }

  absl::Status TransposeBlocks(const Tensor& x, int64_t blocks, int64_t rows, int64_t cols,
                               Tensor* y) override {
    const int64_t block = rows * cols;
    if (blocks < 0 || rows < 0 || cols < 0 || x.size() != blocks * block ||
        y->size() != blocks * block || x.dtype() != DType::kF32 || y->dtype() != DType::kF32) {
      return absl::InvalidArgumentError(
          absl::StrFormat("TransposeBlocks: %d × [%d, %d] of a %d-value x into a %d-value y",
                          blocks, rows, cols, x.size(), y->size()));
    }
    const float* in = x.f32();
    float* out = y->f32();
    ParallelFor(blocks * rows, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) {
        const int64_t b = i / rows, r = i % rows;
        const float* src = in + b * block + r * cols;
        float* dst = out + b * block + r;
        for (int64_t c = 0; c < cols; ++c) dst[c * rows] = src[c];
      }
    });
    return absl::OkStatus();
  }

  absl::Status BatchNormForward(bool training, float momentum, float epsilon, const Tensor& x,
                                const Tensor& gamma, const Tensor& beta, Tensor* running_mean,
                                Tensor* running_var, Tensor* mean, Tensor* rstd,
                                Tensor* y) override {
    const int64_t batch = x.rows(), n = x.cols();
    TRAIND_RETURN_IF_ERROR(
        CheckBatchNormArgs(x, gamma, beta, *running_mean, *running_var, *mean, *rstd, *y));
    const float* in = x.f32();
    float* mu = mean->f32();
    float* rs = rstd->f32();
    if (training) {
      // Per feature, in double, rows in order: deterministic.
      for (int64_t j = 0; j < n; ++j) {
        double sum = 0;
        for (int64_t r = 0; r < batch; ++r) sum += in[r * n + j];
        const double m = sum / static_cast<double>(batch);
        double sq = 0;
        for (int64_t r = 0; r < batch; ++r) {
          const double d = in[r * n + j] - m;
          sq += d * d;
        }
        const double var = sq / static_cast<double>(batch);
        const double unbiased = batch > 1 ? sq / static_cast<double>(batch - 1) : var;
        mu[j] = static_cast<float>(m);
        rs[j] = static_cast<float>(1.0 / std::sqrt(var + epsilon));
        running_mean->f32()[j] =
            (1.0f - momentum) * running_mean->f32()[j] + momentum * static_cast<float>(m);
        running_var->f32()[j] =
            (1.0f - momentum) * running_var->f32()[j] + momentum * static_cast<float>(unbiased);
      }
    } else {
      for (int64_t j = 0; j < n; ++j) {
        mu[j] = running_mean->f32()[j];
        rs[j] = 1.0f / std::sqrt(running_var->f32()[j] + epsilon);
      }
    }
    ApplyBatchNorm(in, batch, n, mu, rs, gamma.f32(), beta.f32(), y->f32());
    return absl::OkStatus();
  }

  absl::Status BatchNormBackward(const Tensor& x, const Tensor& gamma, const Tensor& mean,
                                 const Tensor& rstd, const Tensor& dy, Tensor* dgamma,
                                 Tensor* dbeta, Tensor* dx) override {
    const int64_t batch = x.rows(), n = x.cols();
    TRAIND_RETURN_IF_ERROR(CheckShape(dy, DType::kF32, batch, n, "batch norm dy"));
    const float* in = x.f32();
    const float* g = dy.f32();
    const float* mu = mean.f32();
    const float* rs = rstd.f32();
    // dx = gamma rstd / B (B dy - Σ dy - x̂ Σ dy x̂)
    for (int64_t j = 0; j < n; ++j) {
      double sum_dy, sum_dy_xhat;
      BatchNormColumnGradientSums(in, g, batch, n, j, mu[j], rs[j], &sum_dy, &sum_dy_xhat);
      dgamma->f32()[j] = static_cast<float>(sum_dy_xhat);
      dbeta->f32()[j] = static_cast<float>(sum_dy);
      if (dx == nullptr) continue;
      BatchNormColumnDx(in, g, batch, n, j, mu[j], rs[j], gamma.f32()[j],
                        static_cast<double>(batch), sum_dy, sum_dy_xhat, dx->f32());
    }
    return absl::OkStatus();
  }

  absl::Status BatchNormColumnSums(const Tensor& x, Tensor* sum) override {
    const int64_t batch = x.rows(), n = x.cols();
    TRAIND_RETURN_IF_ERROR(CheckStatistic(*sum, n, "batch norm sum"));
    const float* in = x.f32();
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int64_t r = 0; r < batch; ++r) s += in[r * n + j];
      sum->f32()[j] = static_cast<float>(s);
    }
    return absl::OkStatus();
  }

  absl::Status BatchNormSquaredDeviations(const Tensor& x, const Tensor& sum, int64_t count,
                                          Tensor* mean, Tensor* sq) override {
    const int64_t batch = x.rows(), n = x.cols();
    TRAIND_RETURN_IF_ERROR(CheckBatchNormSquaredDeviationsArgs(x, sum, count, *mean, *sq));
    const float* in = x.f32();
    for (int64_t j = 0; j < n; ++j) {
      const float mu = static_cast<float>(sum.f32()[j] / static_cast<double>(count));
      double s = 0;
      for (int64_t r = 0; r < batch; ++r) {
        const double d = static_cast<double>(in[r * n + j]) - mu;
        s += d * d;
      }
      mean->f32()[j] = mu;
      sq->f32()[j] = static_cast<float>(s);
    }
    return absl::OkStatus();
  }

  absl::Status BatchNormForwardFromMoments(float momentum, float epsilon, int64_t count,
                                           const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                           const Tensor& mean, const Tensor& sq,
                                           Tensor* running_mean, Tensor* running_var, Tensor* rstd,
                                           Tensor* y) override {
    const int64_t batch = x.rows(), n = x.cols();
    TRAIND_RETURN_IF_ERROR(CheckBatchNormFromMomentsArgs(count, x, gamma, beta, mean, sq,
                                                         *running_mean, *running_var, *rstd, *y));
    const float* mu = mean.f32();
    float* rs = rstd->f32();
    for (int64_t j = 0; j < n; ++j) {
      const double s = sq.f32()[j];
      const double var = s / static_cast<double>(count);
      const double unbiased = count > 1 ? s / static_cast<double>(count - 1) : var;
      rs[j] = static_cast<float>(1.0 / std::sqrt(var + epsilon));
      running_mean->f32()[j] = (1.0f - momentum) * running_mean->f32()[j] + momentum * mu[j];
      running_var->f32()[j] =
          (1.0f - momentum) * running_var->f32()[j] + momentum * static_cast<float>(unbiased);
    }
    const float* in = x.f32();
    ApplyBatchNorm(in, batch, n, mu, rs, gamma.f32(), beta.f32(), y->f32());
    return absl::OkStatus();
  }

  absl::Status BatchNormBackwardSums(const Tensor& x, const Tensor& mean, const Tensor& rstd,
                                     const Tensor& dy, Tensor* dgamma, Tensor* dbeta,
                                     Tensor* sums) override {
    const int64_t batch = x.rows(), n = x.cols();
    TRAIND_RETURN_IF_ERROR(
        CheckBatchNormBackwardSumsArgs(x, mean, rstd, dy, *dgamma, *dbeta, *sums));
    const float* in = x.f32();
    const float* g = dy.f32();
    const float* mu = mean.f32();
    const float* rs = rstd.f32();
    for (int64_t j = 0; j < n; ++j) {
      double sum_dy, sum_dy_xhat;
      BatchNormColumnGradientSums(in, g, batch, n, j, mu[j], rs[j], &sum_dy, &sum_dy_xhat);
      dgamma->f32()[j] = sums->f32()[n + j] = static_cast<float>(sum_dy_xhat);
      dbeta->f32()[j] = sums->f32()[j] = static_cast<float>(sum_dy);
    }
    return absl::OkStatus();
  }

  absl::Status BatchNormBackwardData(const Tensor& x, const Tensor& gamma, const Tensor& mean,
                                     const Tensor& rstd, const Tensor& dy, const Tensor& sums,
                                     int64_t count, Tensor* dx) override {
    const int64_t batch = x.rows(), n = x.cols();
    TRAIND_RETURN_IF_ERROR(
        CheckBatchNormBackwardDataArgs(x, gamma, mean, rstd, dy, sums, count, *dx));
    const float* in = x.f32();
    const float* g = dy.f32();
    const float* mu = mean.f32();
    const float* rs = rstd.f32();
    for (int64_t j = 0; j < n; ++j) {
      BatchNormColumnDx(in, g, batch, n, j, mu[j], rs[j], gamma.f32()[j],
                        static_cast<double>(count), sums.f32()[j], sums.f32()[n + j], dx->f32());
    }
    return absl::OkStatus();
  }

  absl::Status LayerNormForward(float epsilon, const Tensor& x, const Tensor& gamma,
                                const Tensor& beta, Tensor* mean, Tensor* rstd,
                                Tensor* y) override {
    const int64_t batch = x.rows(), n = x.cols();
    TRAIND_RETURN_IF_ERROR(CheckShape(*y, DType::kF32, batch, n, "layer norm y"));
    if (mean->size() != batch || rstd->size() != batch || gamma.size() != n || beta.size() != n) {
      return absl::InvalidArgumentError("layer norm: bad statistic sizes");
    }
    const float* in = x.f32();
    float* out = y->f32();
    for (int64_t r = 0; r < batch; ++r) {
      const float* row = in + r * n;
      double sum = 0;
      for (int64_t j = 0; j < n; ++j) sum += row[j];
      const double m = sum / static_cast<double>(n);
      double sq = 0;
      for (int64_t j = 0; j < n; ++j) sq += (row[j] - m) * (row[j] - m);
      const float mu = static_cast<float>(m);
      const float rs = static_cast<float>(1.0 / std::sqrt(sq / static_cast<double>(n) + epsilon));
      mean->f32()[r] = mu;
      rstd->f32()[r] = rs;
      for (int64_t j = 0; j < n; ++j) {
        out[r * n + j] = gamma.f32()[j] * (row[j] - mu) * rs + beta.f32()[j];
      }
    }
    return absl::OkStatus();
  }

  absl::Status LayerNormBackward(const Tensor& x, const Tensor& gamma, const Tensor& mean,
                                 const Tensor& rstd, const Tensor& dy, Tensor* dgamma,
                                 Tensor* dbeta, Tensor* dx) override {
    const int64_t batch = x.rows(), n = x.cols();
    TRAIND_RETURN_IF_ERROR(CheckShape(dy, DType::kF32, batch, n, "layer norm dy"));
    std::fill(dgamma->f32(), dgamma->f32() + n, 0.0f);
    std::fill(dbeta->f32(), dbeta->f32() + n, 0.0f);
    const float* in = x.f32();
    const float* g = dy.f32();
    for (int64_t r = 0; r < batch; ++r) {
      const float mu = mean.f32()[r], rs = rstd.f32()[r];
      double sum_gh = 0, sum_gh_xhat = 0;
      for (int64_t j = 0; j < n; ++j) {
        const float xhat = (in[r * n + j] - mu) * rs;
        const float gh = g[r * n + j] * gamma.f32()[j];
        dgamma->f32()[j] += g[r * n + j] * xhat;
        dbeta->f32()[j] += g[r * n + j];
        sum_gh += gh;
        sum_gh_xhat += gh * xhat;
      }
      if (dx == nullptr) continue;
      // dx = rstd / n (n ĝ - Σ ĝ - x̂ Σ ĝ x̂), ĝ = dy gamma
      for (int64_t j = 0; j < n; ++j) {
        const double xhat = (in[r * n + j] - mu) * rs;
        const double gh = g[r * n + j] * gamma.f32()[j];
        dx->f32()[r * n + j] =
            static_cast<float>(rs / static_cast<double>(n) *
                               (static_cast<double>(n) * gh - sum_gh - xhat * sum_gh_xhat));
      }
    }
    return absl::OkStatus();
  }

  absl::StatusOr<double> SumOfSquares(const Tensor& t) override {
    double sum = 0;
    const float* p = t.f32();
    for (int64_t i = 0; i < t.size(); ++i) sum += static_cast<double>(p[i]) * p[i];
    return sum;
  }

  absl::Status Scale(float factor, Tensor* t) override {
    float* p = t->f32();
    const int64_t n = t->size();
    ParallelFor(n, [&](int64_t i0, int64_t i1) {
#pragma omp simd
      for (int64_t i = i0; i < i1; ++i) p[i] *= factor;
    });
    return absl::OkStatus();
  }

  absl::Status ClipByValue(float limit, Tensor* t) override {
    float* p = t->f32();
    const int64_t n = t->size();
    ParallelFor(n, [&](int64_t i0, int64_t i1) {
#pragma omp simd
      for (int64_t i = i0; i < i1; ++i) p[i] = std::min(limit, std::max(-limit, p[i]));
    });
    return absl::OkStatus();
  }

 private:
  absl::StatusOr<Tensor> AllocateImpl(DType dtype, int64_t rows, int64_t cols, int rank) {
    if (rows < 0 || cols < 0) return absl::InvalidArgumentError("Allocate: negative dimension");
    const size_t bytes = static_cast<size_t>(rows * cols) * SizeOf(dtype);
    void* data = ::operator new(std::max<size_t>(bytes, 64), kAlignment, std::nothrow);
    if (data == nullptr) {
      return OutOfMemoryError(absl::StrFormat("cannot allocate %d bytes of host memory", bytes));
    }
    return Tensor(data, &FreeAligned, dtype, rows, cols, rank, MemorySpace::kHost);
  }

  dnnl::engine engine_;
  dnnl::stream stream_;
  const traind::v1::Precision precision_;
  const cpu::CpuGemmConfig gemm_;
};

}  // namespace

bool CpuSupportsBf16() {
  const int isa = static_cast<int>(dnnl::get_effective_cpu_isa());
  return (isa & dnnl_cpu_isa_avx512_core_bf16) == dnnl_cpu_isa_avx512_core_bf16;
}

void DisableOneDnnProfilerHooks() {
  setenv("ONEDNN_ITT_TASK_LEVEL", "0", /*overwrite=*/0);
  setenv("ONEDNN_JIT_PROFILE", "0", /*overwrite=*/0);
}

absl::StatusOr<std::unique_ptr<Backend>> CreateCpuBackend(traind::v1::Precision precision) {
  TRAIND_RETURN_IF_ERROR(
      spec::CheckCpuPrecision(precision, precision == traind::v1::BF16 && CpuSupportsBf16()));
  TRAIND_ASSIGN_OR_RETURN(const cpu::CpuGemmConfig gemm, cpu::CpuGemmConfigOfProcess());
  try {
    dnnl::engine engine(dnnl::engine::kind::cpu, 0);
    dnnl::stream stream(engine);
    return std::unique_ptr<Backend>(
        new CpuBackend(std::move(engine), std::move(stream), precision, gemm));
  } catch (const dnnl::error& e) {
    return FromDnnl(e, "cannot create the CPU engine");
  }
}

}  // namespace traind::engine
