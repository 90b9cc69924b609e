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

// predictions.csv, and the output of predict (predict.h): a header and one
// line per row: its row index and its `outputs` predictions (pred:
// [rows.size(), outputs]). Columns:
// - kClasses: row, label, p_<class> per class; label is the class of the
//   highest probability (the first on ties).
// - kBinary: row, label, p_<classes[1]>; label is classes[1] when p > 0.5 (as the metrics count
// it),
//   else classes[0].
// - kMultiLabel: row, p_<label> per target column (no label column).
// - kRegression: row, prediction (one target), or one column per target
//   named after it.
// Values are printed with 9 significant digits (a float round-trips); names
// are quoted as RFC 4180 says when they hold a comma, quote or line break.
std::string PredictionsCsv(const PredictionColumns& columns, int64_t outputs,
                           absl::Span<const int64_t> rows, const float* pred);
// The columns of `data`'s target.
std::string PredictionsCsv(const data::Dataset& data, int64_t outputs,
                           absl::Span<const int64_t> rows, const float* pred);

}  // namespace traind::engine

#endif  // TRAIND_WORKER_ENGINE_FIT_ARTIFACTS_H_
