// Losses: hand-derived values and finite-difference gradients.
#include "worker/engine/losses.h"

#include <cmath>
#include <memory>
#include <vector>

#include "base/random.h"
#include "base/status.h"
#include "gtest/gtest.h"

namespace traind::engine {
namespace {

std::unique_ptr<Loss> Make(const traind::v1::LossSpec& spec, data::TargetKind target,
                           int64_t outputs) {
  absl::StatusOr<std::unique_ptr<Loss>> loss = Loss::Create(spec, target, outputs);
  EXPECT_TRUE(loss.ok()) << loss.status();
  return std::move(loss).value();
}

double Value(const Loss& loss, const std::vector<float>& z, int64_t batch, const BatchTargets& t) {
  LossSums sums;
  loss.Compute(z.data(), batch, t, nullptr, &sums);
  return sums.value_sum / sums.weight_sum;
}

// Central differences in double around each output.
void CheckGradient(const Loss& loss, std::vector<float> z, int64_t batch, const BatchTargets& t) {
  std::vector<float> grad(z.size());
  LossSums sums;
  loss.Compute(z.data(), batch, t, grad.data(), &sums);
  for (size_t i = 0; i < z.size(); ++i) {
    const float saved = z[i];
    z[i] = saved + 1e-3f;
    const float hi = z[i];
    const double f_hi = Value(loss, z, batch, t);
    z[i] = saved - 1e-3f;
    const float lo = z[i];
    const double f_lo = Value(loss, z, batch, t);
    z[i] = saved;
    const double numeric = (f_hi - f_lo) / (double{hi} - double{lo});
    EXPECT_NEAR(grad[i], numeric, 1e-4 + 1e-3 * std::abs(numeric)) << i;
  }
}

std::vector<float> Random(size_t n, uint64_t seed) {
  Rng rng(seed);
  std::vector<float> v(n);
  for (float& x : v) x = static_cast<float>(4 * rng.Uniform() - 2);
  return v;
}

TEST(SoftmaxCrossEntropyTest, HandValueWithSmoothingAndWeights) {
  traind::v1::LossSpec spec;
  spec.mutable_softmax_cross_entropy()->set_label_smoothing(0.1);
  auto loss = Make(spec, data::TargetKind::kClasses, 2);
  // logits [0, ln 3] -> p = [1/4, 3/4]; label 1:
  // 0.9 (-ln 3/4) + 0.05 (-ln 1/4 - ln 3/4)
  const std::vector<float> z = {0.0f, static_cast<float>(std::log(3.0))};
  const int32_t y[1] = {1};
  BatchTargets t{y, nullptr};
  EXPECT_NEAR(Value(*loss, z, 1, t),
              0.9 * -std::log(0.75) + 0.05 * (-std::log(0.25) - std::log(0.75)), 1e-6);
  // Class weights [3, 1], two rows with labels 0 and 1, all logits 0:
  // (3 ln 2 + 1 ln 2) / (3 + 1) = ln 2; and with smoothing 0.5:
  // row 0: 0.5·3 ln2 + 0.25 (3 + 1) ln2 = 2.5 ln2; row 1: 0.5 ln2 + ln2 = 1.5 ln2 -> 4 ln2 / 4.
  spec.mutable_softmax_cross_entropy()->set_label_smoothing(0.0);
  spec.mutable_softmax_cross_entropy()->add_class_weights(3);
  spec.mutable_softmax_cross_entropy()->add_class_weights(1);
  auto weighted = Make(spec, data::TargetKind::kClasses, 2);
  const std::vector<float> zeros(4, 0.0f);
  const int32_t y2[2] = {0, 1};
  EXPECT_NEAR(Value(*weighted, zeros, 2, {y2, nullptr}), std::log(2.0), 1e-6);
  // Unequal: logits row 0 = [ln 3, 0] (p0 = 3/4), row 1 = [0, 0]:
  // (3 (-ln 3/4) + 1 ln 2) / 4
  const std::vector<float> z2 = {static_cast<float>(std::log(3.0)), 0, 0, 0};
  EXPECT_NEAR(Value(*weighted, z2, 2, {y2, nullptr}), (3 * -std::log(0.75) + std::log(2.0)) / 4,
              1e-6);
}

TEST(SoftmaxCrossEntropyTest, GradientMatchesFiniteDifferences) {
  traind::v1::LossSpec spec;
  spec.mutable_softmax_cross_entropy()->set_label_smoothing(0.2);
  for (double w : {0.5, 2.0, 1.0, 0.0}) spec.mutable_softmax_cross_entropy()->add_class_weights(w);
  auto loss = Make(spec, data::TargetKind::kClasses, 4);
  const int32_t y[5] = {0, 1, 2, 3, 1};
  CheckGradient(*loss, Random(20, 1), 5, {y, nullptr});
}

TEST(SigmoidBceTest, HandValueAndGradient) {
  traind::v1::LossSpec spec;
  spec.mutable_sigmoid_binary_cross_entropy()->add_pos_weight(3);
  auto loss = Make(spec, data::TargetKind::kBinary, 1);
  // z = 0: y = 1 -> 3 ln 2, y = 0 -> ln 2; mean 2 ln 2.
  const std::vector<float> z = {0.0f, 0.0f};
  const float y[2] = {1, 0};
  EXPECT_NEAR(Value(*loss, z, 2, {nullptr, y}), 2 * std::log(2.0), 1e-6);
  // Multi-label with a weight per label.
  spec.mutable_sigmoid_binary_cross_entropy()->add_pos_weight(0.5);
  spec.mutable_sigmoid_binary_cross_entropy()->add_pos_weight(1.0);
  auto multi = Make(spec, data::TargetKind::kMultiLabel, 3);
  const float labels[12] = {1, 0, 1, 0, 1, 1, 1, 1, 0, 0, 0, 0};
  CheckGradient(*multi, Random(12, 2), 4, {nullptr, labels});
  // Extreme logits stay finite.
  const std::vector<float> big = {100.0f, -100.0f, 50.0f};
  const float lab[3] = {0, 1, 1};
  EXPECT_TRUE(std::isfinite(Value(*multi, big, 1, {nullptr, lab})));
}

TEST(RegressionLossTest, HandValuesAndGradients) {
  const std::vector<float> z = {1.5f, -1.0f};
  const float t[2] = {1.0f, 1.0f};  // d = 0.5, -2
  traind::v1::LossSpec mse, l1, huber;
  mse.mutable_mse();
  l1.mutable_l1();
  huber.mutable_huber()->set_delta(1.0);
  EXPECT_NEAR(Value(*Make(mse, data::TargetKind::kRegression, 2), z, 1, {nullptr, t}),
              (0.25 + 4) / 2, 1e-6);
  EXPECT_NEAR(Value(*Make(l1, data::TargetKind::kRegression, 2), z, 1, {nullptr, t}), (0.5 + 2) / 2,
              1e-6);
  // 0.5 · 0.25 and 1 · (2 - 0.5)
  EXPECT_NEAR(Value(*Make(huber, data::TargetKind::kRegression, 2), z, 1, {nullptr, t}),
              (0.125 + 1.5) / 2, 1e-6);
  const float targets[6] = {0.3f, -1.2f, 2.0f, 0.1f, 0.9f, -0.4f};
  for (const auto* spec : {&mse, &l1, &huber}) {
    CheckGradient(*Make(*spec, data::TargetKind::kRegression, 3), Random(6, 3), 2,
                  {nullptr, targets});
  }
}

TEST(LossTest, ParameterLengthsMustMatchOutputs) {
  traind::v1::LossSpec spec;
  spec.mutable_sigmoid_binary_cross_entropy()->add_pos_weight(1);
  absl::StatusOr<std::unique_ptr<Loss>> loss = Loss::Create(spec, data::TargetKind::kMultiLabel, 3);
  ASSERT_FALSE(loss.ok());
  EXPECT_EQ(FailureKindOf(loss.status()), FailureKind::kInvalidSpec);
  EXPECT_EQ(
      loss.status().message(),
      "loss.sigmoid_binary_cross_entropy.pos_weight: has 1 values, but the model has 3 outputs");
}

}  // namespace
}  // namespace traind::engine
