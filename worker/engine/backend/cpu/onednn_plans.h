// oneDNN primitives planned once and run many times without allocating:
// their memory objects carry no buffer of their own, each run points them at
// the caller's tensors and executes through the C API on a stack array (the
// C++ API's argument map allocates on every call). The CPU dense kernels'
// building blocks (cpu_dense_kernel.cc).
//
// Thread safety: a plan runs on one thread at a time (its memory objects'
// handles are set per run).
#ifndef TRAIND_WORKER_ENGINE_BACKEND_CPU_ONEDNN_PLANS_H_
#define TRAIND_WORKER_ENGINE_BACKEND_CPU_ONEDNN_PLANS_H_

#include <array>
#include <cstdint>

#include "absl/status/status.h"
#include "base/status.h"
#include "oneapi/dnnl/dnnl.hpp"
#include "worker/engine/backend/backend.h"
#include "worker/engine/backend/cpu/onednn_status.h"

namespace traind::engine::cpu {

// Points `memory` at `data`. oneDNN takes a non-const pointer for inputs
// too; it only reads them.
inline absl::Status SetDataHandle(const dnnl::memory& memory, const void* data) {
  return FromDnnlStatus(
      dnnl_memory_set_data_handle_v2(memory.get(), const_cast<void*>(data), nullptr),
      "set data handle");
}

// The oneDNN post-op of an activation whose derivative needs only y.
inline void AppendPostOp(const ActivationFn& f, dnnl::post_ops* ops) {
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

// Runs `primitive` on `nargs` arguments and waits for it; `what` names it
// in an error.
inline absl::Status ExecuteAndWait(const dnnl::primitive& primitive, const dnnl::stream& stream,
                                   int nargs, const dnnl_exec_arg_t* args, const char* what) {
  TRAIND_RETURN_IF_ERROR(
      FromDnnlStatus(dnnl_primitive_execute(primitive.get(), stream.get(), nargs, args), what));
  return FromDnnlStatus(dnnl_stream_wait(stream.get()), "stream wait");
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
    TRAIND_RETURN_IF_ERROR(SetDataHandle(src_, src));
    TRAIND_RETURN_IF_ERROR(SetDataHandle(weights_, weights));
    TRAIND_RETURN_IF_ERROR(SetDataHandle(dst_, dst));
    std::array<dnnl_exec_arg_t, 5> args = {{
        {DNNL_ARG_SRC, src_.get()},
        {DNNL_ARG_WEIGHTS, weights_.get()},
        {DNNL_ARG_DST, dst_.get()},
    }};
    int nargs = 3;
    if (scratchpad_) args[nargs++] = {DNNL_ARG_SCRATCHPAD, scratchpad_.get()};
    if (bias_) {
      TRAIND_RETURN_IF_ERROR(SetDataHandle(bias_, bias));
      args[nargs++] = {DNNL_ARG_BIAS, bias_.get()};
    }
    return ExecuteAndWait(primitive_, stream, nargs, args.data(), "matmul execute");
  }

 private:
  dnnl::matmul primitive_;
  dnnl::memory src_, weights_, bias_, dst_, scratchpad_;
};

// The f32 products of the row slab [r0, r0 + rows) of w in a dense layer
// [batch, in] -> [batch, out], on strided views of the whole tensors (no
// copies), as the row-slab kernel runs them (cpu_dense_kernel.cc) and the
// benchmark's GEMM set times them:
//   kForward: x[:, r0:r1] · w[r0:r1, :] -> [batch, out];
//   kWeights: x[:, r0:r1]ᵀ · dz -> dw[r0:r1, :], plus momentum · dw[r0:r1, :]
//             when momentum > 0 (a sum post-op: SGD's velocity accumulates);
//   kData:    dz · w[r0:r1, :]ᵀ -> dx[:, r0:r1].
// Operand pointers are the slab's first element (x + r0, w + r0·out,
// dx + r0; dz and a kForward result whole).
enum class SlabProduct { kForward, kWeights, kData };

inline MatmulPlan CreateSlabMatmul(const dnnl::engine& engine, SlabProduct product, int64_t batch,
                                   int64_t in, int64_t out, int64_t rows, float momentum = 0.0f) {
  using dt = dnnl::memory::data_type;
  using tag = dnnl::memory::format_tag;
  using dims = dnnl::memory::dims;
  const dnnl::memory::desc whole({batch, out}, dt::f32, tag::ab);  // y, dz
  const dnnl::memory::desc w_rows({rows, out}, dt::f32, tag::ab);  // w's or dw's rows
  dnnl::primitive_attr attr;
  switch (product) {
    case SlabProduct::kForward:
      return MatmulPlan::Create(engine, dnnl::memory::desc({batch, rows}, dt::f32, dims{in, 1}),
                                w_rows, nullptr, whole, attr);
    case SlabProduct::kWeights:
      if (momentum > 0.0f) {
        dnnl::post_ops ops;
        ops.append_sum(momentum);
        attr.set_post_ops(ops);
      }
      return MatmulPlan::Create(engine, dnnl::memory::desc({rows, batch}, dt::f32, dims{1, in}),
                                whole, nullptr, w_rows, attr);
    case SlabProduct::kData:
      break;
  }
  return MatmulPlan::Create(engine, whole, dnnl::memory::desc({out, rows}, dt::f32, dims{1, out}),
                            nullptr, dnnl::memory::desc({batch, rows}, dt::f32, dims{in, 1}), attr);
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
    TRAIND_RETURN_IF_ERROR(SetDataHandle(src_, src));
    TRAIND_RETURN_IF_ERROR(SetDataHandle(dst_, dst));
    std::array<dnnl_exec_arg_t, 3> args = {{
        {DNNL_ARG_FROM, src_.get()},
        {DNNL_ARG_TO, dst_.get()},
    }};
    int nargs = 2;
    if (scratchpad_) args[nargs++] = {DNNL_ARG_SCRATCHPAD, scratchpad_.get()};
    return ExecuteAndWait(primitive_, stream, nargs, args.data(), "reorder execute");
  }

 private:
  dnnl::reorder primitive_;
  dnnl::memory src_, dst_, scratchpad_;
};

}  // namespace traind::engine::cpu

#endif  // TRAIND_WORKER_ENGINE_BACKEND_CPU_ONEDNN_PLANS_H_
