// A table of features and targets, loaded from CSV.
#ifndef TRAIND_DATA_DATASET_H_
#define TRAIND_DATA_DATASET_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "data/target.h"
#include "traind/v1/job.pb.h"

namespace traind::data {

// A string feature column; encoded one-hot per fold (see FeaturePipeline).
struct CategoricalColumn {
  std::string name;
  std::vector<std::string> values;  // distinct values in the file, ascending
  std::vector<int32_t> codes;       // [rows] index into values; -1 missing
};

struct Dataset {
  int64_t rows = 0;
  int64_t features = 0;                    // numeric feature columns
  std::vector<float> x;                    // [rows, features], row-major, unscaled; NaN: missing
  std::vector<std::string> feature_names;  // the numeric feature columns, in order
  std::vector<CategoricalColumn> categorical;

  TargetKind target = TargetKind::kClasses;
  std::vector<int32_t> y;            // [rows] class codes in [0, classes.size()) (classes, binary)
  std::vector<std::string> classes;  // class i is classes[i] (see EncodeLabels)
  int64_t outputs = 0;               // target columns (multi-label, regression)
  std::vector<float> targets;        // [rows, outputs] (multi-label 0/1, regression values)
  std::vector<std::string> target_names;

  std::vector<int32_t> groups;    // [rows] group codes (group k-fold), else empty
  int64_t validation_start = -1;  // rows from here on come from validation_path
  std::vector<int64_t> lines;     // [rows] line in its file (for messages)
  std::string path;
  int64_t columns = 0;  // columns of data.path's header (every column, used or not)

  // Images (data/images.h, or a CSV with data.shape): [C, H, W] of a row,
  // whose features are its pixels in C, H, W order; empty for tables.
  std::vector<int32_t> image_shape;
  // Images read as bytes: the pixels [rows, features] (x is then empty).
  std::vector<uint8_t> pixels;
  // Image folders: each row's file, "<class>/<file>"; else empty. `lines`
  // holds an image's index in its file.
  std::vector<std::string> row_names;
  // Tables: the columns that identify a row (data.id, else data.ignore),
  // never features, and each row's cells [rows, id_names.size()] as the
  // file holds them ("" where a validation file lacks the column).
  // Predictions carry them (and an image folder's row_names) so that they
  // join back to the user's rows.
  std::vector<std::string> id_names;
  std::vector<std::string> ids;

  // Width of the model's output the data needs: classes for softmax, 1 for
  // a binary sigmoid, else the target columns.
  int64_t ModelOutputs() const;
};

// Reads spec.data() (and cross_validation.validation_path when set): CSV with
// a header row, split by data.delimiter.
//
// Columns: the targets (data.label or data.labels), the group column, the
// features (data.features, or every other column except data.ignore), of
// which data.categorical are strings; the others must be numbers. A missing
// value (empty, NA, NaN, nan, null) is an error unless data.missing imputes
// (then it is NaN in x, or code -1 in a categorical column).
//
// Errors: a column named in the spec that is not in the file →
// InvalidSpecError with the field path ("data.label: column \"x\" not found
// in <path>; columns: a, b, c"). Unreadable or malformed CSV, no data rows,
// no feature column, an empty label cell, a value that is not a finite
// float32 number, a multi-label value other than 0/1 → DataError; a binary
// target without exactly 2 classes → InvalidSpecError ("<path>:<line>: column \"sepal_width\"
// (column 2): \"abc\" is not a number"); columns are numbered from 1.
// Image formats (data.format): data/images.h. `threads` decode an image
// folder's files in parallel.
absl::StatusOr<Dataset> LoadDataset(const traind::v1::JobSpec& spec, int threads = 1);

// Class labels in data.label, every other column a numeric feature.
absl::StatusOr<Dataset> LoadDataset(const traind::v1::DataSpec& spec);

// What submit checks of a job's data, read in one pass without holding the
// rows: memory is one record plus the distinct label and group values, at
// most kSummaryDistinctBytes of them (past that, what needs them is unknown
// and left to the worker, which loads the whole file).
inline constexpr size_t kSummaryDistinctBytes = size_t{16} << 20;

struct DatasetSummary {
  int64_t columns = 0;          // columns of data.path's header
  int64_t rows = 0;             // data rows of data.path
  int64_t validation_rows = 0;  // data rows of cross_validation.validation_path
  int64_t features = 0;         // numeric feature columns
  TargetKind target = TargetKind::kClasses;
  int64_t target_columns = 0;  // data.labels' columns (multi-label, regression), or 1
  // Classes and binary targets: rows per class (of both files), in the
  // classes' order (EncodeLabels); empty when not known.
  std::vector<int64_t> class_rows;
  bool classes_known = false;
  // Group column: rows per group (of both files), by group code (values
  // ascending, as LoadDataset codes them); empty when not known.
  std::vector<int64_t> group_rows;
  bool groups_known = false;
  // Images: [C, H, W] (as Dataset::image_shape).
  std::vector<int32_t> image_shape;

  // As Dataset::ModelOutputs; -1 when the classes are not known.
  int64_t ModelOutputs() const;
};

// Reads what DatasetSummary holds from spec.data() (and validation_path),
// with the column rules and the spec errors of LoadDataset, the file's
// framing errors (CSV structure, UTF-8, field size), an empty label cell, and
// text in a numeric feature column (a spec error: data.categorical, naming
// the value, file, line and column). Other cell values are not checked (the
// worker reports those with line and column).
absl::StatusOr<DatasetSummary> SummarizeDataset(const traind::v1::JobSpec& spec);

// Parses a feature (or regression target) cell as a finite float32.
// Surrounding spaces/tabs and a leading '+' are accepted; "nan", "inf" and
// values beyond float32's range are not. On failure returns what is wrong
// with it ("is not a number", "is out of range for a 32-bit float ..."), for
// a message "<where>: \"abc\" is not a number"; else nullptr.
const char* ParseFeature(std::string_view cell, float* value);

// True for a name traind gives a column of predictions.csv: row, fold,
// repeat, label, prediction, true_*, p_*. data.id may not name such a
// column (a spec error); a data.ignore column so named is not copied into
// predictions.
bool IsPredictionColumnName(std::string_view name);

// True for the cells that mean "missing": "", "NA", "NaN", "nan", "null"
// (surrounding spaces ignored).
bool IsMissing(const std::string& cell);
// The same on a view of the cell.
bool IsMissingText(std::string_view cell);

}  // namespace traind::data

#endif  // TRAIND_DATA_DATASET_H_
