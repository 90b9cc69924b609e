// Hyperparameter search: the trials a spec's `search` section expands to,
// and where each trial's tasks sit among the job's.
//
// A search job's tasks are its trials' tasks, trial by trial: trial i owns
// tasks [i · T, (i + 1) · T), T = the fold tasks of the base spec (folds ×
// repeats); with search.refit_best one more task, last, trains the best
// trial's spec on all rows. Every trial's spec is the base spec with the
// trial's values set (SetJobSpecField) and `search` cleared; the trials
// share the data, the folds and the resources.
//
// Values are drawn from spec.seed with a generator of traind's own (the same
// on every machine and run): trial i's value of dimension d depends on
// (seed, i, d) only.
//
// Thread-safety: pure functions.
#ifndef TRAIND_SPEC_SEARCH_H_
#define TRAIND_SPEC_SEARCH_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "traind/v1/job.pb.h"

namespace traind::spec {

// Limit on a search's trials, whatever the task limit.
inline constexpr int64_t kMaxSearchTrials = 10000;

// The shape of `search` (paths that may vary, ranges, the sampler); does
// not set values (MakeTrial does). InvalidSpecError naming the field
// ("search.space[1].log_uniform.low: must be > 0, got 0").
absl::Status CheckSearchSpec(const traind::v1::JobSpec& spec);

// Trials of the search (0 without one). With grid: the product of the
// `values` lists' sizes (saturating at kMaxSearchTrials + 1).
// REQUIRES: CheckSearchSpec(spec) is ok.
int64_t SearchTrials(const traind::v1::JobSpec& spec);

struct Trial {
  int index = 0;
  traind::v1::JobSpec spec;  // the base spec with the values set, no search
  // (path, value as JSON text) in the order of search.space.
  std::vector<std::pair<std::string, std::string>> params;
};
// Trial `index` of the search. An error names the dimension and the value
// ("search.space[0] (model.layers[0].dense.units = 0): ...").
// REQUIRES: CheckSearchSpec(spec) is ok, 0 <= index < SearchTrials(spec).
absl::StatusOr<Trial> MakeTrial(const traind::v1::JobSpec& spec, int index);

// The metric trials are scored on: search.metric and search.mode resolved
// against the base spec's metrics as at submit (val.loss, min, when they do
// not resolve: the spec was not validated).
struct SearchScore {
  std::string key = "loss";  // the val.* metric's name ("accuracy")
  bool maximize = false;
};
SearchScore SearchScoreOf(const traind::v1::JobSpec& spec);

// Where a task of a search job belongs. REQUIRES: spec.has_search().
struct SearchTask {
  int trial = -1;     // -1: the refit of the best trial
  int spec_task = 0;  // the task within the trial's spec
};
SearchTask LocateSearchTask(const traind::v1::JobSpec& spec, int task);

// The spec the refit of trial `best` trains: its trial spec with
// cross_validation.refit set; the task to run is its refit task.
absl::StatusOr<std::pair<traind::v1::JobSpec, int>> RefitBestSpec(const traind::v1::JobSpec& spec,
                                                                  int best);

}  // namespace traind::spec

#endif  // TRAIND_SPEC_SEARCH_H_
