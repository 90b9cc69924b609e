#include "worker/engine/backend/cpu/cpu_conv_kernel.h"

#include <array>
#include <cstdint>
#include <initializer_list>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "base/status.h"
#include "worker/engine/backend/activation_math.h"
#include "worker/engine/backend/cpu/cpu_parallel.h"
#include "worker/engine/backend/cpu/onednn_plans.h"
#include "worker/engine/backend/cpu/onednn_status.h"
#include "worker/engine/backend/tensor_checks.h"

namespace traind::engine::cpu {
namespace {

using dt = dnnl::memory::data_type;
using tag = dnnl::memory::format_tag;
using dims = dnnl::memory::dims;

// One primitive with its arguments' memory objects, which carry no buffer of
// their own: Run points them at the caller's tensors and executes through
// the C API on a stack array (no allocation per run), with the plan's own
// scratchpad and, where the primitive has one, workspace.
class Plan {
 public:
  static constexpr int kMaxArgs = 8;

  // The primitive `Primitive` of `pd` (its scratchpad planned as user's).
  template <typename Primitive, typename PrimitiveDesc>
  void Init(const dnnl::engine& engine, const PrimitiveDesc& pd, const char* what) {
    primitive_ = Primitive(pd);
    what_ = what;
    if (pd.scratchpad_desc().get_size() > 0) {
      scratchpad_ = dnnl::memory(pd.scratchpad_desc(), engine);
    }
  }
  // An argument, in the order Run's handles come.
  void Arg(int arg, const dnnl::memory::desc& md, const dnnl::engine& engine) {
    args_.push_back({arg, dnnl::memory(md, engine, DNNL_MEMORY_NONE)});
  }
  // An argument whose buffer the plan owns (a workspace), shared with
  // another plan when `shared` is given.
  void OwnedArg(int arg, const dnnl::memory& shared) { owned_.push_back({arg, shared}); }

  absl::Status Run(const dnnl::stream& stream, std::initializer_list<const void*> handles) const {
    std::array<dnnl_exec_arg_t, kMaxArgs> exec{};
    int n = 0;
    const void* const* h = handles.begin();
    for (const auto& [arg, memory] : args_) {
      TRAIND_RETURN_IF_ERROR(SetDataHandle(memory, *h++));
      exec[n++] = {arg, memory.get()};
    }
    for (const auto& [arg, memory] : owned_) exec[n++] = {arg, memory.get()};
    if (scratchpad_) exec[n++] = {DNNL_ARG_SCRATCHPAD, scratchpad_.get()};
    return ExecuteAndWait(primitive_, stream, n, exec.data(), what_);
  }

