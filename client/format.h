// Plain-text formatting for trainctl: aligned tables, metric values, times.
// Nothing here knows about protos or gRPC.
//
// Thread-safety: free functions are reentrant; a Table is not shared.
#ifndef TRAIND_CLIENT_FORMAT_H_
#define TRAIND_CLIENT_FORMAT_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace traind::client {

enum class Align { kLeft, kRight };

// A text table: a header row and data rows, columns separated by two spaces,
// each column as wide as its widest cell (counted in UTF-8 code points), no
// trailing spaces, every line ending in '\n'.
//
//   Table t({"FOLD", "BEST_EPOCH"});
//   t.SetAlign(1, Align::kRight);
//   t.AddRow({"0", "37"});
//   t.Render() == "FOLD  BEST_EPOCH\n0             37\n"
class Table final {
 public:
  explicit Table(std::vector<std::string> headers);

  // Headers and cells of `column` are aligned this way (default: left).
  void SetAlign(size_t column, Align align);
  // Missing cells are empty; cells beyond the header count are dropped.
  void AddRow(std::vector<std::string> cells);

  size_t rows() const { return rows_.size(); }
  std::string Render() const;

 private:
  std::vector<std::string> headers_;
  std::vector<Align> align_;
  std::vector<std::vector<std::string>> rows_;
};

// Width of `text` in UTF-8 code points (ASCII and most scripts: columns).
size_t DisplayWidth(const std::string& text);

// A metric value with 4 decimals: "0.4123"; "nan", "inf", "-inf".
std::string FormatMetric(double value);

// "0.9733 ± 0.0249".
std::string FormatMeanStd(double mean, double std);

// Seconds with 2 decimals: "0.01s", "12.50s".
std::string FormatSeconds(double seconds);

// A UTC instant as local ISO-8601 with offset, to the second:
// "2024-05-01T12:34:56+02:00". Zero (an unset timestamp) gives "-".
std::string FormatLocalTime(int64_t unix_seconds, int32_t nanos);

// Bytes in binary units, one decimal: "512 B", "1.5 KiB", "80.0 GiB".
std::string FormatBytes(int64_t bytes);

// Metric names in display order: "loss" first, then "accuracy", then the
// others alphabetically.
std::vector<std::string> OrderMetricNames(std::vector<std::string> names);

}  // namespace traind::client

#endif  // TRAIND_CLIENT_FORMAT_H_
