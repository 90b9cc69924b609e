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
#include "oneapi/dnnl/dnnl.hpp"
#include "worker/engine/backend/activation_math.h"
#include "worker/engine/backend/tensor_checks.h"
#include "worker/engine/random.h"
#include "worker/engine/spec_validation.h"
#include "worker/engine/status.h"

namespace traind::engine {
namespace {

// Loops shorter than this run on one thread: forking costs more than it saves.
constexpr int64_t kParallelThreshold = 1 << 15;
constexpr std::align_val_t kAlignment{64};

void FreeAligned(void* p) { ::operator delete(p, kAlignment); }

// The one place where oneDNN's exceptions become statuses.
absl::Status FromDnnl(const dnnl::error& e, absl::string_view what) {
  const std::string message = absl::StrCat("oneDNN: ", what, ": ", e.what());
  if (e.status == dnnl_out_of_memory) return OutOfMemoryError(message);
  return DeviceError(message);
}

absl::Status FromDnnlStatus(dnnl_status_t status, absl::string_view what) {
  if (status == dnnl_success) return absl::OkStatus();
  const std::string message = absl::StrFormat("oneDNN: %s: status %d", what, status);
  if (status == dnnl_out_of_memory) return OutOfMemoryError(message);
  return DeviceError(message);
}

// The oneDNN post-op of an activation whose derivative needs only y.
void AppendPostOp(const ActivationFn& f, dnnl::post_ops* ops) {
  switch (f.kind) {
    case DenseActivation::kRelu:
      ops->append_eltwise(1.0f, dnnl::algorithm::eltwise_relu, 0.0f, 0.0f);
      break;
    case DenseActivation::kLeakyRelu:
      ops->append_eltwise(1.0f, dnnl::algorithm::eltwise_relu, f.alpha, 0.0f);
      break;
    case DenseActivation::kElu:
      ops->append_eltwise(1.0f, dnnl::algorithm::eltwise_elu, f.alpha, 0.0f);
      break;
    case DenseActivation::kSigmoid:
      ops->append_eltwise(1.0f, dnnl::algorithm::eltwise_logistic, 0.0f, 0.0f);
      break;
    case DenseActivation::kTanh:
      ops->append_eltwise(1.0f, dnnl::algorithm::eltwise_tanh, 0.0f, 0.0f);
      break;
    case DenseActivation::kGelu:
      ops->append_eltwise(1.0f, dnnl::algorithm::eltwise_gelu_erf, 0.0f, 0.0f);
      break;
    case DenseActivation::kSoftplus:
      ops->append_eltwise(1.0f, dnnl::algorithm::eltwise_soft_relu, 0.0f, 0.0f);
      break;
    case DenseActivation::kSwish:
      ops->append_eltwise(1.0f, dnnl::algorithm::eltwise_swish, 1.0f, 0.0f);
      break;
    case DenseActivation::kLinear:
      break;
  }
}

// body(i0, i1) over [0, n): split evenly across the threads when n is large,
// else on this thread. (Branching here rather than `omp parallel if (...)`:
// a one-thread region still builds a team, which allocates in libgomp.)
template <typename Body>
void ParallelFor(int64_t n, Body body) {
  if (n <= kParallelThreshold) {
    body(0, n);
    return;
  }
#pragma omp parallel
  {
    const int64_t threads = omp_get_num_threads();
    const int64_t chunk = ((n + threads - 1) / threads + 15) & ~int64_t{15};
    const int64_t begin = std::min(n, chunk * omp_get_thread_num());
    body(begin, std::min(n, begin + chunk));
  }
}

// Columns [j0, j1) of GradAndBiasSumLoop, on one thread.
template <typename Deriv>
inline void GradAndBiasSumColumns(int64_t batch, int64_t out, int64_t j0, int64_t j1,
                                  const float* __restrict y, float* __restrict g,
                                  float* __restrict db, Deriv deriv) {
  if (db != nullptr) {
    for (int64_t j = j0; j < j1; ++j) db[j] = 0.0f;
    for (int64_t r = 0; r < batch; ++r) {
      float* __restrict row = g + r * out;
      const float* __restrict act = y + r * out;
#pragma omp simd
      for (int64_t j = j0; j < j1; ++j) row[j] *= deriv(act[j]);
      // The row is in L1 now; a separate loop vectorizes where a fused one does not.
#pragma omp simd
      for (int64_t j = j0; j < j1; ++j) db[j] += row[j];
    }
  } else {
    for (int64_t r = 0; r < batch; ++r) {
      float* __restrict row = g + r * out;
      const float* __restrict act = y + r * out;
#pragma omp simd
      for (int64_t j = j0; j < j1; ++j) row[j] *= deriv(act[j]);
    }
  }
}

// dz = dy ⊙ f'(y) in place over g: [batch, out], and (unless db is null)
// db[j] = Σ_r dz[r, j] summed row by row — the same order whatever the
// thread count, so the result is deterministic. `deriv` maps y to f'.
// Threads split the columns in cache-line multiples.
template <typename Deriv>
void GradAndBiasSumLoop(int64_t batch, int64_t out, const float* y, float* g, float* db,
                        Deriv deriv) {
  if (batch * out <= kParallelThreshold || out < 32) {
    GradAndBiasSumColumns(batch, out, 0, out, y, g, db, deriv);
    return;
  }
#pragma omp parallel
  {
    const int64_t threads = omp_get_num_threads();
    const int64_t chunk = ((out + threads - 1) / threads + 15) & ~int64_t{15};
    const int64_t j0 = std::min(out, chunk * omp_get_thread_num());
    GradAndBiasSumColumns(batch, out, j0, std::min(out, j0 + chunk), y, g, db, deriv);
  }
}

void ActivationGradAndBiasSum(const ActivationFn& f, int64_t batch, int64_t out, const float* y,
                              float* g, float* db) {
  namespace am = activation_math;
  const float alpha = f.alpha;
  switch (f.kind) {
    case DenseActivation::kLinear:
      if (db != nullptr) GradAndBiasSumLoop(batch, out, y, g, db, [](float) { return 1.0f; });
      return;
    case DenseActivation::kRelu:
      return GradAndBiasSumLoop(batch, out, y, g, db,
                                [](float v) { return am::ReluGradFromOutput(v); });
    case DenseActivation::kLeakyRelu:
      return GradAndBiasSumLoop(batch, out, y, g, db,
                                [alpha](float v) { return am::LeakyReluGradFromOutput(alpha, v); });
    case DenseActivation::kElu:
      return GradAndBiasSumLoop(batch, out, y, g, db,
                                [alpha](float v) { return am::EluGradFromOutput(alpha, v); });
    case DenseActivation::kSigmoid:
      return GradAndBiasSumLoop(batch, out, y, g, db,
                                [](float v) { return am::SigmoidGradFromOutput(v); });
    case DenseActivation::kTanh:
      return GradAndBiasSumLoop(batch, out, y, g, db,
                                [](float v) { return am::TanhGradFromOutput(v); });
    default: {
      // Not used in training (their derivative needs z): kept for the contract.
      const DenseActivation kind = f.kind;
      return GradAndBiasSumLoop(batch, out, y, g, db, [kind, alpha](float v) {
        return am::Derivative(kind, alpha, 0.0f, v);
      });
    }
  }
}

// body(t, i0, i1) over elements [i0, i1) of tensors[t], for all tensors: in
// one parallel region when there are enough elements (each large tensor split
// evenly across the threads, as a per-tensor loop would; small ones whole, to
// one thread each), else on this thread.
template <typename Body>
void ForEachSegment(absl::Span<Tensor* const> tensors, Body body) {
  int64_t total = 0;
  for (const Tensor* t : tensors) total += t->size();
  if (total <= kParallelThreshold) {
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

// One matmul primitive with its memory objects. The memory objects carry no
// buffer of their own: Run points them at the caller's tensors, then executes
// through the C API on a stack array, so a step allocates nothing here.
class MatmulPlan {
 public:
  MatmulPlan() = default;

  // dst = src · weights (+ bias) with `attr`'s post-ops.
  static MatmulPlan Create(const dnnl::engine& engine, const dnnl::memory::desc& src,
                           const dnnl::memory::desc& weights, const dnnl::memory::desc* bias,
                           const dnnl::memory::desc& dst, dnnl::primitive_attr attr) {
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    const dnnl::matmul::desc desc = bias != nullptr ? dnnl::matmul::desc(src, weights, *bias, dst)
                                                    : dnnl::matmul::desc(src, weights, dst);
    const dnnl::matmul::primitive_desc pd(desc, attr, engine);
    MatmulPlan plan;
    plan.primitive_ = dnnl::matmul(pd);
    plan.src_ = dnnl::memory(src, engine, DNNL_MEMORY_NONE);
    plan.weights_ = dnnl::memory(weights, engine, DNNL_MEMORY_NONE);
    if (bias != nullptr) plan.bias_ = dnnl::memory(*bias, engine, DNNL_MEMORY_NONE);
    plan.dst_ = dnnl::memory(dst, engine, DNNL_MEMORY_NONE);
    // Owns its buffer. None when the primitive needs none: each argument
    // passed costs an allocation inside dnnl_primitive_execute (its argument map).
    if (pd.scratchpad_desc().get_size() > 0) {
      plan.scratchpad_ = dnnl::memory(pd.scratchpad_desc(), engine);
    }
    return plan;
  }

  // src and weights are f32 or bf16, as the plan was created.
  absl::Status Run(const dnnl::stream& stream, const void* src, const void* weights,
                   const float* bias, float* dst) const {
    TRAIND_RETURN_IF_ERROR(SetHandle(src_, src));
    TRAIND_RETURN_IF_ERROR(SetHandle(weights_, weights));
    TRAIND_RETURN_IF_ERROR(SetHandle(dst_, dst));
    std::array<dnnl_exec_arg_t, 5> args = {{
        {DNNL_ARG_SRC, src_.get()},
        {DNNL_ARG_WEIGHTS, weights_.get()},
        {DNNL_ARG_DST, dst_.get()},
    }};
    int nargs = 3;
    if (scratchpad_) args[nargs++] = {DNNL_ARG_SCRATCHPAD, scratchpad_.get()};
    if (bias_) {
      TRAIND_RETURN_IF_ERROR(SetHandle(bias_, bias));
      args[nargs++] = {DNNL_ARG_BIAS, bias_.get()};
    }
    TRAIND_RETURN_IF_ERROR(
        FromDnnlStatus(dnnl_primitive_execute(primitive_.get(), stream.get(), nargs, args.data()),
                       "matmul execute"));
    return FromDnnlStatus(dnnl_stream_wait(stream.get()), "stream wait");
  }

 private:
  static absl::Status SetHandle(const dnnl::memory& memory, const void* data) {
    // oneDNN takes a non-const pointer for inputs too; it only reads them.
    return FromDnnlStatus(
        dnnl_memory_set_data_handle_v2(memory.get(), const_cast<void*>(data), nullptr),
        "set data handle");
  }

  dnnl::matmul primitive_;
  dnnl::memory src_, weights_, bias_, dst_, scratchpad_;
};

// A bf16 buffer of a fixed size, 64-byte aligned, allocated once.
using Bf16Buffer = std::unique_ptr<void, void (*)(void*)>;

Bf16Buffer AllocateBf16(int64_t elements) {
  void* p = ::operator new(static_cast<size_t>(std::max<int64_t>(elements, 32)) * 2, kAlignment);
  return Bf16Buffer(p, &FreeAligned);
}

// One f32 -> bf16 reorder (round to nearest even) of a plain [rows, cols]
// matrix, run like MatmulPlan: memory objects without buffers of their own,
// executed through the C API on a stack array.
class ReorderPlan {
 public:
  ReorderPlan() = default;

  static ReorderPlan Create(const dnnl::engine& engine, int64_t rows, int64_t cols) {
    using dt = dnnl::memory::data_type;
    using tag = dnnl::memory::format_tag;
    const dnnl::memory::desc src({rows, cols}, dt::f32, tag::ab);
    const dnnl::memory::desc dst({rows, cols}, dt::bf16, tag::ab);
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    ReorderPlan plan;
    plan.src_ = dnnl::memory(src, engine, DNNL_MEMORY_NONE);
    plan.dst_ = dnnl::memory(dst, engine, DNNL_MEMORY_NONE);
    const dnnl::reorder::primitive_desc pd(engine, src, engine, dst, attr);
    plan.primitive_ = dnnl::reorder(pd);
    if (pd.scratchpad_desc().get_size() > 0) {
      plan.scratchpad_ = dnnl::memory(pd.scratchpad_desc(), engine);
    }
    return plan;
  }

  absl::Status Run(const dnnl::stream& stream, const float* src, void* dst) const {
    TRAIND_RETURN_IF_ERROR(FromDnnlStatus(
        dnnl_memory_set_data_handle_v2(src_.get(), const_cast<float*>(src), nullptr),
        "set data handle"));
    TRAIND_RETURN_IF_ERROR(FromDnnlStatus(
        dnnl_memory_set_data_handle_v2(dst_.get(), dst, nullptr), "set data handle"));
    std::array<dnnl_exec_arg_t, 3> args = {{
        {DNNL_ARG_FROM, src_.get()},
        {DNNL_ARG_TO, dst_.get()},
    }};
    int nargs = 2;
    if (scratchpad_) args[nargs++] = {DNNL_ARG_SCRATCHPAD, scratchpad_.get()};
    TRAIND_RETURN_IF_ERROR(
        FromDnnlStatus(dnnl_primitive_execute(primitive_.get(), stream.get(), nargs, args.data()),
                       "reorder execute"));
    return FromDnnlStatus(dnnl_stream_wait(stream.get()), "stream wait");
  }

 private:
  dnnl::reorder primitive_;
  dnnl::memory src_, dst_, scratchpad_;
};

// The three matmuls of a dense layer of shape (batch, in, out), with
// `operand` x, w and dy (f32, or bf16 copies) and f32 bias, results and
// accumulation; the activation fused into the forward one as a post-op.
struct DenseMatmuls {
  MatmulPlan forward, backward_data, backward_weights;

  static DenseMatmuls Create(const dnnl::engine& engine, int64_t batch, int64_t in, int64_t out,
                             dnnl::memory::data_type operand, bool bias,
                             const ActivationFn& activation) {
    using dt = dnnl::memory::data_type;
    using tag = dnnl::memory::format_tag;
    using dims = dnnl::memory::dims;
    const dnnl::memory::desc x({batch, in}, operand, tag::ab);
    const dnnl::memory::desc w({in, out}, operand, tag::ab);
    const dnnl::memory::desc dy({batch, out}, operand, tag::ab);
    const dnnl::memory::desc b({1, out}, dt::f32, tag::ab);
    const dnnl::memory::desc y({batch, out}, dt::f32, tag::ab);
    const dnnl::memory::desc dx({batch, in}, dt::f32, tag::ab);
    const dnnl::memory::desc dw({in, out}, dt::f32, tag::ab);
    // Transposed views by strides, no copies: wᵀ: [out, in] over w's buffer,
    // xᵀ: [in, batch] over x's buffer.
    const dnnl::memory::desc w_t({out, in}, operand, dims{1, out});
    const dnnl::memory::desc x_t({in, batch}, operand, dims{1, in});

    dnnl::primitive_attr forward_attr;
    if (activation.kind != DenseActivation::kLinear) {
      dnnl::post_ops ops;
      AppendPostOp(activation, &ops);
      forward_attr.set_post_ops(ops);
    }
    DenseMatmuls m;
    // x: [batch, in] · w: [in, out] + b -> y: [batch, out], activation fused.
    m.forward = MatmulPlan::Create(engine, x, w, bias ? &b : nullptr, y, forward_attr);
    // dy: [batch, out] · wᵀ: [out, in] -> dx: [batch, in]
    m.backward_data = MatmulPlan::Create(engine, dy, w_t, nullptr, dx, dnnl::primitive_attr());
    // xᵀ: [in, batch] · dy: [batch, out] -> dw: [in, out]
    m.backward_weights = MatmulPlan::Create(engine, x_t, dy, nullptr, dw, dnnl::primitive_attr());
    return m;
  }
};

class CpuDenseKernel final : public DenseKernel {
 public:
  CpuDenseKernel(const dnnl::engine& engine, const dnnl::stream& stream, int64_t batch, int64_t in,
                 int64_t out, const DenseKernelOptions& options)
      : stream_(stream),
        batch_(batch),
        in_(in),
        out_(out),
        activation_(options.activation),
        bias_(options.bias) {
    DenseMatmuls plans =
        DenseMatmuls::Create(engine, batch, in, out, dnnl::memory::data_type::f32, bias_,
                             activation_);
    forward_ = std::move(plans.forward);
    backward_data_ = std::move(plans.backward_data);
    backward_weights_ = std::move(plans.backward_weights);
  }

  absl::Status Forward(const Tensor& x, const Tensor& w, const Tensor& b, Tensor* y) override {
    TRAIND_RETURN_IF_ERROR(CheckDenseForwardArgs(x, w, b, *y, batch_, in_, out_, bias_));
    return forward_.Run(stream_, x.f32(), w.f32(), bias_ ? b.f32() : nullptr, y->f32());
  }

  absl::Status Backward(const Tensor& x, const Tensor& w, const Tensor& y, Tensor* dy, Tensor* dw,
                        Tensor* db, Tensor* dx) override {
    TRAIND_RETURN_IF_ERROR(CheckDenseBackwardArgs(x, w, y, *dy, *dw, db, dx, batch_, in_, out_));
    float* g = dy->f32();
    // dy -> dz = dy ⊙ f'(z) (from y), and db = column sums of dz, in one pass.
    ActivationGradAndBiasSum(activation_, batch_, out_, y.f32(), g,
                             db != nullptr ? db->f32() : nullptr);
    TRAIND_RETURN_IF_ERROR(backward_weights_.Run(stream_, x.f32(), g, nullptr, dw->f32()));
    if (dx != nullptr) {
      TRAIND_RETURN_IF_ERROR(backward_data_.Run(stream_, g, w.f32(), nullptr, dx->f32()));
    }
    return absl::OkStatus();
  }

 private:
  dnnl::stream stream_;
  const int64_t batch_, in_, out_;
  const ActivationFn activation_;
  const bool bias_;
  MatmulPlan forward_, backward_data_, backward_weights_;
};

// The dense kernel of precision BF16: the three matmuls multiply bf16 copies
// of x, w and dz (made by reorders into buffers allocated here) and
// accumulate in fp32 into fp32 y, dx and dw. The activation, the bias and
// its gradient are fp32, as in CpuDenseKernel.
//
// Forward converts x and w and remembers which tensors it converted;
// Backward converts dz, and converts x or w again only when it is given
// other tensors than the forward pass (a caller that changes a tensor's
// values in place between the two breaks the Backward contract anyway).
class CpuBf16DenseKernel final : public DenseKernel {
 public:
  CpuBf16DenseKernel(const dnnl::engine& engine, const dnnl::stream& stream, int64_t batch,
                     int64_t in, int64_t out, const DenseKernelOptions& options)
      : stream_(stream),
        batch_(batch),
        in_(in),
        out_(out),
        activation_(options.activation),
        bias_(options.bias),
        x_bf16_(AllocateBf16(batch * in)),
        w_bf16_(AllocateBf16(in * out)),
        dz_bf16_(AllocateBf16(batch * out)) {
    // bf16 operands, fp32 bias, accumulation and results.
    DenseMatmuls plans =
        DenseMatmuls::Create(engine, batch, in, out, dnnl::memory::data_type::bf16, bias_,
                             activation_);
    forward_ = std::move(plans.forward);
    backward_data_ = std::move(plans.backward_data);
    backward_weights_ = std::move(plans.backward_weights);
    to_bf16_x_ = ReorderPlan::Create(engine, batch, in);
    to_bf16_w_ = ReorderPlan::Create(engine, in, out);
    to_bf16_dz_ = ReorderPlan::Create(engine, batch, out);
  }

  absl::Status Forward(const Tensor& x, const Tensor& w, const Tensor& b, Tensor* y) override {
    TRAIND_RETURN_IF_ERROR(CheckDenseForwardArgs(x, w, b, *y, batch_, in_, out_, bias_));
    TRAIND_RETURN_IF_ERROR(ConvertX(x));
    TRAIND_RETURN_IF_ERROR(ConvertW(w));
    return forward_.Run(stream_, x_bf16_.get(), w_bf16_.get(), bias_ ? b.f32() : nullptr,
                        y->f32());
  }

  absl::Status Backward(const Tensor& x, const Tensor& w, const Tensor& y, Tensor* dy, Tensor* dw,
                        Tensor* db, Tensor* dx) override {
    TRAIND_RETURN_IF_ERROR(CheckDenseBackwardArgs(x, w, y, *dy, *dw, db, dx, batch_, in_, out_));
    float* g = dy->f32();
    // dy -> dz = dy ⊙ f'(z) (from y), and db = column sums of dz, in one pass.
    ActivationGradAndBiasSum(activation_, batch_, out_, y.f32(), g,
                             db != nullptr ? db->f32() : nullptr);
    TRAIND_RETURN_IF_ERROR(to_bf16_dz_.Run(stream_, g, dz_bf16_.get()));
    if (x.f32() != x_converted_) TRAIND_RETURN_IF_ERROR(ConvertX(x));
    TRAIND_RETURN_IF_ERROR(
        backward_weights_.Run(stream_, x_bf16_.get(), dz_bf16_.get(), nullptr, dw->f32()));
    if (dx != nullptr) {
      if (w.f32() != w_converted_) TRAIND_RETURN_IF_ERROR(ConvertW(w));
      TRAIND_RETURN_IF_ERROR(
          backward_data_.Run(stream_, dz_bf16_.get(), w_bf16_.get(), nullptr, dx->f32()));
    }
    return absl::OkStatus();
  }

 private:
  absl::Status ConvertX(const Tensor& x) {
    x_converted_ = nullptr;
    TRAIND_RETURN_IF_ERROR(to_bf16_x_.Run(stream_, x.f32(), x_bf16_.get()));
    x_converted_ = x.f32();
    return absl::OkStatus();
  }
  absl::Status ConvertW(const Tensor& w) {
    w_converted_ = nullptr;
    TRAIND_RETURN_IF_ERROR(to_bf16_w_.Run(stream_, w.f32(), w_bf16_.get()));
    w_converted_ = w.f32();
    return absl::OkStatus();
  }

  dnnl::stream stream_;
  const int64_t batch_, in_, out_;
  const ActivationFn activation_;
  const bool bias_;
  Bf16Buffer x_bf16_, w_bf16_, dz_bf16_;  // [batch, in], [in, out], [batch, out]
  // The tensors whose values x_bf16_ and w_bf16_ hold (null: none).
  const float* x_converted_ = nullptr;
  const float* w_converted_ = nullptr;
  MatmulPlan forward_, backward_data_, backward_weights_;
  ReorderPlan to_bf16_x_, to_bf16_w_, to_bf16_dz_;
};

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
    dx[r * n + j] = static_cast<float>(scale * (count * dy[r * n + j] - sum_dy - xhat * sum_dy_xhat));
  }
}

// A loss on the host: loss_math.h's arithmetic, rows in order.
class CpuLossKernel final : public LossKernel {
 public:
  explicit CpuLossKernel(LossKernelOptions options)
      : options_(std::move(options)),
        params_(ParamsOf(options_)),
        slots_(static_cast<size_t>(options_.slots), 0.0) {}

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
    slots_[static_cast<size_t>(slot)] = loss_math::SumOnHost(
        params_, outputs.f32(), batch, classes ? targets.s32() : nullptr,
        classes ? nullptr : targets.f32(),
        grad_scale == kStoredGradScale ? stored_scale_ : grad_scale,
        grad != nullptr && batch > 0 ? grad->f32() : nullptr,
        predictions != nullptr && batch > 0 ? predictions->f32() : nullptr);
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
  const LossKernelOptions options_;
  LossParams params_;
  std::vector<double> slots_;
  double stored_scale_ = 0;
};

class CpuBackend final : public Backend {
 public:
  CpuBackend(dnnl::engine engine, dnnl::stream stream, traind::v1::Precision precision)
      : engine_(std::move(engine)), stream_(std::move(stream)), precision_(precision) {}

