#include "worker/engine/data/dataset.h"

#include <charconv>
#include <cmath>
#include <string_view>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "worker/engine/data/csv.h"
#include "worker/engine/data/labels.h"
#include "worker/engine/status.h"

namespace traind::engine {
namespace {

// Parses a finite float32. Surrounding spaces/tabs and a leading '+' are
// accepted; "nan", "inf" and values beyond float32's range are not.
bool ParseFeature(std::string_view s, float* value) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  if (!s.empty() && s.front() == '+') s.remove_prefix(1);
  if (s.empty()) return false;
  float v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || !std::isfinite(v)) return false;
  *value = v;
  return true;
}

}  // namespace

absl::StatusOr<Dataset> LoadDataset(const traind::v1::DataSpec& spec) {
  if (spec.path().empty()) return InvalidSpecError("data.path: required");
  if (spec.label().empty()) return InvalidSpecError("data.label: required");
  TRAIND_ASSIGN_OR_RETURN(CsvTable table, ReadCsv(spec.path()));

  int64_t label_column = -1;
  int label_count = 0;
  for (size_t c = 0; c < table.header.size(); ++c) {
    if (table.header[c] == spec.label()) {
      if (label_column < 0) label_column = static_cast<int64_t>(c);
      ++label_count;
    }
  }
  if (label_column < 0) {
    return InvalidSpecError(absl::StrFormat("data.label: column \"%s\" not found in %s; columns: %s",
                                            spec.label(), spec.path(),
                                            absl::StrJoin(table.header, ", ")));
  }
  if (label_count > 1) {
    return InvalidSpecError(absl::StrFormat("data.label: column \"%s\" appears %d times in %s",
                                            spec.label(), label_count, spec.path()));
  }
  if (table.header.size() < 2) {
    return DataError(absl::StrFormat("%s: no feature columns besides the label \"%s\"",
                                     spec.path(), spec.label()));
  }
  if (table.rows.empty()) return DataError(absl::StrCat(spec.path(), ": no data rows"));

  Dataset data;
  data.path = spec.path();
  data.rows = static_cast<int64_t>(table.rows.size());
  data.features = static_cast<int64_t>(table.header.size()) - 1;
  for (size_t c = 0; c < table.header.size(); ++c) {
    if (static_cast<int64_t>(c) != label_column) data.feature_names.push_back(table.header[c]);
  }
  data.x.resize(static_cast<size_t>(data.rows * data.features));
  std::vector<std::string> labels;
  labels.reserve(table.rows.size());
  float* out = data.x.data();
  for (size_t r = 0; r < table.rows.size(); ++r) {
    std::vector<std::string>& row = table.rows[r];
    for (size_t c = 0; c < row.size(); ++c) {
      if (static_cast<int64_t>(c) == label_column) continue;
      if (!ParseFeature(row[c], out)) {
        return DataError(absl::StrFormat("%s:%d: column \"%s\" (column %d): \"%s\" is not a number",
                                         spec.path(), table.lines[r], table.header[c], c + 1,
                                         row[c]));
      }
      ++out;
    }
    std::string& label = row[static_cast<size_t>(label_column)];
    if (label.empty()) {
      return DataError(absl::StrFormat("%s:%d: column \"%s\" (column %d): empty label",
                                       spec.path(), table.lines[r], spec.label(),
                                       label_column + 1));
    }
    labels.push_back(std::move(label));
  }
  LabelEncoding encoding = EncodeLabels(labels);
  data.y = std::move(encoding.codes);
  data.classes = std::move(encoding.classes);
  return data;
}

}  // namespace traind::engine
