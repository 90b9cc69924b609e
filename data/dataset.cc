#include "data/dataset.h"

#include <algorithm>
#include <bit>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <optional>
#include <string_view>
#include <unordered_map>
#include <utility>

#include "absl/base/attributes.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "base/status.h"
#include "data/csv.h"
#include "data/images.h"
#include "data/labels.h"
#include "data/text.h"

namespace traind::data {
namespace {

using traind::v1::JobSpec;

constexpr uint64_t kZeroDigits = 0x3030303030303030u;  // "00000000"

// Whether the 8 bytes of `word` are all ASCII digits.
inline bool EightDigits(uint64_t word) {
  // Every high nibble 3, and still 3 with 6 added to the byte (no carry
  // crosses a byte once the first half holds).
  return (((word & 0xF0F0F0F0F0F0F0F0u) ^ kZeroDigits) |
          (((word + 0x0606060606060606u) & 0xF0F0F0F0F0F0F0F0u) ^ kZeroDigits)) == 0;
}

// The value of 8 ASCII digits read little-endian (the first is the highest).
inline uint64_t EightDigitsValue(uint64_t word) {
  word = (word & 0x0F0F0F0F0F0F0F0Fu) * 2561 >> 8;
  word = (word & 0x00FF00FF00FF00FFu) * 6553601 >> 16;
  return (word & 0x0000FFFF0000FFFFu) * 42949672960001u >> 32;
}

// Sets `*value` to w / 10^k (k <= 22), negated when `negative`, rounded to
// float32 as std::from_chars rounds it, and returns true; or returns false
// (w > 2^53, or too near a float32 halfway point to tell).
//
// w (<= 2^53) is an exact double and 10^-k a double within half an ulp of
// it, so their product d (rounded once more) lies within 2 ulps (of d) of
// x = w / 10^k. Float32's rounding of x is decided by which pair of its
// halfway points x lies between; those points are doubles, so when d is 3
// ulps or more from the nearest one, x lies on the same side of it as d and
// rounds as d does (once, to float32).
inline bool Round(uint64_t w, size_t k, bool negative, float* value) {
  static constexpr double kTenths[] = {1e-0,  1e-1,  1e-2,  1e-3,  1e-4,  1e-5,  1e-6,  1e-7,
                                       1e-8,  1e-9,  1e-10, 1e-11, 1e-12, 1e-13, 1e-14, 1e-15,
                                       1e-16, 1e-17, 1e-18, 1e-19, 1e-20, 1e-21, 1e-22};
  if (w > (uint64_t{1} << 53)) return false;
  const double d = static_cast<double>(w) * kTenths[k];
  uint64_t bits = 0;
  std::memcpy(&bits, &d, sizeof bits);
  // The 29 bits a float32 drops from a double's 52: a halfway point has 1
  // then zeros there; d's distance from it in ulps is theirs from 2^28.
  const int64_t from_halfway = static_cast<int64_t>(bits & 0x1FFFFFFFu) - (int64_t{1} << 28);
  if (from_halfway > -3 && from_halfway < 3) return false;
  *value = static_cast<float>(negative ? -d : d);
  return true;
}

// Reads `s` when it is plain decimal text, -?[0-9]+(.[0-9]+)?, whose digits
// (at most 19) make an integer w <= 2^53 with k <= 22 of them after the point,
// so that its value w / 10^k rounds to float32 as std::from_chars rounds it
// (Round); returns false for every other text (from_chars reads those).
inline bool ParsePlainDecimal(std::string_view s, float* value) {
  static constexpr uint64_t kTens[] = {1,      10,      100,      1000,     10000,
                                       100000, 1000000, 10000000, 100000000};
  const char* p = s.data();
  const char* const end = p + s.size();
  const bool negative = p != end && *p == '-';
  p += negative;  // no branch: signs come in any order
  const char* const digits = p;
  const size_t length = static_cast<size_t>(end - p);
  if (std::endian::native == std::endian::little && length >= 4 && length <= 8) {
    // 4 to 8 bytes in one word (two overlapping halves), '0' before them: a
    // whole number, if all are digits.
    uint32_t head = 0;
    uint32_t tail = 0;
    std::memcpy(&head, p, sizeof head);
    std::memcpy(&tail, end - 4, sizeof tail);
    const unsigned pad = 8 * static_cast<unsigned>(8 - length);  // bits before the text
    const uint64_t word = (uint64_t{tail} << 32) | (uint64_t{head} << pad) |
                          (pad == 0 ? 0 : kZeroDigits >> (64 - pad));
    if (EightDigits(word)) return Round(EightDigitsValue(word), 0, negative, value);
  }
  uint64_t w = 0;  // wraps past 19 digits, which are refused below
  for (; p != end; ++p) {
    const unsigned digit = static_cast<unsigned char>(*p) - unsigned{'0'};
    if (digit > 9) break;
    w = w * 10 + digit;
  }
  const size_t whole = static_cast<size_t>(p - digits);
  size_t after_point = 0;
  if (p != end) {
    if (*p != '.') return false;
    ++p;
    after_point = static_cast<size_t>(end - p);
    if (std::endian::native == std::endian::little && after_point >= 1 && after_point <= 8 &&
        end - s.data() >= 8) {
      // The fraction in one word: the 8 bytes that end the text, those
      // before the fraction made '0'.
      uint64_t word = 0;
      std::memcpy(&word, end - 8, sizeof word);
      const unsigned bits = 8 * static_cast<unsigned>(after_point);
      if (bits < 64) word = (word >> (64 - bits) << (64 - bits)) | (kZeroDigits >> bits);
      if (!EightDigits(word)) return false;
      w = w * kTens[after_point] + EightDigitsValue(word);
    } else {
      for (; p != end; ++p) {
        const unsigned digit = static_cast<unsigned char>(*p) - unsigned{'0'};
        if (digit > 9) return false;
        w = w * 10 + digit;
      }
    }
    if (after_point == 0) return false;
  }
  if (whole == 0 || whole + after_point > 19 || after_point > 22) return false;
  return Round(w, after_point, negative, value);
}

constexpr const char* kNotANumber = "is not a number";

// ParseFeature past its plain decimal text.
ABSL_ATTRIBUTE_NOINLINE const char* ParseFeatureText(std::string_view s, float* value) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  if (!s.empty() && s.front() == '+') s.remove_prefix(1);
  if (s.empty()) return kNotANumber;
  if (ParsePlainDecimal(s, value)) return nullptr;
  float v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (end != s.data() + s.size()) return kNotANumber;
  if (ec == std::errc::result_out_of_range) {
    return "is out of range for a 32-bit float (magnitudes from 1.2e-38 to 3.4e38, or 0)";
  }
  if (ec != std::errc() || !std::isfinite(v)) return kNotANumber;
  *value = v;
  return nullptr;
}

// Whether a cell ParseFeature refused is a number all the same, one that is
// not finite ("inf", "-Infinity"): an error in the data, not text.
bool IsNonFinite(std::string_view cell) {
  absl::string_view s = absl::StripAsciiWhitespace(absl::string_view(cell.data(), cell.size()));
  if (!s.empty() && s.front() == '+') s.remove_prefix(1);
  double v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  return !s.empty() && end == s.data() + s.size() && ec == std::errc() && !std::isfinite(v);
}

// The error for a feature cell ParseFeature refused (wrong: its answer) at
// `where` ("path:line: column "name" (column k)"). Text in a numeric column
// is most often a category the spec does not declare: say where it goes.
std::string FeatureCellError(const std::string& where, const std::string& column,
                             const std::string& value, const char* wrong) {
  std::string message = absl::StrFormat("%s: %s %s", where, QuoteForMessage(value), wrong);
  if (wrong == kNotANumber) {
    absl::StrAppend(&message, "; if column ", QuoteForMessage(column),
                    " holds categories, list it in data.categorical");
  }
  return message;
}

}  // namespace

