// Losses on the host: the model's outputs for a batch -> the loss sums, the
// gradient of the batch loss, and the predictions metrics use.
//
// The loss owns its parameters (class_weights, pos_weight); each worker (and,
// on several devices, each device's trainer) creates its own copy.
#ifndef TRAIND_WORKER_ENGINE_LOSSES_H_
#define TRAIND_WORKER_ENGINE_LOSSES_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "traind/v1/job.pb.h"
#include "worker/engine/spec_check.h"

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
  virtual ~Loss() = default;

  // The loss of `spec` for `outputs` model outputs.
  // Errors: InvalidSpecError when class_weights or pos_weight do not have one
  // value per output.
  static absl::StatusOr<std::unique_ptr<Loss>> Create(const traind::v1::LossSpec& spec,
                                                      TargetKind target, int64_t outputs);

  // outputs: [batch, width] -> *sums; grad: [batch, width] = d(batch loss)/
  // d outputs, where the batch loss is sums.value_sum / sums.weight_sum
  // (or / `normalizer` when it is > 0: data parallelism, where a rank's rows
  // are part of a batch of that weight), unless grad is null. Non-finite
  // outputs give a non-finite value_sum.
  virtual void Compute(const float* outputs, int64_t batch, const BatchTargets& targets,
                       float* grad, LossSums* sums, double normalizer = 0) const = 0;

  // outputs: [batch, width] -> predictions: [batch, width]: class
  // probabilities (softmax), label probabilities (sigmoid) or values.
  virtual void Predict(const float* outputs, int64_t batch, float* predictions) const = 0;

  int64_t width() const { return width_; }

 protected:
  explicit Loss(int64_t width) : width_(width) {}
  // The gradient's scale: 1 / normalizer when given, else 1 / the batch's
  // own weight (0 for a batch that weighs nothing).
  static double GradientScale(double normalizer, double weight) {
    return normalizer > 0 ? 1.0 / normalizer : weight > 0 ? 1.0 / weight : 0.0;
  }
  int64_t width_;
};

}  // namespace traind::engine

#endif  // TRAIND_WORKER_ENGINE_LOSSES_H_
