#include "worker/engine/layers/normalization.h"

#include <cstring>
#include <utility>

#include "absl/strings/str_format.h"
#include "base/status.h"
#include "worker/engine/parallel/communicator.h"

namespace traind::engine {

absl::StatusOr<std::unique_ptr<BatchNorm>> BatchNorm::Create(Backend* backend, int64_t n,
                                                             float momentum, float epsilon) {
  std::unique_ptr<BatchNorm> layer(new BatchNorm(backend, n, momentum, epsilon));
  for (Tensor* t : {&layer->gamma_, &layer->beta_, &layer->dgamma_, &layer->dbeta_,
                    &layer->running_mean_, &layer->running_var_, &layer->mean_, &layer->rstd_,
                    &layer->train_mean_, &layer->train_rstd_, &layer->sum_, &layer->sq_}) {
    TRAIND_ASSIGN_OR_RETURN(*t, backend->Allocate1d(DType::kF32, n));
    TRAIND_RETURN_IF_ERROR(backend->Fill(0.0f, t));
  }
  TRAIND_ASSIGN_OR_RETURN(layer->grad_sums_, backend->Allocate1d(DType::kF32, 2 * n));
  TRAIND_RETURN_IF_ERROR(backend->Fill(0.0f, &layer->grad_sums_));
  Rng unused(0);
  TRAIND_RETURN_IF_ERROR(layer->Initialize(unused));
  return layer;
}

absl::Status BatchNorm::Initialize(Rng&) {
  TRAIND_RETURN_IF_ERROR(backend_->Fill(1.0f, &gamma_));
  TRAIND_RETURN_IF_ERROR(backend_->Fill(0.0f, &beta_));
  TRAIND_RETURN_IF_ERROR(backend_->Fill(0.0f, &running_mean_));
  return backend_->Fill(1.0f, &running_var_);
}

absl::Status BatchNorm::SetCommunicator(const ForwardMode& mode) {
  comm_ = nullptr;
  if (mode.communicator == nullptr || mode.communicator->size() <= 1) return absl::OkStatus();
  if (mode.batch_rows <= 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("batch norm: a pass across ranks of %d rows", mode.batch_rows));
  }
  comm_ = mode.communicator;
  count_ = mode.batch_rows;
  return absl::OkStatus();
}

Tensor BatchNorm::NoRows() { return sq_.Rows(0, 0); }

absl::Status BatchNorm::SyncForward(const Tensor& x, Tensor* y) {
  // Two passes, as BatchNormForward: the mean of the whole batch, then the
  // squared deviations from it.
  TRAIND_RETURN_IF_ERROR(backend_->BatchNormColumnSums(x, &sum_));
  TRAIND_RETURN_IF_ERROR(comm_->AllReduceSum(sum_.f32(), n_));
  TRAIND_RETURN_IF_ERROR(backend_->BatchNormSquaredDeviations(x, sum_, count_, &train_mean_, &sq_));
  TRAIND_RETURN_IF_ERROR(comm_->AllReduceSum(sq_.f32(), n_));
  return backend_->BatchNormForwardFromMoments(momentum_, epsilon_, count_, x, gamma_, beta_,
                                               train_mean_, sq_, &running_mean_, &running_var_,
                                               &train_rstd_, y);
}

absl::Status BatchNorm::SyncBackward(const Tensor& x, const Tensor& dy, Tensor* dx) {
  TRAIND_RETURN_IF_ERROR(backend_->BatchNormBackwardSums(x, train_mean_, train_rstd_, dy, &dgamma_,
                                                         &dbeta_, &grad_sums_));
  // Every rank sums, whether or not it needs dx.
  TRAIND_RETURN_IF_ERROR(comm_->AllReduceSum(grad_sums_.f32(), grad_sums_.size()));
  if (dx == nullptr) return absl::OkStatus();
  return backend_->BatchNormBackwardData(x, gamma_, train_mean_, train_rstd_, dy, grad_sums_,
                                         count_, dx);
}

