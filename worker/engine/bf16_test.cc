// training.precision end to end: bf16 training on digits reaches fp32's
// validation accuracy; fp32 stated explicitly is the default path.
#include <cstdio>
#include <string>

#include "base/status.h"
#include "data/dataset.h"
#include "data/split.h"
#include "gtest/gtest.h"
#include "traind/v1/job.pb.h"
#include "worker/engine/backend/cpu/cpu_backend.h"
#include "worker/engine/fit.h"

namespace traind::engine {
namespace {

using traind::v1::FoldResult;
using traind::v1::JobSpec;

const data::Dataset& Digits() {
  static const data::Dataset* digits = [] {
    traind::v1::DataSpec spec;
    spec.set_path(std::string(TRAIND_SOURCE_DIR) + "/examples/data/digits.csv");
    spec.set_label("digit");
    return new data::Dataset(std::move(data::LoadDataset(spec)).value());
  }();
  return *digits;
}

// 64-256-128-10 (relu), Adam, 10 epochs of batch 32, standardized pixels.
JobSpec DigitsSpec(traind::v1::Precision precision) {
  JobSpec spec;
  spec.set_seed(3);
  spec.mutable_data()->set_standardize(true);
  for (int units : {256, 128}) {
    traind::v1::Dense* hidden = spec.mutable_model()->add_layers()->mutable_dense();
    hidden->set_units(units);
    hidden->set_activation(traind::v1::RELU);
  }
  spec.mutable_model()->add_layers()->mutable_dense()->set_units(10);
  spec.mutable_loss()->mutable_softmax_cross_entropy();
  spec.mutable_optimizer()->mutable_adam()->set_learning_rate(0.001);
  spec.mutable_training()->set_epochs(10);
  spec.mutable_training()->set_batch_size(32);
  spec.mutable_training()->set_precision(precision);
  spec.mutable_metrics()->add_train(traind::v1::LOSS);
  spec.mutable_metrics()->add_val(traind::v1::LOSS);
  spec.mutable_metrics()->add_val(traind::v1::ACCURACY);
  return spec;
}

// Mean validation accuracy over 3 of the 5 stratified folds.
struct Outcome {
  double accuracy = 0;
  double train_loss = 0;
};

Outcome FitFolds(traind::v1::Precision precision) {
  Outcome outcome;
  const int folds = 3;
  for (int fold = 0; fold < folds; ++fold) {
    const data::FoldRows rows =
        data::FoldSplit(data::StratifiedKFold(Digits().y, 5, true, 7), fold);
    absl::StatusOr<FoldResult> result =
        Fit(DigitsSpec(precision), Digits(), rows, fold, {}, nullptr);
    EXPECT_TRUE(result.ok()) << result.status();
    if (!result.ok()) return {};
    outcome.accuracy += result->val().at("accuracy") / folds;
    outcome.train_loss += result->final_train().at("loss") / folds;
  }
  return outcome;
}

TEST(Bf16FitTest, DigitsAccuracyWithinPointAndHalfOfFp32) {
  if (!CpuSupportsBf16()) {
    GTEST_SKIP() << "this CPU has neither AVX512-BF16 nor AMX (as oneDNN sees it): "
                    "training.precision: bf16 is refused here";
  }
  const Outcome fp32 = FitFolds(traind::v1::FP32);
  const Outcome bf16 = FitFolds(traind::v1::BF16);
  std::printf(
      "[bf16] digits, 3 folds: validation accuracy fp32 %.4f, bf16 %.4f; "
      "final training loss fp32 %.4f, bf16 %.4f\n",
      fp32.accuracy, bf16.accuracy, fp32.train_loss, bf16.train_loss);
  EXPECT_GE(fp32.accuracy, 0.95);
  EXPECT_NEAR(bf16.accuracy, fp32.accuracy, 0.015);
  // The same trajectory, give or take bf16's rounding: not a different run.
  EXPECT_NEAR(bf16.train_loss, fp32.train_loss, 0.5 * fp32.train_loss + 0.01);
}

TEST(Bf16FitTest, Fp32IsTheUnspecifiedPathBitForBit) {
  const data::FoldRows rows = data::FoldSplit(data::StratifiedKFold(Digits().y, 5, true, 7), 0);
  JobSpec spec = DigitsSpec(traind::v1::PRECISION_UNSPECIFIED);
  spec.mutable_training()->set_epochs(3);
  absl::StatusOr<FoldResult> unspecified = Fit(spec, Digits(), rows, 0, {}, nullptr);
  spec.mutable_training()->set_precision(traind::v1::FP32);
  absl::StatusOr<FoldResult> fp32 = Fit(spec, Digits(), rows, 0, {}, nullptr);
  ASSERT_TRUE(unspecified.ok()) << unspecified.status();
  ASSERT_TRUE(fp32.ok()) << fp32.status();
  EXPECT_EQ(unspecified->final_train().at("loss"), fp32->final_train().at("loss"));
  EXPECT_EQ(unspecified->val().at("loss"), fp32->val().at("loss"));
  EXPECT_EQ(unspecified->val().at("accuracy"), fp32->val().at("accuracy"));
}

TEST(Bf16FitTest, Tf32OnTheCpuFailsAsASpecError) {
  const data::FoldRows rows = data::FoldSplit(data::StratifiedKFold(Digits().y, 5, true, 7), 0);
  absl::StatusOr<FoldResult> result =
      Fit(DigitsSpec(traind::v1::TF32), Digits(), rows, 0, {}, nullptr);
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(FailureKindOf(result.status()), FailureKind::kInvalidSpec);
  EXPECT_EQ(result.status().message().rfind("training.precision: tf32", 0), 0u) << result.status();
}

}  // namespace
}  // namespace traind::engine