  std::string name() const override {
    return precision_ == traind::v1::BF16 ? "cpu (oneDNN, bf16 matmuls)" : "cpu (oneDNN)";
  }

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
    for (int64_t i = 0; i < n; ++i) {
      std::memcpy(out + i * cols, src + rows[static_cast<size_t>(i)] * cols,
                  static_cast<size_t>(cols) * sizeof(float));
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
    try {
      if (precision_ == traind::v1::BF16) {
        return std::unique_ptr<DenseKernel>(
            new CpuBf16DenseKernel(engine_, stream_, batch, in, out, options));
      }
      return std::unique_ptr<DenseKernel>(
          new CpuDenseKernel(engine_, stream_, batch, in, out, options));
    } catch (const dnnl::error& e) {
      return FromDnnl(e,
                      absl::StrFormat("dense kernel [%d, %d] -> [%d, %d]", batch, in, batch, out));
    } catch (const std::bad_alloc&) {
      return OutOfMemoryError("dense kernel: out of host memory");
    }
  }

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
    return SgdUpdateMany(step, grads,
                         velocity != nullptr ? absl::Span<Tensor* const>(velocities)
                                             : absl::Span<Tensor* const>(),
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
                                           const Tensor& x, const Tensor& gamma,
                                           const Tensor& beta, const Tensor& mean,
                                           const Tensor& sq, Tensor* running_mean,
                                           Tensor* running_var, Tensor* rstd,
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
      CheckCpuPrecision(precision, precision == traind::v1::BF16 && CpuSupportsBf16()));
  try {
    dnnl::engine engine(dnnl::engine::kind::cpu, 0);
    dnnl::stream stream(engine);
    return std::unique_ptr<Backend>(
        new CpuBackend(std::move(engine), std::move(stream), precision));
  } catch (const dnnl::error& e) {
    return FromDnnl(e, "cannot create the CPU engine");
  }
}

}  // namespace traind::engine
