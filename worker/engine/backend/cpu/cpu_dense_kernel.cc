#include "worker/engine/backend/cpu/cpu_dense_kernel.h"

#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <exception>
#include <memory>
#include <new>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status.h"
#include "oneapi/dnnl/dnnl.hpp"
#include "worker/engine/backend/activation_math.h"
#include "worker/engine/backend/cpu/cpu_parallel.h"
#include "worker/engine/backend/cpu/onednn_plans.h"
#include "worker/engine/backend/cpu/onednn_status.h"
#include "worker/engine/backend/tensor_checks.h"

namespace traind::engine::cpu {
namespace {

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

// Up to this many outputs (batch × out), one thread computes a layer's dz
// and db. Measured on 2 cores, layer 784-512 at batch 128 (65,536 outputs):
// split by columns, the pass took 0.020 ms, and the whole backward of the
// layer was 0.03 ms slower than with the pass on one thread — its products
// read all of dz, so each core then pulls the other's half of every row.
constexpr int64_t kSerialActivationGradElements = int64_t{1} << 16;

// dz = dy ⊙ f'(y) in place over g: [batch, out], and (unless db is null)
// db[j] = Σ_r dz[r, j] summed row by row — the same order whatever the
// thread count, so the result is deterministic. `deriv` maps y to f'.
// Threads split the columns in cache-line multiples.
template <typename Deriv>
void GradAndBiasSumLoop(int64_t batch, int64_t out, const float* y, float* g, float* db,
                        Deriv deriv) {
  if (!Forks(batch * out, kSerialActivationGradElements) || out < 32) {
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

// A bf16 buffer of a fixed size, 64-byte aligned, allocated once.
using Bf16Buffer = std::unique_ptr<void, void (*)(void*)>;

Bf16Buffer AllocateBf16(int64_t elements) {
  void* p = ::operator new(static_cast<size_t>(std::max<int64_t>(elements, 32)) * 2, kAlignment);
  return Bf16Buffer(p, &FreeAligned);
}

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

// y[r, :] = f(y[r, :] + Σ partials[r, :] + b) for the rows [r0, r1) of
// [batch, out] matrices; f: y -> y of the activation.
template <typename F>
void SumBiasActivateRows(int64_t r0, int64_t r1, int64_t out,
                         absl::Span<const std::unique_ptr<float, void (*)(void*)>> partials,
                         const float* b, float* y, F f) {
  for (int64_t r = r0; r < r1; ++r) {
    float* __restrict row = y + r * out;
    for (const auto& partial : partials) {
      const float* __restrict src = partial.get() + r * out;
#pragma omp simd
      for (int64_t j = 0; j < out; ++j) row[j] += src[j];
    }
    if (b != nullptr) {
#pragma omp simd
      for (int64_t j = 0; j < out; ++j) row[j] = f(row[j] + b[j]);
    } else {
#pragma omp simd
      for (int64_t j = 0; j < out; ++j) row[j] = f(row[j]);
    }
  }
}

// The f32 dense kernel of a layer big enough to split (SplitsInRowSlabs),
// or of any layer whose products cpu_gemm.h gives to OpenBLAS (then with one
// slab when it is not split, and OpenBLAS's own threads):
// thread t owns the row slab [r0, r1) of w (cpu_parallel.h SlabBegin over
// its `in` rows) and runs one single-threaded matmul per op on it (oneDNN's,
// or OpenBLAS's for the products GemmLibraries names) —
//   forward:  y = Σ_t x[:, r0:r1] · w[r0:r1, :] (thread 0's term in y, the
//             others' in buffers of their own), then + b and the activation
//             in one pass over y after a barrier;
//   weights:  dw[r0:r1, :] = x[:, r0:r1]ᵀ · dz;
//   data:     dx[:, r0:r1] = dz · w[r0:r1, :]ᵀ;
// and the optimizers' updates split w, dw and their state in the same flat
// ranges (ForEachSegment) — or, for SGD with momentum on one rank, each
// thread updates its rows in the backward pass (BackwardUpdate: the weight
// gradient accumulates into v in its matmul, v = xᵀ·dz + momentum·v, and w
// -= lr·v follows on the same rows, so dw is never written or read back). So every line of w, dw
// and the optimizer state stays in one core's cache from the forward pass to the update: an update
// that writes lines another core has read or written runs about 4× slower
// (measured on 2 cores: 0.06 ms against 0.26–0.30 ms for SGD with momentum
// over 535k parameters), and oneDNN's own split of one multi-threaded
// matmul follows its own blocking, different for each op and each ISA.
class CpuSplitDenseKernel final : public DenseKernel {
 public:
  // `libraries` for every slab; `blas` loaded when they name OpenBLAS.
  CpuSplitDenseKernel(const dnnl::engine& engine, int threads, int64_t batch, int64_t in,
                      int64_t out, const DenseKernelOptions& options, GemmLibraries libraries,
                      const OpenBlas* blas)
      : batch_(batch),
        in_(in),
        out_(out),
        activation_(options.activation),
        bias_(options.bias),
        libraries_(libraries),
        blas_(blas) {
    for (int t = 0; t < threads; ++t) {
      const int64_t r0 = SlabBegin(in, threads, t);
      const int64_t r1 = SlabBegin(in, threads, t + 1);
      if (r0 < r1) parts_.push_back(Part{r0, r1, {}, {}, {}, {}, {}});
    }
    statuses_.resize(parts_.size());
    partials_.reserve(parts_.size());
    for (size_t p = 1; p < parts_.size(); ++p) {
      partials_.emplace_back(static_cast<float*>(::operator new(
                                 static_cast<size_t>(batch * out) * sizeof(float), kAlignment)),
                             &FreeAligned);
    }
    engine_ = engine;
    PlanParts([this](Part* part) { MakePlans(engine_, part); });
  }

  absl::Status Forward(const Tensor& x, const Tensor& w, const Tensor& b, Tensor* y) override {
    TRAIND_RETURN_IF_ERROR(CheckDenseForwardArgs(x, w, b, *y, batch_, in_, out_, bias_));
    const float* xs = x.f32();
    const float* ws = w.f32();
    const float* bs = bias_ ? b.f32() : nullptr;
    float* ys = y->f32();
    if (parts_.size() == 1) {  // no team: a one-thread region still allocates in libgomp
      statuses_[0] = ForwardPart(0, xs, ws, ys);
      Epilogue(0, batch_, bs, ys);
      return FirstError();
    }
#pragma omp parallel
    {
      const size_t tid = static_cast<size_t>(omp_get_thread_num());
      const size_t nt = static_cast<size_t>(omp_get_num_threads());
      for (size_t p = tid; p < parts_.size(); p += nt) statuses_[p] = ForwardPart(p, xs, ws, ys);
#pragma omp barrier
      const int64_t r0 = SlabBegin(batch_, static_cast<int64_t>(nt), static_cast<int64_t>(tid));
      const int64_t r1 = SlabBegin(batch_, static_cast<int64_t>(nt), static_cast<int64_t>(tid) + 1);
      Epilogue(r0, r1, bs, ys);
    }
    return FirstError();
  }

  absl::Status Backward(const Tensor& x, const Tensor& w, const Tensor& y, Tensor* dy, Tensor* dw,
                        Tensor* db, Tensor* dx) override {
    TRAIND_RETURN_IF_ERROR(CheckDenseBackwardArgs(x, w, y, *dy, *dw, db, dx, batch_, in_, out_));
    float* g = dy->f32();
    // dy -> dz = dy ⊙ f'(y), and db.
    ActivationGradAndBiasSum(activation_, batch_, out_, y.f32(), g,
                             db != nullptr ? db->f32() : nullptr);
    const float* xs = x.f32();
    const float* ws = w.f32();
    float* dws = dw->f32();
    float* dxs = dx != nullptr ? dx->f32() : nullptr;
    if (parts_.size() == 1) {
      statuses_[0] = BackwardPart(0, xs, ws, g, dws, dxs);
      return FirstError();
    }
#pragma omp parallel
    {
      const size_t nt = static_cast<size_t>(omp_get_num_threads());
      for (size_t p = static_cast<size_t>(omp_get_thread_num()); p < parts_.size(); p += nt) {
        statuses_[p] = BackwardPart(p, xs, ws, g, dws, dxs);
      }
    }
    return FirstError();
  }

  // Split in row slabs: each thread's rows of w, v and the product stay on
  // its core from the forward pass to the update.
  bool UpdatesInBackward() const override { return parts_.size() > 1; }

  absl::Status BackwardUpdate(const Tensor& x, Tensor* w, const Tensor& y, Tensor* dy, Tensor* db,
                              Tensor* dx, const SgdStep& sgd, Tensor* velocity) override {
    if (!UpdatesInBackward())
      return DenseKernel::BackwardUpdate(x, w, y, dy, db, dx, sgd, velocity);
    if (!(sgd.momentum > 0) || sgd.nesterov) {
      return absl::InvalidArgumentError(
          "dense backward update: SGD with momentum > 0 and without Nesterov only");
    }
    TRAIND_RETURN_IF_ERROR(
        CheckDenseBackwardArgs(x, *w, y, *dy, *velocity, db, dx, batch_, in_, out_));
    const float momentum = static_cast<float>(sgd.momentum);
    if (momentum != planned_momentum_) {
      // Once per job: the spec's momentum is the sum post-op's scale.
      try {
        PlanParts([&](Part* part) { MakeMomentumPlan(momentum, part); });
      } catch (const dnnl::error& e) {
        return FromDnnl(e, "dense backward update: planning the momentum product");
      } catch (const std::bad_alloc&) {
        return OutOfMemoryError("dense backward update: out of host memory");
      }
      planned_momentum_ = momentum;
    }
    float* g = dy->f32();
    ActivationGradAndBiasSum(activation_, batch_, out_, y.f32(), g,
                             db != nullptr ? db->f32() : nullptr);
    const float* xs = x.f32();
    float* ws = w->f32();
    float* vs = velocity->f32();
    float* dxs = dx != nullptr ? dx->f32() : nullptr;
    const float lr = static_cast<float>(sgd.learning_rate);
    const float wd = static_cast<float>(sgd.weight_decay);
#pragma omp parallel
    {
      const size_t nt = static_cast<size_t>(omp_get_num_threads());
      for (size_t p = static_cast<size_t>(omp_get_thread_num()); p < parts_.size(); p += nt) {
        statuses_[p] = BackwardUpdatePart(p, xs, g, lr, wd, ws, vs, dxs);
      }
    }
    return FirstError();
  }

 private:
  struct Part {
    int64_t r0, r1;
    MatmulPlan forward, weights, data;
    // v[r0:r1, :] = xᵀ·dz + momentum·v[r0:r1, :] (BackwardUpdate's).
    MatmulPlan weights_momentum;
    dnnl::stream stream;
  };

  // plan(part) for every part. One part runs on the calling thread outside
  // any region, so its oneDNN products are planned there, for all the
  // threads; else each part's on a thread of a parallel region, with one
  // thread as the nthreads of its task: oneDNN plans them for one thread, as
  // they run. Rethrows the first exception.
  template <typename Plan>
  void PlanParts(Plan plan) {
    if (parts_.size() == 1) {
      plan(&parts_[0]);
      return;
    }
    std::exception_ptr error;
#pragma omp parallel for schedule(static, 1)
    for (size_t p = 0; p < parts_.size(); ++p) {
      omp_set_num_threads(1);
      try {
        plan(&parts_[p]);
      } catch (...) {
#pragma omp critical(traind_split_dense_error)
        error = std::current_exception();
      }
    }
    if (error) std::rethrow_exception(error);
  }

  // Part p's term of the forward product: into y for part 0, else into its
  // partial buffer.
  absl::Status ForwardPart(size_t p, const float* xs, const float* ws, float* ys) const {
    const Part& part = parts_[p];
    float* dst = p == 0 ? ys : partials_[p - 1].get();
    if (libraries_.forward_openblas) {
      // x[:, r0:r1] · w[r0:r1, :]: [batch, rows] · [rows, out].
      blas_->Sgemm(false, false, batch_, out_, part.r1 - part.r0, xs + part.r0, in_,
                   ws + part.r0 * out_, out_, 0.0f, dst, out_);
      return absl::OkStatus();
    }
    return part.forward.Run(part.stream, xs + part.r0, ws + part.r0 * out_, nullptr, dst);
  }

  // Part p's rows of dw and columns of dx (when dxs is not null).
  absl::Status BackwardPart(size_t p, const float* xs, const float* ws, const float* g, float* dws,
                            float* dxs) const {
    const Part& part = parts_[p];
    TRAIND_RETURN_IF_ERROR(
        part.weights.Run(part.stream, xs + part.r0, g, nullptr, dws + part.r0 * out_));
    if (dxs == nullptr) return absl::OkStatus();
    return DataPart(p, ws, g, dxs);
  }

  // Part p's rows of v (the momentum product) and columns of dx (when dxs
  // is not null, from w's rows before the update), then its rows of w.
  absl::Status BackwardUpdatePart(size_t p, const float* xs, const float* g, float lr, float wd,
                                  float* ws, float* vs, float* dxs) const {
    const Part& part = parts_[p];
    float* __restrict v = vs + part.r0 * out_;
    TRAIND_RETURN_IF_ERROR(part.weights_momentum.Run(part.stream, xs + part.r0, g, nullptr, v));
    if (dxs != nullptr) TRAIND_RETURN_IF_ERROR(DataPart(p, ws, g, dxs));
    float* __restrict w = ws + part.r0 * out_;
    const int64_t n = (part.r1 - part.r0) * out_;
    if (wd != 0.0f) {
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) {
        v[i] += wd * w[i];
        w[i] -= lr * v[i];
      }
    } else {
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) w[i] -= lr * v[i];
    }
    return absl::OkStatus();
  }

  // Part p's columns of dx = dz · w[r0:r1, :]ᵀ.
  absl::Status DataPart(size_t p, const float* ws, const float* g, float* dxs) const {
    const Part& part = parts_[p];
    if (libraries_.data_openblas) {
      // dz · w[r0:r1, :]ᵀ: [batch, out] · [out, rows] -> dx[:, r0:r1].
      blas_->Sgemm(false, true, batch_, part.r1 - part.r0, out_, g, out_, ws + part.r0 * out_, out_,
                   0.0f, dxs + part.r0, in_);
      return absl::OkStatus();
    }
    return part.data.Run(part.stream, g, ws + part.r0 * out_, nullptr, dxs + part.r0);
  }

  void MakePlans(const dnnl::engine& engine, Part* part) const {
    const int64_t rows = part->r1 - part->r0;
    if (!libraries_.forward_openblas) {
      part->forward = CreateSlabMatmul(engine, SlabProduct::kForward, batch_, in_, out_, rows);
    }
    part->weights = CreateSlabMatmul(engine, SlabProduct::kWeights, batch_, in_, out_, rows);
    if (!libraries_.data_openblas) {
      part->data = CreateSlabMatmul(engine, SlabProduct::kData, batch_, in_, out_, rows);
    }
    part->stream = dnnl::stream(engine);
  }

  void MakeMomentumPlan(float momentum, Part* part) const {
    part->weights_momentum = CreateSlabMatmul(engine_, SlabProduct::kWeights, batch_, in_, out_,
                                              part->r1 - part->r0, momentum);
  }

  void Epilogue(int64_t r0, int64_t r1, const float* b, float* y) const {
    namespace am = activation_math;
    const float alpha = activation_.alpha;
    const auto partials = absl::MakeConstSpan(partials_);
    switch (activation_.kind) {
      case DenseActivation::kRelu:
        return SumBiasActivateRows(r0, r1, out_, partials, b, y,
                                   [](float z) { return am::Relu(z); });
      case DenseActivation::kLeakyRelu:
        return SumBiasActivateRows(r0, r1, out_, partials, b, y,
                                   [alpha](float z) { return am::LeakyRelu(alpha, z); });
      case DenseActivation::kLinear:
        return SumBiasActivateRows(r0, r1, out_, partials, b, y, [](float z) { return z; });
      default: {
        const DenseActivation kind = activation_.kind;
        return SumBiasActivateRows(r0, r1, out_, partials, b, y,
                                   [kind, alpha](float z) { return am::Activate(kind, alpha, z); });
      }
    }
  }

  absl::Status FirstError() {
    for (absl::Status& s : statuses_) {
      if (!s.ok()) return std::exchange(s, absl::OkStatus());
    }
    return absl::OkStatus();
  }

  const int64_t batch_, in_, out_;
  const ActivationFn activation_;
  const bool bias_;
  const GemmLibraries libraries_;
  const OpenBlas* const blas_;  // not owned; null unless libraries_ name it
  dnnl::engine engine_;
  std::vector<Part> parts_;
  std::vector<absl::Status> statuses_;
  std::vector<std::unique_ptr<float, void (*)(void*)>> partials_;
  float planned_momentum_ = 0;  // of the parts' weights_momentum; 0: none
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
    DenseMatmuls plans = DenseMatmuls::Create(engine, batch, in, out, dnnl::memory::data_type::f32,
                                              bias_, activation_);
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
    DenseMatmuls plans = DenseMatmuls::Create(engine, batch, in, out, dnnl::memory::data_type::bf16,
                                              bias_, activation_);
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
    return forward_.Run(stream_, x_bf16_.get(), w_bf16_.get(), bias_ ? b.f32() : nullptr, y->f32());
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

}  // namespace

absl::StatusOr<CpuGemmConfig> CpuGemmConfigOfProcess() {
  CpuGemmConfig gemm;
  TRAIND_ASSIGN_OR_RETURN(gemm.policy, GemmPolicyFromEnvironment());
  gemm.has_avx512 = OneDnnHasAvx512();
  return gemm;
}

DenseLayout ChooseDenseLayout(const CpuGemmConfig& gemm, bool openblas_loaded, int64_t batch,
                              int64_t in, int64_t out, int threads) {
  DenseLayout layout;
  layout.parts = SplitsInRowSlabs(in, out, threads) ? threads : 1;
  const int64_t rows = SlabBegin(in, layout.parts, 1);  // the first slab is the largest
  layout.libraries =
      ChooseGemmLibraries(gemm.policy, gemm.has_avx512, openblas_loaded, batch, rows, out);
  return layout;
}

absl::StatusOr<std::unique_ptr<DenseKernel>> CreateCpuDenseKernel(
    const dnnl::engine& engine, const dnnl::stream& stream, traind::v1::Precision precision,
    int64_t batch, int64_t in, int64_t out, const DenseKernelOptions& options,
    const CpuGemmConfig& gemm) {
  try {
    if (precision == traind::v1::BF16) {
      return std::unique_ptr<DenseKernel>(
          new CpuBf16DenseKernel(engine, stream, batch, in, out, options));
    }
    if (DerivativeFromOutput(options.activation.kind)) {
      const DenseLayout layout =
          ChooseDenseLayout(gemm, /*openblas_loaded=*/true, batch, in, out, omp_get_max_threads());
      GemmLibraries libraries = layout.libraries;
      const OpenBlas* blas = nullptr;
      if (libraries.any()) {
        absl::StatusOr<const OpenBlas*> loaded = LoadOpenBlas();
        if (loaded.ok()) {
          blas = *loaded;
        } else if (gemm.policy == GemmPolicy::kOpenBlas) {
          return absl::FailedPreconditionError(
              absl::StrCat("TRAIND_CPU_GEMM=openblas: ", loaded.status().message()));
        } else {
          libraries = GemmLibraries();  // oneDNN, as on a machine without OpenBLAS
        }
      }
      if (layout.parts > 1 || libraries.any()) {
        return std::unique_ptr<DenseKernel>(new CpuSplitDenseKernel(engine, layout.parts, batch, in,
                                                                    out, options, libraries, blas));
      }
    }
    return std::unique_ptr<DenseKernel>(
        new CpuDenseKernel(engine, stream, batch, in, out, options));
  } catch (const dnnl::error& e) {
    return FromDnnl(e, absl::StrFormat("dense kernel [%d, %d] -> [%d, %d]", batch, in, batch, out));
  } catch (const std::bad_alloc&) {
    return OutOfMemoryError("dense kernel: out of host memory");
  }
}

}  // namespace traind::engine::cpu
