// Learning-rate schedules against hand-computed values.
#include "worker/engine/schedules.h"

#include <cmath>
#include <vector>

#include "gtest/gtest.h"

namespace traind::engine {
namespace {

TEST(ScheduleTest, Constant) {
  LearningRateSchedule s(traind::v1::LearningRateSchedule(), 0.3, 10);
  EXPECT_DOUBLE_EQ(s.LearningRate(0), 0.3);
  EXPECT_DOUBLE_EQ(s.LearningRate(9), 0.3);
}

TEST(ScheduleTest, Step) {
  traind::v1::LearningRateSchedule spec;
  spec.mutable_step()->set_step_size(2);
  spec.mutable_step()->set_gamma(0.5);
  LearningRateSchedule s(spec, 1.0, 10);
  const std::vector<double> expected = {1, 1, 0.5, 0.5, 0.25};
  for (int e = 0; e < 5; ++e) EXPECT_DOUBLE_EQ(s.LearningRate(e), expected[e]) << e;
}

TEST(ScheduleTest, CosineWithWarmup) {
  traind::v1::LearningRateSchedule spec;
  spec.mutable_cosine()->set_warmup_epochs(2);
  spec.mutable_cosine()->set_total_epochs(6);
  spec.mutable_cosine()->set_min_lr(0.1);
  LearningRateSchedule s(spec, 1.1, 100);
  // Warmup: 1.1 · 1/2, 1.1 · 2/2; then 0.1 + 1 · (1 + cos(π t)) / 2, t = (e - 2) / 4.
  EXPECT_NEAR(s.LearningRate(0), 0.55, 1e-12);
  EXPECT_NEAR(s.LearningRate(1), 1.1, 1e-12);
  EXPECT_NEAR(s.LearningRate(2), 1.1, 1e-12);
  EXPECT_NEAR(s.LearningRate(3), 0.1 + 0.5 * (1 + std::sqrt(0.5)), 1e-12);
  EXPECT_NEAR(s.LearningRate(4), 0.6, 1e-12);
  EXPECT_NEAR(s.LearningRate(5), 0.1 + 0.5 * (1 - std::sqrt(0.5)), 1e-12);
  EXPECT_NEAR(s.LearningRate(6), 0.1, 1e-12);
  EXPECT_NEAR(s.LearningRate(50), 0.1, 1e-12);  // stays at min_lr
}

TEST(ScheduleTest, Exponential) {
  traind::v1::LearningRateSchedule spec;
  spec.mutable_exponential()->set_gamma(0.9);
  LearningRateSchedule s(spec, 2.0, 10);
  EXPECT_NEAR(s.LearningRate(2), 2.0 * 0.81, 1e-12);
}

TEST(ScheduleTest, ReduceOnPlateauWithCooldownAndFloor) {
  traind::v1::LearningRateSchedule spec;
  auto* r = spec.mutable_reduce_on_plateau();
  r->set_factor(0.5);
  r->set_patience(1);
  r->set_cooldown(1);
  r->set_min_lr(0.2);
  LearningRateSchedule s(spec, 1.0, 10);
  // A metric that never improves after the first epoch.
  const std::vector<double> expected = {1, 1, 0.5, 0.5, 0.5, 0.25, 0.25, 0.25, 0.2, 0.2};
  for (size_t i = 0; i < expected.size(); ++i) {
    s.Observe(1.0, /*maximize=*/false);
    EXPECT_DOUBLE_EQ(s.LearningRate(static_cast<int64_t>(i + 1)), expected[i]) << i;
  }
  // Its state round-trips (checkpoints).
  LearningRateSchedule copy(spec, 1.0, 10);
  copy.Restore(s.State());
  EXPECT_DOUBLE_EQ(copy.LearningRate(0), 0.2);
  // An improvement resets the bad-epoch count.
  LearningRateSchedule t(spec, 1.0, 10);
  for (double v : {5.0, 4.0, 3.0, 2.0}) t.Observe(v, false);
  EXPECT_DOUBLE_EQ(t.LearningRate(0), 1.0);
}

}  // namespace
}  // namespace traind::engine
