#include "worker/engine/layers/image.h"

#include <utility>

#include "base/status.h"
#include "worker/engine/initializers.h"

namespace traind::engine {

absl::StatusOr<Conv2d> Conv2d::Create(Backend* backend, const Conv2dGeometry& geometry,
                                      ActivationFn activation, bool bias, WeightInit init) {
  Conv2d layer(backend, geometry, activation, bias, init);
  layer.g_.batch = 1;
  const int64_t f = geometry.out_channels;
  const int64_t cols = layer.g_.weight_cols();
  TRAIND_ASSIGN_OR_RETURN(layer.w_, backend->Allocate2d(DType::kF32, f, cols));
  TRAIND_ASSIGN_OR_RETURN(layer.b_, backend->Allocate1d(DType::kF32, f));
  TRAIND_ASSIGN_OR_RETURN(layer.dw_, backend->Allocate2d(DType::kF32, f, cols));
  TRAIND_ASSIGN_OR_RETURN(layer.db_, backend->Allocate1d(DType::kF32, f));
  TRAIND_RETURN_IF_ERROR(backend->Fill(0.0f, &layer.dw_));
  TRAIND_RETURN_IF_ERROR(backend->Fill(0.0f, &layer.db_));
  TRAIND_RETURN_IF_ERROR(backend->Fill(0.0f, &layer.b_));
  return layer;
}

absl::Status Conv2d::Initialize(Rng& rng) {
  const int64_t receptive = g_.kernel_height * g_.kernel_width;
  std::vector<float> host(static_cast<size_t>(w_.size()));
  InitializerParams params;
  params.gain = init_.gain;
  params.stddev = init_.stddev;
  params.limit = init_.limit;
  TRAIND_RETURN_IF_ERROR(
      InitializeWeightsWithFans(init_.kind, params, g_.in_channels / g_.groups * receptive,
                                g_.out_channels * receptive, w_.size(), rng, host.data()));
  TRAIND_RETURN_IF_ERROR(backend_->CopyFromHost(host.data(), &w_));
  return backend_->Fill(0.0f, &b_);
}

absl::StatusOr<Conv2d::PerBatch*> Conv2d::For(int64_t batch) {
  for (const std::unique_ptr<PerBatch>& p : per_batch_) {
    if (p->batch == batch) return p.get();
  }
  auto p = std::make_unique<PerBatch>();
  p->batch = batch;
  Conv2dGeometry g = g_;
  g.batch = batch;
  Conv2dKernelOptions options;
  options.bias = bias_;
  options.channels_last = channels_last_;
  if (fused()) options.activation = activation_;
  TRAIND_ASSIGN_OR_RETURN(p->kernel, backend_->CreateConv2dKernel(g, options));
  if (!fused()) {
    TRAIND_ASSIGN_OR_RETURN(p->z, backend_->Allocate2d(DType::kF32, batch, g_.out_size()));
  }
  per_batch_.push_back(std::move(p));
  return per_batch_.back().get();
}

absl::Status Conv2d::Forward(const Tensor& x, const ForwardMode& mode, Tensor* y) {
  TRAIND_ASSIGN_OR_RETURN(PerBatch * p, For(x.rows()));
  if (fused()) return p->kernel->Forward(x, w_, b_, y);
  if (!mode.training) {
    if (p->eval_kernel == nullptr) {
      Conv2dGeometry g = g_;
      g.batch = x.rows();
      Conv2dKernelOptions options;
      options.bias = bias_;
      options.activation = activation_;
      options.channels_last = channels_last_;
      TRAIND_ASSIGN_OR_RETURN(p->eval_kernel, backend_->CreateConv2dKernel(g, options));
    }
    return p->eval_kernel->Forward(x, w_, b_, y);
  }
  TRAIND_RETURN_IF_ERROR(p->kernel->Forward(x, w_, b_, &p->z));
  return backend_->ActivationForward(activation_, p->z, y);
}

absl::Status Conv2d::Backward(const Tensor& x, const Tensor& y, Tensor* dy, Tensor* dx) {
  TRAIND_ASSIGN_OR_RETURN(PerBatch * p, For(x.rows()));
  if (fused()) return p->kernel->Backward(x, w_, y, dy, &dw_, bias_ ? &db_ : nullptr, dx);
  TRAIND_RETURN_IF_ERROR(backend_->ActivationBackward(activation_, p->z, y, *dy, dy));
  return p->kernel->Backward(x, w_, p->z, dy, &dw_, bias_ ? &db_ : nullptr, dx);
}

void Conv2d::AppendParameters(const std::string& prefix, std::vector<Parameter>* out) {
  out->push_back({prefix + ".weight", &w_, &dw_});
  if (bias_) out->push_back({prefix + ".bias", &b_, &db_});
}

absl::StatusOr<Pool2dKernel*> Pool2d::For(int64_t batch) {
  for (auto& [b, kernel] : per_batch_) {
    if (b == batch) return kernel.get();
  }
  Pool2dGeometry g = g_;
  g.batch = batch;
  Pool2dKernelOptions options;
  options.kind = kind_;
  options.channels_last = channels_last_;
  TRAIND_ASSIGN_OR_RETURN(std::unique_ptr<Pool2dKernel> kernel,
                          backend_->CreatePool2dKernel(g, options));
  per_batch_.emplace_back(batch, std::move(kernel));
  return per_batch_.back().second.get();
}

absl::Status Pool2d::Forward(const Tensor& x, const ForwardMode& mode, Tensor* y) {
  TRAIND_ASSIGN_OR_RETURN(Pool2dKernel * kernel, For(x.rows()));
  return kernel->Forward(mode.training, x, y);
}

absl::Status Pool2d::Backward(const Tensor& x, const Tensor&, Tensor* dy, Tensor* dx) {
  if (dx == nullptr) return absl::OkStatus();
  TRAIND_ASSIGN_OR_RETURN(Pool2dKernel * kernel, For(x.rows()));
  return kernel->Backward(*dy, dx);
}

}  // namespace traind::engine
