// Every example spec in examples/ parses, validates and trains (two epochs
// of its first task), so the documented examples keep working.
#include <unistd.h>

#include <string>

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

INSTANTIATE_TEST_SUITE_P(Examples, ExampleSpecTest,
                         ::testing::Values("iris-cv", "digits-multiclass", "breast-cancer-binary",
                                           "digits-multilabel", "diabetes-regression",
                                           "digits-cnn"));

}  // namespace
}  // namespace traind::engine
