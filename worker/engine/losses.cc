#include "worker/engine/losses.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_format.h"
#include "worker/engine/status.h"

namespace traind::engine {
namespace {

// log(1 + e^z) without overflow.
inline double Softplus(double z) { return std::max(z, 0.0) + std::log1p(std::exp(-std::abs(z))); }
inline double Sigmoid(double z) {
  if (z >= 0) return 1.0 / (1.0 + std::exp(-z));
  const double e = std::exp(z);
  return e / (1.0 + e);
}

// PyTorch's CrossEntropyLoss with class weights and label smoothing:
// l_i = (1 - s) w[y] (-log p_y) + (s / C) Σ_c w[c] (-log p_c), divided by
// Σ_i w[y_i].
class SoftmaxCrossEntropyLoss final : public Loss {
 public:
  SoftmaxCrossEntropyLoss(int64_t classes, std::vector<double> weights, double smoothing)
      : Loss(classes), weights_(std::move(weights)), smoothing_(smoothing) {
    for (double w : weights_) weight_total_ += w;
  }

  void Compute(const float* outputs, int64_t batch, const BatchTargets& targets, float* grad,
               LossSums* sums, double normalizer = 0) const override {
    const int64_t c = width_;
    double value = 0, weight = 0;
    for (int64_t r = 0; r < batch; ++r) {
      const int32_t y = targets.classes[r];
      const double wy = weights_[static_cast<size_t>(y)];
      weight += wy;
    }
    const double inv = GradientScale(normalizer, weight);
    for (int64_t r = 0; r < batch; ++r) {
      const float* z = outputs + r * c;
      const int32_t y = targets.classes[r];
      float max = z[0];
      for (int64_t j = 1; j < c; ++j) max = std::max(max, z[j]);
      double sum = 0;
      for (int64_t j = 0; j < c; ++j) sum += std::exp(static_cast<double>(z[j]) - max);
      const double log_sum = std::log(sum) + max;  // log Σ e^z
      const double wy = weights_[static_cast<size_t>(y)];
      double smooth = 0;
      if (smoothing_ > 0) {
        for (int64_t j = 0; j < c; ++j)
          smooth += weights_[static_cast<size_t>(j)] * (log_sum - z[j]);
      }
      value +=
          (1 - smoothing_) * wy * (log_sum - z[y]) + smoothing_ / static_cast<double>(c) * smooth;
      if (grad == nullptr) continue;
      float* g = grad + r * c;
      for (int64_t j = 0; j < c; ++j) {
        const double p = std::exp(static_cast<double>(z[j]) - log_sum);
        // (1 - s) w_y (p_j - [j = y]) + (s / C)(W p_j - w_j)
        const double d = (1 - smoothing_) * wy * (p - (j == y ? 1.0 : 0.0)) +
                         smoothing_ / static_cast<double>(c) *
                             (weight_total_ * p - weights_[static_cast<size_t>(j)]);
        g[j] = static_cast<float>(d * inv);
      }
    }
    sums->value_sum = value;
    sums->weight_sum = weight;
  }

  void Predict(const float* outputs, int64_t batch, float* predictions) const override {
    const int64_t c = width_;
    for (int64_t r = 0; r < batch; ++r) {
      const float* z = outputs + r * c;
      float max = z[0];
      for (int64_t j = 1; j < c; ++j) max = std::max(max, z[j]);
      double sum = 0;
      for (int64_t j = 0; j < c; ++j) sum += std::exp(static_cast<double>(z[j]) - max);
      for (int64_t j = 0; j < c; ++j) {
        predictions[r * c + j] =
            static_cast<float>(std::exp(static_cast<double>(z[j]) - max) / sum);
      }
    }
  }

 private:
  std::vector<double> weights_;
  double smoothing_;
  double weight_total_ = 0;
};

// PyTorch's BCEWithLogitsLoss(pos_weight), mean over all elements.
class SigmoidBceLoss final : public Loss {
 public:
  SigmoidBceLoss(int64_t width, std::vector<double> pos_weight)
      : Loss(width), pos_weight_(std::move(pos_weight)) {}

