#include "worker/engine/optimizers.h"

#include <cmath>
#include <utility>

#include "base/status.h"
#include "spec/checks.h"

namespace traind::engine {
namespace {

absl::StatusOr<std::vector<Tensor>> ZerosLike(Backend* backend,
                                              const std::vector<Parameter>& params) {
  std::vector<Tensor> state;
  state.reserve(params.size());
  for (const Parameter& p : params) {
    TRAIND_ASSIGN_OR_RETURN(
        Tensor t, p.value->rank() == 1
                      ? backend->Allocate1d(DType::kF32, p.value->size())
                      : backend->Allocate2d(DType::kF32, p.value->rows(), p.value->cols()));
    TRAIND_RETURN_IF_ERROR(backend->Fill(0.0f, &t));
    state.push_back(std::move(t));
  }
  return state;
}

// Shared plumbing: parameters, clipping, step count, state tensors.
class OptimizerBase : public Optimizer {
 public:
  OptimizerBase(Backend* backend, std::vector<Parameter> params,
                traind::v1::GradientClipping clipping, double lr)
      : backend_(backend), params_(std::move(params)), clipping_(std::move(clipping)), lr_(lr) {}

  absl::Status Step(double lr) override {
    TRAIND_RETURN_IF_ERROR(ClipGradients(clipping_, backend_, params_));
    ++steps_;
    return UpdateAll(lr);
  }
  int64_t steps() const override { return steps_; }
  void set_steps(int64_t steps) override { steps_ = steps; }
  double base_learning_rate() const override { return lr_; }
  std::vector<Tensor*> state() override {
    std::vector<Tensor*> out;
    for (std::vector<Tensor>* list : {&a_, &b_}) {
      for (Tensor& t : *list) out.push_back(&t);
    }
    return out;
  }

 protected:
  // Updates parameter i; steps_ is already the 1-based step number.
  virtual absl::Status Update(size_t i, double lr) = 0;
  // Updates every parameter (one fused backend call where the optimizer has one).
  virtual absl::Status UpdateAll(double lr) {
    for (size_t i = 0; i < params_.size(); ++i) TRAIND_RETURN_IF_ERROR(Update(i, lr));
    return absl::OkStatus();
  }
  // The parameters' values and gradients, and a state list, as pointer lists
  // for the backends' fused updates (built once: a step allocates nothing).
  void CollectPointers() {
    for (const Parameter& p : params_) {
      values_.push_back(p.value);
      grads_.push_back(p.grad);
    }
    for (Tensor& t : a_) a_ptrs_.push_back(&t);
    for (Tensor& t : b_) b_ptrs_.push_back(&t);
  }

  Backend* backend_;
  std::vector<Parameter> params_;
  traind::v1::GradientClipping clipping_;
  double lr_;
  int64_t steps_ = 0;
  std::vector<Tensor> a_, b_;  // per-parameter state (empty when unused)
  std::vector<Tensor*> values_, a_ptrs_, b_ptrs_;
  std::vector<const Tensor*> grads_;
};

class Sgd final : public OptimizerBase {
 public:
  Sgd(Backend* backend, std::vector<Parameter> params, const traind::v1::OptimizerSpec& spec)
      : OptimizerBase(backend, std::move(params), spec.clipping(), spec.sgd().learning_rate()),
        spec_(spec.sgd()) {}
  absl::Status Init() {
    if (spec_.momentum() > 0) {
      TRAIND_ASSIGN_OR_RETURN(a_, ZerosLike(backend_, params_));
    }
    CollectPointers();
    // v = momentum·v + g + wd·w; w -= lr·v can run in the backward pass:
    // not Nesterov's (it needs g itself), nor after clipping (it needs every
    // gradient first).
    if (spec_.momentum() > 0 && !spec_.nesterov() &&
        clipping_.kind_case() == traind::v1::GradientClipping::KIND_NOT_SET) {
      for (size_t i = 0; i < params_.size(); ++i) {
        if (params_[i].in_backward != nullptr) in_backward_.push_back(i);
      }
    }
    rest_grads_.reserve(params_.size());
    rest_velocities_.reserve(params_.size());
    rest_values_.reserve(params_.size());
    return absl::OkStatus();
  }