absl::Status BatchNorm::JoinForward(const ForwardMode& mode) {
  if (!mode.training) return absl::OkStatus();
  TRAIND_RETURN_IF_ERROR(SetCommunicator(mode));
  if (comm_ == nullptr) return absl::OkStatus();
  const Tensor x = NoRows();
  Tensor y = NoRows();
  return SyncForward(x, &y);
}

absl::Status BatchNorm::JoinBackward() {
  if (comm_ == nullptr) return absl::OkStatus();
  const Tensor x = NoRows();
  const Tensor dy = NoRows();
  Tensor dx = NoRows();
  return SyncBackward(x, dy, &dx);
}

absl::Status BatchNorm::Forward(const Tensor& x, const ForwardMode& mode, Tensor* y) {
  if (mode.training) {
    TRAIND_RETURN_IF_ERROR(SetCommunicator(mode));
    if (comm_ != nullptr) return SyncForward(x, y);
    return backend_->BatchNormForward(true, momentum_, epsilon_, x, gamma_, beta_, &running_mean_,
                                      &running_var_, &train_mean_, &train_rstd_, y);
  }
  return backend_->BatchNormForward(false, momentum_, epsilon_, x, gamma_, beta_, &running_mean_,
                                    &running_var_, &mean_, &rstd_, y);
}

absl::Status BatchNorm::Backward(const Tensor& x, const Tensor&, Tensor* dy, Tensor* dx) {
  if (comm_ != nullptr) return SyncBackward(x, *dy, dx);
  return backend_->BatchNormBackward(x, gamma_, train_mean_, train_rstd_, *dy, &dgamma_, &dbeta_,
                                     dx);
}

void BatchNorm::AppendParameters(const std::string& prefix, std::vector<Parameter>* out) {
  out->push_back({prefix + ".gamma", &gamma_, &dgamma_});
  out->push_back({prefix + ".beta", &beta_, &dbeta_});
}

void BatchNorm::AppendBuffers(const std::string& prefix, std::vector<Parameter>* out) {
  out->push_back({prefix + ".running_mean", &running_mean_, nullptr});
  out->push_back({prefix + ".running_var", &running_var_, nullptr});
}

absl::StatusOr<std::unique_ptr<LayerNorm>> LayerNorm::Create(Backend* backend, int64_t n,
                                                             float epsilon) {
  std::unique_ptr<LayerNorm> layer(new LayerNorm(backend, n, epsilon));
  for (Tensor* t : {&layer->gamma_, &layer->beta_, &layer->dgamma_, &layer->dbeta_}) {
    TRAIND_ASSIGN_OR_RETURN(*t, backend->Allocate1d(DType::kF32, n));
    TRAIND_RETURN_IF_ERROR(backend->Fill(0.0f, t));
  }
  Rng unused(0);
  TRAIND_RETURN_IF_ERROR(layer->Initialize(unused));
  return layer;
}

absl::Status LayerNorm::Initialize(Rng&) {
  TRAIND_RETURN_IF_ERROR(backend_->Fill(1.0f, &gamma_));
  return backend_->Fill(0.0f, &beta_);
}

absl::StatusOr<LayerNorm::Stats*> LayerNorm::StatsFor(int64_t batch) {
  for (Stats& s : stats_) {
    if (s.batch == batch) return &s;
  }
  Stats s{batch, Tensor(), Tensor()};
  TRAIND_ASSIGN_OR_RETURN(s.mean, backend_->Allocate1d(DType::kF32, batch));
  TRAIND_ASSIGN_OR_RETURN(s.rstd, backend_->Allocate1d(DType::kF32, batch));
  stats_.push_back(std::move(s));
  return &stats_.back();
}

absl::Status LayerNorm::Forward(const Tensor& x, const ForwardMode&, Tensor* y) {
  TRAIND_ASSIGN_OR_RETURN(Stats * s, StatsFor(x.rows()));
  return backend_->LayerNormForward(epsilon_, x, gamma_, beta_, &s->mean, &s->rstd, y);
}

absl::Status LayerNorm::Backward(const Tensor& x, const Tensor&, Tensor* dy, Tensor* dx) {
  TRAIND_ASSIGN_OR_RETURN(Stats * s, StatsFor(x.rows()));
  return backend_->LayerNormBackward(x, gamma_, s->mean, s->rstd, *dy, &dgamma_, &dbeta_, dx);
}

