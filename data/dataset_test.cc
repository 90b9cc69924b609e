#include "data/dataset.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <string_view>

#include "absl/strings/ascii.h"
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

// Id columns: data.id, else data.ignore (but a name predictions.csv gives
// its own columns); never features; cells kept as the file holds them, ""
// where the validation file lacks the column.
TEST(LoadDatasetTest, IdColumns) {
  TempFile file("id,y,a,row\n\"k,1\",x,1,7\nk2,z,2,8\n");
  traind::v1::DataSpec d = Spec(file.path(), "y");
  d.add_ignore("id");
  d.add_ignore("row");
  absl::StatusOr<Dataset> data = LoadDataset(d);
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_THAT(data->feature_names, ElementsAre("a"));
  EXPECT_THAT(data->id_names, ElementsAre("id"));
  EXPECT_THAT(data->ids, ElementsAre("k,1", "k2"));
}

TEST(LoadDatasetTest, DeclaredIdColumnsAndAValidationFile) {
  TempFile file("id,y,a,site\nk1,x,1,s1\nk2,z,2,s2\n");
  TempFile val("a,y,id\n3,x,v1\n");
  traind::v1::JobSpec spec;
  *spec.mutable_data() = Spec(file.path(), "y");
  spec.mutable_data()->add_id("site");
  spec.mutable_data()->add_id("id");
  spec.mutable_cross_validation()->set_validation_path(val.path());
  absl::StatusOr<Dataset> data = LoadDataset(spec);
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_THAT(data->feature_names, ElementsAre("a"));
  EXPECT_THAT(data->id_names, ElementsAre("site", "id"));
  EXPECT_THAT(data->ids, ElementsAre("s1", "k1", "s2", "k2", "", "v1"));
  // A declared id column the file lacks is the spec's error, named.
  spec.mutable_data()->add_id("city");
  data = LoadDataset(spec);
  ASSERT_FALSE(data.ok());
  EXPECT_EQ(FailureKindOf(data.status()), FailureKind::kInvalidSpec);
  EXPECT_THAT(std::string(data.status().message()),
              ::testing::StartsWith("data.id[2]: column \"city\" not found in " + file.path()));
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
            file.path() +
                ":4: column \"sepal_width\" (column 2): \"abc\" is not a number; if column "
                "\"sepal_width\" holds categories, list it in data.categorical");
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
              file.path() + ":3: column \"a\" (column 1): \"" + bad +
                  "\" is not a number; if column \"a\" holds categories, list it in "
                  "data.categorical");
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
                                         "\"\xE2\x80\xA6 (50001 bytes) is not a number; "
                                         "if column \"a\" holds categories, list it in "
                                         "data.categorical");
}

// ParseFeature as it reads every text: spaces and tabs trimmed, a leading
// '+' dropped, then std::from_chars to a finite float32.
const char* ReferenceParseFeature(std::string_view s, float* value) {
  static constexpr const char* kNotANumber = "is not a number";
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  if (!s.empty() && s.front() == '+') s.remove_prefix(1);
  if (s.empty()) return kNotANumber;
  float v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (end != s.data() + s.size()) return kNotANumber;
  if (ec == std::errc::result_out_of_range) {
    return "is out of range for a 32-bit float (magnitudes from 1.2e-38 to 3.4e38, or 0)";
  }
  if (ec != std::errc() || !std::isfinite(v)) return kNotANumber;
  *value = v;
  return nullptr;
}

// ParseFeature and the reference agree on `text`: the same message, or the
// same float32 bit for bit.
void ExpectSameFeature(const std::string& text) {
  float got = -1;
  float want = -1;
  const char* got_error = ParseFeature(text, &got);
  const char* want_error = ReferenceParseFeature(text, &want);
  ASSERT_EQ(got_error == nullptr, want_error == nullptr) << "\"" << text << "\"";
  if (want_error != nullptr) {
    EXPECT_STREQ(got_error, want_error) << "\"" << text << "\"";
    return;
  }
  uint32_t got_bits = 0;
  uint32_t want_bits = 0;
  std::memcpy(&got_bits, &got, sizeof got);
  std::memcpy(&want_bits, &want, sizeof want);
  ASSERT_EQ(got_bits, want_bits) << "\"" << text << "\" " << got << " " << want;
}

