#include "worker/engine/backend/cpu/cpu_backend.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <new>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "oneapi/dnnl/dnnl.hpp"
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

absl::Status CheckShape(const Tensor& t, DType dtype, int64_t rows, int64_t cols,
                        absl::string_view name) {
  if (t.empty() || t.dtype() != dtype || t.rows() != rows || t.cols() != cols) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: expected a [%d, %d] tensor, got [%d, %d]%s", name, rows, cols, t.rows(), t.cols(),
        t.empty() ? " (empty)" : ""));
  }
  return absl::OkStatus();
}

absl::Status CheckSameSize(const Tensor& a, const Tensor& b, absl::string_view what) {
  if (a.size() != b.size() || a.dtype() != DType::kF32 || b.dtype() != DType::kF32) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: tensor sizes differ (%d vs %d)", what, a.size(), b.size()));
  }
  return absl::OkStatus();
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
    const dnnl::matmul::desc desc = bias != nullptr
                                        ? dnnl::matmul::desc(src, weights, *bias, dst)
                                        : dnnl::matmul::desc(src, weights, dst);
    const dnnl::matmul::primitive_desc pd(desc, attr, engine);
    MatmulPlan plan;
    plan.primitive_ = dnnl::matmul(pd);
    plan.src_ = dnnl::memory(src, engine, DNNL_MEMORY_NONE);
    plan.weights_ = dnnl::memory(weights, engine, DNNL_MEMORY_NONE);
    if (bias != nullptr) plan.bias_ = dnnl::memory(*bias, engine, DNNL_MEMORY_NONE);
    plan.dst_ = dnnl::memory(dst, engine, DNNL_MEMORY_NONE);
    plan.scratchpad_ = dnnl::memory(pd.scratchpad_desc(), engine);  // owns its buffer
    return plan;
  }

  absl::Status Run(const dnnl::stream& stream, const float* src, const float* weights,
                   const float* bias, float* dst) const {
    TRAIND_RETURN_IF_ERROR(SetHandle(src_, src));
    TRAIND_RETURN_IF_ERROR(SetHandle(weights_, weights));
    TRAIND_RETURN_IF_ERROR(SetHandle(dst_, dst));
    std::array<dnnl_exec_arg_t, 5> args = {{
        {DNNL_ARG_SRC, src_.get()},
        {DNNL_ARG_WEIGHTS, weights_.get()},
        {DNNL_ARG_DST, dst_.get()},
        {DNNL_ARG_SCRATCHPAD, scratchpad_.get()},
        {DNNL_ARG_BIAS, nullptr},
    }};
    int nargs = 4;
    if (bias_) {
      TRAIND_RETURN_IF_ERROR(SetHandle(bias_, bias));
      args[4].memory = bias_.get();
      nargs = 5;
    }
    TRAIND_RETURN_IF_ERROR(FromDnnlStatus(
        dnnl_primitive_execute(primitive_.get(), stream.get(), nargs, args.data()),
        "matmul execute"));
    return FromDnnlStatus(dnnl_stream_wait(stream.get()), "stream wait");
  }

 private:
  static absl::Status SetHandle(const dnnl::memory& memory, const float* data) {
    // oneDNN takes a non-const pointer for inputs too; it only reads them.
    return FromDnnlStatus(
        dnnl_memory_set_data_handle_v2(memory.get(), const_cast<float*>(data), nullptr),
        "set data handle");
  }

  dnnl::matmul primitive_;
  dnnl::memory src_, weights_, bias_, dst_, scratchpad_;
};

