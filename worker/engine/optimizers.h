// Optimizers: SGD with momentum and Adam, with PyTorch's update rules.
#ifndef TRAIND_WORKER_ENGINE_OPTIMIZERS_H_
#define TRAIND_WORKER_ENGINE_OPTIMIZERS_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "traind/v1/job.pb.h"
#include "worker/engine/backend/backend.h"
#include "worker/engine/network.h"
#include "worker/engine/tensor.h"

namespace traind::engine {

// Updates a fixed set of parameters from their gradients. Its state (momenta)
// lives on the parameters' backend. No weight decay.
//
// Thread safety: not thread-safe.
class Optimizer {
 public:
  virtual ~Optimizer() = default;
  // One update of every parameter from its current gradient.
  virtual absl::Status Step() = 0;
  // Steps taken so far.
  virtual int64_t steps() const = 0;
};

// An optimizer for `params`, zero state. Errors: InvalidSpecError for a spec
// CheckTrainingSpec would reject (unset kind, bad learning rate, ...).
// REQUIRES: backend and the parameters outlive the optimizer.
absl::StatusOr<std::unique_ptr<Optimizer>> CreateOptimizer(const traind::v1::OptimizerSpec& spec,
                                                           Backend* backend,
                                                           std::vector<Parameter> params);

}  // namespace traind::engine

#endif  // TRAIND_WORKER_ENGINE_OPTIMIZERS_H_
