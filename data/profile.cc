#include "data/profile.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <string_view>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "base/status.h"
#include "data/cell_hash.h"
#include "data/csv.h"
#include "data/dataset.h"

namespace traind::data {

using traind::v1::ColumnProfile;
using traind::v1::DatasetProfile;

struct CsvProfiler::Column {
  int64_t missing = 0;
  int64_t values = 0;   // cells not missing
  bool numeric = true;  // every value so far is a number
  double min = 0;       // numeric: of the values so far
  double max = 0;
  double sum = 0;  // numeric: the values' sum is sum + compensation
  double compensation = 0;
  bool tracking = true;  // counts holds every distinct value so far
  bool capped = false;
  int64_t distinct = 0;  // once tracking stopped: the distinct values it had seen
  size_t bytes = 0;      // counts' share of tracked_bytes_
  absl::flat_hash_map<std::string, int64_t, CellHash, CellEq> counts;  // value -> cells
};

namespace {

// The first bytes of a cell that may be missing: every missing word starts
// with 'N' or 'n' after spaces (IsMissing decides).
constexpr std::array<bool, 256> kMayBeMissing = [] {
  std::array<bool, 256> may{};
  for (const char c : {'N', 'n', ' ', '\t', '\n', '\v', '\f', '\r'}) {
    may[static_cast<unsigned char>(c)] = true;
  }
  return may;
}();

// Whether `cell` is missing: IsMissing (data/dataset.h), asked only when the
// cell could be.
inline bool Missing(absl::string_view cell) {
  if (!cell.empty() && !kMayBeMissing[static_cast<unsigned char>(cell[0])]) return false;
  return IsMissingText(std::string_view(cell.data(), cell.size()));
}

}  // namespace

CsvProfiler::CsvProfiler(std::vector<std::string> header, ProfileOptions options)
    : header_(std::move(header)), options_(options), columns_(header_.size()) {}

CsvProfiler::~CsvProfiler() = default;

void CsvProfiler::Add(const std::vector<std::string>& row) { AddRow(row); }

void CsvProfiler::AddFields(const std::vector<absl::string_view>& row) { AddRow(row); }

template <typename Row>
void CsvProfiler::AddRow(const Row& row) {
  ++rows_;
  // (Kept here: no call below moves the columns or the row.)
  Column* const columns = columns_.data();
  const size_t count = columns_.size();
  const auto* const cells = row.data();
  const size_t fields = row.size();
  for (size_t c = 0; c < count; ++c) {
    Column& column = columns[c];
    if (c >= fields) {
      ++column.missing;
      continue;
    }
    const absl::string_view cell(cells[c].data(), cells[c].size());
    if (Missing(cell)) {
      ++column.missing;
      continue;
    }
    ++column.values;
    if (column.numeric) {
      float parsed = 0;
      if (ParseFeature(std::string_view(cell.data(), cell.size()), &parsed) != nullptr) {
        column.numeric = false;
      } else {
        const double v = parsed;
        if (column.values == 1) {
          column.min = v;
          column.max = v;
        } else {
          column.min = std::min(column.min, v);
          column.max = std::max(column.max, v);
        }
        // Neumaier's compensated sum: what each addition rounds away is kept.
        const double t = column.sum + v;
        if (std::fabs(column.sum) >= std::fabs(v)) {
          column.compensation += (column.sum - t) + v;
        } else {
          column.compensation += (v - t) + column.sum;
        }
        column.sum = t;
      }
    }
    if (column.tracking) {
      // A value seen before (most cells) is counted here; a new one goes to
      // Track.
      if (auto it = column.counts.find(cell); it != column.counts.end()) {
        ++it->second;
      } else {
        Track(c, cell);
      }
    }
  }
}

void CsvProfiler::Track(size_t c, absl::string_view cell) {
  Column& column = columns_[c];
  if (auto it = column.counts.find(cell); it != column.counts.end()) {
    ++it->second;
    return;
  }
  const size_t cap = static_cast<size_t>(std::max(0, options_.distinct_cap));
  if (column.counts.size() >= cap) {
    StopTracking(c);  // distinct = cap
    return;
  }
  column.counts.emplace(std::string(cell), 1);
  const size_t cost = cell.size() + kProfileValueOverheadBytes;
  column.bytes += cost;
  tracked_bytes_ += cost;
  while (tracked_bytes_ > options_.max_tracked_bytes) {
    // tracked_bytes_ > 0: some column still tracks values.
    size_t greediest = columns_.size();
    for (size_t i = 0; i < columns_.size(); ++i) {
      if (columns_[i].tracking &&
          (greediest == columns_.size() || columns_[i].bytes > columns_[greediest].bytes)) {
        greediest = i;
      }
    }
    StopTracking(greediest);
  }
}

void CsvProfiler::StopTracking(size_t c) {
  Column& column = columns_[c];
  column.distinct = static_cast<int64_t>(column.counts.size());
  column.tracking = false;
  column.capped = true;
  tracked_bytes_ -= column.bytes;
  column.bytes = 0;
  decltype(column.counts)().swap(column.counts);  // frees its memory
}

DatasetProfile CsvProfiler::Finish() {
  DatasetProfile profile;
  profile.set_rows(rows_);
  profile.set_distinct_cap(options_.distinct_cap);
  profile.set_value_counts_cap(options_.value_counts_cap);
  for (size_t c = 0; c < columns_.size(); ++c) {
    const Column& column = columns_[c];
    ColumnProfile* out = profile.add_columns();
    out->set_name(header_[c]);
    out->set_missing(column.missing);
    if (column.values == 0) {
      out->set_kind(ColumnProfile::EMPTY);
    } else if (column.numeric) {
      out->set_kind(ColumnProfile::NUMERIC);
      out->set_min(column.min);
      out->set_max(column.max);
      out->set_mean((column.sum + column.compensation) / static_cast<double>(column.values));
    } else {
      out->set_kind(ColumnProfile::CATEGORICAL);
    }
    out->set_distinct(column.tracking ? static_cast<int64_t>(column.counts.size())
                                      : column.distinct);
    out->set_distinct_capped(column.capped);
    if (!column.tracking || column.counts.empty() ||
        column.counts.size() > static_cast<size_t>(std::max(0, options_.value_counts_cap))) {
      continue;
    }
    std::vector<const std::pair<const std::string, int64_t>*> entries;
    entries.reserve(column.counts.size());
    for (const auto& entry : column.counts) entries.push_back(&entry);
    std::sort(entries.begin(), entries.end(), [](const auto* a, const auto* b) {
      if (a->second != b->second) return a->second > b->second;
      return a->first < b->first;  // std::string compares bytes as unsigned
    });
    for (const auto* entry : entries) {
      ColumnProfile::ValueCount* count = out->add_value_counts();
      count->set_value(entry->first);
      count->set_count(entry->second);
    }
  }
  return profile;
}

absl::StatusOr<DatasetProfile> ProfileCsvFile(const std::string& path,
                                              const std::string& shown_name, char delimiter,
                                              ProfileOptions options) {
  TRAIND_ASSIGN_OR_RETURN(CsvReader reader, CsvReader::Open(path, delimiter, shown_name));
  return ProfileCsv(std::move(reader), options);
}

absl::StatusOr<DatasetProfile> ProfileCsv(CsvReader reader, ProfileOptions options) {
  CsvProfiler profiler(reader.header(), options);
  std::vector<absl::string_view> row;
  int64_t line = 0;
  while (true) {
    TRAIND_ASSIGN_OR_RETURN(bool found, reader.NextFields(&row, &line));
    if (!found) break;
    profiler.AddFields(row);
  }
  return profiler.Finish();
}

}  // namespace traind::data
