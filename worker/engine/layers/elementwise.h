// Layers without weights that act on each value: activations and dropout.
#ifndef TRAIND_WORKER_ENGINE_LAYERS_ELEMENTWISE_H_
#define TRAIND_WORKER_ENGINE_LAYERS_ELEMENTWISE_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "worker/engine/backend/backend.h"
#include "worker/engine/layers/layer.h"

namespace traind::engine {

// y = f(x). x, y: [batch, n]
class ActivationLayer final : public Layer {
 public:
  // REQUIRES: backend outlives the layer.
  ActivationLayer(Backend* backend, int64_t n, ActivationFn f) : backend_(backend), n_(n), f_(f) {}

  int64_t in() const override { return n_; }
  int64_t out() const override { return n_; }
  absl::Status Initialize(Rng&) override { return absl::OkStatus(); }
  absl::Status Forward(const Tensor& x, const ForwardMode& mode, Tensor* y) override;
  absl::Status Backward(const Tensor& x, const Tensor& y, Tensor* dy, Tensor* dx) override;

 private:
  Backend* backend_;
  int64_t n_;
  ActivationFn f_;
};

// Inverted dropout: while training, y = x ⊙ mask with mask values 0
// (probability rate) or 1 / (1 - rate); at evaluation y = x.
class Dropout final : public Layer {
 public:
  // REQUIRES: backend outlives the layer; 0 <= rate < 1.
  Dropout(Backend* backend, int64_t n, float rate) : backend_(backend), n_(n), rate_(rate) {}

  int64_t in() const override { return n_; }
  int64_t out() const override { return n_; }
  absl::Status Initialize(Rng&) override { return absl::OkStatus(); }
  absl::Status Forward(const Tensor& x, const ForwardMode& mode, Tensor* y) override;
  absl::Status Backward(const Tensor& x, const Tensor& y, Tensor* dy, Tensor* dx) override;

 private:
  struct Mask {
    int64_t batch;
    Tensor mask;  // [batch, n]
  };
  absl::StatusOr<Tensor*> MaskFor(int64_t batch);

  Backend* backend_;
  int64_t n_;
  float rate_;
  std::vector<Mask> masks_;
};

}  // namespace traind::engine

#endif  // TRAIND_WORKER_ENGINE_LAYERS_ELEMENTWISE_H_
