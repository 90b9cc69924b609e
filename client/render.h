// trainctl's text and JSON renderings of traind's messages. Pure functions of
// their arguments (plus the local time zone for times); no gRPC.
//
// Conventions: state and reason names without prefixes (RUNNING,
// OUT_OF_MEMORY), times in local ISO-8601, metric values with 4 decimals, folds
// numbered as the server numbers them (0-based). Multi-line renderings end with
// '\n'; one-line renderings (events) do not.
#ifndef TRAIND_CLIENT_RENDER_H_
#define TRAIND_CLIENT_RENDER_H_

#include <string>

#include "google/protobuf/message.h"
#include "traind/v1/job.pb.h"
#include "traind/v1/training_service.pb.h"

namespace traind::client {

// Protobuf JSON with proto field names, default values included (scalars,
// enums, lists and maps; unset messages and unset optional fields are left
// out).
// pretty: indented, for single objects; otherwise one line (JSON Lines).
// Always ends with '\n'.
std::string ToJson(const google::protobuf::Message& message, bool pretty);

// The same as YAML (block style, proto field names). Ends with '\n'.
std::string ToYaml(const google::protobuf::Message& message);

// "RUNNING"; "-" for STATE_UNSPECIFIED.
std::string JobStateName(traind::v1::Job::State state);
std::string TaskStateName(traind::v1::Task::State state);

// The artifact name (as `trainctl download` and ListArtifacts name it) of a
// file in a job's directory on the server: "task-0/predictions.csv" for
// "<state_dir>/jobs/<id>/task-0/predictions.csv"; other paths as they are.
std::string ArtifactName(const std::string& path);

// A task as a user knows it: "fold 3", "task 0" (no cross-validation),
// "refit" (the refit task of a CV job, trained on all rows); in a search
// "trial 1 fold 0" (task 3 of 2-fold trials) or "refit of the best trial".
std::string TaskLabel(const traind::v1::JobSpec& spec, int task);

// "OUT_OF_MEMORY: message (exit code 3, signal 9)"; parts that are unset are
// left out. Empty for an empty Failure.
std::string FailureText(const traind::v1::Failure& failure);

// "submitted job <id> (<name>)\n".
std::string RenderSubmitted(const traind::v1::Job& job);

// One line per event (no '\n'), e.g.
//   fold 2  epoch 5/60  train loss 0.4123 accuracy 0.8750 | val loss 0.3911
//   accuracy 0.9000  (0.01s) fold 2 RUNNING (attempt 1, pid 1234) fold 2 FAILED
//   (attempt 1, pid 1234): OUT_OF_MEMORY: ... (exit code 3) job 42 SUCCEEDED
// `spec` gives the epoch total and whether tasks are folds ("fold") or a
// plain training job ("task"); an empty spec is fine.
std::string RenderEvent(const traind::v1::JobEvent& event, const traind::v1::JobSpec& spec);

// Per-fold table (FOLD BEST_EPOCH VAL_<METRIC>...) and the mean ± std line;
// notes an incomplete result. Empty when the result has no folds. A
// search's result: its trials table, best first, fitted to `width` columns
// (the search metric of `spec`, when given, first), then the best trial's
// folds (numbered within the trial).
std::string RenderResult(const traind::v1::JobResult& result,
                         const traind::v1::JobSpec* spec = nullptr, int width = 80);

// `trainctl result --importance`: the permutation importance over the
// folds, most important first (FEATURE IMPORTANCE STD and a bar scaled to
// the largest), fitted to `width` columns; empty without importance.
std::string RenderImportance(const traind::v1::JobResult& result, int width = 80);

// "val mean ± std over 5 folds: loss 0.0712 ± 0.0213  accuracy 0.9733 ± 0.0249"
// (no '\n'); empty when the result has no validation summary.
std::string RenderMeanStdLine(const traind::v1::JobResult& result);

// `trainctl get`: id, name, state, times, failure, task table
// (TASK STATE ATTEMPTS EPOCHS PID WAIT), task failures, and the result.
std::string RenderJob(const traind::v1::Job& job);

// `trainctl list`: ID NAME STATE TASKS CREATED (+ the next page token).
std::string RenderJobList(const traind::v1::ListJobsResponse& response);

// `trainctl cancel`: "job <id> <STATE>\n".
std::string RenderJobState(const traind::v1::Job& job);

// `trainctl devices`: ID KIND NAME STATE SLOTS CORES MEM_FREE MEM_TOTAL.
std::string RenderDevices(const traind::v1::ListDevicesResponse& response);

// `trainctl info`: "key: value" lines.
std::string RenderServerInfo(const traind::v1::ServerInfo& info);

// `trainctl artifacts`: NAME, KIND, TASK, SIZE, MODIFIED.
std::string RenderArtifacts(const traind::v1::ListArtifactsResponse& response);

}  // namespace traind::client

#endif  // TRAIND_CLIENT_RENDER_H_