const char* ParseFeature(std::string_view s, float* value) {
  // Plain decimal text has nothing to trim: read it as it is.
  if (ParsePlainDecimal(s, value)) return nullptr;
  return ParseFeatureText(s, value);
}

namespace {

// Index of `name` in `header` (of the file `path`), or an InvalidSpecError
// for `field`.
absl::StatusOr<size_t> Column(const std::vector<std::string>& header, const std::string& path,
                              const std::string& name, const std::string& field) {
  size_t found = header.size();
  int count = 0;
  for (size_t c = 0; c < header.size(); ++c) {
    if (header[c] == name) {
      if (count++ == 0) found = c;
    }
  }
  if (count == 0) {
    return InvalidSpecError(absl::StrFormat("%s: column \"%s\" not found in %s; columns: %s", field,
                                            name, path, JoinForMessage(header)));
  }
  if (count > 1) {
    return InvalidSpecError(
        absl::StrFormat("%s: column \"%s\" appears %d times in %s", field, name, count, path));
  }
  return found;
}

// The columns a spec reads, as indices into data.path's header, and where
// each is in the validation file's.
struct SpecColumns {
  std::vector<std::string> target_names;
  std::vector<size_t> target_cols;
  int64_t group_col = -1;
  std::vector<size_t> numeric_cols, categorical_cols;
  std::vector<std::string> numeric_names;
  std::vector<size_t> val_map;  // [header.size()] column in the validation file (needed ones)
  std::vector<size_t> id_cols;
  std::vector<std::string> id_names;
  std::vector<int64_t> val_ids;  // [id_cols.size()] column in the validation file, or -1
};

// Resolves the spec's columns against the headers (val_header: null without
// a validation file). Errors as LoadDataset's.
absl::StatusOr<SpecColumns> ResolveColumns(const JobSpec& spec,
                                           const std::vector<std::string>& header,
                                           const std::vector<std::string>* val_header) {
  const traind::v1::DataSpec& d = spec.data();
  SpecColumns cols;
  if (!d.label().empty()) {
    cols.target_names.push_back(d.label());
  } else {
    cols.target_names.assign(d.labels().begin(), d.labels().end());
  }
  for (size_t i = 0; i < cols.target_names.size(); ++i) {
    const std::string field =
        d.label().empty() ? absl::StrCat("data.labels[", i, "]") : std::string("data.label");
    TRAIND_ASSIGN_OR_RETURN(size_t c, Column(header, d.path(), cols.target_names[i], field));
    cols.target_cols.push_back(c);
  }
  const std::string group_name =
      spec.has_cross_validation() ? spec.cross_validation().group_column() : "";
  if (!group_name.empty()) {
    TRAIND_ASSIGN_OR_RETURN(size_t c,
                            Column(header, d.path(), group_name, "cross_validation.group_column"));
    cols.group_col = static_cast<int64_t>(c);
  }
  std::vector<std::string> feature_list;
  if (d.features_size() > 0) {
    feature_list.assign(d.features().begin(), d.features().end());
  } else {
    for (const std::string& h : header) {
      if (std::find(cols.target_names.begin(), cols.target_names.end(), h) !=
          cols.target_names.end()) {
        continue;
      }
      if (h == group_name) continue;
      if (std::find(d.ignore().begin(), d.ignore().end(), h) != d.ignore().end()) continue;
      if (std::find(d.id().begin(), d.id().end(), h) != d.id().end()) continue;
      feature_list.push_back(h);
    }
  }
  for (int i = 0; i < d.ignore_size(); ++i) {
    TRAIND_RETURN_IF_ERROR(
        Column(header, d.path(), d.ignore(i), absl::StrCat("data.ignore[", i, "]")).status());
  }
  // Id columns: data.id, else the data.ignore columns but one named as a
  // predictions column is (IsPredictionColumnName).
  const bool explicit_ids = d.id_size() > 0;
  const auto& id_list = explicit_ids ? d.id() : d.ignore();
  for (int i = 0; i < id_list.size(); ++i) {
    if (!explicit_ids && IsPredictionColumnName(id_list[i])) continue;
    if (std::find(cols.id_names.begin(), cols.id_names.end(), id_list[i]) != cols.id_names.end()) {
      continue;
    }
    TRAIND_ASSIGN_OR_RETURN(
        size_t c, Column(header, d.path(), id_list[i],
                         absl::StrCat(explicit_ids ? "data.id[" : "data.ignore[", i, "]")));
    cols.id_cols.push_back(c);
    cols.id_names.push_back(id_list[i]);
  }
  for (size_t i = 0; i < feature_list.size(); ++i) {
    const std::string field = d.features_size() > 0 ? absl::StrCat("data.features[", i, "]")
                                                    : std::string("data.features");
    TRAIND_ASSIGN_OR_RETURN(size_t c, Column(header, d.path(), feature_list[i], field));
    if (std::find(cols.target_cols.begin(), cols.target_cols.end(), c) != cols.target_cols.end()) {
      return InvalidSpecError(
          absl::StrFormat("%s: \"%s\" is a label column", field, feature_list[i]));
    }
    if (std::find(d.categorical().begin(), d.categorical().end(), feature_list[i]) ==
        d.categorical().end()) {
      cols.numeric_cols.push_back(c);
      cols.numeric_names.push_back(feature_list[i]);
    }
  }
  for (int i = 0; i < d.categorical_size(); ++i) {
    TRAIND_ASSIGN_OR_RETURN(size_t c, Column(header, d.path(), d.categorical(i),
                                             absl::StrCat("data.categorical[", i, "]")));
    cols.categorical_cols.push_back(c);
  }
  if (cols.numeric_cols.empty() && cols.categorical_cols.empty()) {
    return DataError(absl::StrFormat("%s: no feature columns besides the label", d.path()));
  }
  // Map each column of the validation file by name.
  cols.val_map.assign(header.size(), 0);
  if (val_header != nullptr) {
    auto has = [](const std::vector<size_t>& v, size_t c) {
      return std::find(v.begin(), v.end(), c) != v.end();
    };
    for (size_t c = 0; c < header.size(); ++c) {
      const bool needed = has(cols.numeric_cols, c) || has(cols.categorical_cols, c) ||
                          has(cols.target_cols, c) || static_cast<int64_t>(c) == cols.group_col;
      if (!needed) continue;
      TRAIND_ASSIGN_OR_RETURN(
          cols.val_map[c], Column(*val_header, spec.cross_validation().validation_path(), header[c],
                                  "cross_validation.validation_path"));
    }
    // An id column the validation file lacks leaves its cells empty.
    for (const std::string& name : cols.id_names) {
      const auto it = std::find(val_header->begin(), val_header->end(), name);
      cols.val_ids.push_back(it == val_header->end() ? -1 : it - val_header->begin());
    }
  }
  return cols;
}

// The rows of the main file followed by those of the validation file, with
// the validation file's columns mapped to the main file's.
struct Rows {
  const CsvTable* table;
  size_t row;
};

}  // namespace