  void BeginStep(double lr) override {
    for (size_t i : in_backward_) {
      InBackwardUpdate* u = params_[i].in_backward;
      u->armed = true;
      u->done = false;
      u->sgd = StepFor(lr);
      u->velocity = &a_[i];
    }
  }

 private:
  SgdStep StepFor(double lr) const {
    SgdStep step;
    step.learning_rate = lr;
    step.momentum = spec_.momentum();
    step.nesterov = spec_.nesterov();
    step.weight_decay = spec_.weight_decay();
    return step;
  }
  absl::Status Update(size_t i, double lr) override {
    return backend_->SgdUpdate(StepFor(lr), *params_[i].grad, a_.empty() ? nullptr : &a_[i],
                               params_[i].value);
  }
  absl::Status UpdateAll(double lr) override {
    bool any_done = false;
    for (size_t i : in_backward_) {
      InBackwardUpdate* u = params_[i].in_backward;
      any_done = any_done || u->done;
      u->armed = false;
    }
    if (!any_done) return backend_->SgdUpdateMany(StepFor(lr), grads_, a_ptrs_, values_);
    // The parameters their layers did not update (no allocation: reserved).
    rest_grads_.clear();
    rest_velocities_.clear();
    rest_values_.clear();
    for (size_t i = 0; i < params_.size(); ++i) {
      InBackwardUpdate* u = params_[i].in_backward;
      if (u != nullptr && u->done) {
        u->done = false;
        continue;
      }
      rest_grads_.push_back(grads_[i]);
      rest_velocities_.push_back(a_ptrs_[i]);
      rest_values_.push_back(values_[i]);
    }
    if (rest_values_.empty()) return absl::OkStatus();
    return backend_->SgdUpdateMany(StepFor(lr), rest_grads_, rest_velocities_, rest_values_);
  }
  traind::v1::Sgd spec_;
  std::vector<size_t> in_backward_;  // parameters whose layers may update them
  std::vector<const Tensor*> rest_grads_;
  std::vector<Tensor*> rest_velocities_, rest_values_;
};

class Adam final : public OptimizerBase {
 public:
  Adam(Backend* backend, std::vector<Parameter> params, const traind::v1::OptimizerSpec& spec)
      : OptimizerBase(backend, std::move(params), spec.clipping(), LearningRate(spec)) {
    if (spec.has_adam()) {
      const auto& a = spec.adam();
      if (a.has_beta1()) constants_.beta1 = a.beta1();
      if (a.has_beta2()) constants_.beta2 = a.beta2();
      if (a.has_epsilon()) constants_.epsilon = a.epsilon();
      constants_.weight_decay = a.weight_decay();
    } else {
      const auto& a = spec.adamw();
      if (a.has_beta1()) constants_.beta1 = a.beta1();
      if (a.has_beta2()) constants_.beta2 = a.beta2();
      if (a.has_epsilon()) constants_.epsilon = a.epsilon();
      constants_.weight_decay = a.has_weight_decay() ? a.weight_decay() : 0.01;
      constants_.decoupled = true;
    }
  }
  absl::Status Init() {
    TRAIND_ASSIGN_OR_RETURN(a_, ZerosLike(backend_, params_));
    TRAIND_ASSIGN_OR_RETURN(b_, ZerosLike(backend_, params_));
    CollectPointers();
    return absl::OkStatus();
  }

