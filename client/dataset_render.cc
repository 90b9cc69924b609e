#include "client/dataset_render.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/format.h"

namespace traind::client {
namespace {

using ::traind::v1::ColumnProfile;
using ::traind::v1::Dataset;

constexpr char kEllipsis[] = "\xE2\x80\xA6";  // "…", one column

bool IsNameByte(char c) {
  return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-';
}

// `text` cut to at most `width` columns (UTF-8 code points), ending in "…"
// when cut.
std::string Ellipsize(const std::string& text, size_t width) {
  if (DisplayWidth(text) <= width) return text;
  if (width == 0) return "";
  std::string out;
  size_t columns = 0;
  for (size_t i = 0; i < text.size();) {
    size_t len = 1;
    while (i + len < text.size() && (static_cast<unsigned char>(text[i + len]) & 0xC0) == 0x80) {
      ++len;
    }
    if (columns + 1 > width - 1) break;
    out.append(text, i, len);
    ++columns;
    i += len;
  }
  return out + kEllipsis;
}

// Parts joined by two spaces, and the width of that.
size_t JoinedWidth(const std::vector<std::string>& parts) {
  size_t width = 0;
  for (const std::string& p : parts) width += DisplayWidth(p);
  return width + (parts.empty() ? 0 : 2 * (parts.size() - 1));
}

std::string OneDecimal(double value) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f", value);
  return buf;
}

// "5.2/12.3 MB": both sizes in the unit of the total.
std::string SizesText(int64_t done, int64_t total) {
  if (total < 1000) return absl::StrCat(done, "/", total, " B");
  static const char* const kUnits[] = {"kB", "MB", "GB", "TB"};
  double scale = 1000.0;
  int unit = 0;
  while (unit < 3 && static_cast<double>(total) / scale >= 999.95) {
    scale *= 1000.0;
    ++unit;
  }
  return absl::StrCat(OneDecimal(static_cast<double>(done) / scale), "/",
                      OneDecimal(static_cast<double>(total) / scale), " ", kUnits[unit]);
}

// "ETA 1:05", "ETA 1:02:03"; "ETA -:--" when the rate is not known.
std::string EtaText(int64_t remaining, double bytes_per_second) {
  if (remaining <= 0) return "ETA 0:00";
  if (!(bytes_per_second > 0)) return "ETA -:--";
  double seconds = std::ceil(static_cast<double>(remaining) / bytes_per_second);
  seconds = std::min(seconds, 99.0 * 3600 + 59 * 60 + 59);
  const int64_t s = static_cast<int64_t>(seconds);
  char buf[32];
  if (s >= 3600) {
    std::snprintf(buf, sizeof(buf), "ETA %lld:%02lld:%02lld", static_cast<long long>(s / 3600),
                  static_cast<long long>(s / 60 % 60), static_cast<long long>(s % 60));
  } else {
    std::snprintf(buf, sizeof(buf), "ETA %lld:%02lld", static_cast<long long>(s / 60),
                  static_cast<long long>(s % 60));
  }
  return buf;
}

// Whole numbers below 1e9 in full ("2999999"); others with six significant
// digits, or three when six take ten columns or more: "5.84333",
// "-1.23e+07".
std::string Number(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  char buf[32];
  if (value == std::trunc(value) && std::fabs(value) < 1e9) {
    std::snprintf(buf, sizeof(buf), "%.0f", value == 0 ? 0.0 : value);
    return buf;
  }
  std::snprintf(buf, sizeof(buf), "%.6g", value);
  if (std::strlen(buf) > 9) std::snprintf(buf, sizeof(buf), "%.3g", value);
  return buf;
}

std::string KindName(ColumnProfile::Kind kind) {
  if (kind == ColumnProfile::KIND_UNSPECIFIED) return "-";
  return absl::AsciiStrToLower(ColumnProfile::Kind_Name(kind));
}

std::string Time(const google::protobuf::Timestamp& ts) {
  return FormatLocalTime(ts.seconds(), ts.nanos());
}

// "4.6 kB (4551 bytes)".
std::string SizeText(int64_t bytes) {
  if (bytes < 1000) return FormatDecimalBytes(bytes);
  return absl::StrCat(FormatDecimalBytes(bytes), " (", bytes, " bytes)");
}

// `words` joined by `separator` into lines of at most `width` columns, each
// starting with `indent`.
std::string Wrap(const std::vector<std::string>& words, const std::string& separator,
                 const std::string& indent, size_t width) {
  std::string out, line;
  for (size_t i = 0; i < words.size(); ++i) {
    const std::string word = words[i] + (i + 1 < words.size() ? separator : "");
    const std::string trimmed = std::string(absl::StripTrailingAsciiWhitespace(word));
    if (!line.empty() && DisplayWidth(line) + DisplayWidth(trimmed) > width) {
      out += std::string(absl::StripTrailingAsciiWhitespace(line)) + "\n";
      line.clear();
    }
    if (line.empty()) line = indent;
    line += word;
  }
  if (!line.empty()) out += std::string(absl::StripTrailingAsciiWhitespace(line)) + "\n";
  return out;
}

}  // namespace

