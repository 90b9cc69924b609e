// A dataset's profile: per column, what kind of values it holds, how many are
// missing, how many are distinct, numeric ranges and a candidate label's
// class counts, found in one pass over the rows with bounded memory.
#ifndef TRAIND_DATA_PROFILE_H_
#define TRAIND_DATA_PROFILE_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "data/csv.h"
#include "traind/v1/dataset.pb.h"

namespace traind::data {

struct ProfileOptions {
  int distinct_cap = 10000;   // distinct values tracked exactly per column
  int value_counts_cap = 20;  // a column with at most this many distinct values lists its counts
  // All columns' distinct-value sets together (kProfileValueOverheadBytes
  // plus its length per value); past it, columns stop tracking
  // (distinct_capped).
  size_t max_tracked_bytes = 32 << 20;
};

// What one tracked distinct value counts against max_tracked_bytes beside
// its own bytes: the bookkeeping of holding it and its count.
inline constexpr size_t kProfileValueOverheadBytes = 64;

// Profiles rows as they come: memory bounded by the options, not by the rows.
//
// The rules, per column (cells are compared as text, exactly as in the file):
// - missing: the cells IsMissing (data/dataset.h) takes as missing ("", "NA",
//   "NaN", "nan", "null", surrounding spaces ignored), as the engine does for a
//   numeric column. Missing cells are counted here and left out of everything
//   below.
// - kind: EMPTY when every cell is missing (or there are no rows); NUMERIC
//   when every other cell is a number to ParseFeature (data/dataset.h), the
//   parser of the engine's numeric columns (a finite float32, so "1e39" is
//   not one); else CATEGORICAL.
// - distinct: the distinct cells, exact up to distinct_cap. A column with
//   more stops tracking: distinct = distinct_cap, distinct_capped. The sets of
//   all columns together stay within max_tracked_bytes: when a new value
//   takes them past it, the column whose set holds the most bytes (the
//   leftmost of equals) stops tracking and frees its set, until the rest
//   fits; its distinct is then the values it had seen (a lower bound) and
//   distinct_capped is set.
// - min, max, mean: NUMERIC columns only, over the float32 values the engine
//   trains on (the mean summed with compensation, so it stays accurate over
//   many rows).
// - value_counts: a column with at most value_counts_cap distinct values
//   (not capped, not EMPTY): every value and its count, most frequent first,
//   equal counts by value ascending (byte order).
// - rows: the data rows added; distinct_cap and value_counts_cap echo the
//   options.
//
// Thread-safety: none; one thread at a time.
class CsvProfiler {
 public:
  explicit CsvProfiler(std::vector<std::string> header, ProfileOptions options = {});
  ~CsvProfiler();
  CsvProfiler(const CsvProfiler&) = delete;
  CsvProfiler& operator=(const CsvProfiler&) = delete;

  const std::vector<std::string>& header() const { return header_; }

  // One data row of header().size() fields (a field past those is ignored, an
  // absent one counts as missing).
  void Add(const std::vector<std::string>& row);
  // As Add, on views of the fields (e.g. from CsvReader::NextFields).
  void AddFields(const std::vector<absl::string_view>& row);

  // The profile of the rows added so far.
  traind::v1::DatasetProfile Finish();

 private:
  struct Column;

  // Add's work, on a row of std::string or absl::string_view.
  template <typename Row>
  void AddRow(const Row& row);
  // Tracks `cell` (not missing) for column `c`.
  void Track(size_t c, absl::string_view cell);
  // Column `c` stops tracking distinct values and frees its set.
  void StopTracking(size_t c);

  std::vector<std::string> header_;
  ProfileOptions options_;
  std::vector<Column> columns_;
  int64_t rows_ = 0;
  size_t tracked_bytes_ = 0;  // of every column's set
};

// Reads `path` with CsvReader (one pass, record by record; memory is one
// record plus CsvProfiler's) and profiles it.
//
// Errors are CsvReader's (DataError: the file cannot be opened or read, it
// has no header row, a field is not UTF-8 or is over kMaxCsvFieldBytes, a
// row's field count differs from the header's, a quoted field is malformed),
// naming `shown_name` (e.g. the client's file name "customers.csv") in place
// of `path`, with the line and column ("customers.csv:7: column 2 is not valid
// UTF-8 ..."). An empty `shown_name` names `path`.
absl::StatusOr<traind::v1::DatasetProfile> ProfileCsvFile(const std::string& path,
                                                          const std::string& shown_name,
                                                          char delimiter = ',',
                                                          ProfileOptions options = {});
// The same over the records of `reader` (e.g. one reading a file while it
// is being written).
absl::StatusOr<traind::v1::DatasetProfile> ProfileCsv(CsvReader reader,
                                                      ProfileOptions options = {});

}  // namespace traind::data

#endif  // TRAIND_DATA_PROFILE_H_
