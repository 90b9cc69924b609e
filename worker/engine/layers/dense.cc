#include "worker/engine/layers/dense.h"

#include <vector>

#include "base/status.h"
#include "worker/engine/initializers.h"

namespace traind::engine {

absl::StatusOr<Dense> Dense::Create(Backend* backend, int64_t in, int64_t out,
                                    DenseActivation activation) {
  ActivationFn fn;
  fn.kind = activation;
  return Create(backend, in, out, fn, /*bias=*/true, WeightInit());
}

absl::StatusOr<Dense> Dense::Create(Backend* backend, int64_t in, int64_t out,
                                    ActivationFn activation, bool bias, WeightInit init) {
  Dense layer(backend, in, out, activation, bias, init);
  TRAIND_ASSIGN_OR_RETURN(layer.w_, backend->Allocate2d(DType::kF32, in, out));
  TRAIND_ASSIGN_OR_RETURN(layer.b_, backend->Allocate1d(DType::kF32, out));
  TRAIND_ASSIGN_OR_RETURN(layer.dw_, backend->Allocate2d(DType::kF32, in, out));
  TRAIND_ASSIGN_OR_RETURN(layer.db_, backend->Allocate1d(DType::kF32, out));
  TRAIND_RETURN_IF_ERROR(backend->Fill(0.0f, &layer.dw_));
  TRAIND_RETURN_IF_ERROR(backend->Fill(0.0f, &layer.db_));
  TRAIND_RETURN_IF_ERROR(backend->Fill(0.0f, &layer.b_));
  return layer;
}

absl::Status Dense::Initialize(traind::v1::Initializer init, Rng& rng) {
  init_.kind = init;
  return Initialize(rng);
}

absl::Status Dense::Initialize(Rng& rng) {
  std::vector<float> host(static_cast<size_t>(in_ * out_));
  InitializerParams params;
  params.gain = init_.gain;
  params.stddev = init_.stddev;
  params.limit = init_.limit;
  TRAIND_RETURN_IF_ERROR(InitializeWeights(init_.kind, params, in_, out_, rng, host.data()));
  TRAIND_RETURN_IF_ERROR(backend_->CopyFromHost(host.data(), &w_));
  return backend_->Fill(0.0f, &b_);
}

absl::StatusOr<Dense::PerBatch*> Dense::For(int64_t batch) {
  for (const std::unique_ptr<PerBatch>& p : per_batch_) {
    if (p->batch == batch) return p.get();
  }
  auto p = std::make_unique<PerBatch>();
  p->batch = batch;
  DenseKernelOptions options;
  options.bias = bias_;
  if (fused()) options.activation = activation_;
  TRAIND_ASSIGN_OR_RETURN(p->kernel, backend_->CreateDenseKernel(batch, in_, out_, options));
  if (!fused()) {
    TRAIND_ASSIGN_OR_RETURN(p->z, backend_->Allocate2d(DType::kF32, batch, out_));
  }
  per_batch_.push_back(std::move(p));
  return per_batch_.back().get();
}

absl::Status Dense::Forward(const Tensor& x, const ForwardMode& mode, Tensor* y) {
  TRAIND_ASSIGN_OR_RETURN(PerBatch * p, For(x.rows()));
  if (fused()) return p->kernel->Forward(x, w_, b_, y);
  if (!mode.training) {
    // No backward pass follows: the activation runs as the matmul's post-op.
    if (p->eval_kernel == nullptr) {
      DenseKernelOptions options;
      options.bias = bias_;
      options.activation = activation_;
      TRAIND_ASSIGN_OR_RETURN(p->eval_kernel,
                              backend_->CreateDenseKernel(x.rows(), in_, out_, options));
    }
    return p->eval_kernel->Forward(x, w_, b_, y);
  }
  // x: [batch, in] -> z: [batch, out] -> y = f(z)
  TRAIND_RETURN_IF_ERROR(p->kernel->Forward(x, w_, b_, &p->z));
  return backend_->ActivationForward(activation_, p->z, y);
}

absl::Status Dense::Backward(const Tensor& x, const Tensor& y, Tensor* dy, Tensor* dx) {
  TRAIND_ASSIGN_OR_RETURN(PerBatch * p, For(x.rows()));
  if (fused() && update_.armed && p->kernel->UpdatesInBackward()) {
    TRAIND_RETURN_IF_ERROR(p->kernel->BackwardUpdate(x, &w_, y, dy, bias_ ? &db_ : nullptr, dx,
                                                     update_.sgd, update_.velocity));
    update_.done = true;
    return absl::OkStatus();
  }
  if (fused()) return p->kernel->Backward(x, w_, y, dy, &dw_, bias_ ? &db_ : nullptr, dx);
  // dy -> dz = dy ⊙ f'(z), in place; then the linear kernel's gradients.
  TRAIND_RETURN_IF_ERROR(backend_->ActivationBackward(activation_, p->z, y, *dy, dy));
  return p->kernel->Backward(x, w_, p->z, dy, &dw_, bias_ ? &db_ : nullptr, dx);
}

void Dense::AppendParameters(const std::string& prefix, std::vector<Parameter>* out) {
  out->push_back({prefix + ".weight", &w_, &dw_, &update_});
  if (bias_) out->push_back({prefix + ".bias", &b_, &db_});
}

}  // namespace traind::engine