class CpuDenseKernel final : public DenseKernel {
 public:
  CpuDenseKernel(const dnnl::engine& engine, const dnnl::stream& stream, int64_t batch,
                 int64_t in, int64_t out, DenseActivation activation)
      : stream_(stream), batch_(batch), in_(in), out_(out), activation_(activation) {
    using dt = dnnl::memory::data_type;
    using tag = dnnl::memory::format_tag;
    using dims = dnnl::memory::dims;
    const dnnl::memory::desc x({batch, in}, dt::f32, tag::ab);
    const dnnl::memory::desc w({in, out}, dt::f32, tag::ab);
    const dnnl::memory::desc b({1, out}, dt::f32, tag::ab);
    const dnnl::memory::desc y({batch, out}, dt::f32, tag::ab);
    // Transposed views by strides, no copies: wᵀ: [out, in] over w's buffer,
    // xᵀ: [in, batch] over x's buffer.
    const dnnl::memory::desc w_t({out, in}, dt::f32, dims{1, out});
    const dnnl::memory::desc x_t({in, batch}, dt::f32, dims{1, in});

    dnnl::primitive_attr forward_attr;
    if (activation == DenseActivation::kRelu) {
      dnnl::post_ops ops;
      ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_relu, 0.0f, 0.0f);
      forward_attr.set_post_ops(ops);
    }
    // x: [batch, in] · w: [in, out] + b -> y: [batch, out], activation fused.
    forward_ = MatmulPlan::Create(engine, x, w, &b, y, forward_attr);
    // dy: [batch, out] · wᵀ: [out, in] -> dx: [batch, in]
    backward_data_ = MatmulPlan::Create(engine, y, w_t, nullptr, x, dnnl::primitive_attr());
    // xᵀ: [in, batch] · dy: [batch, out] -> dw: [in, out]
    backward_weights_ = MatmulPlan::Create(engine, x_t, y, nullptr, w, dnnl::primitive_attr());
  }

  absl::Status Forward(const Tensor& x, const Tensor& w, const Tensor& b, Tensor* y) override {
    TRAIND_RETURN_IF_ERROR(CheckShape(x, DType::kF32, batch_, in_, "dense forward x"));
    TRAIND_RETURN_IF_ERROR(CheckShape(w, DType::kF32, in_, out_, "dense forward w"));
    TRAIND_RETURN_IF_ERROR(CheckShape(b, DType::kF32, 1, out_, "dense forward b"));
    TRAIND_RETURN_IF_ERROR(CheckShape(*y, DType::kF32, batch_, out_, "dense forward y"));
    return forward_.Run(stream_, x.f32(), w.f32(), b.f32(), y->f32());
  }

  absl::Status Backward(const Tensor& x, const Tensor& w, const Tensor& y, Tensor* dy,
                        Tensor* dw, Tensor* db, Tensor* dx) override {
    TRAIND_RETURN_IF_ERROR(CheckShape(x, DType::kF32, batch_, in_, "dense backward x"));
    TRAIND_RETURN_IF_ERROR(CheckShape(w, DType::kF32, in_, out_, "dense backward w"));
    TRAIND_RETURN_IF_ERROR(CheckShape(y, DType::kF32, batch_, out_, "dense backward y"));
    TRAIND_RETURN_IF_ERROR(CheckShape(*dy, DType::kF32, batch_, out_, "dense backward dy"));
    TRAIND_RETURN_IF_ERROR(CheckShape(*dw, DType::kF32, in_, out_, "dense backward dw"));
    TRAIND_RETURN_IF_ERROR(CheckShape(*db, DType::kF32, 1, out_, "dense backward db"));
    if (dx != nullptr) {
      TRAIND_RETURN_IF_ERROR(CheckShape(*dx, DType::kF32, batch_, in_, "dense backward dx"));
    }
    float* g = dy->f32();
    const int64_t n = batch_ * out_;
    if (activation_ == DenseActivation::kRelu) {
      // relu'(z) = [z > 0] = [y > 0]. dy: [batch, out] -> dz: [batch, out]
      const float* act = y.f32();
#pragma omp parallel for simd if (n > kParallelThreshold) schedule(static)
      for (int64_t i = 0; i < n; ++i) g[i] = act[i] > 0.0f ? g[i] : 0.0f;
    }
    // dz: [batch, out] -> db: [out], summed row by row (a fixed order).
    float* bias_grad = db->f32();
    const int64_t out = out_;
    const int64_t batch = batch_;
    std::fill(bias_grad, bias_grad + out, 0.0f);
    for (int64_t r = 0; r < batch; ++r) {
      const float* row = g + r * out;
#pragma omp simd
      for (int64_t j = 0; j < out; ++j) bias_grad[j] += row[j];
    }
    TRAIND_RETURN_IF_ERROR(backward_weights_.Run(stream_, x.f32(), g, nullptr, dw->f32()));
    if (dx != nullptr) {
      TRAIND_RETURN_IF_ERROR(backward_data_.Run(stream_, g, w.f32(), nullptr, dx->f32()));
    }
    return absl::OkStatus();
  }

 private:
  dnnl::stream stream_;
  const int64_t batch_, in_, out_;
  const DenseActivation activation_;
  MatmulPlan forward_, backward_data_, backward_weights_;
};

