// The files a task leaves: checkpoint directories, periodic checkpoints
// ("epoch-<NNNNNN>.ckpt", pruned to the newest `keep`), best.ckpt, and
// predictions.csv (whose writer predict's output shares; model.ckpt is
// model_file.h's). Every error is an absl::Status naming the path
// (InternalError); nothing here knows the training state.
#ifndef TRAIND_WORKER_ENGINE_FIT_ARTIFACTS_H_
#define TRAIND_WORKER_ENGINE_FIT_ARTIFACTS_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "data/dataset.h"
#include "traind/v1/job.pb.h"

namespace traind::engine {

// Creates `path` and its missing parents; an existing directory is fine.
absl::Status MakeDirs(const std::string& path);

// Writes `text` to `path` atomically (a temporary file beside it, renamed).
absl::Status WriteTextFile(const std::string& path, const std::string& text);

// "<dir>/epoch-000042.ckpt".
std::string PeriodicCheckpointPath(const std::string& dir, int32_t epoch);
// "<dir>/best.ckpt".
std::string BestCheckpointPath(const std::string& dir);

// The periodic checkpoints in `dir` as (epoch, path), newest first; none
// when `dir` does not exist. Other files are ignored.
std::vector<std::pair<int32_t, std::string>> PeriodicCheckpoints(const std::string& dir);

// Removes all but the newest `keep` periodic checkpoints of `dir`.
absl::Status PrunePeriodicCheckpoints(const std::string& dir, int keep);

// What a predictions CSV's columns are named after: the target kind, the
// class names (kClasses, kBinary) and the target columns (kMultiLabel,
// kRegression).
struct PredictionColumns {
  data::TargetKind target = data::TargetKind::kClasses;
  absl::Span<const std::string> classes;
  absl::Span<const std::string> target_names;
};

// Columns between `row` and the predictions (ids, fold, true targets):
// their names and each line's cells [lines, names.size()] as text (quoted
// on output as RFC 4180 says).
struct LeadColumns {
  std::vector<std::string> names;
  std::vector<std::string> cells;
};

// predictions.csv, and the output of predict (predict.h): a header and one
// line per row: its row index, its `lead` cells, and its `outputs`
// predictions (pred: [rows.size(), outputs]). Prediction columns:
// - kClasses: label, p_<class> per class; label is the class of the
//   highest probability (the first on ties).
// - kBinary: label, p_<classes[1]>; label is classes[1] when p > 0.5 (as
//   the metrics count it), else classes[0].
// - kMultiLabel: p_<label> per target column (no label column).
// - kRegression: prediction (one target), or one column per target named
//   after it.
// Values are printed with 9 significant digits (a float round-trips); names
// and cells are quoted as RFC 4180 says when they hold a comma, quote or
// line break.
std::string PredictionsCsv(const PredictionColumns& columns, int64_t outputs,
                           absl::Span<const int64_t> rows, const float* pred,
                           const LeadColumns& lead = {});

// The name of the true-target column of target column `k` of `data`:
// "true_<column>" ("true_label" for images' class labels).
std::string TrueColumnName(const data::Dataset& data, size_t k);

// The lead columns of task `task`'s validation `rows` of `data` (spec: the
// task's spec): the id columns (data.id_names, or an image folder's "file"),
// "fold" (the task's fold within its repeat, from 0), "repeat" when the
// spec repeats its folds, and the true target: true_<label> (the class
// name) or one true_<column> per target column (0/1, or the value).
LeadColumns ValidationLeadColumns(const traind::v1::JobSpec& spec, const data::Dataset& data,
                                  int task, absl::Span<const int64_t> rows);

// predictions.csv of task `task`'s validation rows: ValidationLeadColumns,
// then the predictions of `data`'s target.
std::string ValidationPredictionsCsv(const traind::v1::JobSpec& spec, const data::Dataset& data,
                                     int task, int64_t outputs, absl::Span<const int64_t> rows,
                                     const float* pred);

}  // namespace traind::engine

#endif  // TRAIND_WORKER_ENGINE_FIT_ARTIFACTS_H_
