#include "worker/engine/backend/cuda/cuda_conv_kernel.h"

#include <cudnn.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <type_traits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status.h"
#include "worker/engine/backend/cuda/cuda_image_kernels.h"
#include "worker/engine/backend/cuda/cuda_kernels.h"
#include "worker/engine/backend/cuda/cuda_raii.h"
#include "worker/engine/backend/cuda/cuda_status.h"
#include "worker/engine/backend/tensor_checks.h"

namespace traind::engine {
namespace cuda {

absl::Status CudnnStatus(cudnnStatus_t status, absl::string_view call) {
  if (status == CUDNN_STATUS_SUCCESS) return absl::OkStatus();
  if (status == CUDNN_STATUS_ALLOC_FAILED) return DeviceOutOfMemory(call, 0);
  return DeviceError(absl::StrCat(call, ": ", cudnnGetErrorString(status)));
}

absl::StatusOr<CudnnHandle> CudnnHandle::Create(cudaStream_t stream) {
  cudnnHandle_t h = nullptr;
  TRAIND_RETURN_IF_ERROR(CudnnStatus(cudnnCreate(&h), "cudnnCreate"));
  CudnnHandle handle;
  handle.handle_.reset(h);
  TRAIND_RETURN_IF_ERROR(CudnnStatus(cudnnSetStream(h, stream), "cudnnSetStream"));
  return handle;
}

}  // namespace cuda

namespace {

using cuda::CudnnStatus;
using cuda::DeviceBuffer;

#define TRAIND_CUDNN_RETURN_IF_ERROR(call) TRAIND_RETURN_IF_ERROR(CudnnStatus((call), #call))

// A cuDNN descriptor, destroyed with its owner.
template <typename T, cudnnStatus_t (*Create)(T*), cudnnStatus_t (*Destroy)(T)>
class Descriptor {
 public:
  static absl::StatusOr<Descriptor> Make(const char* what) {
    T d = nullptr;
    TRAIND_RETURN_IF_ERROR(CudnnStatus(Create(&d), what));
    Descriptor out;
    out.d_.reset(d);
    return out;
  }
  T get() const { return d_.get(); }