 private:
  static double LearningRate(const traind::v1::OptimizerSpec& spec) {
    return spec.has_adam() ? spec.adam().learning_rate() : spec.adamw().learning_rate();
  }
  absl::Status Update(size_t i, double lr) override {
    AdamStep step = constants_;
    step.learning_rate = lr;
    step.step = steps_;
    return backend_->AdamUpdate(step, *params_[i].grad, &a_[i], &b_[i], params_[i].value);
  }
  absl::Status UpdateAll(double lr) override {
    AdamStep step = constants_;
    step.learning_rate = lr;
    step.step = steps_;
    return backend_->AdamUpdateMany(step, grads_, a_ptrs_, b_ptrs_, values_);
  }
  AdamStep constants_;
};

class RmsProp final : public OptimizerBase {
 public:
  RmsProp(Backend* backend, std::vector<Parameter> params, const traind::v1::OptimizerSpec& spec)
      : OptimizerBase(backend, std::move(params), spec.clipping(), spec.rmsprop().learning_rate()) {
    const auto& r = spec.rmsprop();
    if (r.has_alpha()) constants_.alpha = r.alpha();
    if (r.has_epsilon()) constants_.epsilon = r.epsilon();
    constants_.momentum = r.momentum();
    constants_.weight_decay = r.weight_decay();
  }
  absl::Status Init() {
    TRAIND_ASSIGN_OR_RETURN(a_, ZerosLike(backend_, params_));
    if (constants_.momentum > 0) {
      TRAIND_ASSIGN_OR_RETURN(b_, ZerosLike(backend_, params_));
    }
    return absl::OkStatus();
  }

 private:
  absl::Status Update(size_t i, double lr) override {
    RmsPropStep step = constants_;
    step.learning_rate = lr;
    return backend_->RmsPropUpdate(step, *params_[i].grad, &a_[i], b_.empty() ? nullptr : &b_[i],
                                   params_[i].value);
  }
  RmsPropStep constants_;
};

template <typename T>
absl::StatusOr<std::unique_ptr<Optimizer>> Make(Backend* backend, std::vector<Parameter> params,
                                                const traind::v1::OptimizerSpec& spec) {
  auto optimizer = std::make_unique<T>(backend, std::move(params), spec);
  TRAIND_RETURN_IF_ERROR(optimizer->Init());
  return std::unique_ptr<Optimizer>(std::move(optimizer));
}

}  // namespace

absl::Status ClipGradients(const traind::v1::GradientClipping& clipping, Backend* backend,
                           const std::vector<Parameter>& params) {
  switch (clipping.kind_case()) {
    case traind::v1::GradientClipping::kMaxNorm: {
      double sum = 0;
      for (const Parameter& p : params) {
        TRAIND_ASSIGN_OR_RETURN(double s, backend->SumOfSquares(*p.grad));
        sum += s;
      }
      const double norm = std::sqrt(sum);
      // PyTorch's clip_grad_norm_: scale by max_norm / (norm + 1e-6) when < 1.
      const double factor = clipping.max_norm() / (norm + 1e-6);
      if (factor < 1.0) {
        for (const Parameter& p : params) {
          TRAIND_RETURN_IF_ERROR(backend->Scale(static_cast<float>(factor), p.grad));
        }
      }
      return absl::OkStatus();
    }
    case traind::v1::GradientClipping::kMaxValue:
      for (const Parameter& p : params) {
        TRAIND_RETURN_IF_ERROR(
            backend->ClipByValue(static_cast<float>(clipping.max_value()), p.grad));
      }
      return absl::OkStatus();
    case traind::v1::GradientClipping::KIND_NOT_SET:
      break;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Optimizer>> CreateOptimizer(const traind::v1::OptimizerSpec& spec,
                                                           Backend* backend,
                                                           std::vector<Parameter> params) {
  TRAIND_RETURN_IF_ERROR(spec::CheckOptimizerSpec(spec));
  switch (spec.kind_case()) {
    case traind::v1::OptimizerSpec::kSgd:
      return Make<Sgd>(backend, std::move(params), spec);
    case traind::v1::OptimizerSpec::kAdam:
    case traind::v1::OptimizerSpec::kAdamw:
      return Make<Adam>(backend, std::move(params), spec);
    case traind::v1::OptimizerSpec::kRmsprop:
      return Make<RmsProp>(backend, std::move(params), spec);
    case traind::v1::OptimizerSpec::KIND_NOT_SET:
      break;
  }
  return InvalidSpecError("optimizer: required (one of: sgd, adam, adamw, rmsprop)");
}

}  // namespace traind::engine
