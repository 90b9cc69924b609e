// A labelled table of float features, loaded from CSV.
#ifndef TRAIND_WORKER_ENGINE_DATA_DATASET_H_
#define TRAIND_WORKER_ENGINE_DATA_DATASET_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "traind/v1/job.pb.h"

namespace traind::engine {

struct Dataset {
  int64_t rows = 0, features = 0;
  std::vector<float> x;                    // [rows, features], row-major, unscaled
  std::vector<int32_t> y;                  // [rows] class codes, in [0, classes.size())
  std::vector<std::string> feature_names;  // every column except the label, in file order
  std::vector<std::string> classes;        // class i is classes[i] (see EncodeLabels)
  std::string path;
};

// Reads spec.path (CSV with a header row): the column spec.label holds the
// class labels, every other column is a numeric feature.
//
// Errors: an empty path or label, or a label column that is not in the file
// (or is in it twice) → InvalidSpecError ("data.label: column \"x\" not found
// in <path>; columns: a, b, c"). Unreadable or malformed CSV, no data rows, no
// feature column, an empty label cell, a feature that is not a finite float32
// number → DataError ("<path>:<line>: column \"sepal_width\" (column 2):
// \"abc\" is not a number"); columns are numbered from 1.
absl::StatusOr<Dataset> LoadDataset(const traind::v1::DataSpec& spec);

}  // namespace traind::engine

#endif  // TRAIND_WORKER_ENGINE_DATA_DATASET_H_