  void Compute(const float* outputs, int64_t batch, const BatchTargets& targets, float* grad,
               LossSums* sums, double normalizer = 0) const override {
    const int64_t n = batch * width_;
    const double inv = GradientScale(normalizer, static_cast<double>(n));
    double value = 0;
    for (int64_t i = 0; i < n; ++i) {
      const double z = outputs[i], y = targets.values[i];
      const double pw = pos_weight_[static_cast<size_t>(i % width_)];
      // -(pw y log σ(z) + (1 - y) log(1 - σ(z)))
      value += pw * y * Softplus(-z) + (1 - y) * Softplus(z);
      if (grad != nullptr) {
        const double s = Sigmoid(z);
        grad[i] = static_cast<float>((pw * y * (s - 1) + (1 - y) * s) * inv);
      }
    }
    sums->value_sum = value;
    sums->weight_sum = static_cast<double>(n);
  }

  void Predict(const float* outputs, int64_t batch, float* predictions) const override {
    for (int64_t i = 0; i < batch * width_; ++i)
      predictions[i] = static_cast<float>(Sigmoid(outputs[i]));
  }

 private:
  std::vector<double> pos_weight_;
};

// Elementwise regression losses, mean over all elements.
class RegressionLoss final : public Loss {
 public:
  enum Kind { kMse, kL1, kHuber };
  RegressionLoss(int64_t width, Kind kind, double delta)
      : Loss(width), kind_(kind), delta_(delta) {}

  void Compute(const float* outputs, int64_t batch, const BatchTargets& targets, float* grad,
               LossSums* sums, double normalizer = 0) const override {
    const int64_t n = batch * width_;
    const double inv = GradientScale(normalizer, static_cast<double>(n));
    double value = 0;
    for (int64_t i = 0; i < n; ++i) {
      const double d = static_cast<double>(outputs[i]) - targets.values[i];
      double v, g;
      switch (kind_) {
        case kMse:
          v = d * d;
          g = 2 * d;
          break;
        case kL1:
          v = std::abs(d);
          g = d > 0 ? 1.0 : (d < 0 ? -1.0 : 0.0);
          break;
        case kHuber:
        default:
          if (std::abs(d) < delta_) {
            v = 0.5 * d * d;
            g = d;
          } else {
            v = delta_ * (std::abs(d) - 0.5 * delta_);
            g = d > 0 ? delta_ : -delta_;
          }
          break;
      }
      value += v;
      if (grad != nullptr) grad[i] = static_cast<float>(g * inv);
    }
    sums->value_sum = value;
    sums->weight_sum = static_cast<double>(n);
  }

  void Predict(const float* outputs, int64_t batch, float* predictions) const override {
    std::copy(outputs, outputs + batch * width_, predictions);
  }

 private:
  Kind kind_;
  double delta_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Loss>> Loss::Create(const traind::v1::LossSpec& spec,
                                                   TargetKind target, int64_t outputs) {
  switch (target) {
    case TargetKind::kClasses: {
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
      return std::unique_ptr<Loss>(
          new SoftmaxCrossEntropyLoss(outputs, std::move(weights), ce.label_smoothing()));
    }
    case TargetKind::kBinary:
    case TargetKind::kMultiLabel: {
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
      return std::unique_ptr<Loss>(new SigmoidBceLoss(outputs, std::move(pw)));
    }
    case TargetKind::kRegression:
      if (spec.has_l1())
        return std::unique_ptr<Loss>(new RegressionLoss(outputs, RegressionLoss::kL1, 0));
      if (spec.has_huber()) {
        return std::unique_ptr<Loss>(
            new RegressionLoss(outputs, RegressionLoss::kHuber,
                               spec.huber().has_delta() ? spec.huber().delta() : 1.0));
      }
      return std::unique_ptr<Loss>(new RegressionLoss(outputs, RegressionLoss::kMse, 0));
  }
  return absl::InternalError("unknown target kind");
}

}  // namespace traind::engine
