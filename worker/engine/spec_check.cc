#include "worker/engine/spec_check.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "worker/engine/status.h"

namespace traind::engine {
using traind::v1::JobSpec;

absl::Status CheckModelSpec(const traind::v1::ModelSpec& model) {
  if (model.layers_size() == 0) {
    return InvalidSpecError("model.layers: at least one layer is required");
  }
  for (int i = 0; i < model.layers_size(); ++i) {
    const traind::v1::Layer& layer = model.layers(i);
    const std::string path = absl::StrCat("model.layers[", i, "]");
    if (layer.kind_case() != traind::v1::Layer::kDense) {
      return InvalidSpecError(absl::StrCat(path, ": the layer kind is not set (one of: dense)"));
    }
    const traind::v1::Dense& dense = layer.dense();
    if (dense.units() <= 0) {
      return InvalidSpecError(
          absl::StrFormat("%s.dense.units: must be positive, got %d", path, dense.units()));
    }
    if (!traind::v1::Activation_IsValid(dense.activation())) {
      return InvalidSpecError(absl::StrFormat("%s.dense.activation: unknown value %d", path,
                                              static_cast<int>(dense.activation())));
    }
    if (!traind::v1::Initializer_IsValid(dense.init())) {
      return InvalidSpecError(absl::StrFormat("%s.dense.init: unknown value %d", path,
                                              static_cast<int>(dense.init())));
    }
  }
  return absl::OkStatus();
}

namespace {

absl::Status CheckLearningRate(double lr, const std::string& path) {
  if (!(std::isfinite(lr) && lr > 0)) {
    return InvalidSpecError(absl::StrFormat("%s: must be a positive number, got %g", path, lr));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckOptimizerSpec(const traind::v1::OptimizerSpec& optimizer) {
  switch (optimizer.kind_case()) {
    case traind::v1::OptimizerSpec::kSgd: {
      const traind::v1::Sgd& sgd = optimizer.sgd();
      TRAIND_RETURN_IF_ERROR(CheckLearningRate(sgd.learning_rate(), "optimizer.sgd.learning_rate"));
      if (!(std::isfinite(sgd.momentum()) && sgd.momentum() >= 0)) {
        return InvalidSpecError(absl::StrFormat(
            "optimizer.sgd.momentum: must be a number >= 0, got %g", sgd.momentum()));
      }
      return absl::OkStatus();
    }
    case traind::v1::OptimizerSpec::kAdam: {
      const traind::v1::Adam& adam = optimizer.adam();
      TRAIND_RETURN_IF_ERROR(
          CheckLearningRate(adam.learning_rate(), "optimizer.adam.learning_rate"));
      if (adam.has_beta1() && !(adam.beta1() >= 0 && adam.beta1() < 1)) {
        return InvalidSpecError(absl::StrFormat(
            "optimizer.adam.beta1: must be in [0, 1), got %g", adam.beta1()));
      }
      if (adam.has_beta2() && !(adam.beta2() >= 0 && adam.beta2() < 1)) {
        return InvalidSpecError(absl::StrFormat(
            "optimizer.adam.beta2: must be in [0, 1), got %g", adam.beta2()));
      }
      if (adam.has_epsilon() && !(std::isfinite(adam.epsilon()) && adam.epsilon() > 0)) {
        return InvalidSpecError(absl::StrFormat(
            "optimizer.adam.epsilon: must be a positive number, got %g", adam.epsilon()));
      }
      return absl::OkStatus();
    }
    case traind::v1::OptimizerSpec::KIND_NOT_SET:
      break;
  }
  return InvalidSpecError("optimizer: required (one of: sgd, adam)");
}

namespace {

absl::Status CheckTraining(const traind::v1::TrainingSpec& training) {
  if (training.epochs() < 0) {
    return InvalidSpecError(
        absl::StrFormat("training.epochs: must be positive, got %d", training.epochs()));
  }
  if (training.batches() < 0) {
    return InvalidSpecError(
        absl::StrFormat("training.batches: must be positive, got %d", training.batches()));
  }
  if (training.epochs() == 0 && training.batches() == 0) {
    return InvalidSpecError("training: one of epochs and batches is required");
  }
  if (training.epochs() > 0 && training.batches() > 0) {
    return InvalidSpecError("training: set only one of epochs and batches");
  }
  if (training.batch_size() <= 0) {
    return InvalidSpecError(absl::StrFormat("training.batch_size: must be positive, got %d",
                                            training.batch_size()));
  }
  return absl::OkStatus();
}

}  // namespace

std::string MetricName(traind::v1::Metric metric) {
  switch (metric) {
    case traind::v1::LOSS:
      return "loss";
    case traind::v1::ACCURACY:
      return "accuracy";
    default:
      return "";
  }
}

absl::StatusOr<std::vector<traind::v1::Metric>> ResolveMetrics(
    const google::protobuf::RepeatedField<int>& metrics, const std::string& field) {
  if (metrics.empty()) return std::vector<traind::v1::Metric>{traind::v1::LOSS, traind::v1::ACCURACY};
  std::vector<traind::v1::Metric> result;
  for (int i = 0; i < metrics.size(); ++i) {
    const int value = metrics.Get(i);
    if (!traind::v1::Metric_IsValid(value) || value == traind::v1::METRIC_UNSPECIFIED) {
      return InvalidSpecError(
          absl::StrFormat("%s[%d]: not a metric (value %d; one of: loss, accuracy)", field, i, value));
    }
    const auto metric = static_cast<traind::v1::Metric>(value);
    if (std::find(result.begin(), result.end(), metric) == result.end()) result.push_back(metric);
  }
  return result;
}

absl::Status CheckTrainingSpec(const JobSpec& spec) {
  TRAIND_RETURN_IF_ERROR(CheckModelSpec(spec.model()));
  // Softmax cross-entropy is the only loss, and the default when unset.
  TRAIND_RETURN_IF_ERROR(CheckOptimizerSpec(spec.optimizer()));
  TRAIND_RETURN_IF_ERROR(CheckTraining(spec.training()));
  TRAIND_RETURN_IF_ERROR(ResolveMetrics(spec.metrics().train(), "metrics.train").status());
  TRAIND_RETURN_IF_ERROR(ResolveMetrics(spec.metrics().val(), "metrics.val").status());
  return absl::OkStatus();
}

}  // namespace traind::engine
