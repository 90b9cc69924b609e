#include "data/csv.h"

#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/temp_dir.h"

namespace traind::data {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::traind::testing::TempDir;
using traind::testing::TempFile;

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
  TempFile file(
      "\xEF\xBB\xBF"
      "a;b\n1,5;\"2;3\"\n");
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
  EXPECT_EQ(table.status().message(), file.path() + ":4: row has 3 fields, the header has 5");
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

// Text crosses proto boundaries: a field that is not UTF-8 is a DataError
// naming the line and the column, never a string that cannot be reported.
TEST(ReadCsvTest, NonUtf8FieldsNameLineAndColumn) {
  TempFile file("a,label\n1,x\n5\xff,y\n");
  absl::StatusOr<CsvTable> table = ReadCsv(file.path());
  ASSERT_FALSE(table.ok());
  EXPECT_EQ(FailureKindOf(table.status()), FailureKind::kDataError);
  EXPECT_EQ(table.status().message(),
            file.path() +
                ":3: column 1 is not valid UTF-8 (byte 0xff at offset 1 of the field); "
                "save the file as UTF-8");
  TempFile header("a,\xe9t\xe9\n1,2\n");  // Latin-1 "été"
  table = ReadCsv(header.path());
  ASSERT_FALSE(table.ok());
  EXPECT_THAT(table.status().message(), HasSubstr(":1: column 2 is not valid UTF-8"));
  TempFile utf8("a,\xc3\xa9t\xc3\xa9\n1,caf\xc3\xa9\n");
  EXPECT_TRUE(ReadCsv(utf8.path()).ok());
}

TEST(ReadCsvTest, AFieldOverTheLimitIsADataError) {
  TempFile ok("a,b\n" + std::string(kMaxCsvFieldBytes, '1') + ",2\n");
  EXPECT_TRUE(ReadCsv(ok.path()).ok());
  TempFile big("a,b\n1,2\n3,\"" + std::string(10 * 1024 * 1024, 'x') + "\"\n");
  absl::StatusOr<CsvTable> table = ReadCsv(big.path());
  ASSERT_FALSE(table.ok());
  EXPECT_EQ(FailureKindOf(table.status()), FailureKind::kDataError);
  EXPECT_EQ(table.status().message(),
            absl::StrCat(big.path(),
                         ":3: column 2 holds more than 65536 bytes; a field may hold at most ",
                         kMaxCsvFieldBytes));
}

// A FIFO would block the reader until someone writes to it: refused at once.
TEST(ReadCsvTest, OnlyRegularFilesAreRead) {
  const TempDir scratch("traind-csv");
  ASSERT_FALSE(scratch.path().empty());
  const std::string dir = scratch.path();
  const std::string fifo = scratch.Path("data.csv");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<CsvTable> table = ReadCsv(fifo);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  ASSERT_FALSE(table.ok());
  EXPECT_EQ(FailureKindOf(table.status()), FailureKind::kDataError);
  EXPECT_EQ(table.status().message(),
            fifo + ": is a FIFO, not a regular file (data must be a regular file)");
  table = ReadCsv(dir);
  ASSERT_FALSE(table.ok());
  EXPECT_EQ(table.status().message(),
            dir + ": is a directory, not a regular file (data must be a regular file)");
}

// The file is read in pieces: records, quoted fields, CRLF pairs and the BOM
// that straddle a piece's end read as they do from the whole text in memory
// (ParseCsv, one buffer), errors included, with the same line numbers.
TEST(ReadCsvTest, AFileReadInPiecesReadsAsTheWholeText) {
  std::mt19937 rng(7);
  for (int round = 0; round < 4; ++round) {
    std::string text = round % 2 == 0 ? "\xEF\xBB\xBF" : "";
    text += "id,note,value\r\n";
    int64_t n = 0;
    while (text.size() < (size_t{3} << 20) + 17 * round) {
      const int kind = static_cast<int>(rng() % 5);
      std::string note;
      if (kind == 0) note = "\"" + std::string(rng() % 3000, 'q') + "\"\"x\r\ny\"";
      if (kind == 1) note = std::string(rng() % 200, 'p');
      if (kind == 2) note = "\"a,b\nc\"";
      text += absl::StrCat(n++, ",", note, ",", rng() % 1000, rng() % 2 ? "\r\n" : "\n");
      if (kind == 3) text += "\n";  // a blank line
    }
    if (round == 3) text += "bad,\"open\n";  // an unterminated quote at the end
    TempFile file(text);
    absl::StatusOr<CsvTable> piecewise = ReadCsv(file.path());
    absl::StatusOr<CsvTable> whole = ParseCsv(text, file.path());
    ASSERT_EQ(piecewise.ok(), whole.ok()) << piecewise.status() << whole.status();
    if (!whole.ok()) {
      EXPECT_EQ(piecewise.status(), whole.status());
      EXPECT_THAT(std::string(whole.status().message()), HasSubstr("unterminated quoted field"));
      continue;
    }
    EXPECT_EQ(piecewise->header, whole->header);
    EXPECT_EQ(piecewise->header[0], "id");
    ASSERT_EQ(piecewise->rows.size(), static_cast<size_t>(n));
    EXPECT_EQ(piecewise->rows, whole->rows);
    EXPECT_EQ(piecewise->lines, whole->lines);
  }
}

// A tricky record at every offset across the first piece's end.
TEST(ReadCsvTest, ARecordAcrossThePieceEndAtEveryOffset) {
  const std::string tricky = "x,\"a\r\nb\"\"c\nd\",1\r\n";
  for (size_t k = 0; k <= tricky.size() + 2; ++k) {
    std::string text = "id,note,value\n";
    const std::string filler = "f,p,0\n";
    while (text.size() + filler.size() <= kCsvReadBytes - k) text += filler;
    text += std::string(kCsvReadBytes - k - text.size(), '\n');  // blank lines up to the offset
    text += tricky + "y,\"e\r\n\",2\r\n";
    TempFile file(text);
    absl::StatusOr<CsvTable> piecewise = ReadCsv(file.path());
    absl::StatusOr<CsvTable> whole = ParseCsv(text, file.path());
    ASSERT_TRUE(piecewise.ok() && whole.ok()) << k << piecewise.status() << whole.status();
    ASSERT_GE(whole->rows.size(), 2u);
    EXPECT_THAT(whole->rows[whole->rows.size() - 2], ElementsAre("x", "a\r\nb\"c\nd", "1"));
    EXPECT_EQ(piecewise->rows, whole->rows) << k;
    EXPECT_EQ(piecewise->lines, whole->lines) << k;
  }
}

// Fields are scanned many bytes at a time and checked for UTF-8 only when a
// byte >= 0x80 is seen: a bad byte at any offset of a field of any length,
// quoted or not, near the end of the text or far from it, is found and named
// as the byte-by-byte check names it; a good character anywhere is kept.
TEST(ReadCsvTest, AHighByteAtEveryOffsetOfAField) {
  const std::string filler = "f,p\n";
  for (size_t length = 1; length <= 40; ++length) {
    for (size_t offset = 0; offset < length; ++offset) {
      for (const bool quoted : {false, true}) {
        for (const bool at_text_end : {false, true}) {
          std::string field(length, 'v');
          field[offset] = '\xff';
          const std::string q = quoted ? "\"" : "";
          std::string text = "a,b\nx," + q + field + q + "\n";
          if (!at_text_end) {
            for (int i = 0; i < 20; ++i) text += filler;
          }
          absl::StatusOr<CsvTable> table = ParseCsv(text, "t.csv");
          ASSERT_FALSE(table.ok()) << length << " " << offset;
          EXPECT_EQ(table.status().message(),
                    absl::StrCat("t.csv:2: column 2 is not valid UTF-8 (byte 0xff at offset ",
                                 offset, " of the field); save the file as UTF-8"))
              << length << " " << offset << " " << quoted << " " << at_text_end;
          if (offset + 2 <= length) {
            field[offset] = '\xc3';  // "é"
            field[offset + 1] = '\xa9';
            text = "a,b\nx," + q + field + q + "\n";
            if (!at_text_end) text += filler;
            table = ParseCsv(text, "t.csv");
            ASSERT_TRUE(table.ok()) << table.status();
            ASSERT_EQ(table->rows.size(), at_text_end ? 1u : 2u);
            EXPECT_EQ(table->rows[0][1], field) << length << " " << offset;
          }
        }
      }
    }
  }
}

// `text` with its first kCsvReadBytes - k bytes a header and filler rows (and
// blank lines), then `record` (so that the first piece read ends k bytes
// into it), then a last row.
std::string RecordAtPieceEnd(const std::string& record, size_t k) {
  std::string text = "id,note,value\n";
  const std::string filler = "f,p,0\n";
  while (text.size() + filler.size() <= kCsvReadBytes - k) text += filler;
  text += std::string(kCsvReadBytes - k - text.size(), '\n');
  return text + record + "z,last,9\n";
}

// Multi-byte characters, delimiters inside quotes, escaped quotes and CRLF
// that the first piece's end cuts at any byte read as from one buffer.
TEST(ReadCsvTest, CharactersQuotesAndCrlfAcrossThePieceEnd) {
  const std::string record = "\xc3\xa9x,\"q,\"\"r\nz,\",y\xc3\xbc\r\n";
  for (size_t k = 0; k <= record.size() + 1; ++k) {
    const std::string text = RecordAtPieceEnd(record, k);
    TempFile file(text);
    absl::StatusOr<CsvTable> piecewise = ReadCsv(file.path());
    absl::StatusOr<CsvTable> whole = ParseCsv(text, file.path());
    ASSERT_TRUE(piecewise.ok() && whole.ok()) << k << piecewise.status() << whole.status();
    ASSERT_GE(whole->rows.size(), 2u);
    EXPECT_THAT(whole->rows[whole->rows.size() - 2],
                ElementsAre("\xc3\xa9x", "q,\"r\nz,", "y\xc3\xbc"));
    EXPECT_EQ(piecewise->rows, whole->rows) << k;
    EXPECT_EQ(piecewise->lines, whole->lines) << k;
  }
}

// A CR that ends the first piece and the LF that starts the next make one
// line ending.
TEST(ReadCsvTest, CrlfSplitByThePieceEndIsOneLineEnding) {
  std::string text = "a,b\r\n";
  while (text.size() + 12 <= kCsvReadBytes) text += "1,2\n";
  text += std::string(kCsvReadBytes - 3 - text.size(), 'x') + ",3\r\n4,5\n";
  ASSERT_EQ(text[kCsvReadBytes - 1], '\r');
  ASSERT_EQ(text[kCsvReadBytes], '\n');
  TempFile file(text);
  absl::StatusOr<CsvTable> piecewise = ReadCsv(file.path());
  absl::StatusOr<CsvTable> whole = ParseCsv(text, file.path());
  ASSERT_TRUE(piecewise.ok() && whole.ok()) << piecewise.status() << whole.status();
  ASSERT_GE(piecewise->rows.size(), 2u);
  EXPECT_THAT(piecewise->rows.back(), ElementsAre("4", "5"));
  EXPECT_EQ(piecewise->lines.back(), piecewise->lines[piecewise->lines.size() - 2] + 1);
  EXPECT_EQ(piecewise->rows, whole->rows);
  EXPECT_EQ(piecewise->lines, whole->lines);
}

// A bad byte, and a character cut in two, at every offset across the first
// piece's end: the cut character is no error, the bad byte is the error the
// whole text gives.
TEST(ReadCsvTest, AHighByteAcrossThePieceEnd) {
  for (const std::string& record :
       {std::string("ab\xc3\xa9\xc3\xa9,\"c\xc3\xa9\",1\n"), std::string("abcd\xff,x,1\n"),
        std::string("a,\"bc\xff\",1\n")}) {
    for (size_t k = 0; k <= record.size(); ++k) {
      const std::string text = RecordAtPieceEnd(record, k);
      TempFile file(text);
      absl::StatusOr<CsvTable> piecewise = ReadCsv(file.path());
      absl::StatusOr<CsvTable> whole = ParseCsv(text, file.path());
      ASSERT_EQ(piecewise.ok(), whole.ok()) << k << piecewise.status() << whole.status();
      if (whole.ok()) {
        EXPECT_EQ(whole->rows[whole->rows.size() - 2][0], "ab\xc3\xa9\xc3\xa9");
        EXPECT_EQ(piecewise->rows, whole->rows) << k;
      } else {
        EXPECT_THAT(std::string(whole.status().message()), HasSubstr("is not valid UTF-8"));
        EXPECT_EQ(piecewise.status(), whole.status()) << k;
      }
    }
  }
}

// NextFields reads what Next reads (views of the same fields), with the
// same errors.
TEST(ReadCsvTest, NextFieldsReadsWhatNextReads) {
  std::mt19937 rng(11);
  std::string text = "a,b,c\n";
  const std::vector<std::string> cells = {"",           "x",        "\"q,r\"",     "\"\"",
                                          "\"s\"\"t\"", "\"u\nv\"", "caf\xc3\xa9", "12.5"};
  while (text.size() < (size_t{2} << 20)) {
    for (int c = 0; c < 3; ++c) {
      text += cells[rng() % cells.size()];
      text += c < 2 ? "," : (rng() % 2 ? "\r\n" : "\n");
    }
  }
  TempFile file(text + "1,2\n");
  absl::StatusOr<CsvReader> copies = CsvReader::Open(file.path());
  absl::StatusOr<CsvReader> views = CsvReader::Open(file.path());
  ASSERT_TRUE(copies.ok() && views.ok());
  std::vector<std::string> row;
  std::vector<absl::string_view> fields;
  int64_t line = 0;
  int64_t fields_line = 0;
  int64_t rows = 0;
  while (true) {
    absl::StatusOr<bool> found = copies->Next(&row, &line);
    absl::StatusOr<bool> fields_found = views->NextFields(&fields, &fields_line);
    ASSERT_EQ(found.ok(), fields_found.ok());
    if (!found.ok()) {
      EXPECT_EQ(found.status(), fields_found.status());
      EXPECT_THAT(std::string(found.status().message()),
                  HasSubstr(": row has 2 fields, the header has 3"));
      break;
    }
    ASSERT_EQ(*found, *fields_found);
    if (!*found) break;
    ++rows;
    ASSERT_EQ(line, fields_line);
    ASSERT_EQ(fields.size(), row.size());
    for (size_t i = 0; i < row.size(); ++i) ASSERT_EQ(fields[i], row[i]) << line;
  }
  EXPECT_GT(rows, 10000);
}

// CsvReader holds one record, not the file.
TEST(ReadCsvTest, CsvReaderStreamsRecords) {
  TempFile file("a,b\n1,\"x\ny\"\n\n2,3\n");
  absl::StatusOr<CsvReader> reader = CsvReader::Open(file.path());
  ASSERT_TRUE(reader.ok()) << reader.status();
  EXPECT_THAT(reader->header(), ElementsAre("a", "b"));
  std::vector<std::string> row;
  int64_t line = 0;
  ASSERT_TRUE(*reader->Next(&row, &line));
  EXPECT_THAT(row, ElementsAre("1", "x\ny"));
  EXPECT_EQ(line, 2);
  ASSERT_TRUE(*reader->Next(&row, &line));
  EXPECT_THAT(row, ElementsAre("2", "3"));
  EXPECT_EQ(line, 5);
  EXPECT_FALSE(*reader->Next(&row, &line));
  EXPECT_FALSE(*reader->Next(&row, &line));
}

// A shown name stands for the path in path() and in every message.
TEST(ReadCsvTest, CsvReaderShowsAGivenName) {
  TempFile file("a,b\n1,2\n3\n");
  absl::StatusOr<CsvReader> reader = CsvReader::Open(file.path(), ',', "upload.csv");
  ASSERT_TRUE(reader.ok()) << reader.status();
  EXPECT_EQ(reader->path(), "upload.csv");
  std::vector<std::string> row;
  int64_t line = 0;
  ASSERT_TRUE(*reader->Next(&row, &line));
  EXPECT_EQ(reader->Next(&row, &line).status().message(),
            "upload.csv:3: row has 1 fields, the header has 2");
  EXPECT_EQ(CsvReader::Open(file.path() + ".absent", ',', "upload.csv").status().message(),
            "upload.csv: cannot open: No such file or directory");
}

}  // namespace
}  // namespace traind::data
