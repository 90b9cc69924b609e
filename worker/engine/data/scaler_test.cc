#include "worker/engine/data/scaler.h"

#include <cmath>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace traind::engine {
namespace {

using ::testing::DoubleNear;
using ::testing::ElementsAre;

data::Dataset Matrix(int64_t rows, int64_t features, std::vector<float> x) {
  data::Dataset d;
  d.rows = rows;
  d.features = features;
  d.x = std::move(x);
  d.y.assign(static_cast<size_t>(rows), 0);
  return d;
}

TEST(StandardizerTest, FitsOnChosenRowsOnly) {
  // Rows 0, 1, 3 are the training rows; row 2 holds extreme values.
  data::Dataset d = Matrix(4, 3,
                           {1, 10, 5,        //
                            2, 20, 5,        //
                            1e6f, -1e6f, 7,  //
                            6, 30, 5});
  Standardizer s;
  s.Fit(d, {0, 1, 3});
  // Column 0: mean (1 + 2 + 6) / 3 = 3; deviations -2, -1, 3; variance
  // (4 + 1 + 9) / 3 = 14/3; std sqrt(14/3) = 2.160247.
  // Column 1: mean 20; deviations -10, 0, 10; variance 200/3; std 8.164966.
  // Column 2: constant 5 -> scale 1.
  EXPECT_THAT(s.mean(), ElementsAre(3.0, 20.0, 5.0));
  EXPECT_THAT(s.scale(), ElementsAre(DoubleNear(std::sqrt(14.0 / 3), 1e-12),
                                     DoubleNear(std::sqrt(200.0 / 3), 1e-12), 1.0));
  std::vector<float> x = d.x;
  s.Transform(x.data(), 4, 3);
  EXPECT_NEAR(x[0], -2 / std::sqrt(14.0 / 3), 1e-6);
  EXPECT_NEAR(x[1], -10 / std::sqrt(200.0 / 3), 1e-6);
  EXPECT_EQ(x[2], 0.0f);
  EXPECT_NEAR(x[9], 3 / std::sqrt(14.0 / 3), 1e-6);
  EXPECT_EQ(x[8], 2.0f);  // (7 - 5) / 1: validation rows use the training statistics.
}

TEST(StandardizerTest, ConstantColumnWithInexactMeanGetsScaleOne) {
  // 0.1f summed in double does not give exactly 3 * 0.1f / 3 back.
  data::Dataset d = Matrix(3, 1, {0.1f, 0.1f, 0.1f});
  Standardizer s;
  s.Fit(d, {0, 1, 2});
  EXPECT_EQ(s.scale()[0], 1.0);
  std::vector<float> x = d.x;
  s.Transform(x.data(), 3, 1);
  EXPECT_NEAR(x[0], 0.0f, 1e-7);
}

TEST(StandardizerTest, FromStatistics) {
  Standardizer s({1.0, -2.0}, {2.0, 0.5});
  std::vector<float> x = {3, -2, 1, -1};
  s.Transform(x.data(), 2, 2);
  EXPECT_THAT(x, ElementsAre(1.0f, 0.0f, 0.0f, 2.0f));
  EXPECT_EQ(s.features(), 2);
}

}  // namespace
}  // namespace traind::engine
