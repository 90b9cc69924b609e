// The per-fold feature pipeline and the loader's columns: imputation,
// scaling and one-hot encoding fitted on the training rows only.
#include "worker/engine/data/features.h"

#include <cmath>
#include <string>
#include <vector>

#include "base/status.h"
#include "data/dataset.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "spec/task_rows.h"
#include "spec/validation.h"
#include "tests/testing/temp_dir.h"

namespace traind::engine {
namespace {

using ::testing::ElementsAre;
using traind::v1::JobSpec;

JobSpec Spec(const std::string& path) {
  JobSpec spec;
  spec.mutable_data()->set_path(path);
  spec.mutable_data()->set_label("y");
  return spec;
}

TEST(FeaturePipelineTest, ImputeScaleAndOneHotFromTrainingRowsOnly) {
  // Rows 0-3 train, 4-5 validate. Column a has a missing value in training;
  // color "blue" appears only in validation.
  traind::testing::TempFile file(
      "id|a|color|y\n"
      "1|1|red|p\n"
      "2||green|q\n"
      "3|3|red|p\n"
      "4|5|green|q\n"
      "5|100|blue|p\n"
      "6|NA|red|q\n");
  JobSpec spec = Spec(file.path());
  spec.mutable_data()->set_delimiter("|");
  spec.mutable_data()->add_ignore("id");
  spec.mutable_data()->add_categorical("color");
  spec.mutable_data()->set_missing(traind::v1::IMPUTE_MEDIAN);
  spec.mutable_data()->set_scaling(traind::v1::MIN_MAX);
  absl::StatusOr<data::Dataset> data = data::LoadDataset(spec);
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_THAT(data->feature_names, ElementsAre("a"));
  ASSERT_EQ(data->categorical.size(), 1u);
  EXPECT_THAT(data->categorical[0].values, ElementsAre("blue", "green", "red"));
  FeaturePipeline pipeline;
  pipeline.Fit(spec.data(), *data, {0, 1, 2, 3});
  // Median of {1, 3, 5} = 3; min-max over the imputed {1, 3, 3, 5}: [1, 5].
  EXPECT_DOUBLE_EQ(pipeline.impute[0], 3.0);
  EXPECT_DOUBLE_EQ(pipeline.offset[0], 1.0);
  EXPECT_DOUBLE_EQ(pipeline.scale[0], 4.0);
  EXPECT_EQ(pipeline.width(), 3);  // a, green, red (blue unseen in training)
  FeatureMatrix out;
  pipeline.Transform(*data, &out);
  ASSERT_EQ(out.size(), 18u);
  EXPECT_THAT(std::vector<float>(out.begin(), out.begin() + 3), ElementsAre(0.0f, 0.0f, 1.0f));
  EXPECT_THAT(std::vector<float>(out.begin() + 3, out.begin() + 6), ElementsAre(0.5f, 1.0f, 0.0f));
  // Validation rows: 100 scales beyond 1 (no leakage of its value), blue is all zeros.
  EXPECT_THAT(std::vector<float>(out.begin() + 12, out.begin() + 15),
              ElementsAre(24.75f, 0.0f, 0.0f));
  EXPECT_THAT(std::vector<float>(out.begin() + 15, out.begin() + 18),
              ElementsAre(0.5f, 0.0f, 1.0f));

  spec.mutable_data()->set_missing(traind::v1::IMPUTE_MEAN);
  spec.mutable_data()->set_scaling(traind::v1::STANDARD);
  pipeline.Fit(spec.data(), *data, {0, 1, 2, 3});
  EXPECT_DOUBLE_EQ(pipeline.impute[0], 3.0);            // mean of {1, 3, 5}
  EXPECT_DOUBLE_EQ(pipeline.scale[0], std::sqrt(2.0));  // population std of {1, 3, 3, 5}
}

TEST(FeaturePipelineTest, MissingValueErrorNamesRowAndColumn) {
  traind::testing::TempFile file("a,b,y\n1,2,p\n3,,q\n");
  absl::StatusOr<data::Dataset> data = data::LoadDataset(Spec(file.path()));
  ASSERT_FALSE(data.ok());
  EXPECT_EQ(FailureKindOf(data.status()), FailureKind::kDataError);
  EXPECT_EQ(data.status().message(),
            file.path() + ":3: column \"b\" (column 2): missing value (data.missing: error)");
}

TEST(LoadDatasetTest, FeatureColumnsInOrderAndValidationFile) {
  traind::testing::TempFile train("a,b,c,y\n1,2,3,x\n4,5,6,y\n7,8,9,x\n");
  traind::testing::TempFile val("y,c,b,a\nz,30,20,10\n");  // other column order, a new class
  JobSpec spec = Spec(train.path());
  spec.mutable_data()->add_features("c");
  spec.mutable_data()->add_features("a");
  spec.mutable_cross_validation()->set_validation_path(val.path());
  absl::StatusOr<data::Dataset> data = data::LoadDataset(spec);
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_THAT(data->feature_names, ElementsAre("c", "a"));
  EXPECT_EQ(data->rows, 4);
  EXPECT_EQ(data->validation_start, 3);
  EXPECT_THAT(data->x, ElementsAre(3, 1, 6, 4, 9, 7, 30, 10));
  EXPECT_THAT(data->classes, ElementsAre("x", "y", "z"));
  absl::StatusOr<data::FoldRows> rows = spec::RowsForTask(spec, *data, 0);
  ASSERT_TRUE(rows.ok());
  EXPECT_THAT(rows->train, ElementsAre(0, 1, 2));
  EXPECT_THAT(rows->val, ElementsAre(3));
}

TEST(RowsForTaskTest, RepeatedKFoldDiffersPerRepeatAndCoversEachTime) {
  JobSpec spec;
  spec.set_seed(11);
  spec.mutable_data()->set_path(std::string(TRAIND_SOURCE_DIR) + "/examples/data/iris.csv");
  spec.mutable_data()->set_label("species");
  spec.mutable_cross_validation()->set_folds(3);
  spec.mutable_cross_validation()->set_repeats(2);
  absl::StatusOr<data::Dataset> data = data::LoadDataset(spec);
  ASSERT_TRUE(data.ok());
  std::vector<std::vector<int64_t>> val;
  for (int task = 0; task < 6; ++task)
    val.push_back(std::move(spec::RowsForTask(spec, *data, task)).value().val);
  for (int repeat = 0; repeat < 2; ++repeat) {
    std::vector<int64_t> all;
    for (int f = 0; f < 3; ++f) {
      const auto& v = val[static_cast<size_t>(repeat * 3 + f)];
      all.insert(all.end(), v.begin(), v.end());
      EXPECT_EQ(v.size(), 50u);
    }
    std::sort(all.begin(), all.end());
    for (int64_t i = 0; i < 150; ++i) EXPECT_EQ(all[static_cast<size_t>(i)], i);
  }
  EXPECT_NE(val[0], val[3]);
  EXPECT_EQ(val[0],
            std::move(spec::RowsForTask(spec, *data, 0)).value().val);  // identical on a retry
  EXPECT_EQ(spec::RowsForTask(spec, *data, 6).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace traind::engine
