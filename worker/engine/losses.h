// The training loss of a spec: its parameters resolved for the model's
// outputs, the options of its backend kernel (LossKernel: where training
// computes it, on the backend's device), the weight of a batch, and the
// same arithmetic on the host (loss_math.h) for checks and tools.
//
// The loss owns its parameters (class_weights, pos_weight); each worker (and,
// on several devices, each device's trainer) creates its own copy.
#ifndef TRAIND_WORKER_ENGINE_LOSSES_H_
#define TRAIND_WORKER_ENGINE_LOSSES_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "spec/checks.h"
#include "traind/v1/job.pb.h"
#include "worker/engine/backend/backend.h"

namespace traind::engine {

// A pass's loss is value_sum / weight_sum over its batches.
struct LossSums {
  double value_sum = 0;
  double weight_sum = 0;
  void Add(const LossSums& o) {
    value_sum += o.value_sum;
    weight_sum += o.weight_sum;
  }
  double mean() const { return weight_sum > 0 ? value_sum / weight_sum : 0.0; }
};

// The targets of a batch: class codes (kClasses) or values [batch, width]
// (binary and multi-label 0/1, regression).
struct BatchTargets {
  const int32_t* classes = nullptr;
  const float* values = nullptr;
};

// Thread safety: const methods may be called concurrently.
class Loss {
 public:
  // The loss of `spec` for `outputs` model outputs.
  // Errors: InvalidSpecError when class_weights or pos_weight do not have one
  // value per output.
  static absl::StatusOr<std::unique_ptr<Loss>> Create(const traind::v1::LossSpec& spec,
                                                      data::TargetKind target, int64_t outputs);

  Loss(const Loss&) = delete;  // params_ points into options_
  Loss& operator=(const Loss&) = delete;

  // The options of this loss's backend kernel, for batches of up to
  // `max_batch` rows and `slots` value slots.
  LossKernelOptions KernelOptions(int64_t max_batch, int64_t slots) const;

  // The weight of a batch, which its mean loss divides by: Σ class_weights
  // of its rows' classes (softmax cross-entropy), else batch · width.
  double Weight(const BatchTargets& targets, int64_t batch) const;

  // On the host: outputs: [batch, width] -> *sums; grad: [batch, width] =
  // d(batch loss)/d outputs, where the batch loss is sums.value_sum /
  // sums.weight_sum (or / `normalizer` when it is > 0), unless grad is null.
  // Non-finite outputs give a non-finite value_sum.
  void Compute(const float* outputs, int64_t batch, const BatchTargets& targets, float* grad,
               LossSums* sums, double normalizer = 0) const;

  // On the host: outputs: [batch, width] -> predictions: [batch, width]:
  // class probabilities (softmax), label probabilities (sigmoid) or values.
  void Predict(const float* outputs, int64_t batch, float* predictions) const;

  int64_t width() const { return options_.width; }

  // The gradient's scale: 1 / normalizer when given, else 1 / the batch's
  // own weight (0 for a batch that weighs nothing).
  static double GradientScale(double normalizer, double weight) {
    return normalizer > 0 ? 1.0 / normalizer : weight > 0 ? 1.0 / weight : 0.0;
  }

 private:
  explicit Loss(LossKernelOptions options);

  LossKernelOptions options_;  // max_batch and slots unset
  LossParams params_;          // points into options_.weights
};

}  // namespace traind::engine

#endif  // TRAIND_WORKER_ENGINE_LOSSES_H_