bool IsMissing(const std::string& cell) { return IsMissingText(cell); }

bool IsPredictionColumnName(std::string_view name) {
  return name == "row" || name == "fold" || name == "repeat" || name == "label" ||
         name == "prediction" || name.starts_with("true_") || name.starts_with("p_");
}

bool IsMissingText(std::string_view cell) {
  // Every missing word starts with 'N' or 'n': a cell that starts with any
  // other byte but a space is a value.
  if (!cell.empty() && cell[0] != 'N' && cell[0] != 'n' && !absl::ascii_isspace(cell[0])) {
    return false;
  }
  const absl::string_view s =
      absl::StripAsciiWhitespace(absl::string_view(cell.data(), cell.size()));
  return s.empty() || s == "NA" || s == "NaN" || s == "nan" || s == "null";
}

int64_t Dataset::ModelOutputs() const {
  switch (target) {
    case TargetKind::kClasses:
      return static_cast<int64_t>(classes.size());
    case TargetKind::kBinary:
      return 1;
    default:
      return outputs;
  }
}

absl::StatusOr<Dataset> LoadDataset(const traind::v1::DataSpec& spec) {
  JobSpec job;
  *job.mutable_data() = spec;
  return LoadDataset(job);
}

absl::StatusOr<Dataset> LoadDataset(const JobSpec& spec, int threads) {
  const traind::v1::DataSpec& d = spec.data();
  if (d.path().empty()) return InvalidSpecError("data.path: required");
  if (IsImageFormat(d)) return LoadImageDataset(spec, threads);
  if (d.label().empty() && d.labels_size() == 0) return InvalidSpecError("data.label: required");
  const char delimiter = d.delimiter().empty() ? ',' : d.delimiter()[0];
  TRAIND_ASSIGN_OR_RETURN(CsvTable table, ReadCsv(d.path(), delimiter));
  CsvTable val_table;
  const bool has_val_file =
      spec.has_cross_validation() && !spec.cross_validation().validation_path().empty();
  if (has_val_file) {
    TRAIND_ASSIGN_OR_RETURN(val_table,
                            ReadCsv(spec.cross_validation().validation_path(), delimiter));
  }
  const TargetKind target = TargetKindOf(spec);

  TRAIND_ASSIGN_OR_RETURN(
      SpecColumns cols,
      ResolveColumns(spec, table.header, has_val_file ? &val_table.header : nullptr));
  const std::vector<std::string>& target_names = cols.target_names;
  const std::vector<size_t>& target_cols = cols.target_cols;
  const int64_t group_col = cols.group_col;
  const std::vector<size_t>& numeric_cols = cols.numeric_cols;
  const std::vector<size_t>& categorical_cols = cols.categorical_cols;
  const std::vector<size_t>& val_map = cols.val_map;
  Dataset data;
  data.feature_names = cols.numeric_names;
  for (int i = 0; i < d.categorical_size(); ++i) {
    CategoricalColumn column;
    column.name = d.categorical(i);
    data.categorical.push_back(std::move(column));
  }
  std::vector<Rows> rows;
  for (size_t r = 0; r < table.rows.size(); ++r) rows.push_back({&table, r});
  for (size_t r = 0; r < val_table.rows.size(); ++r) rows.push_back({&val_table, r});
  if (table.rows.empty()) return DataError(absl::StrCat(d.path(), ": no data rows"));

  auto cell = [&](const Rows& row, size_t c) -> const std::string& {
    return row.table == &table ? table.rows[row.row][c] : val_table.rows[row.row][val_map[c]];
  };
  auto where = [&](const Rows& row, size_t c) {
    const size_t fc = row.table == &table ? c : val_map[c];
    return absl::StrFormat("%s:%d: column %s (column %d)", row.table->path,
                           row.table->lines[row.row], QuoteForMessage(table.header[c]), fc + 1);
  };
  const bool impute = d.missing() != traind::v1::MISSING_ERROR;

  data.path = d.path();
  if (d.shape_size() == 3) data.image_shape = {d.shape(0), d.shape(1), d.shape(2)};
  data.columns = static_cast<int64_t>(table.header.size());
  data.rows = static_cast<int64_t>(rows.size());
  data.features = static_cast<int64_t>(numeric_cols.size());
  data.target = target;
  data.validation_start = has_val_file ? static_cast<int64_t>(table.rows.size()) : -1;
  data.x.resize(static_cast<size_t>(data.rows * data.features));
  data.lines.resize(rows.size());
  float* out = data.x.data();
  for (size_t r = 0; r < rows.size(); ++r) {
    data.lines[r] = rows[r].table->lines[rows[r].row];
    for (size_t c : numeric_cols) {
      const std::string& v = cell(rows[r], c);
      if (IsMissing(v)) {
        if (!impute) {
          return DataError(
              absl::StrCat(where(rows[r], c), ": missing value (data.missing: error)"));
        }
        *out++ = std::numeric_limits<float>::quiet_NaN();
        continue;
      }
      if (const char* wrong = ParseFeature(v, out); wrong != nullptr) {
        return DataError(FeatureCellError(where(rows[r], c), table.header[c], v, wrong));
      }
      ++out;
    }
  }
  // Id cells, as the files hold them.
  data.id_names = cols.id_names;
  data.ids.reserve(rows.size() * cols.id_cols.size());
  for (const Rows& row : rows) {
    for (size_t k = 0; k < cols.id_cols.size(); ++k) {
      if (row.table == &table) {
        data.ids.push_back(table.rows[row.row][cols.id_cols[k]]);
      } else {
        data.ids.push_back(cols.val_ids[k] < 0 ? std::string()
                                               : val_table.rows[row.row][cols.val_ids[k]]);
      }
    }
  }
  // Categorical columns: distinct values of the whole file, ascending.
  for (size_t k = 0; k < categorical_cols.size(); ++k) {
    const size_t c = categorical_cols[k];
    CategoricalColumn& column = data.categorical[k];
    std::map<std::string, int32_t> index;
    for (const Rows& row : rows) {
      const std::string& v = cell(row, c);
      if (IsMissing(v)) {
        if (!impute) {
          return DataError(absl::StrCat(where(row, c), ": missing value (data.missing: error)"));
        }
        continue;
      }
      index.emplace(v, 0);
    }
    int32_t code = 0;
    for (auto& [value, i] : index) {
      i = code++;
      column.values.push_back(value);
    }
    column.codes.reserve(rows.size());
    for (const Rows& row : rows) {
      const std::string& v = cell(row, c);
      column.codes.push_back(IsMissing(v) ? -1 : index[v]);
    }
  }
  if (group_col >= 0) {
    std::map<std::string, int32_t> index;
    for (const Rows& row : rows) index.emplace(cell(row, static_cast<size_t>(group_col)), 0);
    int32_t code = 0;
    for (auto& [value, i] : index) i = code++;
    for (const Rows& row : rows)
      data.groups.push_back(index[cell(row, static_cast<size_t>(group_col))]);
  }
  // Targets.
  data.target_names = target_names;
  if (target == TargetKind::kClasses || target == TargetKind::kBinary) {
    if (target_cols.size() != 1) return InvalidSpecError("data.label: required");
    std::vector<std::string> labels;
    labels.reserve(rows.size());
    for (const Rows& row : rows) {
      const std::string& v = cell(row, target_cols[0]);
      if (v.empty()) return DataError(absl::StrCat(where(row, target_cols[0]), ": empty label"));
      labels.push_back(v);
    }
    LabelEncoding encoding = EncodeLabels(labels);
    data.y = std::move(encoding.codes);
    data.classes = std::move(encoding.classes);
    if (target == TargetKind::kBinary && data.classes.size() != 2) {
      return InvalidSpecError(absl::StrFormat(
          "data.label: column \"%s\" has %d classes, but sigmoid_binary_cross_entropy on "
          "data.label needs exactly 2 (data.labels for multi-label targets)",
          d.label(), data.classes.size()));
    }
    data.outputs = data.ModelOutputs();
  } else {
    data.outputs = static_cast<int64_t>(target_cols.size());
    data.targets.resize(static_cast<size_t>(data.rows * data.outputs));
    for (size_t r = 0; r < rows.size(); ++r) {
      for (size_t k = 0; k < target_cols.size(); ++k) {
        const std::string& v = cell(rows[r], target_cols[k]);
        float value = 0;
        if (const char* wrong = ParseFeature(v, &value); wrong != nullptr) {
          return DataError(absl::StrFormat("%s: %s %s", where(rows[r], target_cols[k]),
                                           QuoteForMessage(v), wrong));
        }
        if (target == TargetKind::kMultiLabel && value != 0.0f && value != 1.0f) {
          return DataError(absl::StrFormat("%s: %s is not a 0/1 label",
                                           where(rows[r], target_cols[k]), QuoteForMessage(v)));
        }
        data.targets[r * target_cols.size() + k] = value;
      }
    }
  }
  return data;
}