// Plain decimal text is read without std::from_chars: every text reads as
// from_chars reads it, whatever its length, sign, point, digits or junk.
TEST(ParseFeatureTest, ReadsEveryTextAsFromChars) {
  for (const char* text : {"0",
                           "-0",
                           "-0.0",
                           "+0",
                           "1",
                           "-1",
                           "1.",
                           ".5",
                           "-.5",
                           "1.5",
                           "+1.5",
                           " 2.5\t",
                           "+-3",
                           "--3",
                           "1e5",
                           "1E-3",
                           "nan",
                           "inf",
                           "-inf",
                           "1e39",
                           "1e-50",
                           "0x10",
                           "1.2.3",
                           "12.3a5678",
                           "12.34 567",
                           "1,5",
                           "",
                           " ",
                           "+",
                           "-",
                           ".",
                           "9007199254740992",
                           "9007199254740993",
                           "9007199254740993.0",
                           "900719925474099.3",
                           "0000000000000000001.5",
                           "1234567890123456789",
                           "12345678901234567890",
                           "0.0000000000000000000001",
                           "0.00000000000000000000001",
                           "3.4028235e38",
                           "340282356779733661637539395458142568448",
                           "16777217",
                           "-16777217.0",
                           "0.1",
                           "0.2",
                           "0.3",
                           "12345678.12345678",
                           "1.00000005960464477539",
                           "12.3456789"}) {
    ExpectSameFeature(text);
  }
  std::mt19937_64 rng(5);
  const char junk[] = {'a', ' ', '\t', '.', '-', '+', 'e', ',', '\xff', '/', ':'};
  for (int i = 0; i < 300000; ++i) {
    std::string text;
    if (rng() % 10 == 0) text += rng() % 2 ? " " : "\t";
    if (rng() % 4 == 0) text += rng() % 2 ? "-" : "+";
    const int whole = static_cast<int>(rng() % 12);
    for (int d = 0; d < whole; ++d) text += static_cast<char>('0' + rng() % 10);
    if (rng() % 3 != 0) {
      text += '.';
      const int fraction = static_cast<int>(rng() % 14);
      for (int d = 0; d < fraction; ++d) text += static_cast<char>('0' + rng() % 10);
    }
    if (rng() % 8 == 0) text += "e" + std::to_string(static_cast<int>(rng() % 80) - 40);
    if (rng() % 8 == 0) text.insert(rng() % (text.size() + 1), 1, junk[rng() % sizeof junk]);
    if (rng() % 10 == 0) text += rng() % 2 ? " " : "\t";
    ExpectSameFeature(text);
  }
}

// Halfway between two float32s, a decimal text's double may round once more
// the wrong way: texts at and next to those points still read as from_chars
// reads them (and some of them are such texts).
TEST(ParseFeatureTest, ReadsTextsNearFloatHalfwayPoints) {
  std::mt19937_64 rng(9);
  int double_rounding = 0;
  for (int i = 0; i < 200000; ++i) {
    const float f =
        static_cast<float>(std::ldexp(1.0 + static_cast<double>(rng() % (1 << 23)) / (1 << 23),
                                      static_cast<int>(rng() % 40) - 20));
    const double halfway =
        (static_cast<double>(f) + static_cast<double>(std::nextafter(f, 2 * f))) / 2;
    char text[64];
    std::snprintf(text, sizeof text, "%.*f", static_cast<int>(rng() % 12) + 6, halfway);
    std::string s = text;
    if (rng() % 3 == 0) {
      char& last = s.back();
      last = last == '9' ? '8' : static_cast<char>(last + 1);
    }
    ExpectSameFeature(s);
    ExpectSameFeature("-" + s);
    float exact = 0;
    std::from_chars(s.data(), s.data() + s.size(), exact);
    if (static_cast<float>(std::strtod(s.c_str(), nullptr)) != exact) ++double_rounding;
  }
  EXPECT_GT(double_rounding, 0);
}

// What is missing, as IsMissing has always said, on views too.
TEST(IsMissingTest, TheMissingWordsAfterSpaces) {
  const auto reference = [](const std::string& cell) {
    const absl::string_view s = absl::StripAsciiWhitespace(cell);
    return s.empty() || s == "NA" || s == "NaN" || s == "nan" || s == "null";
  };
  for (const char* cell : {"", " ", "NA", " NA ", "\tnull\n", "NaN", "nan", "null", "na", "Null",
                           "NAN", "N", "n", "NA1", "0", "x", "\vnan\f", "\rNA"}) {
    EXPECT_EQ(IsMissing(cell), reference(cell)) << "\"" << cell << "\"";
    EXPECT_EQ(IsMissingText(cell), reference(cell)) << "\"" << cell << "\"";
  }
  std::mt19937 rng(3);
  const char alphabet[] = {'N', 'A', 'a', 'n', 'u', 'l', ' ', '\t', '\n', '\r', '\v', '\f', 'x'};
  for (int i = 0; i < 100000; ++i) {
    std::string cell;
    const int length = static_cast<int>(rng() % 7);
    for (int k = 0; k < length; ++k) cell += alphabet[rng() % sizeof alphabet];
    ASSERT_EQ(IsMissing(cell), reference(cell)) << "\"" << cell << "\"";
    ASSERT_EQ(IsMissingText(cell), reference(cell)) << "\"" << cell << "\"";
  }
}

}  // namespace
}  // namespace traind::data
