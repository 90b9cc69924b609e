#include "spec/checks.h"

#include "absl/strings/str_cat.h"
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

// data.id names columns that are neither features nor targets, and none
// that predictions.csv names itself.
TEST(CheckTrainingSpecTest, IdColumns) {
  JobSpec spec = Valid();
  spec.mutable_data()->set_label("species");
  spec.mutable_data()->add_id("plant");
  spec.mutable_data()->add_id("site");
  EXPECT_TRUE(CheckTrainingSpec(spec).ok());
  for (const char* reserved : {"row", "fold", "repeat", "label", "prediction", "true_x", "p_1"}) {
    JobSpec bad = spec;
    bad.mutable_data()->set_id(1, reserved);
    EXPECT_EQ(MessageOf(bad),
              absl::StrCat("data.id[1]: \"", reserved,
                           "\" is a name traind gives a predictions column (row, fold, repeat, "
                           "label, prediction, true_*, p_*); rename the column"));
  }
  JobSpec bad = spec;
  bad.mutable_data()->set_id(0, "species");
  EXPECT_EQ(MessageOf(bad),
            "data.id[0]: \"species\" is a label column; an id column is never a feature or a "
            "target");
  bad = spec;
  bad.mutable_data()->add_features("site");
  EXPECT_EQ(MessageOf(bad),
            "data.id[1]: \"site\" is in data.features; an id column is never a feature or a "
            "target");
  bad = spec;
  bad.mutable_data()->add_categorical("plant");
  EXPECT_THAT(MessageOf(bad),
              ::testing::StartsWith("data.id[0]: \"plant\" is in data.categorical"));
  bad = spec;
  bad.mutable_cross_validation()->set_folds(2);
  bad.mutable_cross_validation()->set_group_column("site");
  EXPECT_THAT(MessageOf(bad), ::testing::StartsWith("data.id[1]: \"site\" is the group column"));
  bad = spec;
  bad.mutable_data()->add_id("plant");
  EXPECT_THAT(MessageOf(bad), ::testing::StartsWith("data.id[2]: \"plant\" is listed twice"));
}

TEST(CheckTrainingSpecTest, Importance) {
  JobSpec spec = Valid();
  spec.mutable_importance();
  EXPECT_EQ(MessageOf(spec),
            "importance: needs validation rows to shuffle (cross_validation folds, "
            "validation_fraction or validation_path)");
  spec.mutable_cross_validation()->set_folds(3);
  EXPECT_TRUE(CheckTrainingSpec(spec).ok());
  spec.mutable_importance()->set_repeats(101);
  EXPECT_EQ(MessageOf(spec), "importance.repeats: must be between 1 and 100 (default 5), got 101");
  spec.mutable_importance()->set_repeats(20);
  spec.mutable_data()->add_shape(1);
  spec.mutable_data()->add_shape(2);
  spec.mutable_data()->add_shape(2);
  EXPECT_EQ(MessageOf(spec), "importance: only for tables, not images (data.shape)");
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
