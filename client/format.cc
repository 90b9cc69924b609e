#include "client/format.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <utility>

namespace traind::client {

Table::Table(std::vector<std::string> headers)
    : headers_(std::move(headers)), align_(headers_.size(), Align::kLeft) {}

void Table::SetAlign(size_t column, Align align) {
  if (column < align_.size()) align_[column] = align;
}

void Table::AddRow(std::vector<std::string> cells) {
  cells.resize(headers_.size());
  rows_.push_back(std::move(cells));
}

std::string Table::Render() const {
  const size_t n = headers_.size();
  std::vector<size_t> width(n, 0);
  for (size_t c = 0; c < n; ++c) width[c] = DisplayWidth(headers_[c]);
  for (const auto& row : rows_) {
    for (size_t c = 0; c < n; ++c) {
      width[c] = std::max(width[c], DisplayWidth(row[c]));
    }
  }
  std::string out;
  auto render_row = [&](const std::vector<std::string>& row) {
    std::string line;
    for (size_t c = 0; c < n; ++c) {
      if (c > 0) line += "  ";
      const size_t pad = width[c] - DisplayWidth(row[c]);
      if (align_[c] == Align::kRight) {
        line.append(pad, ' ');
        line += row[c];
      } else {
        line += row[c];
        line.append(pad, ' ');
      }
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line;
    out += '\n';
  };
  render_row(headers_);
  for (const auto& row : rows_) render_row(row);
  return out;
}

size_t DisplayWidth(const std::string& text) {
  size_t width = 0;
  for (unsigned char c : text) {
    if ((c & 0xC0) != 0x80) ++width;  // not a UTF-8 continuation byte
  }
  return width;
}

std::string FormatMetric(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.4f", value);
  return buf;
}

std::string FormatMeanStd(double mean, double std) {
  return FormatMetric(mean) + " \xC2\xB1 " + FormatMetric(std);
}

std::string FormatSeconds(double seconds) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.2fs", seconds);
  return buf;
}

std::string FormatLocalTime(int64_t unix_seconds, int32_t nanos) {
  if (unix_seconds == 0 && nanos == 0) return "-";
  std::time_t t = static_cast<std::time_t>(unix_seconds);
  std::tm tm{};
  if (localtime_r(&t, &tm) == nullptr) return "-";
  char date[64];
  std::strftime(date, sizeof(date), "%Y-%m-%dT%H:%M:%S", &tm);
  long offset = tm.tm_gmtoff;
  char sign = offset < 0 ? '-' : '+';
  offset = std::labs(offset);
  char buf[96];
  std::snprintf(buf, sizeof(buf), "%s%c%02ld:%02ld", date, sign, offset / 3600,
                (offset % 3600) / 60);
  return buf;
}

std::string FormatBytes(int64_t bytes) {
  static const char* const kUnits[] = {"KiB", "MiB", "GiB", "TiB", "PiB"};
  if (bytes < 1024) return std::to_string(bytes) + " B";
  double value = static_cast<double>(bytes);
  int unit = -1;
  while (value >= 1024.0 && unit < 4) {
    value /= 1024.0;
    ++unit;
  }
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.1f %s", value, kUnits[unit]);
  return buf;
}

std::vector<std::string> OrderMetricNames(std::vector<std::string> names) {
  auto rank = [](const std::string& name) {
    if (name == "loss") return 0;
    if (name == "accuracy") return 1;
    return 2;
  };
  std::sort(names.begin(), names.end(), [&](const std::string& a, const std::string& b) {
    if (rank(a) != rank(b)) return rank(a) < rank(b);
    return a < b;
  });
  return names;
}

}  // namespace traind::client
