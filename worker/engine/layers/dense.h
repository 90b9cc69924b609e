// Fully connected layer: y = activation(x w + b).
#ifndef TRAIND_WORKER_ENGINE_LAYERS_DENSE_H_
#define TRAIND_WORKER_ENGINE_LAYERS_DENSE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "base/random.h"
#include "traind/v1/job.pb.h"
#include "worker/engine/backend/backend.h"
#include "worker/engine/layers/layer.h"
#include "worker/engine/tensor.h"

namespace traind::engine {

// Initializer of a dense layer's weights with its parameters.
struct WeightInit {
  traind::v1::Initializer kind = traind::v1::XAVIER_UNIFORM;
  double gain = 0;  // 0: the kind's default
  double stddev = 0.01;
  double limit = 0.05;
};

// Owns its parameters and their gradients (on the backend) and one planned
// kernel per batch size seen, so a steady-state step plans and allocates
// nothing. An activation whose derivative needs only y is fused into the
// matmul (oneDNN post-op); gelu, softplus and swish are fused only in
// evaluation passes, and run after a linear kernel while training, keeping
// the pre-activation for the backward pass.
//
// Thread safety: not thread-safe.
class Dense final : public Layer {
 public:
  // w: [in, out], b: [out], uninitialized until Initialize.
  // REQUIRES: backend outlives the layer; in, out > 0.
  static absl::StatusOr<Dense> Create(Backend* backend, int64_t in, int64_t out,
                                      DenseActivation activation);
  static absl::StatusOr<Dense> Create(Backend* backend, int64_t in, int64_t out,
                                      ActivationFn activation, bool bias, WeightInit init);

  Dense(Dense&&) = default;
  Dense& operator=(Dense&&) = default;

  // w from `init` (drawn from `rng`), b = 0.
  absl::Status Initialize(traind::v1::Initializer init, Rng& rng);
  absl::Status Initialize(Rng& rng) override;

  // x: [batch, in] -> y: [batch, out]
  absl::Status Forward(const Tensor& x, const ForwardMode& mode, Tensor* y) override;
  absl::Status Forward(const Tensor& x, Tensor* y) { return Forward(x, ForwardMode(), y); }

  // dy: [batch, out] = dL/dy (overwritten) -> weight_grad(), bias_grad()
  // (overwritten), dx: [batch, in] = dL/dx unless dx is null. When the
  // optimizer has armed the weight's InBackwardUpdate and the kernel can, the
  // weight is updated here instead, and weight_grad() is left as it was.
  absl::Status Backward(const Tensor& x, const Tensor& y, Tensor* dy, Tensor* dx) override;

  void AppendParameters(const std::string& prefix, std::vector<Parameter>* out) override;

  int64_t in() const override { return in_; }
  int64_t out() const override { return out_; }
  DenseActivation activation() const { return activation_.kind; }
  bool has_bias() const { return bias_; }
  Tensor& weight() { return w_; }
  Tensor& bias() { return b_; }
  Tensor& weight_grad() { return dw_; }
  Tensor& bias_grad() { return db_; }

 private:
  struct PerBatch {
    int64_t batch = 0;
    std::unique_ptr<DenseKernel> kernel;
    Tensor z;  // [batch, out] pre-activation (unfused activations only)
    std::unique_ptr<DenseKernel> eval_kernel;  // fused, for evaluation (unfused activations only)
  };

  Dense(Backend* backend, int64_t in, int64_t out, ActivationFn activation, bool bias,
        WeightInit init)
      : backend_(backend), in_(in), out_(out), activation_(activation), bias_(bias), init_(init) {}

  bool fused() const { return DerivativeFromOutput(activation_.kind); }
  absl::StatusOr<PerBatch*> For(int64_t batch);

  Backend* backend_;
  int64_t in_, out_;
  ActivationFn activation_;
  bool bias_;
  WeightInit init_;
  Tensor w_, b_, dw_, db_;
  InBackwardUpdate update_;  // the weight's (see Parameter)
  // A handful of batch sizes at most (full batch, last train batch, last
  // validation batch): a linear search beats a map.
  std::vector<std::unique_ptr<PerBatch>> per_batch_;
};

}  // namespace traind::engine

#endif  // TRAIND_WORKER_ENGINE_LAYERS_DENSE_H_
