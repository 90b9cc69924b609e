#include "worker/engine/optimizers.h"

#include <utility>

#include "worker/engine/spec_check.h"
#include "worker/engine/status.h"

namespace traind::engine {
namespace {

absl::StatusOr<std::vector<Tensor>> ZerosLike(Backend* backend, const std::vector<Parameter>& params) {
  std::vector<Tensor> state;
  state.reserve(params.size());
  for (const Parameter& p : params) {
    TRAIND_ASSIGN_OR_RETURN(Tensor t, p.value->rank() == 1
                                          ? backend->Allocate1d(DType::kF32, p.value->size())
                                          : backend->Allocate2d(DType::kF32, p.value->rows(),
                                                                p.value->cols()));
    TRAIND_RETURN_IF_ERROR(backend->Fill(0.0f, &t));
    state.push_back(std::move(t));
  }
  return state;
}

// v = momentum v + g; w -= lr v (PyTorch's SGD, dampening 0, no Nesterov).
class Sgd final : public Optimizer {
 public:
  Sgd(Backend* backend, std::vector<Parameter> params, float learning_rate, float momentum,
      std::vector<Tensor> velocity)
      : backend_(backend), params_(std::move(params)), learning_rate_(learning_rate),
        momentum_(momentum), velocity_(std::move(velocity)) {}

  absl::Status Step() override {
    for (size_t i = 0; i < params_.size(); ++i) {
      Tensor* velocity = velocity_.empty() ? nullptr : &velocity_[i];
      TRAIND_RETURN_IF_ERROR(
          backend_->SgdUpdate(learning_rate_, momentum_, *params_[i].grad, velocity, params_[i].value));
    }
    ++steps_;
    return absl::OkStatus();
  }
  int64_t steps() const override { return steps_; }

 private:
  Backend* backend_;
  std::vector<Parameter> params_;
  float learning_rate_, momentum_;
  std::vector<Tensor> velocity_;  // empty when momentum == 0
  int64_t steps_ = 0;
};

// Adam with bias correction (PyTorch's formulation).
class Adam final : public Optimizer {
 public:
  Adam(Backend* backend, std::vector<Parameter> params, AdamStep constants, std::vector<Tensor> m,
       std::vector<Tensor> v)
      : backend_(backend), params_(std::move(params)), constants_(constants), m_(std::move(m)),
        v_(std::move(v)) {}

  absl::Status Step() override {
    AdamStep step = constants_;
    step.step = steps_ + 1;
    for (size_t i = 0; i < params_.size(); ++i) {
      TRAIND_RETURN_IF_ERROR(
          backend_->AdamUpdate(step, *params_[i].grad, &m_[i], &v_[i], params_[i].value));
    }
    ++steps_;
    return absl::OkStatus();
  }
  int64_t steps() const override { return steps_; }

 private:
  Backend* backend_;
  std::vector<Parameter> params_;
  AdamStep constants_;
  std::vector<Tensor> m_, v_;
  int64_t steps_ = 0;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Optimizer>> CreateOptimizer(const traind::v1::OptimizerSpec& spec,
                                                           Backend* backend,
                                                           std::vector<Parameter> params) {
  TRAIND_RETURN_IF_ERROR(CheckOptimizerSpec(spec));
  switch (spec.kind_case()) {
    case traind::v1::OptimizerSpec::kSgd: {
      const traind::v1::Sgd& sgd = spec.sgd();
      std::vector<Tensor> velocity;
      if (sgd.momentum() > 0) {
        TRAIND_ASSIGN_OR_RETURN(velocity, ZerosLike(backend, params));
      }
      return std::unique_ptr<Optimizer>(
          new Sgd(backend, std::move(params), static_cast<float>(sgd.learning_rate()),
                  static_cast<float>(sgd.momentum()), std::move(velocity)));
    }
    case traind::v1::OptimizerSpec::kAdam: {
      const traind::v1::Adam& adam = spec.adam();
      AdamStep constants;
      constants.learning_rate = adam.learning_rate();
      if (adam.has_beta1()) constants.beta1 = adam.beta1();
      if (adam.has_beta2()) constants.beta2 = adam.beta2();
      if (adam.has_epsilon()) constants.epsilon = adam.epsilon();
      TRAIND_ASSIGN_OR_RETURN(std::vector<Tensor> m, ZerosLike(backend, params));
      TRAIND_ASSIGN_OR_RETURN(std::vector<Tensor> v, ZerosLike(backend, params));
      return std::unique_ptr<Optimizer>(
          new Adam(backend, std::move(params), constants, std::move(m), std::move(v)));
    }
    case traind::v1::OptimizerSpec::KIND_NOT_SET:
      break;
  }
  return InvalidSpecError("optimizer: required (one of: sgd, adam)");
}

}  // namespace traind::engine
