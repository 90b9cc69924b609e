#include "spec/checks.h"

#include "base/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace traind::spec {
namespace {

using ::testing::ElementsAre;
using traind::v1::JobSpec;

JobSpec Valid() {
  JobSpec spec;
  spec.mutable_model()->add_layers()->mutable_dense()->set_units(3);
  spec.mutable_optimizer()->mutable_sgd()->set_learning_rate(0.1);
  spec.mutable_training()->set_epochs(1);
  spec.mutable_training()->set_batch_size(8);
  return spec;
}

std::string MessageOf(const JobSpec& spec) {
  absl::Status status = CheckTrainingSpec(spec);
  EXPECT_TRUE(status.ok() || FailureKindOf(status) == FailureKind::kInvalidSpec) << status;
  return std::string(status.message());
}

TEST(CheckTrainingSpecTest, AcceptsAValidSpec) { EXPECT_TRUE(CheckTrainingSpec(Valid()).ok()); }

TEST(CheckTrainingSpecTest, NamesTheField) {
  JobSpec spec = Valid();
  spec.mutable_model()->add_layers()->mutable_dense()->set_units(-1);
  EXPECT_EQ(MessageOf(spec), "model.layers[1].dense.units: must be positive, got -1");

  spec = Valid();
  spec.mutable_model()->mutable_layers(0)->mutable_dense()->set_activation(
      static_cast<traind::v1::Activation>(50));
  EXPECT_EQ(MessageOf(spec), "model.layers[0].dense.activation: unknown value 50");

  spec = Valid();
  spec.mutable_training()->set_epochs(0);
  EXPECT_EQ(MessageOf(spec), "training: one of epochs and batches is required");

  spec = Valid();
  spec.mutable_training()->set_batches(-2);
  EXPECT_EQ(MessageOf(spec), "training.batches: must be positive, got -2");

  spec = Valid();
  spec.mutable_optimizer()->mutable_sgd()->set_momentum(-0.5);
  EXPECT_EQ(MessageOf(spec), "optimizer.sgd.momentum: must be a number >= 0, got -0.5");

  spec = Valid();
  spec.mutable_optimizer()->mutable_adam()->set_learning_rate(0.1);
  spec.mutable_optimizer()->mutable_adam()->set_epsilon(0);
  EXPECT_EQ(MessageOf(spec), "optimizer.adam.epsilon: must be a positive number, got 0");

  spec = Valid();
  spec.mutable_metrics()->add_val(traind::v1::LOSS);
  spec.mutable_metrics()->add_val(traind::v1::METRIC_UNSPECIFIED);
  EXPECT_EQ(MessageOf(spec), "metrics.val[1]: not a metric (value 0)");
}

TEST(ResolveMetricsTest, DefaultsAndRepeats) {
  google::protobuf::RepeatedField<int> list;
  EXPECT_THAT(ResolveMetrics(list, "metrics.train").value(),
              ElementsAre(traind::v1::LOSS, traind::v1::ACCURACY));
  list.Add(traind::v1::ACCURACY);
  list.Add(traind::v1::ACCURACY);
  EXPECT_THAT(ResolveMetrics(list, "metrics.train").value(), ElementsAre(traind::v1::ACCURACY));
  EXPECT_EQ(MetricName(traind::v1::LOSS), "loss");
  EXPECT_EQ(MetricName(traind::v1::ACCURACY), "accuracy");
}

}  // namespace
}  // namespace traind::spec