 private:
  struct Deleter {
    void operator()(std::remove_pointer_t<T>* d) const { (void)Destroy(d); }
  };
  std::unique_ptr<std::remove_pointer_t<T>, Deleter> d_;
};
using TensorDesc =
    Descriptor<cudnnTensorDescriptor_t, cudnnCreateTensorDescriptor, cudnnDestroyTensorDescriptor>;
using FilterDesc =
    Descriptor<cudnnFilterDescriptor_t, cudnnCreateFilterDescriptor, cudnnDestroyFilterDescriptor>;
using ConvDesc = Descriptor<cudnnConvolutionDescriptor_t, cudnnCreateConvolutionDescriptor,
                            cudnnDestroyConvolutionDescriptor>;

int Int(int64_t v) { return static_cast<int>(v); }

// The first of cuDNN's heuristic results (best first) that succeeds, is
// deterministic where asked, does not use TF32 under fp32, and whose
// workspace (queried with the descriptor's math type set for it) fits
// `cap`; failing that, the first that fits no cap.
template <typename Perf, typename Algo>
absl::Status Choose(const Perf* perf, int count, bool deterministic, bool fp32, size_t cap,
                    cudnnConvolutionDescriptor_t conv,
                    const std::function<cudnnStatus_t(Algo, size_t*)>& workspace, const char* what,
                    Algo* algo, size_t* bytes) {
  for (int pass = 0; pass < 2; ++pass) {
    for (int i = 0; i < count; ++i) {
      const Perf& p = perf[i];
      if (p.status != CUDNN_STATUS_SUCCESS) continue;
      if (deterministic && p.determinism != CUDNN_DETERMINISTIC) continue;
      if (fp32 && (p.mathType == CUDNN_TENSOR_OP_MATH ||
                   p.mathType == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION)) {
        continue;
      }
      const cudnnMathType_t math = fp32 ? CUDNN_FMA_MATH : p.mathType;
      if (cudnnSetConvolutionMathType(conv, math) != CUDNN_STATUS_SUCCESS) continue;
      size_t need = 0;
      if (workspace(p.algo, &need) != CUDNN_STATUS_SUCCESS) continue;
      if (pass == 0 && need > cap) continue;
      *algo = p.algo;
      *bytes = need;
      return absl::OkStatus();
    }
  }
  return DeviceError(absl::StrCat("conv2d: cuDNN has no ", what, " algorithm for this geometry"));
}

class CudaConv2dKernel final : public Conv2dKernel {
 public:
  static absl::StatusOr<std::unique_ptr<CudaConv2dKernel>> Create(
      const ConvContext& ctx, const Conv2dGeometry& g, const Conv2dKernelOptions& options) {
    std::unique_ptr<CudaConv2dKernel> k(new CudaConv2dKernel(ctx, g, options));
    k->padded_ = g.pad_top != g.pad_bottom || g.pad_left != g.pad_right;
    k->conv_h_ = k->padded_ ? g.in_height + g.pad_top + g.pad_bottom : g.in_height;
    k->conv_w_ = k->padded_ ? g.in_width + g.pad_left + g.pad_right : g.in_width;
    const int64_t pad_h = k->padded_ ? 0 : g.pad_top, pad_w = k->padded_ ? 0 : g.pad_left;
    if (k->padded_) {
      const size_t bytes = sizeof(float) * g.batch * g.in_channels * k->conv_h_ * k->conv_w_;
      TRAIND_ASSIGN_OR_RETURN(k->x_padded_, DeviceBuffer::Allocate(bytes));
      TRAIND_ASSIGN_OR_RETURN(k->dx_padded_, DeviceBuffer::Allocate(bytes));
    }
    TRAIND_ASSIGN_OR_RETURN(k->x_desc_, TensorDesc::Make("cudnnCreateTensorDescriptor"));
    TRAIND_ASSIGN_OR_RETURN(k->y_desc_, TensorDesc::Make("cudnnCreateTensorDescriptor"));
    TRAIND_ASSIGN_OR_RETURN(k->w_desc_, FilterDesc::Make("cudnnCreateFilterDescriptor"));
    TRAIND_CUDNN_RETURN_IF_ERROR(cudnnSetTensor4dDescriptor(
        k->x_desc_.get(), CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, Int(g.batch), Int(g.in_channels),
        Int(k->conv_h_), Int(k->conv_w_)));
    TRAIND_CUDNN_RETURN_IF_ERROR(cudnnSetTensor4dDescriptor(
        k->y_desc_.get(), CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, Int(g.batch), Int(g.out_channels),
        Int(g.out_height()), Int(g.out_width())));
    TRAIND_CUDNN_RETURN_IF_ERROR(cudnnSetFilter4dDescriptor(
        k->w_desc_.get(), CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, Int(g.out_channels),
        Int(g.in_channels / g.groups), Int(g.kernel_height), Int(g.kernel_width)));
    for (ConvDesc* d : {&k->fwd_, &k->bwd_data_, &k->bwd_filter_}) {
      TRAIND_ASSIGN_OR_RETURN(*d, ConvDesc::Make("cudnnCreateConvolutionDescriptor"));
      TRAIND_CUDNN_RETURN_IF_ERROR(cudnnSetConvolution2dDescriptor(
          d->get(), Int(pad_h), Int(pad_w), Int(g.stride_height), Int(g.stride_width),
          Int(g.dilation_height), Int(g.dilation_width), CUDNN_CROSS_CORRELATION,
          CUDNN_DATA_FLOAT));
      TRAIND_CUDNN_RETURN_IF_ERROR(cudnnSetConvolutionGroupCount(d->get(), Int(g.groups)));
    }
    int n = 0, c = 0, h = 0, w = 0;
    TRAIND_CUDNN_RETURN_IF_ERROR(cudnnGetConvolution2dForwardOutputDim(
        k->fwd_.get(), k->x_desc_.get(), k->w_desc_.get(), &n, &c, &h, &w));
    if (n != g.batch || c != g.out_channels || h != g.out_height() || w != g.out_width()) {
      return DeviceError(
          absl::StrFormat("conv2d: cuDNN's output %d×%d×%d×%d is not the geometry's %d×%d×%d×%d", n,
                          c, h, w, g.batch, g.out_channels, g.out_height(), g.out_width()));
    }
    TRAIND_RETURN_IF_ERROR(k->ChooseAlgorithms());
    TRAIND_ASSIGN_OR_RETURN(k->workspace_, DeviceBuffer::Allocate(k->workspace_bytes_));
    return k;
  }

