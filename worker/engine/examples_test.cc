// Every example spec in examples/ parses, validates and trains (two epochs
// of its first task), so the documented examples keep working.
#include <unistd.h>

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "spec/loader.h"
#include "spec/task_rows.h"
#include "spec/validation.h"
#include "worker/engine/fit.h"

namespace traind::engine {
namespace {

class ExampleSpecTest : public ::testing::TestWithParam<const char*> {};

TEST_P(ExampleSpecTest, ValidatesAndTrains) {
  // Data paths in the examples are relative to the repository root.
  char saved[4096];
  ASSERT_NE(getcwd(saved, sizeof(saved)), nullptr);
  ASSERT_EQ(chdir(TRAIND_SOURCE_DIR), 0);
  absl::StatusOr<traind::v1::JobSpec> spec =
      spec::LoadJobSpecFile(std::string("examples/") + GetParam() + ".yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_TRUE(spec::ValidateJobSpec(*spec, spec::ValidationContext()).ok())
      << spec::ValidateJobSpec(*spec, {});
  spec->mutable_training()->set_epochs(2);
  absl::StatusOr<data::Dataset> data = data::LoadDataset(*spec);
  ASSERT_TRUE(data.ok()) << data.status();
  absl::StatusOr<data::FoldRows> rows = spec::RowsForTask(*spec, *data, 0);
  ASSERT_TRUE(rows.ok()) << rows.status();
  absl::StatusOr<traind::v1::FoldResult> result = Fit(*spec, *data, *rows, 0, {}, nullptr);
  EXPECT_TRUE(result.ok()) << result.status();
  ASSERT_EQ(chdir(saved), 0);
}

// Fashion-MNIST from its IDX files (tests/run.sh installs Debian's
// dataset-fashion-mnist): the example validates, and 40 batches of its first
// fold (5,120 images) already classify its 12,000 validation images far
// better than chance (0.1).
TEST(FashionMnistExampleTest, ValidatesLoadsTheIdxFilesAndLearns) {
  const char* const kImages = "/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz";
  if (access(kImages, R_OK) != 0) {
    GTEST_SKIP() << kImages << " is not installed (apt-get install dataset-fashion-mnist)";
  }
  absl::StatusOr<traind::v1::JobSpec> spec =
      spec::LoadJobSpecFile(std::string(TRAIND_SOURCE_DIR) + "/examples/fashion-mnist-cnn.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  spec::ValidatedShape shape;
  ASSERT_TRUE(spec::ValidateJobSpec(*spec, spec::ValidationContext(), &shape).ok())
      << spec::ValidateJobSpec(*spec, {});
  EXPECT_EQ(shape.rows, 60000);
  EXPECT_EQ(shape.features, 784);
  EXPECT_THAT(shape.image_shape, ::testing::ElementsAre(1, 28, 28));
  for (int32_t d : shape.image_shape) spec->mutable_data()->add_shape(d);
  absl::StatusOr<data::Dataset> data = data::LoadDataset(*spec, 2);
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(data->pixels.size(), 60000u * 784u);
  EXPECT_EQ(data->classes[9], "Ankle boot");
  spec->mutable_training()->set_epochs(0);
  spec->mutable_training()->set_batches(40);
  absl::StatusOr<data::FoldRows> rows = spec::RowsForTask(*spec, *data, 0);
  ASSERT_TRUE(rows.ok()) << rows.status();
  EXPECT_EQ(rows->val.size(), 12000u);
  absl::StatusOr<traind::v1::FoldResult> result = Fit(*spec, *data, *rows, 0, {}, nullptr);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_GT(result->val().at("accuracy"), 0.5);
}

INSTANTIATE_TEST_SUITE_P(Examples, ExampleSpecTest,
                         ::testing::Values("iris-cv", "digits-multiclass", "breast-cancer-binary",
                                           "digits-multilabel", "diabetes-regression",
                                           "digits-cnn"));

}  // namespace
}  // namespace traind::engine