int64_t DatasetSummary::ModelOutputs() const {
  switch (target) {
    case TargetKind::kClasses:
      return classes_known ? static_cast<int64_t>(class_rows.size()) : -1;
    case TargetKind::kBinary:
      return 1;
    default:
      return target_columns;
  }
}

absl::StatusOr<DatasetSummary> SummarizeDataset(const JobSpec& spec) {
  const traind::v1::DataSpec& d = spec.data();
  if (d.path().empty()) return InvalidSpecError("data.path: required");
  if (IsImageFormat(d)) return SummarizeImageDataset(spec);
  if (d.label().empty() && d.labels_size() == 0) return InvalidSpecError("data.label: required");
  const char delimiter = d.delimiter().empty() ? ',' : d.delimiter()[0];
  TRAIND_ASSIGN_OR_RETURN(CsvReader main, CsvReader::Open(d.path(), delimiter));
  std::optional<CsvReader> val;
  const bool has_val_file =
      spec.has_cross_validation() && !spec.cross_validation().validation_path().empty();
  if (has_val_file) {
    TRAIND_ASSIGN_OR_RETURN(CsvReader reader,
                            CsvReader::Open(spec.cross_validation().validation_path(), delimiter));
    val.emplace(std::move(reader));
  }
  TRAIND_ASSIGN_OR_RETURN(SpecColumns cols,
                          ResolveColumns(spec, main.header(), val ? &val->header() : nullptr));
  DatasetSummary summary;
  if (d.shape_size() == 3) summary.image_shape = {d.shape(0), d.shape(1), d.shape(2)};
  summary.columns = static_cast<int64_t>(main.header().size());
  summary.features = static_cast<int64_t>(cols.numeric_cols.size());
  summary.target = TargetKindOf(spec);
  summary.target_columns = static_cast<int64_t>(cols.target_cols.size());
  const bool class_target =
      summary.target == TargetKind::kClasses || summary.target == TargetKind::kBinary;
  if (class_target && cols.target_cols.size() != 1) {
    return InvalidSpecError("data.label: required");
  }
  // Distinct values and their rows, while they fit the budget.
  std::unordered_map<std::string, int64_t> labels;
  std::map<std::string, int64_t> groups;
  size_t distinct_bytes = 0;
  constexpr size_t kEntryBytes = 64;  // a node's overhead, roughly
  bool labels_fit = class_target, groups_fit = cols.group_col >= 0;
  auto count = [&](auto& values, bool& fits, const std::string& value) {
    if (!fits) return;
    auto it = values.find(value);
    if (it != values.end()) {
      ++it->second;
      return;
    }
    distinct_bytes += value.size() + kEntryBytes;
    if (distinct_bytes > kSummaryDistinctBytes) {
      fits = false;
      values.clear();
      return;
    }
    values.emplace(value, 1);
  };
  std::vector<std::string> row;
  int64_t line = 0;
  for (CsvReader* reader : {&main, val ? &*val : nullptr}) {
    if (reader == nullptr) continue;
    const bool is_val = reader != &main;
    int64_t& rows = is_val ? summary.validation_rows : summary.rows;
    while (true) {
      TRAIND_ASSIGN_OR_RETURN(bool found, reader->Next(&row, &line));
      if (!found) break;
      ++rows;
      auto cell = [&](size_t c) -> const std::string& { return row[is_val ? cols.val_map[c] : c]; };
      if (class_target) {
        const std::string& v = cell(cols.target_cols[0]);
        if (v.empty()) {
          const size_t fc = is_val ? cols.val_map[cols.target_cols[0]] : cols.target_cols[0];
          return DataError(
              absl::StrFormat("%s:%d: column %s (column %d): empty label", reader->path(), line,
                              QuoteForMessage(main.header()[cols.target_cols[0]]), fc + 1));
        }
        count(labels, labels_fit, v);
      }
      if (cols.group_col >= 0) count(groups, groups_fit, cell(static_cast<size_t>(cols.group_col)));
      // A numeric feature column holding text is the spec's mistake (a
      // category not in data.categorical): refused at submit, not by a worker.
      float value = 0;
      for (size_t c : cols.numeric_cols) {
        const std::string& v = cell(c);
        if (IsMissingText(v) || ParseFeature(v, &value) != kNotANumber || IsNonFinite(v)) {
          continue;
        }
        return InvalidSpecError(absl::StrFormat(
            "data.categorical: column %s holds text (%s at %s:%d, column %d), not a number: if "
            "the column is a category, list it in data.categorical (or in data.ignore); else fix "
            "the value",
            QuoteForMessage(main.header()[c]), QuoteForMessage(v), reader->path(), line,
            (is_val ? cols.val_map[c] : c) + 1));
      }
    }
  }
  if (summary.rows == 0) return DataError(absl::StrCat(d.path(), ": no data rows"));
  if (labels_fit) {
    std::vector<std::string> values;
    values.reserve(labels.size());
    for (const auto& [value, n] : labels) values.push_back(value);
    const LabelEncoding encoding = EncodeLabels(values);  // the classes' order
    for (const std::string& c : encoding.classes) summary.class_rows.push_back(labels[c]);
    summary.classes_known = true;
    if (summary.target == TargetKind::kBinary && summary.class_rows.size() != 2) {
      return InvalidSpecError(absl::StrFormat(
          "data.label: column \"%s\" has %d classes, but sigmoid_binary_cross_entropy on "
          "data.label needs exactly 2 (data.labels for multi-label targets)",
          d.label(), summary.class_rows.size()));
    }
  }
  if (groups_fit) {
    for (const auto& [value, n] : groups) summary.group_rows.push_back(n);
    summary.groups_known = true;
  }
  return summary;
}

}  // namespace traind::data
