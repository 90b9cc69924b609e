#include "worker/engine/layers/elementwise.h"

#include <utility>

#include "base/status.h"

namespace traind::engine {

absl::Status ActivationLayer::Forward(const Tensor& x, const ForwardMode&, Tensor* y) {
  return backend_->ActivationForward(f_, x, y);
}

absl::Status ActivationLayer::Backward(const Tensor& x, const Tensor& y, Tensor* dy, Tensor* dx) {
  if (dx == nullptr) return absl::OkStatus();
  return backend_->ActivationBackward(f_, x, y, *dy, dx);
}

absl::StatusOr<Tensor*> Dropout::MaskFor(int64_t batch) {
  for (Mask& m : masks_) {
    if (m.batch == batch) return &m.mask;
  }
  TRAIND_ASSIGN_OR_RETURN(Tensor mask, backend_->Allocate2d(DType::kF32, batch, n_));
  masks_.push_back({batch, std::move(mask)});
  return &masks_.back().mask;
}

absl::Status Dropout::Forward(const Tensor& x, const ForwardMode& mode, Tensor* y) {
  if (!mode.training || rate_ == 0.0f) {
    // The identity; the network's buffers are distinct, so copy (on the
    // backend: the tensors may be in device memory).
    return backend_->Copy(x, y);
  }
  TRAIND_ASSIGN_OR_RETURN(Tensor * mask, MaskFor(x.rows()));
  return backend_->DropoutForward(rate_, mode.seed, x, mask, y);
}

absl::Status Dropout::Backward(const Tensor& x, const Tensor&, Tensor* dy, Tensor* dx) {
  if (dx == nullptr) return absl::OkStatus();
  if (rate_ == 0.0f) return backend_->Copy(*dy, dx);
  TRAIND_ASSIGN_OR_RETURN(Tensor * mask, MaskFor(x.rows()));
  return backend_->Multiply(*dy, *mask, dx);
}

}  // namespace traind::engine