std::string DefaultDatasetName(const std::string& path) {
  const std::filesystem::path p(path);
  std::string stem = p.filename().string();
  if (p.has_extension() && stem != p.extension().string()) stem = p.stem().string();
  std::string name;
  for (char c : stem) name += IsNameByte(c) ? c : '-';
  const size_t first = name.find_first_not_of('.');
  name = first == std::string::npos ? "" : name.substr(first);
  if (name.size() > kMaxDatasetNameBytes) name.resize(kMaxDatasetNameBytes);
  return name.empty() ? "dataset" : name;
}

bool IsDatasetName(const std::string& name) {
  if (name.empty() || name.size() > kMaxDatasetNameBytes || name[0] == '.') return false;
  return std::all_of(name.begin(), name.end(), IsNameByte);
}

std::string FormatDecimalBytes(int64_t bytes) {
  if (bytes < 1000) return absl::StrCat(bytes, " B");
  static const char* const kUnits[] = {"kB", "MB", "GB", "TB", "PB"};
  double value = static_cast<double>(bytes) / 1000.0;
  int unit = 0;
  while (unit < 4 && value >= 999.95) {
    value /= 1000.0;
    ++unit;
  }
  return absl::StrCat(OneDecimal(value), " ", kUnits[unit]);
}

std::string ProgressLine(const TransferProgress& progress, int width) {
  const size_t usable = static_cast<size_t>(std::max(width - 1, 1));
  const int64_t total = std::max<int64_t>(progress.total, 0);
  const int64_t done = std::clamp<int64_t>(progress.done, 0, total);
  const double fraction = total == 0 ? 1.0 : static_cast<double>(done) / static_cast<double>(total);
  char pct[16];
  std::snprintf(pct, sizeof(pct), "%3d%%", static_cast<int>(std::floor(fraction * 100.0)));
  const std::string rate = progress.bytes_per_second > 0
                               ? absl::StrCat(OneDecimal(progress.bytes_per_second / 1e6), " MB/s")
                               : "-- MB/s";
  std::vector<std::string> tail = {pct, SizesText(done, total), rate,
                                   EtaText(total - done, progress.bytes_per_second)};
  const std::string label = Ellipsize(progress.label, 30);

  // The label and a bar of 10 to 40 cells between brackets.
  constexpr size_t kMinBar = 10 + 2, kMaxBar = 40 + 2;
  std::vector<std::string> head;
  if (!label.empty()) head.push_back(label);
  const size_t fixed = JoinedWidth(head) + (head.empty() ? 0 : 2) + 2 + JoinedWidth(tail);
  if (usable >= fixed + kMinBar) {
    const size_t cells = std::min(usable - fixed, kMaxBar) - 2;
    const size_t filled = static_cast<size_t>(std::floor(fraction * static_cast<double>(cells)));
    std::string bar(cells + 2, '.');
    bar.front() = '[';
    bar.back() = ']';
    std::fill_n(bar.begin() + 1, filled, '#');
    head.push_back(bar);
    head.insert(head.end(), tail.begin(), tail.end());
    return absl::StrJoin(head, "  ");
  }
  if (!label.empty()) {
    head.insert(head.end(), tail.begin(), tail.end());
    if (JoinedWidth(head) <= usable) return absl::StrJoin(head, "  ");
  }
  while (tail.size() > 1 && JoinedWidth(tail) > usable) tail.pop_back();
  return Ellipsize(absl::StrJoin(tail, "  "), usable);
}

