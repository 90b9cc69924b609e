// Optimizers: SGD (momentum, Nesterov, weight decay), Adam, AdamW and
// RMSprop with PyTorch's update rules, and gradient clipping.
#ifndef TRAIND_WORKER_ENGINE_OPTIMIZERS_H_
#define TRAIND_WORKER_ENGINE_OPTIMIZERS_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "traind/v1/job.pb.h"
#include "worker/engine/backend/backend.h"
#include "worker/engine/layers/layer.h"
#include "worker/engine/tensor.h"

namespace traind::engine {

// Updates a fixed set of parameters from their gradients. Its state
// (momenta) lives on the parameters' backend.
//
// Thread safety: not thread-safe.
class Optimizer {
 public:
  virtual ~Optimizer() = default;
  // One update of every parameter from its current gradient (clipped first
  // when the spec clips), with the spec's learning rate.
  absl::Status Step() { return Step(base_learning_rate()); }
  // Before a step's backward pass, with the learning rate its Step will be
  // given: lets layers run the update of parameters they can inside that
  // pass (Parameter::in_backward; SGD with momentum, without Nesterov or
  // clipping). Only where nothing reads or sums the gradients between the
  // backward pass and Step (one rank). Optional: without it, Step updates
  // everything from the gradients.
  virtual void BeginStep(double lr) {}
  // As Step, with learning rate `lr` (from a schedule).
  virtual absl::Status Step(double lr) = 0;
  // Steps taken so far.
  virtual int64_t steps() const = 0;
  virtual double base_learning_rate() const = 0;
  // State tensors (momenta), in a fixed order, for checkpoints.
  virtual std::vector<Tensor*> state() = 0;
  virtual void set_steps(int64_t steps) = 0;
};

// An optimizer for `params`, zero state. Errors: InvalidSpecError for a spec
// CheckOptimizerSpec would reject (unset kind, bad learning rate, ...).
// REQUIRES: backend and the parameters outlive the optimizer.
absl::StatusOr<std::unique_ptr<Optimizer>> CreateOptimizer(const traind::v1::OptimizerSpec& spec,
                                                           Backend* backend,
                                                           std::vector<Parameter> params);

// Clips the gradients of `params` in place: by global norm (scale all by
// max_norm / norm when the L2 norm over all of them exceeds max_norm) or by
// value. No-op when the spec sets neither.
absl::Status ClipGradients(const traind::v1::GradientClipping& clipping, Backend* backend,
                           const std::vector<Parameter>& params);

}  // namespace traind::engine

#endif  // TRAIND_WORKER_ENGINE_OPTIMIZERS_H_