 private:
  dnnl::primitive primitive_;
  const char* what_ = "";
  std::vector<std::pair<int, dnnl::memory>> args_;
  std::vector<std::pair<int, dnnl::memory>> owned_;
  dnnl::memory scratchpad_;
};

// g[i] *= f'(y[i]) for an activation whose derivative needs only its
// output: one loop per function, so that each vectorizes (a switch on the
// function inside the loop kept it scalar: 8 ms for Fashion-MNIST's first
// layer's 2.8 million values at batch 128, more than the convolution's own
// backward pass).
template <typename Deriv>
void ScaleBy(const float* __restrict y, float* __restrict g, int64_t n, Deriv deriv) {
  ParallelFor(n, [=](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) g[i] *= deriv(y[i]);
  });
}
void ScaleByDerivativeFromOutput(const ActivationFn& f, const float* y, float* g, int64_t n) {
  namespace am = activation_math;
  const float alpha = f.alpha;
  switch (f.kind) {
    case DenseActivation::kRelu:
      return ScaleBy(y, g, n, [](float v) { return am::ReluGradFromOutput(v); });
    case DenseActivation::kLeakyRelu:
      return ScaleBy(y, g, n, [alpha](float v) { return am::LeakyReluGradFromOutput(alpha, v); });
    case DenseActivation::kElu:
      return ScaleBy(y, g, n, [alpha](float v) { return am::EluGradFromOutput(alpha, v); });
    case DenseActivation::kSigmoid:
      return ScaleBy(y, g, n, [](float v) { return am::SigmoidGradFromOutput(v); });
    case DenseActivation::kTanh:
      return ScaleBy(y, g, n, [](float v) { return am::TanhGradFromOutput(v); });
    default: {
      const DenseActivation kind = f.kind;
      return ScaleBy(y, g, n,
                     [kind, alpha](float v) { return am::Derivative(kind, alpha, 0.0f, v); });
    }
  }
}

dnnl::primitive_attr UserScratchpad() {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

// A tensor in the layout a primitive chose (format_tag::any) beside its plain
// NCHW / OIHW form at the kernel's boundary: when the two differ, an owned
// buffer in the chosen layout and the reorders between them; when they are
// the same, nothing, and the primitive reads or writes the caller's tensor.
class Stage {
 public:
  void Init(const dnnl::engine& engine, const dnnl::memory::desc& plain,
            const dnnl::memory::desc& chosen, const char* what) {
    if (plain == chosen) return;
    buffer_ = dnnl::memory(chosen, engine);
    dnnl::primitive_attr attr = UserScratchpadAttr();
    to_chosen_.Init<dnnl::reorder>(
        engine, dnnl::reorder::primitive_desc(engine, plain, engine, chosen, attr), what);
    to_chosen_.Arg(DNNL_ARG_SRC, plain, engine);
    to_chosen_.Arg(DNNL_ARG_DST, chosen, engine);
    to_plain_.Init<dnnl::reorder>(
        engine, dnnl::reorder::primitive_desc(engine, chosen, engine, plain, attr), what);
    to_plain_.Arg(DNNL_ARG_SRC, chosen, engine);
    to_plain_.Arg(DNNL_ARG_DST, plain, engine);
  }
  // The data the primitive reads: `plain` itself, or its reordered copy.
  absl::StatusOr<const void*> In(const dnnl::stream& stream, const void* plain) const {
    if (!buffer_) return plain;
    TRAIND_RETURN_IF_ERROR(to_chosen_.Run(stream, {plain, buffer_.get_data_handle()}));
    return buffer_.get_data_handle();
  }
  // Where the primitive writes: `plain` itself, or the buffer Out copies from.
  void* Target(void* plain) const { return buffer_ ? buffer_.get_data_handle() : plain; }
  absl::Status Out(const dnnl::stream& stream, void* plain) const {
    if (!buffer_) return absl::OkStatus();
    return to_plain_.Run(stream, {buffer_.get_data_handle(), plain});
  }

 private:
  static dnnl::primitive_attr UserScratchpadAttr() {
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    return attr;
  }
  dnnl::memory buffer_;
  Plan to_chosen_, to_plain_;
};

class CpuConv2dKernel final : public Conv2dKernel {
 public:
  static absl::StatusOr<std::unique_ptr<Conv2dKernel>> Create(const dnnl::engine& engine,
                                                              const dnnl::stream& stream,
                                                              const Conv2dGeometry& g,
                                                              const Conv2dKernelOptions& options,
                                                              bool bf16) {
    auto k = std::unique_ptr<CpuConv2dKernel>(new CpuConv2dKernel(stream, g, options));
    try {
      // The caller's layouts: NCHW (or NHWC) images, OIHW (GOIHW) weights.
      const tag images = options.channels_last ? tag::nhwc : tag::nchw;
      const dnnl::memory::desc src({g.batch, g.in_channels, g.in_height, g.in_width}, dt::f32,
                                   images);
      const dnnl::memory::desc weights =
          g.groups == 1
              ? dnnl::memory::desc({g.out_channels, g.in_channels, g.kernel_height, g.kernel_width},
                                   dt::f32, tag::oihw)
              : dnnl::memory::desc({g.groups, g.out_channels / g.groups, g.in_channels / g.groups,
                                    g.kernel_height, g.kernel_width},
                                   dt::f32, tag::goihw);
      const dnnl::memory::desc bias({g.out_channels}, dt::f32, tag::x);
      const dnnl::memory::desc dst({g.batch, g.out_channels, g.out_height(), g.out_width()},
                                   dt::f32, images);
      // The primitives choose theirs (blocked layouts run oneDNN's direct
      // JIT convolutions; plain NCHW falls back to im2col and a GEMM).
      // bf16: the products read bf16 images, weights and output gradients
      // (converted by the reorders at the boundary) and accumulate and write
      // f32 outputs, input gradients and weight gradients (as the dense
      // layers' bf16 matmuls do); the model's tensors stay f32.
      // Channels-last: the forward and backward-data passes read and write
      // NHWC as it is (only the weights are reordered); the backward-weights
      // pass still chooses its layouts, as its NHWC form ran 2-3x slower
      // than a reorder into a blocked layout and the blocked primitive
      // (measured with cpu_bench convprofile on Fashion-MNIST's first layer).
      const dt in_type = bf16 ? dt::bf16 : dt::f32;
      const tag chosen = options.channels_last ? tag::nhwc : tag::any;
      const dnnl::memory::desc src_any(src.dims(), in_type, chosen);
      const dnnl::memory::desc weights_any(weights.dims(), in_type, tag::any);
      const dnnl::memory::desc dst_any(dst.dims(), dt::f32, chosen);
      const dnnl::memory::desc src_grad_any(src.dims(), dt::f32, chosen);
      const dnnl::memory::desc weights_grad_any(weights.dims(), dt::f32, tag::any);
      const dnnl::memory::desc dst_grad_any(dst.dims(), in_type, chosen);
      const dnnl::memory::desc weights_src_any(src.dims(), in_type, tag::any);
      const dnnl::memory::desc weights_dst_grad_any(dst.dims(), in_type, tag::any);
      const dims strides = {g.stride_height, g.stride_width};
      // oneDNN counts dilation from 0 (no gaps), PyTorch from 1.
      const dims dilates = {g.dilation_height - 1, g.dilation_width - 1};
      const dims pad_l = {g.pad_top, g.pad_left};
      const dims pad_r = {g.pad_bottom, g.pad_right};

      dnnl::primitive_attr attr = UserScratchpad();
      dnnl::post_ops ops;
      AppendPostOp(options.activation, &ops);
      attr.set_post_ops(ops);
      const auto fwd_desc =
          options.bias ? dnnl::convolution_forward::desc(
                             dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct,
                             src_any, weights_any, bias, dst_any, strides, dilates, pad_l, pad_r)
                       : dnnl::convolution_forward::desc(
                             dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct,
                             src_any, weights_any, dst_any, strides, dilates, pad_l, pad_r);
      const dnnl::convolution_forward::primitive_desc fwd_pd(fwd_desc, attr, engine);
      k->forward_.Init<dnnl::convolution_forward>(engine, fwd_pd, "conv2d forward");
      k->forward_.Arg(DNNL_ARG_SRC, fwd_pd.src_desc(), engine);
      k->forward_.Arg(DNNL_ARG_WEIGHTS, fwd_pd.weights_desc(), engine);
      if (options.bias) k->forward_.Arg(DNNL_ARG_BIAS, bias, engine);
      k->forward_.Arg(DNNL_ARG_DST, fwd_pd.dst_desc(), engine);
      k->x_.Init(engine, src, fwd_pd.src_desc(), "conv2d reorder x");
      k->w_.Init(engine, weights, fwd_pd.weights_desc(), "conv2d reorder w");
      k->y_.Init(engine, dst, fwd_pd.dst_desc(), "conv2d reorder y");

      const dnnl::convolution_backward_data::primitive_desc data_pd(
          dnnl::convolution_backward_data::desc(dnnl::algorithm::convolution_direct, src_grad_any,
                                                weights_any, dst_grad_any, strides, dilates, pad_l,
                                                pad_r),
          UserScratchpad(), engine, fwd_pd);
      k->backward_data_.Init<dnnl::convolution_backward_data>(engine, data_pd,
                                                              "conv2d backward data");
      k->backward_data_.Arg(DNNL_ARG_DIFF_DST, data_pd.diff_dst_desc(), engine);
      k->backward_data_.Arg(DNNL_ARG_WEIGHTS, data_pd.weights_desc(), engine);
      k->backward_data_.Arg(DNNL_ARG_DIFF_SRC, data_pd.diff_src_desc(), engine);
      k->data_dz_.Init(engine, dst, data_pd.diff_dst_desc(), "conv2d reorder dz");
      k->data_w_.Init(engine, weights, data_pd.weights_desc(), "conv2d reorder w");
      k->dx_.Init(engine, src, data_pd.diff_src_desc(), "conv2d reorder dx");

      const auto weights_desc =
          options.bias ? dnnl::convolution_backward_weights::desc(
                             dnnl::algorithm::convolution_direct, weights_src_any, weights_grad_any,
                             bias, weights_dst_grad_any, strides, dilates, pad_l, pad_r)
                       : dnnl::convolution_backward_weights::desc(
                             dnnl::algorithm::convolution_direct, weights_src_any, weights_grad_any,
                             weights_dst_grad_any, strides, dilates, pad_l, pad_r);
      const dnnl::convolution_backward_weights::primitive_desc weights_pd(
          weights_desc, UserScratchpad(), engine, fwd_pd);
      k->backward_weights_.Init<dnnl::convolution_backward_weights>(engine, weights_pd,
                                                                    "conv2d backward weights");
      k->backward_weights_.Arg(DNNL_ARG_SRC, weights_pd.src_desc(), engine);
      k->backward_weights_.Arg(DNNL_ARG_DIFF_DST, weights_pd.diff_dst_desc(), engine);
      k->backward_weights_.Arg(DNNL_ARG_DIFF_WEIGHTS, weights_pd.diff_weights_desc(), engine);
      if (options.bias) k->backward_weights_.Arg(DNNL_ARG_DIFF_BIAS, bias, engine);
      k->weights_x_.Init(engine, src, weights_pd.src_desc(), "conv2d reorder x");
      k->weights_dz_.Init(engine, dst, weights_pd.diff_dst_desc(), "conv2d reorder dz");
      k->dw_.Init(engine, weights, weights_pd.diff_weights_desc(), "conv2d reorder dw");
    } catch (const dnnl::error& e) {
      return FromDnnl(e, "plan conv2d");
    }
    if (options.bias) k->bias_grad_.resize(static_cast<size_t>(g.out_channels));
    return std::unique_ptr<Conv2dKernel>(std::move(k));
  }

  absl::Status Forward(const Tensor& x, const Tensor& w, const Tensor& b, Tensor* y) override {
    TRAIND_RETURN_IF_ERROR(CheckConv2dForwardArgs(g_, options_.bias, x, w, b, *y));
    TRAIND_ASSIGN_OR_RETURN(const void* xs, x_.In(stream_, x.raw()));
    TRAIND_ASSIGN_OR_RETURN(const void* ws, w_.In(stream_, w.raw()));
    void* ys = y_.Target(y->raw());
    if (options_.bias) {
      TRAIND_RETURN_IF_ERROR(forward_.Run(stream_, {xs, ws, b.raw(), ys}));
    } else {
      TRAIND_RETURN_IF_ERROR(forward_.Run(stream_, {xs, ws, ys}));
    }
    return y_.Out(stream_, y->raw());
  }

  absl::Status Backward(const Tensor& x, const Tensor& w, const Tensor& y, Tensor* dy, Tensor* dw,
                        Tensor* db, Tensor* dx) override {
    const ActivationFn& f = options_.activation;
    TRAIND_RETURN_IF_ERROR(CheckConv2dBackwardArgs(g_, f, x, w, y, *dy, *dw, db, dx));
    if (f.kind != DenseActivation::kLinear) {
      // dy -> dz = dy ⊙ f'(z), from y.
      ScaleByDerivativeFromOutput(f, y.f32(), dy->f32(), dy->size());
    }
    if (dx != nullptr) {
      TRAIND_ASSIGN_OR_RETURN(const void* dzs, data_dz_.In(stream_, dy->raw()));
      TRAIND_ASSIGN_OR_RETURN(const void* ws, data_w_.In(stream_, w.raw()));
      TRAIND_RETURN_IF_ERROR(backward_data_.Run(stream_, {dzs, ws, dx_.Target(dx->raw())}));
      TRAIND_RETURN_IF_ERROR(dx_.Out(stream_, dx->raw()));
    }
    TRAIND_ASSIGN_OR_RETURN(const void* xs, weights_x_.In(stream_, x.raw()));
    TRAIND_ASSIGN_OR_RETURN(const void* dzs, weights_dz_.In(stream_, dy->raw()));
    void* dws = dw_.Target(dw->raw());
    if (options_.bias) {
      float* bias_grad = db != nullptr ? db->f32() : bias_grad_.data();
      TRAIND_RETURN_IF_ERROR(backward_weights_.Run(stream_, {xs, dzs, dws, bias_grad}));
    } else {
      TRAIND_RETURN_IF_ERROR(backward_weights_.Run(stream_, {xs, dzs, dws}));
    }
    return dw_.Out(stream_, dw->raw());
  }

 private:
  CpuConv2dKernel(const dnnl::stream& stream, const Conv2dGeometry& g,
                  const Conv2dKernelOptions& options)
      : stream_(stream), g_(g), options_(options) {}

  const dnnl::stream& stream_;
  const Conv2dGeometry g_;
  const Conv2dKernelOptions options_;
  Plan forward_, backward_data_, backward_weights_;
  // Each primitive's operands in the layouts it chose (Stage).
  Stage x_, w_, y_;                    // forward
  Stage data_dz_, data_w_, dx_;        // backward data
  Stage weights_x_, weights_dz_, dw_;  // backward weights
  std::vector<float> bias_grad_;       // db's place when the caller wants none
};

dnnl::algorithm PoolAlgorithm(PoolKind kind) {
  switch (kind) {
    case PoolKind::kMax:
      return dnnl::algorithm::pooling_max;
    case PoolKind::kAverage:
      return dnnl::algorithm::pooling_avg_include_padding;
    case PoolKind::kAverageExcludePadding:
      return dnnl::algorithm::pooling_avg_exclude_padding;
  }
  return dnnl::algorithm::pooling_max;
}

class CpuPool2dKernel final : public Pool2dKernel {
 public:
  static absl::StatusOr<std::unique_ptr<Pool2dKernel>> Create(const dnnl::engine& engine,
                                                              const dnnl::stream& stream,
                                                              const Pool2dGeometry& g,
                                                              const Pool2dKernelOptions& options) {
    auto k = std::unique_ptr<CpuPool2dKernel>(new CpuPool2dKernel(stream, g));
    const PoolKind kind = options.kind;
    try {
      const tag images = options.channels_last ? tag::nhwc : tag::nchw;
      const dnnl::memory::desc src({g.batch, g.channels, g.in_height, g.in_width}, dt::f32, images);
      const dnnl::memory::desc dst({g.batch, g.channels, g.out_height(), g.out_width()}, dt::f32,
                                   images);
      // Pooled channels-last: oneDNN's JIT pooling (on NCHW its forward
      // pass takes a plain loop).
      const dnnl::memory::desc src_in(src.dims(), dt::f32, tag::nhwc);
      const dnnl::memory::desc dst_in(dst.dims(), dt::f32, tag::nhwc);
      k->x_.Init(engine, src, src_in, "pool2d reorder x");
      k->y_.Init(engine, dst, dst_in, "pool2d reorder y");
      k->dy_.Init(engine, dst, dst_in, "pool2d reorder dy");
      k->dx_.Init(engine, src, src_in, "pool2d reorder dx");
      const dims strides = {g.stride_height, g.stride_width};
      const dims kernel = {g.kernel_height, g.kernel_width};
      const dims pad_l = {g.pad_top, g.pad_left};
      const dims pad_r = {g.pad_bottom, g.pad_right};
      const dnnl::algorithm algorithm = PoolAlgorithm(kind);

      const dnnl::pooling_forward::primitive_desc train_pd(
          dnnl::pooling_forward::desc(dnnl::prop_kind::forward_training, algorithm, src_in, dst_in,
                                      strides, kernel, pad_l, pad_r),
          UserScratchpad(), engine);
      k->train_.Init<dnnl::pooling_forward>(engine, train_pd, "pool2d forward");
      k->train_.Arg(DNNL_ARG_SRC, src_in, engine);
      k->train_.Arg(DNNL_ARG_DST, dst_in, engine);
      dnnl::memory workspace;
      if (train_pd.workspace_desc().get_size() > 0) {
        workspace = dnnl::memory(train_pd.workspace_desc(), engine);
        k->train_.OwnedArg(DNNL_ARG_WORKSPACE, workspace);
      }
      const dnnl::pooling_forward::primitive_desc infer_pd(
          dnnl::pooling_forward::desc(dnnl::prop_kind::forward_inference, algorithm, src_in, dst_in,
                                      strides, kernel, pad_l, pad_r),
          UserScratchpad(), engine);
      k->infer_.Init<dnnl::pooling_forward>(engine, infer_pd, "pool2d forward");
      k->infer_.Arg(DNNL_ARG_SRC, src_in, engine);
      k->infer_.Arg(DNNL_ARG_DST, dst_in, engine);

      const dnnl::pooling_backward::primitive_desc backward_pd(
          dnnl::pooling_backward::desc(algorithm, src_in, dst_in, strides, kernel, pad_l, pad_r),
          UserScratchpad(), engine, train_pd);
      k->backward_.Init<dnnl::pooling_backward>(engine, backward_pd, "pool2d backward");
      k->backward_.Arg(DNNL_ARG_DIFF_DST, dst_in, engine);
      k->backward_.Arg(DNNL_ARG_DIFF_SRC, src_in, engine);
      if (workspace) k->backward_.OwnedArg(DNNL_ARG_WORKSPACE, workspace);
    } catch (const dnnl::error& e) {
      return FromDnnl(e, "plan pool2d");
    }
    return std::unique_ptr<Pool2dKernel>(std::move(k));
  }

  absl::Status Forward(bool training, const Tensor& x, Tensor* y) override {
    TRAIND_RETURN_IF_ERROR(CheckShape(x, DType::kF32, g_.batch, g_.in_size(), "pool2d x"));
    TRAIND_RETURN_IF_ERROR(CheckShape(*y, DType::kF32, g_.batch, g_.out_size(), "pool2d y"));
    TRAIND_ASSIGN_OR_RETURN(const void* xs, x_.In(stream_, x.raw()));
    TRAIND_RETURN_IF_ERROR((training ? train_ : infer_).Run(stream_, {xs, y_.Target(y->raw())}));
    trained_ = trained_ || training;
    return y_.Out(stream_, y->raw());
  }

  absl::Status Backward(const Tensor& dy, Tensor* dx) override {
    TRAIND_RETURN_IF_ERROR(CheckShape(dy, DType::kF32, g_.batch, g_.out_size(), "pool2d dy"));
    TRAIND_RETURN_IF_ERROR(CheckShape(*dx, DType::kF32, g_.batch, g_.in_size(), "pool2d dx"));
    if (!trained_) {
      return absl::FailedPreconditionError("pool2d backward: no training forward pass before it");
    }
    TRAIND_ASSIGN_OR_RETURN(const void* dys, dy_.In(stream_, dy.raw()));
    TRAIND_RETURN_IF_ERROR(backward_.Run(stream_, {dys, dx_.Target(dx->raw())}));
    return dx_.Out(stream_, dx->raw());
  }

 private:
  CpuPool2dKernel(const dnnl::stream& stream, const Pool2dGeometry& g) : stream_(stream), g_(g) {}

  const dnnl::stream& stream_;
  const Pool2dGeometry g_;
  Plan train_, infer_, backward_;
  Stage x_, y_, dy_, dx_;  // the operands channels-last
  bool trained_ = false;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Conv2dKernel>> CreateCpuConv2dKernel(
    const dnnl::engine& engine, const dnnl::stream& stream, const Conv2dGeometry& geometry,
    const Conv2dKernelOptions& options, bool bf16) {
  return CpuConv2dKernel::Create(engine, stream, geometry, options, bf16);
}

absl::StatusOr<std::unique_ptr<Pool2dKernel>> CreateCpuPool2dKernel(
    const dnnl::engine& engine, const dnnl::stream& stream, const Pool2dGeometry& geometry,
    const Pool2dKernelOptions& options) {
  return CpuPool2dKernel::Create(engine, stream, geometry, options);
}

}  // namespace traind::engine::cpu
