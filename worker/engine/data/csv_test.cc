#include "worker/engine/data/csv.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/engine/status.h"
#include "worker/engine/testing/temp_file.h"

namespace traind::engine {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::TempFile;

TEST(ReadCsvTest, QuotedFieldsHoldDelimitersQuotesAndNewlines) {
  TempFile file(
      "name,note,value\n"
      "\"Smith, J\",\"said \"\"hi\"\"\",1\n"
      "plain,\"two\nlines\",2\n"
      "\"\",x,3\n");
  absl::StatusOr<CsvTable> table = ReadCsv(file.path());
  ASSERT_TRUE(table.ok()) << table.status();
  EXPECT_EQ(table->path, file.path());
  EXPECT_THAT(table->header, ElementsAre("name", "note", "value"));
  ASSERT_EQ(table->rows.size(), 3u);
  EXPECT_THAT(table->rows[0], ElementsAre("Smith, J", "said \"hi\"", "1"));
  EXPECT_THAT(table->rows[1], ElementsAre("plain", "two\nlines", "2"));
  EXPECT_THAT(table->rows[2], ElementsAre("", "x", "3"));
  // The row after the two-line field starts on line 5.
  EXPECT_THAT(table->lines, ElementsAre(2, 3, 5));
}

TEST(ReadCsvTest, CrlfBlankLinesAndNoFinalNewline) {
  TempFile file("a,b\r\n\r\n1,2\r\n\n\n3,4");
  absl::StatusOr<CsvTable> table = ReadCsv(file.path());
  ASSERT_TRUE(table.ok()) << table.status();
  EXPECT_THAT(table->header, ElementsAre("a", "b"));
  ASSERT_EQ(table->rows.size(), 2u);
  EXPECT_THAT(table->rows[0], ElementsAre("1", "2"));
  EXPECT_THAT(table->rows[1], ElementsAre("3", "4"));
  EXPECT_THAT(table->lines, ElementsAre(3, 6));
}

TEST(ReadCsvTest, CrlfInsideQuotesIsKept) {
  TempFile file("a,b\r\n\"x\r\ny\",2\r\n");
  absl::StatusOr<CsvTable> table = ReadCsv(file.path());
  ASSERT_TRUE(table.ok()) << table.status();
  ASSERT_EQ(table->rows.size(), 1u);
  EXPECT_THAT(table->rows[0], ElementsAre("x\r\ny", "2"));
}

TEST(ReadCsvTest, OtherDelimiterAndByteOrderMark) {
  TempFile file("\xEF\xBB\xBF" "a;b\n1,5;\"2;3\"\n");
  absl::StatusOr<CsvTable> table = ReadCsv(file.path(), ';');
  ASSERT_TRUE(table.ok()) << table.status();
  EXPECT_THAT(table->header, ElementsAre("a", "b"));
  ASSERT_EQ(table->rows.size(), 1u);
  EXPECT_THAT(table->rows[0], ElementsAre("1,5", "2;3"));
}

TEST(ReadCsvTest, RaggedRowNamesPathAndLine) {
  TempFile file("a,b,c,d,e\n1,2,3,4,5\n\n1,2,3\n");
  absl::StatusOr<CsvTable> table = ReadCsv(file.path());
  ASSERT_FALSE(table.ok());
  EXPECT_EQ(FailureKindOf(table.status()), FailureKind::kDataError);
  EXPECT_EQ(table.status().message(),
            file.path() + ":4: row has 3 fields, the header has 5");
}

TEST(ReadCsvTest, MissingFile) {
  absl::StatusOr<CsvTable> table = ReadCsv("/nonexistent/dir/data.csv");
  ASSERT_FALSE(table.ok());
  EXPECT_EQ(FailureKindOf(table.status()), FailureKind::kDataError);
  EXPECT_EQ(table.status().message(),
            "/nonexistent/dir/data.csv: cannot open: No such file or directory");
}

TEST(ReadCsvTest, UnterminatedQuoteNamesItsLine) {
  TempFile file("a,b\n1,2\n3,\"open\nstill open\n");
  absl::StatusOr<CsvTable> table = ReadCsv(file.path());
  ASSERT_FALSE(table.ok());
  EXPECT_EQ(FailureKindOf(table.status()), FailureKind::kDataError);
  EXPECT_THAT(table.status().message(), HasSubstr(file.path() + ":3: unterminated quoted field"));
}

TEST(ReadCsvTest, TextAfterClosingQuoteIsAnError) {
  TempFile file("a,b\n\"x\"y,2\n");
  absl::StatusOr<CsvTable> table = ReadCsv(file.path());
  ASSERT_FALSE(table.ok());
  EXPECT_THAT(table.status().message(), HasSubstr(file.path() + ":2: unexpected character 'y'"));
}

TEST(ReadCsvTest, EmptyFileHasNoHeader) {
  for (const std::string contents : {"", "\n\r\n\n"}) {
    TempFile file(contents);
    absl::StatusOr<CsvTable> table = ReadCsv(file.path());
    ASSERT_FALSE(table.ok());
    EXPECT_EQ(FailureKindOf(table.status()), FailureKind::kDataError);
    EXPECT_THAT(table.status().message(), HasSubstr("no header"));
  }
}

TEST(ReadCsvTest, HeaderOnly) {
  TempFile file("a,b\n");
  absl::StatusOr<CsvTable> table = ReadCsv(file.path());
  ASSERT_TRUE(table.ok()) << table.status();
  EXPECT_THAT(table->header, ElementsAre("a", "b"));
  EXPECT_TRUE(table->rows.empty());
}

}  // namespace
}  // namespace traind::engine
