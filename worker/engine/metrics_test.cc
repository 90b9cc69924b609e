// Metrics against scikit-learn on fixed fixtures (tests/fixtures/metrics.txt).
#include "worker/engine/metrics.h"

#include <map>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "spec/checks.h"
#include "worker/engine/testing/reference_fixtures.h"

namespace traind::engine {
namespace {

using traind::v1::Metric;

class MetricsFixtureTest : public ::testing::Test {
 protected:
  void SetUp() override {
    fx_ = testing::ReadFixture("metrics.txt");
    ASSERT_FALSE(fx_.empty()) << "tests/fixtures/metrics.txt is missing";
  }
  const std::vector<double>& Get(const std::string& key) {
    auto it = fx_.find(key);
    EXPECT_NE(it, fx_.end()) << key;
    static const std::vector<double> kEmpty;
    return it == fx_.end() ? kEmpty : it->second;
  }
  std::vector<float> Floats(const std::string& key) {
    const auto& v = Get(key);
    return std::vector<float>(v.begin(), v.end());
  }
  std::vector<int32_t> Ints(const std::string& key) {
    const auto& v = Get(key);
    return std::vector<int32_t>(v.begin(), v.end());
  }
  void Expect(const std::string& prefix, const PassPredictions& p,
              const std::vector<Metric>& metrics, int top_k = 2) {
    for (Metric m : metrics) {
      const std::string key = prefix + "." + spec::MetricName(m);
      ASSERT_EQ(Get(key).size(), 1u) << key;
      EXPECT_NEAR(ComputeMetric(m, p, top_k), Get(key)[0], 1e-6) << key;
    }
  }
  std::map<std::string, std::vector<double>> fx_;
};

const std::vector<Metric> kPrf = {
    traind::v1::PRECISION_MACRO, traind::v1::PRECISION_MICRO, traind::v1::PRECISION_WEIGHTED,
    traind::v1::RECALL_MACRO,    traind::v1::RECALL_MICRO,    traind::v1::RECALL_WEIGHTED,
    traind::v1::F1_MACRO,        traind::v1::F1_MICRO,        traind::v1::F1_WEIGHTED};

TEST_F(MetricsFixtureTest, MultiClass) {
  const std::vector<double>& shape = Get("multiclass.shape");
  std::vector<float> probs = Floats("multiclass.probs");
  std::vector<int32_t> y = Ints("multiclass.y");
  PassPredictions p{data::TargetKind::kClasses,
                    static_cast<int64_t>(shape[0]),
                    static_cast<int64_t>(shape[1]),
                    probs.data(),
                    y.data(),
                    nullptr};
  std::vector<Metric> metrics = kPrf;
  metrics.push_back(traind::v1::ACCURACY);
  metrics.push_back(traind::v1::TOP_K_ACCURACY);
  metrics.push_back(traind::v1::LOG_LOSS);
  Expect("multiclass", p, metrics);
}

TEST_F(MetricsFixtureTest, Binary) {
  std::vector<float> probs = Floats("binary.p");
  std::vector<int32_t> y = Ints("binary.y");
  PassPredictions p{data::TargetKind::kBinary,
                    static_cast<int64_t>(probs.size()),
                    1,
                    probs.data(),
                    y.data(),
                    nullptr};
  std::vector<Metric> metrics = kPrf;
  metrics.push_back(traind::v1::ACCURACY);
  metrics.push_back(traind::v1::ROC_AUC);
  metrics.push_back(traind::v1::LOG_LOSS);
  Expect("binary", p, metrics);
}

TEST_F(MetricsFixtureTest, MultiLabel) {
  const std::vector<double>& shape = Get("multilabel.shape");
  std::vector<float> probs = Floats("multilabel.p");
  std::vector<float> y = Floats("multilabel.y");
  PassPredictions p{data::TargetKind::kMultiLabel,
                    static_cast<int64_t>(shape[0]),
                    static_cast<int64_t>(shape[1]),
                    probs.data(),
                    nullptr,
                    y.data()};
  std::vector<Metric> metrics = kPrf;
  metrics.push_back(traind::v1::ACCURACY);
  metrics.push_back(traind::v1::ROC_AUC);
  Expect("multilabel", p, metrics);
}

TEST_F(MetricsFixtureTest, Regression) {
  const std::vector<double>& shape = Get("regression.shape");
  std::vector<float> pred = Floats("regression.pred");
  std::vector<float> y = Floats("regression.y");
  PassPredictions p{data::TargetKind::kRegression,
                    static_cast<int64_t>(shape[0]),
                    static_cast<int64_t>(shape[1]),
                    pred.data(),
                    nullptr,
                    y.data()};
  Expect("regression", p, {traind::v1::MSE, traind::v1::RMSE, traind::v1::MAE, traind::v1::R2});
}

TEST(MetricDirectionTest, KnownPerMetricNotByName) {
  EXPECT_FALSE(spec::HigherIsBetter(traind::v1::LOSS));
  EXPECT_FALSE(spec::HigherIsBetter(traind::v1::LOG_LOSS));
  EXPECT_FALSE(spec::HigherIsBetter(traind::v1::RMSE));
  EXPECT_TRUE(spec::HigherIsBetter(traind::v1::R2));
  EXPECT_TRUE(spec::HigherIsBetter(traind::v1::F1_WEIGHTED));
  EXPECT_TRUE(spec::HigherIsBetter(traind::v1::ROC_AUC));
}

TEST(RocAucTest, TiesCountHalf) {
  // Scores tie across a positive and a negative: AUC = 0.5 for that pair.
  const float scores[4] = {0.1f, 0.5f, 0.5f, 0.9f};
  const int32_t y[4] = {0, 0, 1, 1};
  PassPredictions p{data::TargetKind::kBinary, 4, 1, scores, y, nullptr};
  // Pairs (neg, pos): (0.1,0.5) 1, (0.1,0.9) 1, (0.5,0.5) 0.5, (0.5,0.9) 1 -> 3.5 / 4
  EXPECT_DOUBLE_EQ(ComputeMetric(traind::v1::ROC_AUC, p, 1), 0.875);
}

}  // namespace
}  // namespace traind::engine
