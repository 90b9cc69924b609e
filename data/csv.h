// CSV reading (RFC 4180).
#ifndef TRAIND_DATA_CSV_H_
#define TRAIND_DATA_CSV_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace traind::data {

// The largest field (cell or header name, after unquoting) a data file may
// hold. Labels, categories and column names travel in proto messages; a
// larger field is a DataError naming its line and column.
inline constexpr size_t kMaxCsvFieldBytes = 64 * 1024;

// Opens `path` for reading without blocking, and only when it is a regular
// file (a FIFO, a device or a directory would block or make no sense as
// data). Returns the descriptor (blocking, close-on-exec; the caller closes
// it). Errors (DataError): "<path>: cannot open: <strerror>", "<path>: is a
// FIFO, not a regular file (data must be a regular file)".
absl::StatusOr<int> OpenRegularFile(const std::string& path);

// A CSV file: a header row and data rows, all as text.
struct CsvTable {
  std::string path;
  std::vector<std::string> header;
  std::vector<std::vector<std::string>> rows;  // each row has header.size() fields
  std::vector<int64_t> lines;                  // 1-based line number in the file of each row
};

// CsvReader reads a file in pieces of this size (a record longer than a
// piece is read in more).
inline constexpr size_t kCsvReadBytes = size_t{1} << 20;

// Bytes of a CSV from elsewhere (e.g. a file still being written): reads up
// to `max` bytes into `buf`; returns how many, 0 at the end, or an error.
using CsvByteSource = std::function<absl::StatusOr<size_t>(char* buf, size_t max)>;

// A CSV file read record by record, holding only the record being read (so
// its memory does not grow with the file): the rules of ReadCsv below.
class CsvReader {
 public:
  // Opens the file (OpenRegularFile) and reads its header row. A non-empty
  // `shown_name` (e.g. the name a client gave the file) stands for `path` in
  // every message and in path(), so that they never show where the file lies.
  static absl::StatusOr<CsvReader> Open(const std::string& path, char delimiter = ',',
                                        const std::string& shown_name = "");
  // As Open, on the bytes `source` gives; `path` is used in messages only.
  static absl::StatusOr<CsvReader> FromSource(CsvByteSource source, const std::string& path,
                                              char delimiter = ',');
  // As Open, on text in memory; `path` is used in messages only.
  static absl::StatusOr<CsvReader> FromText(std::string text, const std::string& path,
                                            char delimiter = ',');
  CsvReader(CsvReader&&) noexcept;
  CsvReader& operator=(CsvReader&&) noexcept;
  ~CsvReader();

  // The file as messages name it: `path`, or Open's `shown_name`.
  const std::string& path() const;
  const std::vector<std::string>& header() const { return header_; }
  // The next data row into `*row` (header().size() fields) and its 1-based
  // line; false at the end of the file.
  absl::StatusOr<bool> Next(std::vector<std::string>* row, int64_t* line);
  // As Next, with the fields as views of the reader's own copy of the
  // record, valid until the next call (for a caller that looks at each
  // record once, without copying it).
  absl::StatusOr<bool> NextFields(std::vector<absl::string_view>* row, int64_t* line);

 private:
  class Parser;
  explicit CsvReader(std::unique_ptr<Parser> parser);
  static absl::StatusOr<CsvReader> Start(std::unique_ptr<Parser> parser);
  // "<path>:<line>: row has <fields> fields, the header has <n>".
  absl::Status RaggedRow(size_t fields, int64_t line) const;

  std::unique_ptr<Parser> parser_;
  std::vector<std::string> header_;
};

// Reads a whole CSV file whose first record is the header.
//
// RFC 4180: a field may be quoted ("..."); in a quoted field `""` is a quote,
// and the delimiter, CR and LF are plain characters. Records end with CRLF or
// LF (a lone CR also ends a record); the final line ending is optional; blank
// lines are skipped; a UTF-8 byte order mark at the start is ignored. A quote
// inside an unquoted field is kept as a plain character. Fields are not
// trimmed.
//
// The text must be UTF-8 (every field is checked, so labels, categories and
// column names can be reported), each field at most kMaxCsvFieldBytes.
//
// Errors (DataError): the file cannot be opened or read
// ("<path>: cannot open: <strerror>"), it is not a regular file
// (OpenRegularFile), a field is not UTF-8 ("<path>:<line>: column 3 is not
// valid UTF-8 (byte 0xff at offset 1 of the field); save the file as UTF-8")
// or too long ("<path>:<line>: column 3 holds more than 65536 bytes; a field may
// hold at most 65536"), it holds no header row, a row's field
// count differs from the header's ("<path>:<line>: row has 3 fields, the
// header has 5"), a quoted field is never closed or is followed by something
// other than a delimiter or a line ending ("<path>:<line>: ...").
absl::StatusOr<CsvTable> ReadCsv(const std::string& path, char delimiter = ',');

// As ReadCsv, on text already in memory; `path` is used in messages only.
absl::StatusOr<CsvTable> ParseCsv(const std::string& text, const std::string& path,
                                  char delimiter = ',');

}  // namespace traind::data

#endif  // TRAIND_DATA_CSV_H_
