#include "worker/engine/layers/channels_last.h"

#include <utility>

#include "base/status.h"

namespace traind::engine {

ChannelsLastBoundary::ChannelsLastBoundary(Backend* backend, std::unique_ptr<Layer> inner, Side in,
                                           Side out)
    : backend_(backend), inner_(std::move(inner)), in_(in), out_(out) {
  // One channel or one pixel: both orders are the same.
  in_.convert = in_.convert && in_.channels > 1 && in_.pixels > 1;
  out_.convert = out_.convert && out_.channels > 1 && out_.pixels > 1;
}

absl::StatusOr<ChannelsLastBoundary::Buffers*> ChannelsLastBoundary::BuffersFor(int64_t batch) {
  for (const std::unique_ptr<Buffers>& b : buffers_) {
    if (b->batch == batch) return b.get();
  }
  auto b = std::make_unique<Buffers>();
  b->batch = batch;
  if (in_.convert) {
    TRAIND_ASSIGN_OR_RETURN(b->x, backend_->Allocate2d(DType::kF32, batch, inner_->in()));
    TRAIND_ASSIGN_OR_RETURN(b->dx, backend_->Allocate2d(DType::kF32, batch, inner_->in()));
  }
  if (out_.convert) {
    TRAIND_ASSIGN_OR_RETURN(b->y, backend_->Allocate2d(DType::kF32, batch, inner_->out()));
    TRAIND_ASSIGN_OR_RETURN(b->dy, backend_->Allocate2d(DType::kF32, batch, inner_->out()));
  }
  buffers_.push_back(std::move(b));
  return buffers_.back().get();
}

absl::Status ChannelsLastBoundary::Forward(const Tensor& x, const ForwardMode& mode, Tensor* y) {
  const int64_t batch = x.rows();
  TRAIND_ASSIGN_OR_RETURN(Buffers * b, BuffersFor(batch));
  const Tensor* in = &x;
  if (in_.convert) {  // [batch, C, H·W] -> [batch, H·W, C]
    TRAIND_RETURN_IF_ERROR(backend_->TransposeBlocks(x, batch, in_.channels, in_.pixels, &b->x));
    in = &b->x;
  }
  Tensor* result = out_.convert ? &b->y : y;
  TRAIND_RETURN_IF_ERROR(inner_->Forward(*in, mode, result));
  if (!out_.convert) return absl::OkStatus();
  // [batch, H·W, C] -> [batch, C, H·W]
  return backend_->TransposeBlocks(b->y, batch, out_.pixels, out_.channels, y);
}

absl::Status ChannelsLastBoundary::Backward(const Tensor& x, const Tensor& y, Tensor* dy,
                                            Tensor* dx) {
  const int64_t batch = dy->rows();
  TRAIND_ASSIGN_OR_RETURN(Buffers * b, BuffersFor(batch));
  // b->x and b->y hold this batch size's last (training) forward pass.
  const Tensor& in = in_.convert ? b->x : x;
  const Tensor& result = out_.convert ? b->y : y;
  Tensor* grad = dy;
  if (out_.convert) {
    TRAIND_RETURN_IF_ERROR(
        backend_->TransposeBlocks(*dy, batch, out_.channels, out_.pixels, &b->dy));
    grad = &b->dy;
  }
  Tensor* input_grad = dx == nullptr ? nullptr : (in_.convert ? &b->dx : dx);
  TRAIND_RETURN_IF_ERROR(inner_->Backward(in, result, grad, input_grad));
  if (dx == nullptr || !in_.convert) return absl::OkStatus();
  return backend_->TransposeBlocks(b->dx, batch, in_.pixels, in_.channels, dx);
}

}  // namespace traind::engine
