#include "data/profile.h"

#include <map>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "base/status.h"
#include "data/cell_hash.h"
#include "data/csv.h"
#include "data/dataset.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/temp_dir.h"

namespace traind::data {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;
using traind::testing::TempDir;
using traind::testing::TempFile;
using traind::v1::ColumnProfile;
using traind::v1::DatasetProfile;

// A column's value_counts as (value, count) pairs, in order.
std::vector<std::pair<std::string, int64_t>> Counts(const ColumnProfile& column) {
  std::vector<std::pair<std::string, int64_t>> counts;
  for (const auto& vc : column.value_counts()) counts.emplace_back(vc.value(), vc.count());
  return counts;
}

using Count = std::pair<std::string, int64_t>;

TEST(ProfileCsvFileTest, HandWrittenColumns) {
  // Six data rows. x: numbers with a sign, exponents and surrounding spaces;
  // city: text with "null" and "" missing; empty: only missing tokens; mixed:
  // numbers and one word; huge: 1e39 is past float32, so not a number to the
  // engine; grade: few values, a and b tied.
  TempFile file(
      "x,city,empty,mixed,huge,grade\n"
      "-2.5,Paris,,1,1e39,b\n"
      "1.5e3,Berlin,NA,2,1,a\n"
      "NA,Paris,NaN,two,2,b\n"
      "2.5E-1,null,nan,3,3,a\n"
      "+4,Rome, null ,,4,c\n"
      "-2.5,,,1,5,NA\n");
  absl::StatusOr<DatasetProfile> profile = ProfileCsvFile(file.path(), "hand.csv");
  ASSERT_TRUE(profile.ok()) << profile.status();
  EXPECT_EQ(profile->rows(), 6);
  EXPECT_EQ(profile->distinct_cap(), 10000);
  EXPECT_EQ(profile->value_counts_cap(), 20);
  ASSERT_EQ(profile->columns_size(), 6);

  const ColumnProfile& x = profile->columns(0);
  EXPECT_EQ(x.name(), "x");
  EXPECT_EQ(x.kind(), ColumnProfile::NUMERIC);
  EXPECT_EQ(x.missing(), 1);
  EXPECT_EQ(x.distinct(), 4);  // "-2.5" twice
  EXPECT_FALSE(x.distinct_capped());
  // -2.5, 1500, 0.25, 4, -2.5 (each exact in float32): sum 1499.25 over 5.
  EXPECT_DOUBLE_EQ(x.min(), -2.5);
  EXPECT_DOUBLE_EQ(x.max(), 1500.0);
  EXPECT_DOUBLE_EQ(x.mean(), 299.85);
  // Ties by bytes: '+' (0x2b) < '-' (0x2d) < '1' < '2'.
  EXPECT_THAT(Counts(x),
              ElementsAre(Count{"-2.5", 2}, Count{"+4", 1}, Count{"1.5e3", 1}, Count{"2.5E-1", 1}));

  const ColumnProfile& city = profile->columns(1);
  EXPECT_EQ(city.kind(), ColumnProfile::CATEGORICAL);
  EXPECT_EQ(city.missing(), 2);
  EXPECT_EQ(city.distinct(), 3);
  EXPECT_DOUBLE_EQ(city.min(), 0.0);
  EXPECT_DOUBLE_EQ(city.max(), 0.0);
  EXPECT_DOUBLE_EQ(city.mean(), 0.0);
  EXPECT_THAT(Counts(city), ElementsAre(Count{"Paris", 2}, Count{"Berlin", 1}, Count{"Rome", 1}));

  const ColumnProfile& empty = profile->columns(2);
  EXPECT_EQ(empty.kind(), ColumnProfile::EMPTY);
  EXPECT_EQ(empty.missing(), 6);
  EXPECT_EQ(empty.distinct(), 0);
  EXPECT_FALSE(empty.distinct_capped());
  EXPECT_TRUE(empty.value_counts().empty());

  const ColumnProfile& mixed = profile->columns(3);
  EXPECT_EQ(mixed.kind(), ColumnProfile::CATEGORICAL);
  EXPECT_EQ(mixed.missing(), 1);
  EXPECT_EQ(mixed.distinct(), 4);
  EXPECT_DOUBLE_EQ(mixed.mean(), 0.0);
  EXPECT_THAT(Counts(mixed),
              ElementsAre(Count{"1", 2}, Count{"2", 1}, Count{"3", 1}, Count{"two", 1}));

  const ColumnProfile& huge = profile->columns(4);
  EXPECT_EQ(huge.kind(), ColumnProfile::CATEGORICAL);
  EXPECT_EQ(huge.missing(), 0);
  EXPECT_EQ(huge.distinct(), 6);
  EXPECT_THAT(Counts(huge), ElementsAre(Count{"1", 1}, Count{"1e39", 1}, Count{"2", 1},
                                        Count{"3", 1}, Count{"4", 1}, Count{"5", 1}));

  const ColumnProfile& grade = profile->columns(5);
  EXPECT_EQ(grade.kind(), ColumnProfile::CATEGORICAL);
  EXPECT_EQ(grade.missing(), 1);
  EXPECT_EQ(grade.distinct(), 3);
  EXPECT_THAT(Counts(grade), ElementsAre(Count{"a", 2}, Count{"b", 2}, Count{"c", 1}));
}

TEST(ProfileCsvFileTest, HeaderOnlyHasNoRows) {
  TempFile file("a;b\n");
  absl::StatusOr<DatasetProfile> profile = ProfileCsvFile(file.path(), "", ';');
  ASSERT_TRUE(profile.ok()) << profile.status();
  EXPECT_EQ(profile->rows(), 0);
  ASSERT_EQ(profile->columns_size(), 2);
  EXPECT_EQ(profile->columns(1).name(), "b");
  EXPECT_EQ(profile->columns(1).kind(), ColumnProfile::EMPTY);
  EXPECT_EQ(profile->columns(1).missing(), 0);
}

TEST(ProfileCsvFileTest, Iris) {
  const std::string path = std::string(TRAIND_SOURCE_DIR) + "/examples/data/iris.csv";
  absl::StatusOr<DatasetProfile> profile = ProfileCsvFile(path, "iris.csv");
  ASSERT_TRUE(profile.ok()) << profile.status();
  EXPECT_EQ(profile->rows(), 150);
  ASSERT_EQ(profile->columns_size(), 5);
  // From examples/data/iris.csv with Python's csv module, exact arithmetic
  // (fractions.Fraction): min, max, mean and the distinct texts per column.
  // sepal_length mean 1753/300, sepal_width 2293/750, petal_length
  // 1879/500, petal_width 1799/1500. The profiler sums float32 values, hence
  // the tolerance.
  struct Expected {
    const char* name;
    double min, max, mean;
    int64_t distinct;
  };
  const Expected expected[] = {
      {"sepal_length", 4.3, 7.9, 5.843333333333334, 35},
      {"sepal_width", 2.0, 4.4, 3.0573333333333332, 23},
      {"petal_length", 1.0, 6.9, 3.758, 43},
      {"petal_width", 0.1, 2.5, 1.1993333333333334, 22},
  };
  for (int c = 0; c < 4; ++c) {
    const ColumnProfile& column = profile->columns(c);
    SCOPED_TRACE(column.name());
    EXPECT_EQ(column.name(), expected[c].name);
    EXPECT_EQ(column.kind(), ColumnProfile::NUMERIC);
    EXPECT_EQ(column.missing(), 0);
    EXPECT_EQ(column.distinct(), expected[c].distinct);
    EXPECT_FALSE(column.distinct_capped());
    EXPECT_NEAR(column.min(), expected[c].min, 1e-6);
    EXPECT_NEAR(column.max(), expected[c].max, 1e-6);
    EXPECT_NEAR(column.mean(), expected[c].mean, 1e-6);
    EXPECT_TRUE(column.value_counts().empty());  // more than 20 distinct values
  }
  const ColumnProfile& species = profile->columns(4);
  EXPECT_EQ(species.name(), "species");
  EXPECT_EQ(species.kind(), ColumnProfile::CATEGORICAL);
  EXPECT_EQ(species.missing(), 0);
  EXPECT_EQ(species.distinct(), 3);
  EXPECT_THAT(Counts(species),
              ElementsAre(Count{"setosa", 50}, Count{"versicolor", 50}, Count{"virginica", 50}));
}

TEST(CsvProfilerTest, DistinctCap) {
  ProfileOptions options;
  options.distinct_cap = 5;
  options.value_counts_cap = 5;
  CsvProfiler profiler({"many", "five", "none"}, options);
  // many: 0..9 (10 distinct numbers); five: 0..4 twice (5 distinct).
  for (int i = 0; i < 10; ++i) {
    profiler.Add({std::to_string(i), std::to_string(i % 5), "NA"});
  }
  DatasetProfile profile = profiler.Finish();
  EXPECT_EQ(profile.rows(), 10);
  EXPECT_EQ(profile.distinct_cap(), 5);
  EXPECT_EQ(profile.value_counts_cap(), 5);

  const ColumnProfile& many = profile.columns(0);
  EXPECT_EQ(many.distinct(), 5);
  EXPECT_TRUE(many.distinct_capped());
  EXPECT_TRUE(many.value_counts().empty());
  // The numeric summary does not depend on the cap: 0..9.
  EXPECT_EQ(many.kind(), ColumnProfile::NUMERIC);
  EXPECT_DOUBLE_EQ(many.min(), 0.0);
  EXPECT_DOUBLE_EQ(many.max(), 9.0);
  EXPECT_DOUBLE_EQ(many.mean(), 4.5);

  const ColumnProfile& five = profile.columns(1);
  EXPECT_EQ(five.distinct(), 5);
  EXPECT_FALSE(five.distinct_capped());
  EXPECT_THAT(Counts(five), ElementsAre(Count{"0", 2}, Count{"1", 2}, Count{"2", 2}, Count{"3", 2},
                                        Count{"4", 2}));

  const ColumnProfile& none = profile.columns(2);
  EXPECT_EQ(none.kind(), ColumnProfile::EMPTY);
  EXPECT_EQ(none.missing(), 10);
  EXPECT_EQ(none.distinct(), 0);
  EXPECT_FALSE(none.distinct_capped());
}

// The same rows profile the same whether they come as strings (Add), as
// views (AddFields) or from a CsvReader (ProfileCsv): cells with spaces,
// missing words, numbers in every form, quoted text.
TEST(CsvProfilerTest, StringsViewsAndTheReaderProfileAlike) {
  const std::vector<std::string> cells = {
      "",          "NA",          " null ", "NaN",     "nan",   "Nairobi", "no",  "1",
      "-2.5",      "+3",          " 4.25 ", "1e3",     "1e39",  "x",       "0.1", "-0",
      "12.345678", "caf\xc3\xa9", "a,b",    "q\"r",    "\t7\t", "N",       "n/a", "1.",
      "-.5",       "100000",      "\vNA",   "\r null", "\fnan"};
  std::mt19937 rng(23);
  ProfileOptions options;
  options.distinct_cap = 40;
  options.value_counts_cap = 6;
  const std::vector<std::string> header = {"a", "b", "c", "d"};
  CsvProfiler strings(header, options);
  CsvProfiler views(header, options);
  std::string text = "a,b,c,d\n";
  // What the rules say, cell by cell: missing cells, distinct values.
  std::vector<int64_t> missing(header.size());
  std::vector<std::map<std::string, int64_t>> counts(header.size());
  for (int r = 0; r < 5000; ++r) {
    std::vector<std::string> row;
    for (size_t c = 0; c < header.size(); ++c) {
      // Column a only numbers, b numbers and missing, c and d anything.
      const size_t pick = c == 0   ? 7 + rng() % 3
                          : c == 1 ? (rng() % 2 == 0 ? rng() % 5 : 7 + rng() % 5)
                                   : rng() % cells.size();
      row.push_back(cells[pick]);
      if (IsMissing(cells[pick])) {
        ++missing[c];
      } else {
        ++counts[c][cells[pick]];
      }
      std::string quoted = "\"";
      for (const char ch : cells[pick])
        quoted += ch == '"' ? std::string("\"\"") : std::string(1, ch);
      text += (rng() % 3 == 0 || cells[pick].find_first_of(",\"\r\n") != std::string::npos)
                  ? quoted + "\""
                  : cells[pick];
      text += c + 1 < header.size() ? "," : "\n";
    }
    strings.Add(row);
    views.AddFields(std::vector<absl::string_view>(row.begin(), row.end()));
  }
  const DatasetProfile from_strings = strings.Finish();
  const DatasetProfile from_views = views.Finish();
  absl::StatusOr<CsvReader> reader = CsvReader::FromText(text, "t.csv");
  ASSERT_TRUE(reader.ok()) << reader.status();
  absl::StatusOr<DatasetProfile> from_reader = ProfileCsv(*std::move(reader), options);
  ASSERT_TRUE(from_reader.ok()) << from_reader.status();
  EXPECT_EQ(from_strings.SerializeAsString(), from_views.SerializeAsString());
  EXPECT_EQ(from_strings.SerializeAsString(), from_reader->SerializeAsString());
  for (size_t c = 0; c < header.size(); ++c) {
    EXPECT_EQ(from_strings.columns(c).missing(), missing[c]) << c;
    EXPECT_EQ(from_strings.columns(c).distinct(), static_cast<int64_t>(counts[c].size())) << c;
  }
  ASSERT_EQ(from_strings.columns(0).value_counts_size(), 3);
  for (const auto& vc : from_strings.columns(0).value_counts()) {
    EXPECT_EQ(vc.count(), counts[0][vc.value()]) << vc.value();
  }
  EXPECT_EQ(from_strings.columns(0).kind(), ColumnProfile::NUMERIC);
  EXPECT_EQ(from_strings.columns(1).kind(), ColumnProfile::NUMERIC);
  EXPECT_GT(from_strings.columns(1).missing(), 0);
  EXPECT_EQ(from_strings.columns(2).kind(), ColumnProfile::CATEGORICAL);
}

// Values that differ in one byte anywhere, at every length, are counted
// apart (many values: the hash table compares many of them).
TEST(CsvProfilerTest, ValuesThatDifferInOneByteAreDistinct) {
  ProfileOptions options;
  options.distinct_cap = 100000;
  const std::vector<int> lengths = {1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 40};
  std::vector<std::string> header;
  for (const int length : lengths) header.push_back(absl::StrFormat("len%d", length));
  CsvProfiler profiler(header, options);
  const std::string digits = "0123456789abcdefghijklmnopqrstuvwxyz";  // (no "NA")
  for (int i = 0; i < 4 * 36 * 36; ++i) {                             // each value 4 times
    std::vector<std::string> row;
    for (const int length : lengths) {
      // Two bytes vary, at the front and at the back, or only one byte.
      std::string value(length, 'x');
      value[0] = digits[i % 36];
      if (length > 1) value[length - 1] = digits[i / 36 % 36];
      row.push_back(value);
    }
    profiler.Add(row);
  }
  const DatasetProfile profile = profiler.Finish();
  for (size_t c = 0; c < lengths.size(); ++c) {
    EXPECT_EQ(profile.columns(c).distinct(), lengths[c] == 1 ? 36 : 36 * 36) << lengths[c];
  }
}

// Two cells are equal when every byte is, at every length (the short ones
// read as words), and equal cells hash alike.
TEST(CellEqTest, ComparesEveryByte) {
  std::mt19937 rng(29);
  for (size_t length = 0; length <= 40; ++length) {
    std::string a(length, ' ');
    for (char& c : a) c = static_cast<char>(rng());
    const std::string same = a;  // the same bytes elsewhere
    EXPECT_TRUE(CellEq()(a, same)) << length;
    EXPECT_EQ(CellHash()(a), CellHash()(same)) << length;
    EXPECT_FALSE(CellEq()(a, a + "x")) << length;
    for (size_t i = 0; i < length; ++i) {
      std::string b = a;
      b[i] = static_cast<char>(b[i] ^ 0x01);
      EXPECT_FALSE(CellEq()(a, b)) << length << " " << i;
      EXPECT_FALSE(CellEq()(b, a)) << length << " " << i;
    }
  }
}

TEST(CsvProfilerTest, ValueCountsCap) {
  ProfileOptions options;
  options.value_counts_cap = 2;
  CsvProfiler profiler({"two", "three"}, options);
  profiler.Add({"x", "p"});
  profiler.Add({"y", "q"});
  profiler.Add({"x", "r"});
  DatasetProfile profile = profiler.Finish();
  EXPECT_THAT(Counts(profile.columns(0)), ElementsAre(Count{"x", 2}, Count{"y", 1}));
  EXPECT_EQ(profile.columns(1).distinct(), 3);
  EXPECT_FALSE(profile.columns(1).distinct_capped());
  EXPECT_TRUE(profile.columns(1).value_counts().empty());
}

// The byte budget: each tracked value costs its length plus
// kProfileValueOverheadBytes. Room for label's 2 one-byte values and 10 of
// id's six-byte values: the 11th id takes the sets past the budget, and id,
// holding the most bytes, stops tracking with the 11 it had seen.
TEST(CsvProfilerTest, ByteBudgetStopsTheGreediestColumn) {
  ProfileOptions options;
  options.max_tracked_bytes =
      2 * (1 + kProfileValueOverheadBytes) + 10 * (6 + kProfileValueOverheadBytes);
  CsvProfiler profiler({"label", "id"}, options);
  for (int i = 0; i < 100; ++i) {
    profiler.Add({i % 2 == 0 ? "a" : "b", absl::StrFormat("id%04d", i)});
  }
  DatasetProfile profile = profiler.Finish();
  EXPECT_EQ(profile.rows(), 100);
  const ColumnProfile& label = profile.columns(0);
  EXPECT_EQ(label.distinct(), 2);
  EXPECT_FALSE(label.distinct_capped());
  EXPECT_THAT(Counts(label), ElementsAre(Count{"a", 50}, Count{"b", 50}));
  const ColumnProfile& id = profile.columns(1);
  EXPECT_EQ(id.kind(), ColumnProfile::CATEGORICAL);
  EXPECT_EQ(id.distinct(), 11);
  EXPECT_TRUE(id.distinct_capped());
  EXPECT_TRUE(id.value_counts().empty());
}

// A budget of one byte holds no value: every column stops at its first.
TEST(CsvProfilerTest, TinyByteBudgetCapsEveryColumn) {
  ProfileOptions options;
  options.max_tracked_bytes = 1;
  CsvProfiler profiler({"a", "b", "c"}, options);
  profiler.Add({"x", "1", ""});
  profiler.Add({"y", "2", "NA"});
  profiler.Add({"x", "3", ""});
  DatasetProfile profile = profiler.Finish();
  for (int c = 0; c < 2; ++c) {
    EXPECT_EQ(profile.columns(c).distinct(), 1) << c;
    EXPECT_TRUE(profile.columns(c).distinct_capped()) << c;
    EXPECT_TRUE(profile.columns(c).value_counts().empty()) << c;
  }
  EXPECT_EQ(profile.columns(0).kind(), ColumnProfile::CATEGORICAL);
  EXPECT_EQ(profile.columns(1).kind(), ColumnProfile::NUMERIC);
  EXPECT_DOUBLE_EQ(profile.columns(1).mean(), 2.0);
  EXPECT_EQ(profile.columns(2).kind(), ColumnProfile::EMPTY);
  EXPECT_FALSE(profile.columns(2).distinct_capped());
}

// The error of profiling `text` shown as customers.csv.
absl::Status ProfileError(const std::string& text, std::string* path) {
  TempFile file(text);
  *path = file.path();
  absl::StatusOr<DatasetProfile> profile = ProfileCsvFile(file.path(), "customers.csv");
  EXPECT_FALSE(profile.ok());
  return profile.status();
}

TEST(ProfileCsvFileTest, ErrorsNameTheShownFile) {
  std::string path;
  absl::Status status = ProfileError("id,name\n1,ok\n2,caf\xff\n", &path);
  EXPECT_EQ(FailureKindOf(status), FailureKind::kDataError);
  EXPECT_THAT(std::string(status.message()),
              HasSubstr("customers.csv:3: column 2 is not valid UTF-8 (byte 0xff at offset 3"));
  EXPECT_THAT(std::string(status.message()), Not(HasSubstr(path)));

  status = ProfileError("id,name\n1,ok\n\n2\n", &path);
  EXPECT_EQ(FailureKindOf(status), FailureKind::kDataError);
  EXPECT_EQ(status.message(), "customers.csv:4: row has 1 fields, the header has 2");

  status = ProfileError("id,name\n1," + std::string(kMaxCsvFieldBytes + 1, 'x') + "\n", &path);
  EXPECT_THAT(std::string(status.message()),
              HasSubstr("customers.csv:2: column 2 holds more than 65536 bytes"));
  EXPECT_THAT(std::string(status.message()), Not(HasSubstr(path)));

  status = ProfileError("", &path);
  EXPECT_EQ(status.message(), "customers.csv: the file is empty (no header row)");

  TempDir dir;
  const std::string absent = dir.Path("absent.csv");
  absl::StatusOr<DatasetProfile> profile = ProfileCsvFile(absent, "customers.csv");
  EXPECT_EQ(FailureKindOf(profile.status()), FailureKind::kDataError);
  EXPECT_EQ(profile.status().message(), "customers.csv: cannot open: No such file or directory");
  profile = ProfileCsvFile(dir.path(), "customers.csv");
  EXPECT_EQ(profile.status().message(),
            "customers.csv: is a directory, not a regular file (data must be a regular file)");
}

// Without a shown name, messages name the path, as CsvReader's always have.
TEST(ProfileCsvFileTest, NoShownNameNamesThePath) {
  TempFile file("a,b\n1\n");
  absl::StatusOr<DatasetProfile> profile = ProfileCsvFile(file.path(), "");
  EXPECT_EQ(profile.status().message(), file.path() + ":2: row has 1 fields, the header has 2");
}

}  // namespace
}  // namespace traind::data
