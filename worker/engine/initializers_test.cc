#include "worker/engine/initializers.h"

#include <cmath>
#include <vector>

#include "base/status.h"
#include "gtest/gtest.h"

namespace traind::engine {
namespace {

struct Moments {
  double mean, variance, max_abs;
};

Moments Measure(const std::vector<float>& w) {
  double sum = 0, sum_sq = 0, max_abs = 0;
  for (float v : w) {
    sum += v;
    sum_sq += static_cast<double>(v) * v;
    max_abs = std::max(max_abs, std::abs(static_cast<double>(v)));
  }
  const double n = static_cast<double>(w.size());
  return {sum / n, sum_sq / n - (sum / n) * (sum / n), max_abs};
}

TEST(InitializersTest, XavierUniform) {
  // a = sqrt(6 / (300 + 100)) = 0.1224745; variance a² / 3 = 2 / 400 = 0.005.
  std::vector<float> w(300 * 100);
  Rng rng(1);
  XavierUniform(300, 100, rng, w.data());
  Moments m = Measure(w);
  EXPECT_LE(m.max_abs, std::sqrt(6.0 / 400));
  EXPECT_GT(m.max_abs, 0.99 * std::sqrt(6.0 / 400));
  EXPECT_NEAR(m.mean, 0.0, 0.002);
  EXPECT_NEAR(m.variance, 0.005, 0.0002);
}

TEST(InitializersTest, XavierNormal) {
  // stddev sqrt(2 / 400): variance 0.005.
  std::vector<float> w(300 * 100);
  Rng rng(2);
  ASSERT_TRUE(InitializeWeights(traind::v1::XAVIER_NORMAL, 300, 100, rng, w.data()).ok());
  Moments m = Measure(w);
  EXPECT_NEAR(m.mean, 0.0, 0.002);
  EXPECT_NEAR(m.variance, 0.005, 0.0002);
  EXPECT_GT(m.max_abs, 3 * std::sqrt(0.005));  // tails a uniform would not have
}

TEST(InitializersTest, UnspecifiedIsXavierUniformAndSeeded) {
  std::vector<float> a(64), b(64), c(64);
  Rng r1(7), r2(7), r3(8);
  ASSERT_TRUE(InitializeWeights(traind::v1::INITIALIZER_UNSPECIFIED, 8, 8, r1, a.data()).ok());
  XavierUniform(8, 8, r2, b.data());
  XavierUniform(8, 8, r3, c.data());
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  EXPECT_EQ(
      FailureKindOf(InitializeWeights(static_cast<traind::v1::Initializer>(9), 8, 8, r1, a.data())),
      FailureKind::kInvalidSpec);
}

}  // namespace
}  // namespace traind::engine
