// Job results: the per-fold results and their summary (mean and standard
// deviation over folds of every validation metric), and the one file of
// every fold's out-of-fold predictions.
//
// Thread-safety: pure functions, except MergePredictions, which reads and
// writes files (call it without holding the scheduler's mutex).
#ifndef TRAIND_SERVER_SCHEDULER_JOB_RESULTS_H_
#define TRAIND_SERVER_SCHEDULER_JOB_RESULTS_H_

#include <optional>
#include <string>
#include <vector>

#include "traind/v1/job.pb.h"

namespace traind::server {

// Rewrites the folds, refit and val summary of `job->result()` from the
// job's SUCCEEDED tasks (the refit task has its own place, outside the
// summary). Other fields of the result are kept.
void AggregateFoldResults(traind::v1::Job* job);

// The predictions files to merge for a job whose folds wrote them.
struct PredictionsMerge {
  std::string job_id;
  std::vector<std::string> inputs;  // each fold's file, in fold order
  std::string output;               // <state_dir>/jobs/<job>/predictions.csv
};
// Nothing to merge when no fold wrote predictions.
std::optional<PredictionsMerge> PlanPredictionsMerge(const traind::v1::Job& job,
                                                     const std::string& state_dir);
// Writes one file of every fold's predictions, ordered by row (each file
// has the same header; its first column is the row index). Returns the
// output's path, or nothing (logged) when a file cannot be read or written.
std::optional<std::string> MergePredictions(const PredictionsMerge& merge);

}  // namespace traind::server

#endif  // TRAIND_SERVER_SCHEDULER_JOB_RESULTS_H_
