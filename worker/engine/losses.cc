#include "worker/engine/losses.h"

#include <utility>

#include "absl/strings/str_format.h"
#include "base/status.h"

namespace traind::engine {

Loss::Loss(LossKernelOptions options) : options_(std::move(options)), params_(ParamsOf(options_)) {}

LossKernelOptions Loss::KernelOptions(int64_t max_batch, int64_t slots) const {
  LossKernelOptions o = options_;
  o.max_batch = max_batch;
  o.slots = slots;
  return o;
}

double Loss::Weight(const BatchTargets& targets, int64_t batch) const {
  if (options_.kind != LossKind::kSoftmaxCrossEntropy) {
    return static_cast<double>(batch * options_.width);
  }
  double weight = 0;
  for (int64_t r = 0; r < batch; ++r) weight += loss_math::WeightOf(params_, targets.classes[r]);
  return weight;
}

void Loss::Compute(const float* outputs, int64_t batch, const BatchTargets& targets, float* grad,
                   LossSums* sums, double normalizer) const {
  const double weight = Weight(targets, batch);
  sums->value_sum = loss_math::SumOnHost(params_, outputs, batch, targets.classes, targets.values,
                                         GradientScale(normalizer, weight), grad, /*pred=*/nullptr);
  sums->weight_sum = weight;
}

void Loss::Predict(const float* outputs, int64_t batch, float* predictions) const {
  const int64_t w = options_.width;
  if (options_.kind == LossKind::kSoftmaxCrossEntropy) {
    for (int64_t r = 0; r < batch; ++r) {
      loss_math::SoftmaxCrossEntropyRow(params_, outputs + r * w, /*y=*/0, 0, nullptr,
                                        predictions + r * w);
    }
    return;
  }
  for (int64_t i = 0; i < batch * w; ++i) {
    loss_math::ElementLoss(params_, i % w, outputs[i], 0.0f, 0, nullptr, predictions + i);
  }
}

absl::StatusOr<std::unique_ptr<Loss>> Loss::Create(const traind::v1::LossSpec& spec,
                                                   data::TargetKind target, int64_t outputs) {
  switch (target) {
    case data::TargetKind::kClasses: {
      const auto& ce = spec.softmax_cross_entropy();
      std::vector<double> weights(static_cast<size_t>(outputs), 1.0);
      if (ce.class_weights_size() > 0) {
        if (ce.class_weights_size() != outputs) {
          return InvalidSpecError(absl::StrFormat(
              "loss.softmax_cross_entropy.class_weights: has %d weights, but there are %d classes",
              ce.class_weights_size(), outputs));
        }
        weights.assign(ce.class_weights().begin(), ce.class_weights().end());
      }
      LossKernelOptions o;
      o.kind = LossKind::kSoftmaxCrossEntropy;
      o.width = outputs;
      if (ce.class_weights_size() > 0) o.weights = std::move(weights);
      o.label_smoothing = ce.label_smoothing();
      return std::unique_ptr<Loss>(new Loss(std::move(o)));
    }
    case data::TargetKind::kBinary:
    case data::TargetKind::kMultiLabel: {
      const auto& bce = spec.sigmoid_binary_cross_entropy();
      std::vector<double> pw(static_cast<size_t>(outputs), 1.0);
      if (bce.pos_weight_size() > 0) {
        if (bce.pos_weight_size() != outputs) {
          return InvalidSpecError(absl::StrFormat(
              "loss.sigmoid_binary_cross_entropy.pos_weight: has %d values, but the model has %d "
              "outputs",
              bce.pos_weight_size(), outputs));
        }
        pw.assign(bce.pos_weight().begin(), bce.pos_weight().end());
      }
      LossKernelOptions o;
      o.kind = LossKind::kSigmoidBinaryCrossEntropy;
      o.width = outputs;
      if (bce.pos_weight_size() > 0) o.weights = std::move(pw);
      return std::unique_ptr<Loss>(new Loss(std::move(o)));
    }
    case data::TargetKind::kRegression: {
      LossKernelOptions o;
      o.width = outputs;
      o.kind = spec.has_l1() ? LossKind::kL1 : spec.has_huber() ? LossKind::kHuber : LossKind::kMse;
      if (spec.has_huber() && spec.huber().has_delta()) o.huber_delta = spec.huber().delta();
      return std::unique_ptr<Loss>(new Loss(std::move(o)));
    }
  }
  return absl::InternalError("unknown target kind");
}

}  // namespace traind::engine
