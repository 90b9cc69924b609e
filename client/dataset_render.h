// trainctl's text for datasets: the default name of an uploaded file, the
// upload progress line, the dataset listings and profile, and the spec
// overrides `submit` adds for the files it uploaded. Pure functions of their
// arguments (plus the local time zone for times); no gRPC.
//
// Sizes of transfers and datasets are in decimal units ("12.3 MB"), as the
// rate is ("3.1 MB/s").
#ifndef TRAIND_CLIENT_DATASET_RENDER_H_
#define TRAIND_CLIENT_DATASET_RENDER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "traind/v1/dataset.pb.h"
#include "traind/v1/training_service.pb.h"

namespace traind::client {

// The longest dataset name traind takes, in bytes.
inline constexpr size_t kMaxDatasetNameBytes = 128;

// The name a file is uploaded under by default: its base name without the
// last extension ("data/customers.v2.csv" -> "customers.v2"), every byte
// outside [A-Za-z0-9._-] replaced by '-', leading dots dropped (traind
// refuses a name starting with '.'), cut to kMaxDatasetNameBytes; "dataset"
// when nothing is left.
std::string DefaultDatasetName(const std::string& path);

// Whether traind takes `name` as a dataset name: 1 to 128 bytes of
// [A-Za-z0-9._-], not starting with '.'.
bool IsDatasetName(const std::string& name);

// Bytes in decimal units, one decimal: "512 B", "4.6 kB", "12.3 MB",
// "1.2 GB".
std::string FormatDecimalBytes(int64_t bytes);

// A transfer under way, as the progress line shows it.
struct TransferProgress {
  std::string label;        // e.g. the file's name; left out when short of room
  int64_t done = 0;         // bytes done, those of an earlier try included
  int64_t total = 0;        // bytes in all
  double bytes_per_second;  // the rate of this try; <= 0: not known yet
};

// One line (no '\n', no control characters) at most width - 1 columns
// wide, so that redrawing it with '\r' never wraps:
//   customers.csv  [########..........]  42%  5.2/12.3 MB  3.1 MB/s  ETA 0:02
// Short of room it leaves out, in this order, the bar, the label, the ETA,
// the rate and the sizes; the percentage stays.
std::string ProgressLine(const TransferProgress& progress, int width);

// "customers:3".
std::string DatasetRef(const traind::v1::Dataset& dataset);

// `datasets upload`: "key: value" lines (dataset, sha256, size, rows,
// columns) fitting `width` columns.
std::string RenderDatasetSummary(const traind::v1::Dataset& dataset, int width = 80);

// `datasets list`: NAME VERSION SIZE CREATED SHA256 (its first 12 digits)
// FILE, plus OWNER when the datasets are not all one owner's.
std::string RenderDatasetList(const traind::v1::ListDatasetsResponse& response);

// `datasets get`: the dataset's fields, its profile as a table (COLUMN KIND
// MISSING DISTINCT MIN MAX MEAN, long column names shortened with "…"), the
// most frequent values of the columns that have value counts, and the jobs
// that used it; no line wider than `width` (at least 60) columns.
std::string RenderDataset(const traind::v1::Dataset& dataset, int width = 80);

// `datasets delete`: "deleted customers:3 (12.3 MB)" per dataset.
std::string RenderDeletedDatasets(const traind::v1::DeleteDatasetResponse& response);

// The digests of the files `submit` uploaded for a spec; empty: that file
// was not uploaded.
struct SpecUploads {
  std::string data_sha256;
  std::string validation_sha256;
};

// The --set overrides that make a spec name the uploaded files instead of
// their paths, to apply after the user's:
//   data.path=  data.dataset=sha256:<hex>
//   cross_validation.validation_path=  cross_validation.validation_dataset=sha256:<hex>
std::vector<std::string> DatasetOverrides(const SpecUploads& uploads);

}  // namespace traind::client

#endif  // TRAIND_CLIENT_DATASET_RENDER_H_
