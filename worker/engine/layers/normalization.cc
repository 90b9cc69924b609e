#include "worker/engine/layers/normalization.h"

#include <cstring>
#include <utility>

#include "worker/engine/status.h"

namespace traind::engine {

absl::StatusOr<std::unique_ptr<BatchNorm>> BatchNorm::Create(Backend* backend, int64_t n,
                                                             float momentum, float epsilon) {
  std::unique_ptr<BatchNorm> layer(new BatchNorm(backend, n, momentum, epsilon));
  for (Tensor* t : {&layer->gamma_, &layer->beta_, &layer->dgamma_, &layer->dbeta_,
                    &layer->running_mean_, &layer->running_var_, &layer->mean_, &layer->rstd_,
                    &layer->train_mean_, &layer->train_rstd_}) {
    TRAIND_ASSIGN_OR_RETURN(*t, backend->Allocate1d(DType::kF32, n));
    TRAIND_RETURN_IF_ERROR(backend->Fill(0.0f, t));
  }
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

absl::Status BatchNorm::Forward(const Tensor& x, const ForwardMode& mode, Tensor* y) {
  if (mode.training) {
    return backend_->BatchNormForward(true, momentum_, epsilon_, x, gamma_, beta_, &running_mean_,
                                      &running_var_, &train_mean_, &train_rstd_, y);
  }
  return backend_->BatchNormForward(false, momentum_, epsilon_, x, gamma_, beta_, &running_mean_,
                                    &running_var_, &mean_, &rstd_, y);
}

absl::Status BatchNorm::Backward(const Tensor& x, const Tensor&, Tensor* dy, Tensor* dx) {
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

}  // namespace traind::engine
