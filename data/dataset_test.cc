#include "data/dataset.h"

#include <string>

#include "base/status.h"
#include "data/text.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/temp_dir.h"

namespace traind::data {
namespace {

using ::testing::ElementsAre;
using traind::testing::TempFile;

traind::v1::DataSpec Spec(const std::string& path, const std::string& label) {
  traind::v1::DataSpec spec;
  spec.set_path(path);
  spec.set_label(label);
  return spec;
}

TEST(LoadDatasetTest, Iris) {
  const std::string path = std::string(TRAIND_SOURCE_DIR) + "/examples/data/iris.csv";
  absl::StatusOr<Dataset> data = LoadDataset(Spec(path, "species"));
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(data->rows, 150);
  EXPECT_EQ(data->features, 4);
  EXPECT_EQ(data->path, path);
  EXPECT_THAT(data->feature_names,
              ElementsAre("sepal_length", "sepal_width", "petal_length", "petal_width"));
  EXPECT_THAT(data->classes, ElementsAre("setosa", "versicolor", "virginica"));
  ASSERT_EQ(data->x.size(), 600u);
  ASSERT_EQ(data->y.size(), 150u);
  // First row: 5.1,3.5,1.4,0.2,setosa
  EXPECT_THAT(std::vector<float>(data->x.begin(), data->x.begin() + 4),
              ElementsAre(5.1f, 3.5f, 1.4f, 0.2f));
  EXPECT_EQ(data->y[0], 0);
  int counts[3] = {0, 0, 0};
  for (int32_t c : data->y) {
    ASSERT_GE(c, 0);
    ASSERT_LT(c, 3);
    ++counts[c];
  }
  EXPECT_THAT(counts, ElementsAre(50, 50, 50));
}

TEST(LoadDatasetTest, LabelMayBeAnyColumn) {
  TempFile file("y,a,b\n10,1.5,-2\n2,3,4e2\n");
  absl::StatusOr<Dataset> data = LoadDataset(Spec(file.path(), "y"));
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_THAT(data->feature_names, ElementsAre("a", "b"));
  EXPECT_THAT(data->x, ElementsAre(1.5f, -2.0f, 3.0f, 400.0f));
  EXPECT_THAT(data->classes, ElementsAre("2", "10"));
  EXPECT_THAT(data->y, ElementsAre(1, 0));
}

TEST(LoadDatasetTest, MissingLabelColumnListsColumns) {
  TempFile file("a,b,c\n1,2,3\n");
  absl::StatusOr<Dataset> data = LoadDataset(Spec(file.path(), "x"));
  ASSERT_FALSE(data.ok());
  EXPECT_EQ(FailureKindOf(data.status()), FailureKind::kInvalidSpec);
  EXPECT_EQ(data.status().message(),
            "data.label: column \"x\" not found in " + file.path() + "; columns: a, b, c");
}

TEST(LoadDatasetTest, NonNumericFeatureNamesLineAndColumn) {
  TempFile file(
      "sepal_length,sepal_width,species\n"
      "1,2,a\n"
      "\n"
      "3,abc,b\n");
  absl::StatusOr<Dataset> data = LoadDataset(Spec(file.path(), "species"));
  ASSERT_FALSE(data.ok());
  EXPECT_EQ(FailureKindOf(data.status()), FailureKind::kDataError);
  EXPECT_EQ(data.status().message(),
            file.path() + ":4: column \"sepal_width\" (column 2): \"abc\" is not a number");
}

TEST(LoadDatasetTest, NanInfAndOutOfRangeAreRejected) {
  for (const std::string bad : {"1e39", "-1e999"}) {
    TempFile file("a,label\n1,x\n" + bad + ",y\n");
    absl::StatusOr<Dataset> data = LoadDataset(Spec(file.path(), "label"));
    ASSERT_FALSE(data.ok()) << "value: " << bad;
    EXPECT_EQ(
        data.status().message(),
        file.path() + ":3: column \"a\" (column 1): \"" + bad +
            "\" is out of range for a 32-bit float (magnitudes from 1.2e-38 to 3.4e38, or 0)");
  }
  for (const std::string bad : {"inf", "-Infinity", "1.5x"}) {
    TempFile file("a,label\n1,x\n" + bad + ",y\n");
    absl::StatusOr<Dataset> data = LoadDataset(Spec(file.path(), "label"));
    ASSERT_FALSE(data.ok()) << "value: " << bad;
    EXPECT_EQ(data.status().message(),
              file.path() + ":3: column \"a\" (column 1): \"" + bad + "\" is not a number");
  }
}

// The whole class of overflow says "out of range" with line and column: any
// spelling of the exponent, either sign, underflow below float32's normal
// range, in a feature column or a regression target.
TEST(LoadDatasetTest, EveryOverflowIsOutOfRange) {
  const std::string kOutOfRange =
      "is out of range for a 32-bit float (magnitudes from 1.2e-38 to 3.4e38, or 0)";
  for (const std::string bad :
       std::vector<std::string>{"1e999", "1E999", "+1e999", " -1e999 ", "1e-999", "3.5e38",
                                "1" + std::string(60, '0'), "1e99999999999999999999"}) {
    TempFile file("a,label\n1,x\n" + bad + ",y\n");
    absl::StatusOr<Dataset> data = LoadDataset(Spec(file.path(), "label"));
    ASSERT_FALSE(data.ok()) << "value: " << bad;
    EXPECT_THAT(std::string(data.status().message()),
                ::testing::StartsWith(file.path() + ":3: column \"a\" (column 1): "));
    EXPECT_THAT(std::string(data.status().message()), ::testing::EndsWith(kOutOfRange))
        << "value: " << bad;
  }
  // A regression target.
  TempFile file("a,y\n1,2\n3,1e999\n");
  traind::v1::JobSpec spec;
  *spec.mutable_data() = Spec(file.path(), "y");
  spec.mutable_loss()->mutable_mse();
  absl::StatusOr<Dataset> data = LoadDataset(spec);
  ASSERT_FALSE(data.ok());
  EXPECT_EQ(data.status().message(),
            file.path() + ":3: column \"y\" (column 2): \"1e999\" " + kOutOfRange);
}

// Empty cells and NA/NaN are missing values: an error naming row and column
// unless data.missing imputes.
TEST(LoadDatasetTest, MissingValuesAreErrorsByDefault) {
  for (const std::string bad : {"nan", "", "NA"}) {
    TempFile file("a,label\n1,x\n" + bad + ",y\n");
    absl::StatusOr<Dataset> data = LoadDataset(Spec(file.path(), "label"));
    ASSERT_FALSE(data.ok()) << "value: " << bad;
    EXPECT_EQ(FailureKindOf(data.status()), FailureKind::kDataError);
    EXPECT_EQ(data.status().message(),
              file.path() + ":3: column \"a\" (column 1): missing value (data.missing: error)");
  }
}

TEST(LoadDatasetTest, EmptyLabelIsADataError) {
  TempFile file("a,label\n1,x\n2,\n");
  absl::StatusOr<Dataset> data = LoadDataset(Spec(file.path(), "label"));
  ASSERT_FALSE(data.ok());
  EXPECT_EQ(FailureKindOf(data.status()), FailureKind::kDataError);
  EXPECT_EQ(data.status().message(), file.path() + ":3: column \"label\" (column 2): empty label");
}

TEST(LoadDatasetTest, CsvErrorsPassThrough) {
  absl::StatusOr<Dataset> data = LoadDataset(Spec("/nonexistent.csv", "y"));
  ASSERT_FALSE(data.ok());
  EXPECT_EQ(FailureKindOf(data.status()), FailureKind::kDataError);
}

TEST(LoadDatasetTest, NoRowsOrNoFeatures) {
  TempFile header_only("a,label\n");
  EXPECT_EQ(FailureKindOf(LoadDataset(Spec(header_only.path(), "label")).status()),
            FailureKind::kDataError);
  TempFile label_only("label\nx\n");
  EXPECT_EQ(FailureKindOf(LoadDataset(Spec(label_only.path(), "label")).status()),
            FailureKind::kDataError);
  EXPECT_EQ(FailureKindOf(LoadDataset(Spec("", "label")).status()), FailureKind::kInvalidSpec);
  EXPECT_EQ(FailureKindOf(LoadDataset(Spec(header_only.path(), "")).status()),
            FailureKind::kInvalidSpec);
}

// A message quotes a value from the data cut to a bounded length, escaped,
// so that it always fits in a report.
TEST(LoadDatasetTest, ALongValueIsQuotedCut) {
  const std::string value(50000, '7');
  TempFile file("a,label\n1,x\n" + value + "z,y\n");
  absl::StatusOr<Dataset> data = LoadDataset(Spec(file.path(), "label"));
  ASSERT_FALSE(data.ok());
  EXPECT_EQ(data.status().message(), file.path() + ":3: column \"a\" (column 1): \"" +
                                         std::string(kMaxQuotedBytes, '7') +
                                         "\"\xE2\x80\xA6 (50001 bytes) is not a number");
}

}  // namespace
}  // namespace traind::data
