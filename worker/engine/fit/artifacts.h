// The files a task leaves: checkpoint directories, periodic checkpoints
// ("epoch-<NNNNNN>.ckpt", pruned to the newest `keep`), best.ckpt,
// predictions.csv and model.ckpt. Every error is an absl::Status naming the
// path (InternalError); nothing here knows the training state.
#ifndef TRAIND_WORKER_ENGINE_FIT_ARTIFACTS_H_
#define TRAIND_WORKER_ENGINE_FIT_ARTIFACTS_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "worker/engine/data/dataset.h"

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

// predictions.csv: a header ("row", then p_<class> / prediction / the target
// names, as the target kind has them) and one line per row: its data row
// index and its `outputs` predictions (pred: [rows.size(), outputs]).
std::string PredictionsCsv(const Dataset& data, int64_t outputs, absl::Span<const int64_t> rows,
                           const float* pred);

}  // namespace traind::engine

#endif  // TRAIND_WORKER_ENGINE_FIT_ARTIFACTS_H_