  absl::Status Forward(const Tensor& x, const Tensor& w, const Tensor& b, Tensor* y) override {
    TRAIND_RETURN_IF_ERROR(CheckConv2dForwardArgs(g_, options_.bias, x, w, b, *y));
    TRAIND_ASSIGN_OR_RETURN(const float* in, Input(x));
    const float one = 1.0f, zero = 0.0f;
    TRAIND_CUDNN_RETURN_IF_ERROR(cudnnConvolutionForward(
        ctx_.cudnn, &one, x_desc_.get(), in, w_desc_.get(), w.f32(), fwd_.get(), fwd_algo_,
        workspace_.get(), workspace_bytes_, &zero, y_desc_.get(), y->f32()));
    const ActivationFn& f = options_.activation;
    if (options_.bias || f.kind != DenseActivation::kLinear) {
      TRAIND_LAUNCH(cuda::LaunchChannelBiasActivation(
          f.kind, f.alpha, options_.bias ? b.f32() : nullptr, y->f32(), g_.batch, g_.out_channels,
          g_.out_height() * g_.out_width(), ctx_.stream));
    }
    return absl::OkStatus();
  }

  absl::Status Backward(const Tensor& x, const Tensor& w, const Tensor& y, Tensor* dy, Tensor* dw,
                        Tensor* db, Tensor* dx) override {
    const ActivationFn& f = options_.activation;
    TRAIND_RETURN_IF_ERROR(CheckConv2dBackwardArgs(g_, f, x, w, y, *dy, *dw, db, dx));
    // dy -> dz = dy ⊙ f'(z), from y.
    if (f.kind != DenseActivation::kLinear) {
      TRAIND_LAUNCH(cuda::LaunchActivationGradFromOutput(f.kind, f.alpha, y.f32(), dy->f32(),
                                                         dy->size(), ctx_.stream));
    }
    if (db != nullptr && options_.bias) {
      TRAIND_LAUNCH(cuda::LaunchChannelSum(dy->f32(), g_.batch, g_.out_channels,
                                           g_.out_height() * g_.out_width(), db->f32(),
                                           ctx_.stream));
    }
    const float one = 1.0f, zero = 0.0f;
    TRAIND_ASSIGN_OR_RETURN(const float* in, Input(x));
    TRAIND_CUDNN_RETURN_IF_ERROR(cudnnConvolutionBackwardFilter(
        ctx_.cudnn, &one, x_desc_.get(), in, y_desc_.get(), dy->f32(), bwd_filter_.get(),
        bwd_filter_algo_, workspace_.get(), workspace_bytes_, &zero, w_desc_.get(), dw->f32()));
    if (dx != nullptr) {
      float* out = padded_ ? dx_padded_.as<float>() : dx->f32();
      TRAIND_CUDNN_RETURN_IF_ERROR(cudnnConvolutionBackwardData(
          ctx_.cudnn, &one, w_desc_.get(), w.f32(), y_desc_.get(), dy->f32(), bwd_data_.get(),
          bwd_data_algo_, workspace_.get(), workspace_bytes_, &zero, x_desc_.get(), out));
      if (padded_) {
        TRAIND_LAUNCH(cuda::LaunchCrop2d(out, g_.batch * g_.in_channels, conv_h_, conv_w_,
                                         g_.pad_top, g_.pad_left, g_.in_height, g_.in_width,
                                         dx->f32(), ctx_.stream));
      }
    }
    return absl::OkStatus();
  }

 private:
  CudaConv2dKernel(const ConvContext& ctx, const Conv2dGeometry& g,
                   const Conv2dKernelOptions& options)
      : ctx_(ctx), g_(g), options_(options) {}

  // x, or its explicitly padded copy.
  absl::StatusOr<const float*> Input(const Tensor& x) {
    if (!padded_) return x.f32();
    TRAIND_LAUNCH(cuda::LaunchPad2d(x.f32(), g_.batch * g_.in_channels, g_.in_height, g_.in_width,
                                    g_.pad_top, g_.pad_left, conv_h_, conv_w_,
                                    x_padded_.as<float>(), ctx_.stream));
    return x_padded_.as<float>();
  }