class CpuBackend final : public Backend {
 public:
  CpuBackend(dnnl::engine engine, dnnl::stream stream)
      : engine_(std::move(engine)), stream_(std::move(stream)) {}

  std::string name() const override { return "cpu (oneDNN)"; }

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
      int64_t batch, int64_t in, int64_t out, DenseActivation activation) override {
    if (batch <= 0 || in <= 0 || out <= 0) {
      return absl::InvalidArgumentError(
          absl::StrFormat("CreateDenseKernel: bad shape batch %d, in %d, out %d", batch, in, out));
    }
    try {
      return std::unique_ptr<DenseKernel>(
          new CpuDenseKernel(engine_, stream_, batch, in, out, activation));
    } catch (const dnnl::error& e) {
      return FromDnnl(e, absl::StrFormat("dense kernel [%d, %d] -> [%d, %d]", batch, in, batch, out));
    } catch (const std::bad_alloc&) {
      return OutOfMemoryError("dense kernel: out of host memory");
    }
  }

  absl::Status SoftmaxCrossEntropy(const Tensor& logits, const Tensor& labels, Tensor* dlogits,
                                   LossStats* stats) override {
    const int64_t batch = logits.rows();
    const int64_t classes = logits.cols();
    TRAIND_RETURN_IF_ERROR(CheckShape(logits, DType::kF32, batch, classes, "softmax logits"));
    if (labels.dtype() != DType::kS32 || labels.size() != batch) {
      return absl::InvalidArgumentError("softmax cross-entropy: labels must be s32 [batch]");
    }
    if (dlogits != nullptr) {
      TRAIND_RETURN_IF_ERROR(CheckShape(*dlogits, DType::kF32, batch, classes, "softmax dlogits"));
    }
    const float* z = logits.f32();
    const int32_t* y = labels.s32();
    const float inv_batch = 1.0f / static_cast<float>(batch);
    double loss_sum = 0;
    int64_t correct = 0;
    for (int64_t r = 0; r < batch; ++r) {
      const float* row = z + r * classes;
      const int32_t label = y[r];
      if (label < 0 || label >= classes) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "softmax cross-entropy: label %d of row %d is not in [0, %d)", label, r, classes));
      }
      // Log-sum-exp shifted by the row maximum: no overflow, no underflow to 0.
      int64_t argmax = 0;
      for (int64_t j = 1; j < classes; ++j) {
        if (row[j] > row[argmax]) argmax = j;
      }
      const float max = row[argmax];
      double sum = 0;
      for (int64_t j = 0; j < classes; ++j) sum += std::exp(static_cast<double>(row[j] - max));
      const double log_sum = std::log(sum);
      // -log softmax(z)[label] = max + log Σ exp(z - max) - z[label]
      loss_sum += log_sum - static_cast<double>(row[label] - max);
      correct += argmax == label ? 1 : 0;
      if (dlogits != nullptr) {
        float* grad = dlogits->f32() + r * classes;
        const double inv_sum = 1.0 / sum;
        for (int64_t j = 0; j < classes; ++j) {
          const float p = static_cast<float>(std::exp(static_cast<double>(row[j] - max)) * inv_sum);
          grad[j] = (p - (j == label ? 1.0f : 0.0f)) * inv_batch;
        }
      }
    }
    stats->loss_sum = loss_sum;
    stats->correct = correct;
    return absl::OkStatus();
  }

  absl::Status SgdUpdate(float learning_rate, float momentum, const Tensor& grad,
                         Tensor* velocity, Tensor* param) override {
    TRAIND_RETURN_IF_ERROR(CheckSameSize(grad, *param, "SgdUpdate"));
    const int64_t n = param->size();
    float* w = param->f32();
    const float* g = grad.f32();
    const float lr = learning_rate;
    if (momentum == 0.0f && velocity == nullptr) {
#pragma omp parallel for simd if (n > kParallelThreshold) schedule(static)
      for (int64_t i = 0; i < n; ++i) w[i] -= lr * g[i];
      return absl::OkStatus();
    }
    if (velocity == nullptr) return absl::InvalidArgumentError("SgdUpdate: momentum without velocity");
    TRAIND_RETURN_IF_ERROR(CheckSameSize(grad, *velocity, "SgdUpdate"));
    float* v = velocity->f32();
    const float mu = momentum;
#pragma omp parallel for simd if (n > kParallelThreshold) schedule(static)
    for (int64_t i = 0; i < n; ++i) {
      v[i] = mu * v[i] + g[i];
      w[i] -= lr * v[i];
    }
    return absl::OkStatus();
  }

  absl::Status AdamUpdate(const AdamStep& step, const Tensor& grad, Tensor* m, Tensor* v,
                          Tensor* param) override {
    TRAIND_RETURN_IF_ERROR(CheckSameSize(grad, *param, "AdamUpdate"));
    TRAIND_RETURN_IF_ERROR(CheckSameSize(grad, *m, "AdamUpdate"));
    TRAIND_RETURN_IF_ERROR(CheckSameSize(grad, *v, "AdamUpdate"));
    // Scalars in double, cast to float once, as PyTorch does with its Python
    // float arguments.
    const double bias_correction1 = 1.0 - std::pow(step.beta1, static_cast<double>(step.step));
    const double bias_correction2 = 1.0 - std::pow(step.beta2, static_cast<double>(step.step));
    const float step_size = static_cast<float>(step.learning_rate / bias_correction1);
    const float sqrt_bc2 = static_cast<float>(std::sqrt(bias_correction2));
    const float b1 = static_cast<float>(step.beta1), b2 = static_cast<float>(step.beta2);
    const float one_minus_b1 = static_cast<float>(1.0 - step.beta1);
    const float one_minus_b2 = static_cast<float>(1.0 - step.beta2);
    const float eps = static_cast<float>(step.epsilon);
    const int64_t n = param->size();
    float* w = param->f32();
    float* mm = m->f32();
    float* vv = v->f32();
    const float* g = grad.f32();
#pragma omp parallel for simd if (n > kParallelThreshold) schedule(static)
    for (int64_t i = 0; i < n; ++i) {
      mm[i] = b1 * mm[i] + one_minus_b1 * g[i];
      vv[i] = b2 * vv[i] + one_minus_b2 * g[i] * g[i];
      // w -= lr/bc1 · m / (sqrt(v)/sqrt(bc2) + eps)
      w[i] -= step_size * (mm[i] / (std::sqrt(vv[i]) / sqrt_bc2 + eps));
    }
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
};

}  // namespace

absl::StatusOr<std::unique_ptr<Backend>> CreateCpuBackend() {
  try {
    dnnl::engine engine(dnnl::engine::kind::cpu, 0);
    dnnl::stream stream(engine);
    return std::unique_ptr<Backend>(new CpuBackend(std::move(engine), std::move(stream)));
  } catch (const dnnl::error& e) {
    return FromDnnl(e, "cannot create the CPU engine");
  }
}

}  // namespace traind::engine