std::string DatasetRef(const Dataset& dataset) {
  return absl::StrCat(dataset.name(), ":", dataset.version());
}

std::string RenderDatasetSummary(const Dataset& dataset, int width) {
  const size_t w = static_cast<size_t>(std::max(width, 40));
  std::string out =
      absl::StrCat("dataset:  ", DatasetRef(dataset), "\n", "sha256:   ", dataset.sha256(), "\n",
                   "size:     ", SizeText(dataset.size_bytes()), "\n");
  if (dataset.has_profile()) {
    const traind::v1::DatasetProfile& profile = dataset.profile();
    absl::StrAppend(&out, "rows:     ", profile.rows(), "\n");
    std::vector<std::string> names;
    for (const ColumnProfile& c : profile.columns()) names.push_back(c.name());
    const std::string columns = absl::StrCat("columns:  ", profile.columns_size(),
                                             names.empty() ? "" : ": ", absl::StrJoin(names, ", "));
    absl::StrAppend(&out, Ellipsize(columns, w), "\n");
  }
  return out;
}

std::string RenderDatasetList(const traind::v1::ListDatasetsResponse& response) {
  if (response.datasets().empty()) return "no datasets\n";
  std::set<std::string> owners;
  for (const Dataset& d : response.datasets()) owners.insert(d.owner());
  const bool show_owner = owners.size() > 1;
  std::vector<std::string> headers = {"NAME", "VERSION", "SIZE", "CREATED", "SHA256", "FILE"};
  if (show_owner) headers.push_back("OWNER");
  Table table(headers);
  table.SetAlign(1, Align::kRight);
  table.SetAlign(2, Align::kRight);
  for (const Dataset& d : response.datasets()) {
    std::vector<std::string> row = {d.name(),
                                    absl::StrCat(d.version()),
                                    FormatDecimalBytes(d.size_bytes()),
                                    Time(d.create_time()),
                                    d.sha256().substr(0, 12),
                                    d.file_name().empty() ? "-" : d.file_name()};
    if (show_owner) row.push_back(d.owner());
    table.AddRow(std::move(row));
  }
  return table.Render();
}