  absl::Status ChooseAlgorithms() {
    const bool fp32 = ctx_.precision == GemmPrecision::kFp32;
    const size_t cap = static_cast<size_t>(ConvWorkspaceCap(g_));
    size_t fwd_bytes = 0, data_bytes = 0, filter_bytes = 0;
    {
      cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
      int count = 0;
      TRAIND_CUDNN_RETURN_IF_ERROR(cudnnGetConvolutionForwardAlgorithm_v7(
          ctx_.cudnn, x_desc_.get(), w_desc_.get(), fwd_.get(), y_desc_.get(),
          CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &count, perf));
      std::function<cudnnStatus_t(cudnnConvolutionFwdAlgo_t, size_t*)> size =
          [&](cudnnConvolutionFwdAlgo_t a, size_t* bytes) {
            return cudnnGetConvolutionForwardWorkspaceSize(ctx_.cudnn, x_desc_.get(), w_desc_.get(),
                                                           fwd_.get(), y_desc_.get(), a, bytes);
          };
      TRAIND_RETURN_IF_ERROR(Choose(perf, count, false, fp32, cap, fwd_.get(), size, "forward",
                                    &fwd_algo_, &fwd_bytes));
    }
    {
      cudnnConvolutionBwdDataAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
      int count = 0;
      TRAIND_CUDNN_RETURN_IF_ERROR(cudnnGetConvolutionBackwardDataAlgorithm_v7(
          ctx_.cudnn, w_desc_.get(), y_desc_.get(), bwd_data_.get(), x_desc_.get(),
          CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &count, perf));
      std::function<cudnnStatus_t(cudnnConvolutionBwdDataAlgo_t, size_t*)> size =
          [&](cudnnConvolutionBwdDataAlgo_t a, size_t* bytes) {
            return cudnnGetConvolutionBackwardDataWorkspaceSize(
                ctx_.cudnn, w_desc_.get(), y_desc_.get(), bwd_data_.get(), x_desc_.get(), a, bytes);
          };
      TRAIND_RETURN_IF_ERROR(Choose(perf, count, true, fp32, cap, bwd_data_.get(), size,
                                    "backward data", &bwd_data_algo_, &data_bytes));
    }
    {
      cudnnConvolutionBwdFilterAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
      int count = 0;
      TRAIND_CUDNN_RETURN_IF_ERROR(cudnnGetConvolutionBackwardFilterAlgorithm_v7(
          ctx_.cudnn, x_desc_.get(), y_desc_.get(), bwd_filter_.get(), w_desc_.get(),
          CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &count, perf));
      std::function<cudnnStatus_t(cudnnConvolutionBwdFilterAlgo_t, size_t*)> size =
          [&](cudnnConvolutionBwdFilterAlgo_t a, size_t* bytes) {
            return cudnnGetConvolutionBackwardFilterWorkspaceSize(ctx_.cudnn, x_desc_.get(),
                                                                  y_desc_.get(), bwd_filter_.get(),
                                                                  w_desc_.get(), a, bytes);
          };
      TRAIND_RETURN_IF_ERROR(Choose(perf, count, true, fp32, cap, bwd_filter_.get(), size,
                                    "backward filter", &bwd_filter_algo_, &filter_bytes));
    }
    workspace_bytes_ = std::max({fwd_bytes, data_bytes, filter_bytes});
    return absl::OkStatus();
  }

