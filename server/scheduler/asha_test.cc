#include "server/scheduler/asha.h"

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "spec/loader.h"

namespace traind::server {
namespace {

using Decision = AshaRungs::Decision;

traind::v1::JobSpec Spec(int trials, int epochs) {
  absl::StatusOr<traind::v1::JobSpec> spec = spec::ParseJobSpec(absl::StrCat(R"(
data: {path: d.csv, label: y}
cross_validation: {folds: 2}
model: {layers: [{dense: {units: 2}}]}
training: {epochs: )",
                                                                             epochs, R"(}
search:
  space: [{path: optimizer.adam.learning_rate, uniform: {low: 0.001, high: 0.1}}]
  sampler: {random: {trials: )",
                                                                             trials, R"(}}
  asha: {grace_epochs: 1, reduction_factor: 3}
)"),
                                                                "t.yaml");
  EXPECT_TRUE(spec.ok()) << spec.status();
  return *spec;
}

TEST(AshaTest, PercentileInterpolatesLinearlyAsNumpy) {
  EXPECT_DOUBLE_EQ(Percentile({4, 1, 3, 2}, 200.0 / 3), 3.0);  // position 2 of 0..3
  EXPECT_DOUBLE_EQ(Percentile({0.5, 0.9}, 50), 0.7);
  EXPECT_DOUBLE_EQ(Percentile({0.6}, 66.0), 0.6);
  EXPECT_NEAR(Percentile({0.6, 0.5}, 200.0 / 3), 0.5 + 0.1 * 2 / 3, 1e-15);
}

// A hand-computed sequence: 2 folds per trial, rungs at 1, 3, 9 (10 epochs,
// grace 1, factor 3), val.accuracy (max).
TEST(AshaTest, DecisionsOnFoldMeansAgainstEarlierTrialsAtTheRung) {
  std::optional<AshaRungs> asha = AshaRungs::ForJob(Spec(4, 10), "accuracy", true);
  ASSERT_TRUE(asha.has_value());
  EXPECT_EQ(asha->rungs(), (std::vector<int>{1, 3, 9}));
  EXPECT_EQ(asha->PauseAfter(0), 1);
  EXPECT_FALSE(asha->WaitsAtRung(0, 0));
  // Trial 0 at rung 1: (0.5 + 0.7) / 2 = 0.6, the first there: promoted.
  EXPECT_EQ(asha->Record(0, 0, 1, 0.5), Decision::kNone);
  EXPECT_TRUE(asha->WaitsAtRung(0, 1));                    // fold 0 waits for fold 1
  EXPECT_EQ(asha->Record(0, 0, 1, 0.9), Decision::kNone);  // a repeat: the first counts
  EXPECT_EQ(asha->Record(0, 1, 1, 0.7), Decision::kPromote);
  EXPECT_FALSE(asha->WaitsAtRung(0, 1));
  EXPECT_EQ(asha->PauseAfter(0), 3);
  // Trial 1: 0.5 < the 66.7th percentile of {0.6} = 0.6: pruned.
  EXPECT_EQ(asha->Record(1, 0, 1, 0.4), Decision::kNone);
  EXPECT_EQ(asha->Record(1, 1, 1, 0.6), Decision::kPrune);
  EXPECT_TRUE(asha->Pruned(1));
  // Trial 2: 0.8 against {0.6, 0.5}: cutoff 0.5 + 0.1 · 2/3 ≈ 0.567: promoted.
  EXPECT_EQ(asha->Record(2, 1, 1, 0.8), Decision::kNone);
  EXPECT_EQ(asha->Record(2, 0, 1, 0.8), Decision::kPromote);
  EXPECT_EQ(asha->Recorded(0), (std::vector<double>{0.6, 0.5, 0.8}));
  // Rung 3: trial 0 first (0.7), then trial 2 (0.65 < 0.7): pruned there.
  EXPECT_EQ(asha->Record(0, 0, 3, 0.7), Decision::kNone);
  EXPECT_EQ(asha->Record(0, 1, 3, 0.7), Decision::kPromote);
  EXPECT_EQ(asha->PauseAfter(0), 9);
  EXPECT_EQ(asha->Record(2, 0, 3, 0.6), Decision::kNone);
  EXPECT_EQ(asha->Record(2, 1, 3, 0.7), Decision::kPrune);
  EXPECT_TRUE(asha->Pruned(2));
  EXPECT_EQ(asha->Record(0, 0, 9, 0.9), Decision::kNone);
  EXPECT_EQ(asha->Record(0, 1, 9, 0.9), Decision::kPromote);
  EXPECT_EQ(asha->PauseAfter(0), 0);  // no rung left: to the end
  // Epochs between rungs decide nothing.
  EXPECT_EQ(asha->Record(3, 0, 2, 0.1), Decision::kNone);
  EXPECT_TRUE(asha->WaitsAtRung(3, 1));  // trial 3 not decided at rung 1 yet
}

TEST(AshaTest, AMetricToMinimizeIsPrunedWhenAboveTheCutoff) {
  std::optional<AshaRungs> asha = AshaRungs::ForJob(Spec(3, 4), "loss", false);
  ASSERT_TRUE(asha.has_value());
  EXPECT_EQ(asha->rungs(), (std::vector<int>{1, 3}));
  asha->Record(0, 0, 1, 0.3);
  EXPECT_EQ(asha->Record(0, 1, 1, 0.3), Decision::kPromote);
  asha->Record(1, 0, 1, 0.2);
  EXPECT_EQ(asha->Record(1, 1, 1, 0.2), Decision::kPromote);  // better than 0.3
  // 0.4 against {0.3, 0.2}: the cutoff is 0.2 + 0.1 / 3 ≈ 0.233 (a third of
  // the way from the best): pruned.
  asha->Record(2, 0, 1, 0.4);
  EXPECT_EQ(asha->Record(2, 1, 1, 0.4), Decision::kPrune);
}

TEST(AshaTest, NoAshaNoRungs) {
  traind::v1::JobSpec spec = Spec(2, 10);
  spec.mutable_search()->clear_asha();
  EXPECT_FALSE(AshaRungs::ForJob(spec, "accuracy", true).has_value());
}

}  // namespace
}  // namespace traind::server