std::string RenderDataset(const Dataset& dataset, int width) {
  const size_t w = static_cast<size_t>(std::max(width, 60));
  std::string out =
      absl::StrCat("dataset:  ", DatasetRef(dataset), "\n", "sha256:   ", dataset.sha256(), "\n",
                   "size:     ", SizeText(dataset.size_bytes()), "\n",
                   "kind:     ", absl::AsciiStrToLower(Dataset::Kind_Name(dataset.kind())), "\n");
  if (!dataset.owner().empty()) absl::StrAppend(&out, "owner:    ", dataset.owner(), "\n");
  absl::StrAppend(&out, "created:  ", Time(dataset.create_time()), "\n");
  if (!dataset.file_name().empty()) {
    absl::StrAppend(&out, Ellipsize("file:     " + dataset.file_name(), w), "\n");
  }
  const traind::v1::DatasetProfile& profile = dataset.profile();
  absl::StrAppend(&out, "rows:     ", profile.rows(), "\n", "columns:  ", profile.columns_size(),
                  "\n");

  if (!profile.columns().empty()) {
    // Every cell but the names, to see how much room the names have.
    const std::vector<std::string> headers = {"COLUMN", "KIND", "MISSING", "DISTINCT",
                                              "MIN",    "MAX",  "MEAN"};
    std::vector<std::vector<std::string>> rows;
    std::vector<size_t> widths(headers.size());
    for (size_t c = 0; c < headers.size(); ++c) widths[c] = DisplayWidth(headers[c]);
    for (const ColumnProfile& c : profile.columns()) {
      const bool numeric = c.kind() == ColumnProfile::NUMERIC;
      std::vector<std::string> row = {c.name(),
                                      KindName(c.kind()),
                                      absl::StrCat(c.missing()),
                                      absl::StrCat(c.distinct(), c.distinct_capped() ? "+" : ""),
                                      numeric ? Number(c.min()) : "-",
                                      numeric ? Number(c.max()) : "-",
                                      numeric ? Number(c.mean()) : "-"};
      for (size_t i = 1; i < row.size(); ++i) widths[i] = std::max(widths[i], DisplayWidth(row[i]));
      rows.push_back(std::move(row));
    }
    size_t others = 2 * (headers.size() - 1);
    for (size_t i = 1; i < widths.size(); ++i) others += widths[i];
    const size_t name_width = w > others + 6 ? w - others : 6;
    Table table(headers);
    for (size_t c = 2; c < headers.size(); ++c) table.SetAlign(c, Align::kRight);
    for (std::vector<std::string>& row : rows) {
      row[0] = Ellipsize(row[0], name_width);
      table.AddRow(std::move(row));
    }
    absl::StrAppend(&out, "\n", table.Render());
  }

  bool top_header = false;
  for (const ColumnProfile& c : profile.columns()) {
    if (c.value_counts().empty()) continue;
    if (!top_header) {
      absl::StrAppend(&out, "\ntop values:\n");
      top_header = true;
    }
    std::string line = absl::StrCat("  ", Ellipsize(c.name(), 24), ":");
    const std::string more = ", \xE2\x80\xA6";
    for (int i = 0; i < c.value_counts_size(); ++i) {
      const auto& vc = c.value_counts(i);
      const std::string item =
          absl::StrCat(i == 0 ? " " : ", ", Ellipsize(vc.value(), 24), " ", vc.count());
      const bool last = i + 1 == c.value_counts_size();
      const size_t room = last ? w : w - DisplayWidth(more);
      if (DisplayWidth(line) + DisplayWidth(item) > room) {
        line += i == 0 ? std::string(" ") + kEllipsis : more;
        break;
      }
      line += item;
    }
    absl::StrAppend(&out, line, "\n");
  }

  if (dataset.job_ids().empty()) {
    absl::StrAppend(&out, "\njobs that used it: none\n");
  } else {
    absl::StrAppend(&out, "\njobs that used it (", dataset.job_ids_size(), "):\n",
                    Wrap({dataset.job_ids().begin(), dataset.job_ids().end()}, "  ", "  ", w));
  }
  return out;
}

std::string RenderDeletedDatasets(const traind::v1::DeleteDatasetResponse& response) {
  if (response.deleted().empty()) return "nothing deleted\n";
  std::string out;
  for (const Dataset& d : response.deleted()) {
    absl::StrAppend(&out, "deleted ", DatasetRef(d), " (", FormatDecimalBytes(d.size_bytes()),
                    ")\n");
  }
  return out;
}

std::vector<std::string> DatasetOverrides(const SpecUploads& uploads) {
  std::vector<std::string> overrides;
  if (!uploads.data_sha256.empty()) {
    overrides.push_back("data.path=");
    overrides.push_back("data.dataset=sha256:" + uploads.data_sha256);
  }
  if (!uploads.validation_sha256.empty()) {
    overrides.push_back("cross_validation.validation_path=");
    overrides.push_back("cross_validation.validation_dataset=sha256:" + uploads.validation_sha256);
  }
  return overrides;
}

}  // namespace traind::client