  const ConvContext ctx_;
  const Conv2dGeometry g_;
  const Conv2dKernelOptions options_;
  bool padded_ = false;              // asymmetric padding, applied explicitly
  int64_t conv_h_ = 0, conv_w_ = 0;  // the input cuDNN sees (padded or not)
  DeviceBuffer x_padded_, dx_padded_;
  TensorDesc x_desc_, y_desc_;
  FilterDesc w_desc_;
  ConvDesc fwd_, bwd_data_, bwd_filter_;  // one per pass: each has its math type
  cudnnConvolutionFwdAlgo_t fwd_algo_ = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM;
  cudnnConvolutionBwdDataAlgo_t bwd_data_algo_ = CUDNN_CONVOLUTION_BWD_DATA_ALGO_1;
  cudnnConvolutionBwdFilterAlgo_t bwd_filter_algo_ = CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1;
  DeviceBuffer workspace_;
  size_t workspace_bytes_ = 0;
};

class CudaPool2dKernel final : public Pool2dKernel {
 public:
  static absl::StatusOr<std::unique_ptr<CudaPool2dKernel>> Create(cudaStream_t stream,
                                                                  const Pool2dGeometry& g,
                                                                  PoolKind kind) {
    std::unique_ptr<CudaPool2dKernel> k(new CudaPool2dKernel(stream, g));
    cuda::PoolShape& s = k->shape_;
    s.images = g.batch * g.channels;
    s.in_h = g.in_height;
    s.in_w = g.in_width;
    s.out_h = g.out_height();
    s.out_w = g.out_width();
    s.kernel_h = g.kernel_height;
    s.kernel_w = g.kernel_width;
    s.stride_h = g.stride_height;
    s.stride_w = g.stride_width;
    s.pad_top = g.pad_top;
    s.pad_left = g.pad_left;
    s.kind = kind == PoolKind::kMax ? 0 : kind == PoolKind::kAverage ? 1 : 2;
    if (kind == PoolKind::kMax) {
      TRAIND_ASSIGN_OR_RETURN(k->argmax_,
                              DeviceBuffer::Allocate(sizeof(int32_t) * g.batch * g.out_size()));
    }
    return k;
  }

  absl::Status Forward(bool training, const Tensor& x, Tensor* y) override {
    TRAIND_RETURN_IF_ERROR(CheckShape(x, DType::kF32, g_.batch, g_.in_size(), "pool2d x"));
    TRAIND_RETURN_IF_ERROR(CheckShape(*y, DType::kF32, g_.batch, g_.out_size(), "pool2d y"));
    int32_t* where = training ? argmax_.as<int32_t>() : nullptr;
    TRAIND_LAUNCH(cuda::LaunchPoolForward(shape_, x.f32(), y->f32(), where, stream_));
    trained_ = trained_ || training;
    return absl::OkStatus();
  }

  absl::Status Backward(const Tensor& dy, Tensor* dx) override {
    TRAIND_RETURN_IF_ERROR(CheckShape(dy, DType::kF32, g_.batch, g_.out_size(), "pool2d dy"));
    TRAIND_RETURN_IF_ERROR(CheckShape(*dx, DType::kF32, g_.batch, g_.in_size(), "pool2d dx"));
    if (!trained_) {
      return absl::FailedPreconditionError("pool2d backward: no training forward pass before it");
    }
    TRAIND_LAUNCH(
        cuda::LaunchPoolBackward(shape_, dy.f32(), argmax_.as<int32_t>(), dx->f32(), stream_));
    return absl::OkStatus();
  }

 private:
  CudaPool2dKernel(cudaStream_t stream, const Pool2dGeometry& g) : stream_(stream), g_(g) {}

  const cudaStream_t stream_;
  const Pool2dGeometry g_;
  cuda::PoolShape shape_ = {};
  DeviceBuffer argmax_;  // max: where each maximum of the last training pass was
  bool trained_ = false;
};

}  // namespace

int64_t ConvWorkspaceCap(const Conv2dGeometry& g) {
  return static_cast<int64_t>(sizeof(float)) * g.batch * g.out_height() * g.out_width() *
         g.in_channels * g.kernel_height * g.kernel_width;
}

absl::StatusOr<std::unique_ptr<Conv2dKernel>> CreateCudaConv2dKernel(
    const ConvContext& context, const Conv2dGeometry& geometry,
    const Conv2dKernelOptions& options) {
  TRAIND_ASSIGN_OR_RETURN(std::unique_ptr<CudaConv2dKernel> k,
                          CudaConv2dKernel::Create(context, geometry, options));
  return std::unique_ptr<Conv2dKernel>(std::move(k));
}

absl::StatusOr<std::unique_ptr<Pool2dKernel>> CreateCudaPool2dKernel(cudaStream_t stream,
                                                                     const Pool2dGeometry& geometry,
                                                                     PoolKind kind) {
  TRAIND_ASSIGN_OR_RETURN(std::unique_ptr<CudaPool2dKernel> k,
                          CudaPool2dKernel::Create(stream, geometry, kind));
  return std::unique_ptr<Pool2dKernel>(std::move(k));
}

}  // namespace traind::engine
