#include "worker/engine/layers/dense.h"

#include <vector>

#include "worker/engine/initializers.h"
#include "worker/engine/status.h"

namespace traind::engine {

absl::StatusOr<Dense> Dense::Create(Backend* backend, int64_t in, int64_t out,
                                    DenseActivation activation) {
  Dense layer(backend, in, out, activation);
  TRAIND_ASSIGN_OR_RETURN(layer.w_, backend->Allocate2d(DType::kF32, in, out));
  TRAIND_ASSIGN_OR_RETURN(layer.b_, backend->Allocate1d(DType::kF32, out));
  TRAIND_ASSIGN_OR_RETURN(layer.dw_, backend->Allocate2d(DType::kF32, in, out));
  TRAIND_ASSIGN_OR_RETURN(layer.db_, backend->Allocate1d(DType::kF32, out));
  TRAIND_RETURN_IF_ERROR(backend->Fill(0.0f, &layer.dw_));
  TRAIND_RETURN_IF_ERROR(backend->Fill(0.0f, &layer.db_));
  return layer;
}

absl::Status Dense::Initialize(traind::v1::Initializer init, Rng& rng) {
  std::vector<float> host(static_cast<size_t>(in_ * out_));
  TRAIND_RETURN_IF_ERROR(InitializeWeights(init, in_, out_, rng, host.data()));
  TRAIND_RETURN_IF_ERROR(backend_->CopyFromHost(host.data(), &w_));
  return backend_->Fill(0.0f, &b_);
}

absl::StatusOr<DenseKernel*> Dense::KernelFor(int64_t batch) {
  for (auto& [size, kernel] : kernels_) {
    if (size == batch) return kernel.get();
  }
  TRAIND_ASSIGN_OR_RETURN(std::unique_ptr<DenseKernel> kernel,
                          backend_->CreateDenseKernel(batch, in_, out_, activation_));
  kernels_.emplace_back(batch, std::move(kernel));
  return kernels_.back().second.get();
}

absl::Status Dense::Forward(const Tensor& x, Tensor* y) {
  TRAIND_ASSIGN_OR_RETURN(DenseKernel * kernel, KernelFor(x.rows()));
  return kernel->Forward(x, w_, b_, y);
}

absl::Status Dense::Backward(const Tensor& x, const Tensor& y, Tensor* dy, Tensor* dx) {
  TRAIND_ASSIGN_OR_RETURN(DenseKernel * kernel, KernelFor(x.rows()));
  return kernel->Backward(x, w_, y, dy, &dw_, &db_, dx);
}

}  // namespace traind::engine