void LayerNorm::AppendParameters(const std::string& prefix, std::vector<Parameter>* out) {
  out->push_back({prefix + ".gamma", &gamma_, &dgamma_});
  out->push_back({prefix + ".beta", &beta_, &dbeta_});
}

// ------------------------------------------------------------ BatchNorm2d

absl::StatusOr<std::unique_ptr<BatchNorm2d>> BatchNorm2d::Create(Backend* backend, int64_t channels,
                                                                 int64_t pixels, float momentum,
                                                                 float epsilon) {
  TRAIND_ASSIGN_OR_RETURN(std::unique_ptr<BatchNorm> inner,
                          BatchNorm::Create(backend, channels, momentum, epsilon));
  return std::unique_ptr<BatchNorm2d>(new BatchNorm2d(backend, channels, pixels, std::move(inner)));
}

absl::StatusOr<BatchNorm2d::Buffers*> BatchNorm2d::BuffersFor(int64_t batch) {
  for (Buffers& b : buffers_) {
    if (b.batch == batch) return &b;
  }
  Buffers b;
  b.batch = batch;
  for (Tensor* t : {&b.x, &b.y, &b.d}) {
    TRAIND_ASSIGN_OR_RETURN(*t, backend_->Allocate2d(DType::kF32, batch * pixels_, channels_));
  }
  buffers_.push_back(std::move(b));
  return &buffers_.back();
}

absl::Status BatchNorm2d::Forward(const Tensor& x, const ForwardMode& mode, Tensor* y) {
  if (mode.training && mode.communicator != nullptr && mode.communicator->size() > 1) {
    return InvalidSpecError("batch_norm on images: not across ranks (one GPU or the CPU)");
  }
  ForwardMode one = mode;
  one.communicator = nullptr;
  const int64_t batch = x.rows();
  if (channels_last_) {  // a row per pixel, a column per channel already
    Tensor rows_y = y->Reshaped(batch * pixels_, channels_);
    return inner_->Forward(x.Reshaped(batch * pixels_, channels_), one, &rows_y);
  }
  TRAIND_ASSIGN_OR_RETURN(Buffers * b, BuffersFor(batch));
  // [batch, C, H·W] -> [batch, H·W, C]: a row per pixel, a column per channel.
  TRAIND_RETURN_IF_ERROR(backend_->TransposeBlocks(x, batch, channels_, pixels_, &b->x));
  TRAIND_RETURN_IF_ERROR(inner_->Forward(b->x, one, &b->y));
  return backend_->TransposeBlocks(b->y, batch, pixels_, channels_, y);
}

absl::Status BatchNorm2d::Backward(const Tensor& x, const Tensor& y, Tensor* dy, Tensor* dx) {
  const int64_t batch = dy->rows();
  if (channels_last_) {
    Tensor rows_dy = dy->Reshaped(batch * pixels_, channels_);
    Tensor rows_dx = dx == nullptr ? Tensor() : dx->Reshaped(batch * pixels_, channels_);
    return inner_->Backward(x.Reshaped(batch * pixels_, channels_),
                            y.Reshaped(batch * pixels_, channels_), &rows_dy,
                            dx == nullptr ? nullptr : &rows_dx);
  }
  TRAIND_ASSIGN_OR_RETURN(Buffers * b, BuffersFor(batch));
  // b->x and b->y hold this batch size's last (training) forward pass.
  TRAIND_RETURN_IF_ERROR(backend_->TransposeBlocks(*dy, batch, channels_, pixels_, &b->d));
  if (dx == nullptr) return inner_->Backward(b->x, b->y, &b->d, nullptr);
  // The input gradient overwrites the transposed output, not needed again.
  TRAIND_RETURN_IF_ERROR(inner_->Backward(b->x, b->y, &b->d, &b->y));
  return backend_->TransposeBlocks(b->y, batch, pixels_, channels_, dx);
}

}  // namespace traind::engine
