#include "spec/checks.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "base/status.h"
#include "data/dataset.h"
#include "spec/model_shapes.h"

namespace traind::spec {
using traind::v1::JobSpec;
using traind::v1::Metric;

namespace {

absl::Status Bad(const std::string& path, const std::string& what) {
  return InvalidSpecError(absl::StrCat(path, ": ", what));
}

bool Finite(double v) { return std::isfinite(v); }

absl::Status CheckPositive(double v, const std::string& path) {
  if (!(Finite(v) && v > 0))
    return Bad(path, absl::StrFormat("must be a positive number, got %g", v));
  return absl::OkStatus();
}

absl::Status CheckNonNegative(double v, const std::string& path) {
  if (!(Finite(v) && v >= 0)) return Bad(path, absl::StrFormat("must be a number >= 0, got %g", v));
  return absl::OkStatus();
}

absl::Status CheckLearningRate(double lr, const std::string& path) {
  if (!(Finite(lr) && lr > 0)) {
    return InvalidSpecError(absl::StrFormat("%s: must be a positive number, got %g", path, lr));
  }
  return absl::OkStatus();
}

absl::Status CheckBeta(bool has, double v, const std::string& path) {
  if (has && !(v >= 0 && v < 1)) {
    return InvalidSpecError(absl::StrFormat("%s: must be in [0, 1), got %g", path, v));
  }
  return absl::OkStatus();
}

absl::Status CheckEpsilon(bool has, double v, const std::string& path) {
  if (has && !(Finite(v) && v > 0)) {
    return InvalidSpecError(absl::StrFormat("%s: must be a positive number, got %g", path, v));
  }
  return absl::OkStatus();
}

absl::Status CheckActivation(int value, bool has_alpha, double alpha, const std::string& path) {
  if (!traind::v1::Activation_IsValid(value)) {
    return InvalidSpecError(absl::StrFormat("%s: unknown value %d", path, value));
  }
  if (has_alpha && !Finite(alpha)) return Bad(path + "'s alpha", "must be a finite number");
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckModelSpec(const traind::v1::ModelSpec& model) {
  if (model.layers_size() == 0) {
    return InvalidSpecError("model.layers: at least one layer is required");
  }
  bool has_dense = false;
  for (int i = 0; i < model.layers_size(); ++i) {
    const traind::v1::Layer& layer = model.layers(i);
    const std::string path = absl::StrCat("model.layers[", i, "]");
    switch (layer.kind_case()) {
      case traind::v1::Layer::kDense: {
        has_dense = true;
        const traind::v1::Dense& dense = layer.dense();
        if (dense.units() <= 0) {
          return InvalidSpecError(
              absl::StrFormat("%s.dense.units: must be positive, got %d", path, dense.units()));
        }
        TRAIND_RETURN_IF_ERROR(CheckActivation(dense.activation(), dense.has_alpha(), dense.alpha(),
                                               path + ".dense.activation"));
        if (!traind::v1::Initializer_IsValid(dense.init())) {
          return InvalidSpecError(absl::StrFormat("%s.dense.init: unknown value %d", path,
                                                  static_cast<int>(dense.init())));
        }
        if (dense.has_gain())
          TRAIND_RETURN_IF_ERROR(CheckPositive(dense.gain(), path + ".dense.gain"));
        if (dense.has_stddev()) {
          TRAIND_RETURN_IF_ERROR(CheckPositive(dense.stddev(), path + ".dense.stddev"));
        }
        if (dense.has_limit())
          TRAIND_RETURN_IF_ERROR(CheckPositive(dense.limit(), path + ".dense.limit"));
        break;
      }
      case traind::v1::Layer::kActivation: {
        const traind::v1::ActivationLayer& a = layer.activation();
        TRAIND_RETURN_IF_ERROR(
            CheckActivation(a.function(), a.has_alpha(), a.alpha(), path + ".activation.function"));
        break;
      }
      case traind::v1::Layer::kDropout: {
        const double rate = layer.dropout().rate();
        if (!(rate >= 0 && rate < 1)) {
          return Bad(path + ".dropout.rate", absl::StrFormat("must be in [0, 1), got %g", rate));
        }
        break;
      }
      case traind::v1::Layer::kBatchNorm: {
        const traind::v1::BatchNorm& bn = layer.batch_norm();
        if (bn.has_momentum() && !(bn.momentum() >= 0 && bn.momentum() <= 1)) {
          return Bad(path + ".batch_norm.momentum",
                     absl::StrFormat("must be in [0, 1], got %g", bn.momentum()));
        }
        TRAIND_RETURN_IF_ERROR(
            CheckEpsilon(bn.has_epsilon(), bn.epsilon(), path + ".batch_norm.epsilon"));
        break;
      }
      case traind::v1::Layer::kLayerNorm:
        TRAIND_RETURN_IF_ERROR(CheckEpsilon(layer.layer_norm().has_epsilon(),
                                            layer.layer_norm().epsilon(),
                                            path + ".layer_norm.epsilon"));
        break;
      case traind::v1::Layer::kConv2D: {
        const traind::v1::Conv2d& conv = layer.conv2d();
        TRAIND_RETURN_IF_ERROR(CheckConv2dFields(conv, path + ".conv2d"));
        TRAIND_RETURN_IF_ERROR(CheckActivation(conv.activation(), conv.has_alpha(), conv.alpha(),
                                               path + ".conv2d.activation"));
        if (!traind::v1::Initializer_IsValid(conv.init())) {
          return InvalidSpecError(absl::StrFormat("%s.conv2d.init: unknown value %d", path,
                                                  static_cast<int>(conv.init())));
        }
        if (conv.has_gain())
          TRAIND_RETURN_IF_ERROR(CheckPositive(conv.gain(), path + ".conv2d.gain"));
        if (conv.has_stddev())
          TRAIND_RETURN_IF_ERROR(CheckPositive(conv.stddev(), path + ".conv2d.stddev"));
        if (conv.has_limit())
          TRAIND_RETURN_IF_ERROR(CheckPositive(conv.limit(), path + ".conv2d.limit"));
        break;
      }
      case traind::v1::Layer::kMaxPool2D:
        TRAIND_RETURN_IF_ERROR(CheckPool2dFields(layer.max_pool2d(), path + ".max_pool2d"));
        break;
      case traind::v1::Layer::kAvgPool2D:
        TRAIND_RETURN_IF_ERROR(CheckPool2dFields(layer.avg_pool2d(), path + ".avg_pool2d"));
        break;
      case traind::v1::Layer::kGlobalAvgPool2D:
      case traind::v1::Layer::kFlatten:
        break;
      case traind::v1::Layer::KIND_NOT_SET:
        return InvalidSpecError(absl::StrCat(
            path,
            ": the layer kind is not set (one of: dense, conv2d, max_pool2d, avg_pool2d, "
            "global_avg_pool2d, flatten, activation, dropout, batch_norm, layer_norm)"));
    }
  }
  if (!has_dense) return InvalidSpecError("model.layers: at least one dense layer is required");
  return absl::OkStatus();
}

int64_t ModelOutputs(const traind::v1::ModelSpec& model, int64_t inputs) {
  int64_t width = inputs;
  for (const traind::v1::Layer& layer : model.layers()) {
    if (layer.has_dense()) width = layer.dense().units();
  }
  return width;
}

namespace {

absl::Status CheckSchedule(const traind::v1::LearningRateSchedule& s, double lr) {
  const std::string p = "optimizer.schedule";
  switch (s.kind_case()) {
    case traind::v1::LearningRateSchedule::kStep:
      if (s.step().step_size() <= 0) {
        return Bad(p + ".step.step_size",
                   absl::StrFormat("must be positive, got %d", s.step().step_size()));
      }
      if (s.step().has_gamma())
        TRAIND_RETURN_IF_ERROR(CheckPositive(s.step().gamma(), p + ".step.gamma"));
      return absl::OkStatus();
    case traind::v1::LearningRateSchedule::kCosine: {
      const auto& c = s.cosine();
      if (c.warmup_epochs() < 0) return Bad(p + ".cosine.warmup_epochs", "must be >= 0");
      if (c.total_epochs() < 0) return Bad(p + ".cosine.total_epochs", "must be >= 0");
      if (c.total_epochs() > 0 && c.total_epochs() < c.warmup_epochs()) {
        return Bad(p + ".cosine.total_epochs", "must be at least warmup_epochs");
      }
      TRAIND_RETURN_IF_ERROR(CheckNonNegative(c.min_lr(), p + ".cosine.min_lr"));
      if (c.min_lr() > lr) return Bad(p + ".cosine.min_lr", "must not exceed the learning rate");
      return absl::OkStatus();
    }
    case traind::v1::LearningRateSchedule::kExponential:
      return CheckPositive(s.exponential().gamma(), p + ".exponential.gamma");
    case traind::v1::LearningRateSchedule::kReduceOnPlateau: {
      const auto& r = s.reduce_on_plateau();
      if (r.has_factor() && !(r.factor() > 0 && r.factor() < 1)) {
        return Bad(p + ".reduce_on_plateau.factor",
                   absl::StrFormat("must be in (0, 1), got %g", r.factor()));
      }
      if (r.has_patience() && r.patience() < 0)
        return Bad(p + ".reduce_on_plateau.patience", "must be >= 0");
      if (r.cooldown() < 0) return Bad(p + ".reduce_on_plateau.cooldown", "must be >= 0");
      TRAIND_RETURN_IF_ERROR(CheckNonNegative(r.min_lr(), p + ".reduce_on_plateau.min_lr"));
      TRAIND_RETURN_IF_ERROR(CheckNonNegative(r.min_delta(), p + ".reduce_on_plateau.min_delta"));
      if (!traind::v1::Mode_IsValid(r.mode()))
        return Bad(p + ".reduce_on_plateau.mode", "unknown value");
      return absl::OkStatus();
    }
    case traind::v1::LearningRateSchedule::KIND_NOT_SET:
      return absl::OkStatus();
  }
  return absl::OkStatus();
}

double LearningRateOf(const traind::v1::OptimizerSpec& o) {
  switch (o.kind_case()) {
    case traind::v1::OptimizerSpec::kSgd:
      return o.sgd().learning_rate();
    case traind::v1::OptimizerSpec::kAdam:
      return o.adam().learning_rate();
    case traind::v1::OptimizerSpec::kAdamw:
      return o.adamw().learning_rate();
    case traind::v1::OptimizerSpec::kRmsprop:
      return o.rmsprop().learning_rate();
    default:
      return 0;
  }
}

}  // namespace

absl::Status CheckOptimizerSpec(const traind::v1::OptimizerSpec& optimizer) {
  switch (optimizer.kind_case()) {
    case traind::v1::OptimizerSpec::kSgd: {
      const traind::v1::Sgd& sgd = optimizer.sgd();
      TRAIND_RETURN_IF_ERROR(CheckLearningRate(sgd.learning_rate(), "optimizer.sgd.learning_rate"));
      if (!(Finite(sgd.momentum()) && sgd.momentum() >= 0)) {
        return InvalidSpecError(absl::StrFormat(
            "optimizer.sgd.momentum: must be a number >= 0, got %g", sgd.momentum()));
      }
      if (sgd.nesterov() && sgd.momentum() == 0) {
        return Bad("optimizer.sgd.nesterov", "needs a momentum > 0");
      }
      TRAIND_RETURN_IF_ERROR(CheckNonNegative(sgd.weight_decay(), "optimizer.sgd.weight_decay"));
      break;
    }
    case traind::v1::OptimizerSpec::kAdam: {
      const traind::v1::Adam& adam = optimizer.adam();
      TRAIND_RETURN_IF_ERROR(
          CheckLearningRate(adam.learning_rate(), "optimizer.adam.learning_rate"));
      TRAIND_RETURN_IF_ERROR(CheckBeta(adam.has_beta1(), adam.beta1(), "optimizer.adam.beta1"));
      TRAIND_RETURN_IF_ERROR(CheckBeta(adam.has_beta2(), adam.beta2(), "optimizer.adam.beta2"));
      TRAIND_RETURN_IF_ERROR(
          CheckEpsilon(adam.has_epsilon(), adam.epsilon(), "optimizer.adam.epsilon"));
      TRAIND_RETURN_IF_ERROR(CheckNonNegative(adam.weight_decay(), "optimizer.adam.weight_decay"));
      break;
    }
    case traind::v1::OptimizerSpec::kAdamw: {
      const traind::v1::AdamW& adam = optimizer.adamw();
      TRAIND_RETURN_IF_ERROR(
          CheckLearningRate(adam.learning_rate(), "optimizer.adamw.learning_rate"));
      TRAIND_RETURN_IF_ERROR(CheckBeta(adam.has_beta1(), adam.beta1(), "optimizer.adamw.beta1"));
      TRAIND_RETURN_IF_ERROR(CheckBeta(adam.has_beta2(), adam.beta2(), "optimizer.adamw.beta2"));
      TRAIND_RETURN_IF_ERROR(
          CheckEpsilon(adam.has_epsilon(), adam.epsilon(), "optimizer.adamw.epsilon"));
      if (adam.has_weight_decay()) {
        TRAIND_RETURN_IF_ERROR(
            CheckNonNegative(adam.weight_decay(), "optimizer.adamw.weight_decay"));
      }
      break;
    }
    case traind::v1::OptimizerSpec::kRmsprop: {
      const traind::v1::RmsProp& r = optimizer.rmsprop();
      TRAIND_RETURN_IF_ERROR(
          CheckLearningRate(r.learning_rate(), "optimizer.rmsprop.learning_rate"));
      TRAIND_RETURN_IF_ERROR(CheckBeta(r.has_alpha(), r.alpha(), "optimizer.rmsprop.alpha"));
      TRAIND_RETURN_IF_ERROR(
          CheckEpsilon(r.has_epsilon(), r.epsilon(), "optimizer.rmsprop.epsilon"));
      TRAIND_RETURN_IF_ERROR(CheckNonNegative(r.momentum(), "optimizer.rmsprop.momentum"));
      TRAIND_RETURN_IF_ERROR(CheckNonNegative(r.weight_decay(), "optimizer.rmsprop.weight_decay"));
      break;
    }
    case traind::v1::OptimizerSpec::KIND_NOT_SET:
      return InvalidSpecError("optimizer: required (one of: sgd, adam, adamw, rmsprop)");
  }
  switch (optimizer.clipping().kind_case()) {
    case traind::v1::GradientClipping::kMaxNorm:
      TRAIND_RETURN_IF_ERROR(
          CheckPositive(optimizer.clipping().max_norm(), "optimizer.clipping.max_norm"));
      break;
    case traind::v1::GradientClipping::kMaxValue:
      TRAIND_RETURN_IF_ERROR(
          CheckPositive(optimizer.clipping().max_value(), "optimizer.clipping.max_value"));
      break;
    case traind::v1::GradientClipping::KIND_NOT_SET:
      break;
  }
  return CheckSchedule(optimizer.schedule(), LearningRateOf(optimizer));
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
    return InvalidSpecError(
        absl::StrFormat("training.batch_size: must be positive, got %d", training.batch_size()));
  }
  if (training.validate_every() < 0) {
    return Bad("training.validate_every",
               absl::StrFormat("must be >= 0, got %d", training.validate_every()));
  }
  return absl::OkStatus();
}

absl::Status CheckLoss(const JobSpec& spec) {
  const traind::v1::LossSpec& loss = spec.loss();
  switch (loss.kind_case()) {
    case traind::v1::LossSpec::kSoftmaxCrossEntropy: {
      const auto& ce = loss.softmax_cross_entropy();
      double sum = 0;
      for (int i = 0; i < ce.class_weights_size(); ++i) {
        TRAIND_RETURN_IF_ERROR(
            CheckNonNegative(ce.class_weights(i),
                             absl::StrCat("loss.softmax_cross_entropy.class_weights[", i, "]")));
        sum += ce.class_weights(i);
      }
      if (ce.class_weights_size() > 0 && sum == 0) {
        return Bad("loss.softmax_cross_entropy.class_weights", "at least one must be positive");
      }
      if (!(ce.label_smoothing() >= 0 && ce.label_smoothing() < 1)) {
        return Bad("loss.softmax_cross_entropy.label_smoothing",
                   absl::StrFormat("must be in [0, 1), got %g", ce.label_smoothing()));
      }
      if (spec.data().labels_size() > 0) {
        return Bad("data.labels", "softmax_cross_entropy takes one label column (data.label)");
      }
      break;
    }
    case traind::v1::LossSpec::kSigmoidBinaryCrossEntropy: {
      const auto& bce = loss.sigmoid_binary_cross_entropy();
      for (int i = 0; i < bce.pos_weight_size(); ++i) {
        TRAIND_RETURN_IF_ERROR(
            CheckPositive(bce.pos_weight(i),
                          absl::StrCat("loss.sigmoid_binary_cross_entropy.pos_weight[", i, "]")));
      }
      break;
    }
    case traind::v1::LossSpec::kHuber:
      if (loss.huber().has_delta())
        TRAIND_RETURN_IF_ERROR(CheckPositive(loss.huber().delta(), "loss.huber.delta"));
      break;
    default:
      break;
  }
  return absl::OkStatus();
}

absl::Status CheckDataShape(const JobSpec& spec) {
  const traind::v1::DataSpec& d = spec.data();
  if (!d.label().empty() && d.labels_size() > 0) {
    return Bad("data.labels", "set only one of data.label and data.labels");
  }
  if (d.delimiter().size() > 1) {
    return Bad("data.delimiter",
               absl::StrCat("must be one character, got \"", d.delimiter(), "\""));
  }
  if (d.delimiter() == "\"" || d.delimiter() == "\n" || d.delimiter() == "\r") {
    return Bad("data.delimiter", "cannot be a quote or a line break");
  }
  if (!traind::v1::Scaling_IsValid(d.scaling())) return Bad("data.scaling", "unknown value");
  if (!traind::v1::MissingValues_IsValid(d.missing())) return Bad("data.missing", "unknown value");
  if (d.standardize() && d.scaling() != traind::v1::SCALING_UNSPECIFIED &&
      d.scaling() != traind::v1::STANDARD) {
    return Bad("data.scaling", "conflicts with data.standardize: true");
  }
  for (int i = 0; i < d.categorical_size(); ++i) {
    if (d.features_size() > 0 && std::find(d.features().begin(), d.features().end(),
                                           d.categorical(i)) == d.features().end()) {
      return Bad(absl::StrCat("data.categorical[", i, "]"),
                 absl::StrCat("\"", d.categorical(i), "\" is not in data.features"));
    }
  }
  for (int i = 0; i < d.id_size(); ++i) {
    const std::string field = absl::StrCat("data.id[", i, "]");
    const std::string& id = d.id(i);
    auto in = [&id](const auto& list) {
      return std::find(list.begin(), list.end(), id) != list.end();
    };
    if (data::IsPredictionColumnName(id)) {
      return Bad(field, absl::StrCat("\"", id,
                                     "\" is a name traind gives a predictions column (row, fold, "
                                     "repeat, label, prediction, true_*, p_*); rename the column"));
    }
    const char* also = nullptr;
    if (id == d.label() || in(d.labels())) also = "a label column";
    if (spec.has_cross_validation() && id == spec.cross_validation().group_column()) {
      also = "the group column (cross_validation.group_column)";
    }
    if (in(d.features())) also = "in data.features";
    if (in(d.categorical())) also = "in data.categorical";
    if (std::find(d.id().begin(), d.id().begin() + i, id) != d.id().begin() + i) {
      also = "listed twice in data.id";
    }
    if (also != nullptr) {
      return Bad(field, absl::StrCat("\"", id, "\" is ", also,
                                     "; an id column is never a feature or a target"));
    }
  }
  if (!spec.has_cross_validation()) return absl::OkStatus();
  const traind::v1::CrossValidationSpec& cv = spec.cross_validation();
  const int ways =
      (cv.folds() != 0) + (cv.validation_fraction() != 0) + (!cv.validation_path().empty());
  if (ways == 0) {
    return Bad("cross_validation", "set one of folds, validation_fraction and validation_path");
  }
  if (ways > 1) {
    return Bad("cross_validation",
               "set only one of folds, validation_fraction and validation_path");
  }
  if (cv.folds() != 0 && cv.folds() < 2) {
    return Bad("cross_validation.folds", absl::StrCat("must be at least 2 (got ", cv.folds(), ")"));
  }
  if (cv.validation_fraction() != 0 &&
      !(cv.validation_fraction() > 0 && cv.validation_fraction() < 1)) {
    return Bad("cross_validation.validation_fraction",
               absl::StrFormat("must be in (0, 1), got %g", cv.validation_fraction()));
  }
  if (cv.repeats() < 0) return Bad("cross_validation.repeats", "must be >= 1");
  if (cv.repeats() > 1 && cv.folds() == 0) {
    return Bad("cross_validation.repeats", "needs folds (repeated k-fold)");
  }
  // Task indices are int32 (the server's limits.max_tasks is far lower).
  if (static_cast<int64_t>(cv.folds()) * std::max(1, cv.repeats()) + 1 >
      std::numeric_limits<int32_t>::max()) {
    return Bad("cross_validation.repeats",
               absl::StrCat(cv.folds(), " folds × ", cv.repeats(), " repeats are more tasks than ",
                            std::numeric_limits<int32_t>::max() - 1));
  }
  if (!cv.group_column().empty()) {
    if (cv.folds() == 0) return Bad("cross_validation.group_column", "needs folds (group k-fold)");
    if (cv.has_stratified() && cv.stratified()) {
      return Bad("cross_validation.stratified", "cannot be combined with group_column");
    }
    if (cv.repeats() > 1) {
      return Bad("cross_validation.repeats", "cannot be combined with group_column");
    }
  }
  if (cv.has_stratified() && cv.stratified() &&
      (data::TargetKindOf(spec) == data::TargetKind::kRegression ||
       data::TargetKindOf(spec) == data::TargetKind::kMultiLabel)) {
    return Bad("cross_validation.stratified", "needs class labels (data.label with a class loss)");
  }
  return absl::OkStatus();
}

bool AppliesTo(Metric m, data::TargetKind target) {
  switch (m) {
    case traind::v1::LOSS:
      return true;
    case traind::v1::MSE:
    case traind::v1::RMSE:
    case traind::v1::MAE:
    case traind::v1::R2:
      return target == data::TargetKind::kRegression;
    case traind::v1::TOP_K_ACCURACY:
      return target == data::TargetKind::kClasses;
    default:
      return target != data::TargetKind::kRegression;
  }
}

std::string MetricList(const std::vector<Metric>& metrics) {
  std::vector<std::string> names;
  for (Metric m : metrics) names.push_back(MetricName(m));
  return absl::StrJoin(names, ", ");
}

}  // namespace

std::string MetricName(Metric metric) {
  switch (metric) {
    case traind::v1::LOSS:
      return "loss";
    case traind::v1::ACCURACY:
      return "accuracy";
    case traind::v1::TOP_K_ACCURACY:
      return "top_k_accuracy";
    case traind::v1::PRECISION_MACRO:
      return "precision_macro";
    case traind::v1::PRECISION_MICRO:
      return "precision_micro";
    case traind::v1::PRECISION_WEIGHTED:
      return "precision_weighted";
    case traind::v1::RECALL_MACRO:
      return "recall_macro";
    case traind::v1::RECALL_MICRO:
      return "recall_micro";
    case traind::v1::RECALL_WEIGHTED:
      return "recall_weighted";
    case traind::v1::F1_MACRO:
      return "f1_macro";
    case traind::v1::F1_MICRO:
      return "f1_micro";
    case traind::v1::F1_WEIGHTED:
      return "f1_weighted";
    case traind::v1::ROC_AUC:
      return "roc_auc";
    case traind::v1::LOG_LOSS:
      return "log_loss";
    case traind::v1::MSE:
      return "mse";
    case traind::v1::RMSE:
      return "rmse";
    case traind::v1::MAE:
      return "mae";
    case traind::v1::R2:
      return "r2";
    default:
      return "";
  }
}

bool HigherIsBetter(Metric metric) {
  switch (metric) {
    case traind::v1::LOSS:
    case traind::v1::LOG_LOSS:
    case traind::v1::MSE:
    case traind::v1::RMSE:
    case traind::v1::MAE:
      return false;
    default:
      return true;
  }
}

absl::StatusOr<std::vector<Metric>> ResolveMetrics(
    const google::protobuf::RepeatedField<int>& metrics, const std::string& field) {
  return ResolveMetrics(metrics, field, data::TargetKind::kClasses);
}

absl::StatusOr<std::vector<Metric>> ResolveMetrics(
    const google::protobuf::RepeatedField<int>& metrics, const std::string& field,
    data::TargetKind target) {
  if (metrics.empty()) {
    if (target == data::TargetKind::kRegression) return std::vector<Metric>{traind::v1::LOSS};
    return std::vector<Metric>{traind::v1::LOSS, traind::v1::ACCURACY};
  }
  std::vector<Metric> result;
  for (int i = 0; i < metrics.size(); ++i) {
    const int value = metrics.Get(i);
    if (!traind::v1::Metric_IsValid(value) || value == traind::v1::METRIC_UNSPECIFIED) {
      return InvalidSpecError(absl::StrFormat("%s[%d]: not a metric (value %d)", field, i, value));
    }
    const auto metric = static_cast<Metric>(value);
    if (!AppliesTo(metric, target)) {
      static constexpr const char* kTargets[] = {"class", "binary", "multi-label", "regression"};
      return InvalidSpecError(absl::StrFormat("%s[%d]: %s does not apply to %s targets", field, i,
                                              MetricName(metric),
                                              kTargets[static_cast<int>(target)]));
    }
    if (std::find(result.begin(), result.end(), metric) == result.end()) result.push_back(metric);
  }
  return result;
}

absl::StatusOr<ResolvedMetrics> ResolveSpecMetrics(const JobSpec& spec) {
  const data::TargetKind target = data::TargetKindOf(spec);
  ResolvedMetrics r;
  TRAIND_ASSIGN_OR_RETURN(r.train, ResolveMetrics(spec.metrics().train(), "metrics.train", target));
  if (spec.metrics().val().empty()) {
    r.val = r.train;
  } else {
    TRAIND_ASSIGN_OR_RETURN(r.val, ResolveMetrics(spec.metrics().val(), "metrics.val", target));
  }
  // The loss is always reported: best-epoch selection defaults to val.loss.
  for (std::vector<Metric>* list : {&r.train, &r.val}) {
    if (std::find(list->begin(), list->end(), traind::v1::LOSS) == list->end()) {
      list->insert(list->begin(), traind::v1::LOSS);
    }
  }
  return r;
}

std::string Monitor::key() const { return MetricName(metric); }

std::string Monitor::Describe() const {
  return absl::StrCat(val ? "val." : "train.", key(), maximize ? " (max)" : " (min)");
}

absl::StatusOr<Monitor> ResolveMonitor(const std::string& text, traind::v1::Mode mode,
                                       const ResolvedMetrics& metrics, const std::string& field) {
  const std::string name = text.empty() ? "val.loss" : text;
  Monitor m;
  std::string rest;
  if (absl::StartsWith(name, "val.")) {
    m.val = true;
    rest = name.substr(4);
  } else if (absl::StartsWith(name, "train.")) {
    m.val = false;
    rest = name.substr(6);
  } else {
    return Bad(field, absl::StrCat("\"", name, "\" must start with train. or val."));
  }
  const std::vector<Metric>& list = m.val ? metrics.val : metrics.train;
  bool found = false;
  for (Metric metric : list) {
    if (MetricName(metric) == rest) {
      m.metric = metric;
      found = true;
    }
  }
  if (!found) {
    return Bad(field,
               absl::StrCat(name, " is not computed (", m.val ? "metrics.val" : "metrics.train",
                            ": ", MetricList(list), ")"));
  }
  if (!traind::v1::Mode_IsValid(mode)) return Bad(field + "'s mode", "unknown value");
  m.maximize = mode == traind::v1::MODE_AUTO ? HigherIsBetter(m.metric) : mode == traind::v1::MAX;
  return m;
}

bool HasValidation(const JobSpec& spec) {
  if (!spec.has_cross_validation()) return false;
  const auto& cv = spec.cross_validation();
  return cv.folds() > 0 || cv.validation_fraction() > 0 || !cv.validation_path().empty();
}

absl::StatusOr<Monitor> SelectionMonitor(const JobSpec& spec) {
  TRAIND_ASSIGN_OR_RETURN(ResolvedMetrics metrics, ResolveSpecMetrics(spec));
  if (spec.has_early_stopping()) {
    return ResolveMonitor(spec.early_stopping().monitor(), spec.early_stopping().mode(), metrics,
                          "early_stopping.monitor");
  }
  if (spec.has_checkpoint() && spec.checkpoint().save_best()) {
    return ResolveMonitor(spec.checkpoint().monitor(), spec.checkpoint().mode(), metrics,
                          "checkpoint.monitor");
  }
  Monitor m;
  m.val = HasValidation(spec);
  m.metric = traind::v1::LOSS;
  m.maximize = false;
  return m;
}

absl::Status CheckTrainingSpec(const JobSpec& spec) {
  TRAIND_RETURN_IF_ERROR(CheckModelSpec(spec.model()));
  TRAIND_RETURN_IF_ERROR(CheckLoss(spec));
  TRAIND_RETURN_IF_ERROR(CheckDataShape(spec));
  TRAIND_RETURN_IF_ERROR(CheckOptimizerSpec(spec.optimizer()));
  TRAIND_RETURN_IF_ERROR(CheckTraining(spec.training()));
  TRAIND_ASSIGN_OR_RETURN(ResolvedMetrics metrics, ResolveSpecMetrics(spec));
  if (spec.metrics().top_k() < 0) return Bad("metrics.top_k", "must be >= 1");
  const bool validation = HasValidation(spec);
  auto check_monitor = [&](const std::string& text, traind::v1::Mode mode,
                           const std::string& field) -> absl::Status {
    TRAIND_ASSIGN_OR_RETURN(Monitor m, ResolveMonitor(text, mode, metrics, field));
    if (m.val && !validation) {
      return Bad(field, absl::StrCat(m.Describe(),
                                     " needs validation rows (cross_validation folds, "
                                     "validation_fraction or validation_path)"));
    }
    return absl::OkStatus();
  };
  const auto& schedule = spec.optimizer().schedule();
  if (schedule.has_reduce_on_plateau()) {
    TRAIND_RETURN_IF_ERROR(check_monitor(schedule.reduce_on_plateau().monitor(),
                                         schedule.reduce_on_plateau().mode(),
                                         "optimizer.schedule.reduce_on_plateau.monitor"));
  }
  if (spec.has_importance()) {
    const int repeats = spec.importance().repeats();
    if (repeats < 0 || repeats > 100) {
      return Bad("importance.repeats",
                 absl::StrCat("must be between 1 and 100 (default 5), got ", repeats));
    }
    if (!validation) {
      return Bad("importance",
                 "needs validation rows to shuffle (cross_validation folds, "
                 "validation_fraction or validation_path)");
    }
    if (spec.data().shape_size() > 0) {
      return Bad("importance", "only for tables, not images (data.shape)");
    }
  }
  if (spec.has_early_stopping()) {
    const auto& es = spec.early_stopping();
    TRAIND_RETURN_IF_ERROR(check_monitor(es.monitor(), es.mode(), "early_stopping.monitor"));
    if (es.patience() < 0) return Bad("early_stopping.patience", "must be >= 0");
    TRAIND_RETURN_IF_ERROR(CheckNonNegative(es.min_delta(), "early_stopping.min_delta"));
    if (es.start_from_epoch() < 0) return Bad("early_stopping.start_from_epoch", "must be >= 0");
    if (es.has_baseline() && !Finite(es.baseline())) {
      return Bad("early_stopping.baseline", "must be a finite number");
    }
  }
  if (spec.has_checkpoint()) {
    const auto& c = spec.checkpoint();
    if (c.every_epochs() < 0) return Bad("checkpoint.every_epochs", "must be >= 0");
    if (c.keep() < 0) return Bad("checkpoint.keep", "must be >= 0");
    if (c.save_best()) {
      TRAIND_RETURN_IF_ERROR(check_monitor(c.monitor().empty() && spec.has_early_stopping()
                                               ? spec.early_stopping().monitor()
                                               : c.monitor(),
                                           c.mode(), "checkpoint.monitor"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckCpuPrecision(traind::v1::Precision precision, bool cpu_bf16) {
  switch (precision) {
    case traind::v1::PRECISION_UNSPECIFIED:
    case traind::v1::FP32:
      return absl::OkStatus();
    case traind::v1::BF16:
      if (cpu_bf16) return absl::OkStatus();
      return InvalidSpecError(
          "training.precision: bf16 needs a CPU with AVX512-BF16 or AMX, as oneDNN sees it (the "
          "workers' CPU has neither, or ONEDNN_MAX_CPU_ISA caps it below them); use fp32");
    case traind::v1::TF32:
      return InvalidSpecError(
          "training.precision: tf32 is a GPU mode (resources.device: gpu); CPU jobs train in fp32 "
          "or bf16");
    default:
      return InvalidSpecError(
          absl::StrCat("training.precision: unknown value ", static_cast<int>(precision)));
  }
}

}  // namespace traind::spec
