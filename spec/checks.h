// Checks of the parts of a JobSpec that need no data: model, loss,
// optimizer, schedule, training, metrics, early stopping, checkpoints and the
// shape of the data and cross-validation sections. Needs no oneDNN, so the
// server can reject a spec at submission with the same messages the worker
// would give. Also the spec's derived facts shared by the server and the
// engine: the target kind, metric names and directions, monitors.
#ifndef TRAIND_SPEC_CHECKS_H_
#define TRAIND_SPEC_CHECKS_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "data/target.h"
#include "google/protobuf/repeated_field.h"
#include "traind/v1/job.pb.h"

namespace traind::spec {

// InvalidSpecError naming the first bad field ("model.layers[1].dense.units:
// must be positive, got 0"), or ok. Does not check what needs the data (the
// input width, the number of classes, the lengths of class_weights and
// pos_weight).
absl::Status CheckTrainingSpec(const traind::v1::JobSpec& spec);

// The sections CheckTrainingSpec checks, one by one (same messages).
absl::Status CheckModelSpec(const traind::v1::ModelSpec& model);
absl::Status CheckOptimizerSpec(const traind::v1::OptimizerSpec& optimizer);

// Width of the model's output for `inputs` input features: the last dense
// layer's units (layers after it keep the width).
int64_t ModelOutputs(const traind::v1::ModelSpec& model, int64_t inputs);

// Lower-case metric name used as the key of metric maps: "loss", "accuracy",
// "f1_macro", ... Empty for METRIC_UNSPECIFIED and unknown values.
std::string MetricName(traind::v1::Metric metric);
// True when larger values of the metric are better (accuracy, f1, r2, ...),
// false for loss, log_loss and the errors.
bool HigherIsBetter(traind::v1::Metric metric);

// The metrics a list asks for: {LOSS, ACCURACY} when empty; otherwise the
// list, without repeats. `field` ("metrics.train") is used in messages;
// METRIC_UNSPECIFIED or an unknown value is an InvalidSpecError.
absl::StatusOr<std::vector<traind::v1::Metric>> ResolveMetrics(
    const google::protobuf::RepeatedField<int>& metrics, const std::string& field);
// As above for a target kind: the defaults are {loss, accuracy} for class
// targets and {loss} for regression; a metric that does not apply to the
// target (accuracy of a regression, r2 of classes) is an InvalidSpecError.
absl::StatusOr<std::vector<traind::v1::Metric>> ResolveMetrics(
    const google::protobuf::RepeatedField<int>& metrics, const std::string& field,
    data::TargetKind target);

// The metrics the spec computes: metrics.train and metrics.val resolved
// (metrics.val defaults to metrics.train), each with loss first when the
// list leaves it out: the loss is always reported.
struct ResolvedMetrics {
  std::vector<traind::v1::Metric> train, val;
};
absl::StatusOr<ResolvedMetrics> ResolveSpecMetrics(const traind::v1::JobSpec& spec);

// A monitored metric ("val.f1_macro") with its direction.
struct Monitor {
  bool val = true;  // val.* (else train.*)
  traind::v1::Metric metric = traind::v1::LOSS;
  bool maximize = false;
  // "val.f1_macro (max)"
  std::string Describe() const;
  std::string key() const;  // "f1_macro"
};

// Parses `text` ("val.loss" when empty) against the metrics the spec
// computes; `mode` MODE_AUTO takes the metric's own direction. Errors name
// `field` ("early_stopping.monitor: val.f1_macro is not computed (metrics.val:
// loss, accuracy)").
absl::StatusOr<Monitor> ResolveMonitor(const std::string& text, traind::v1::Mode mode,
                                       const ResolvedMetrics& metrics, const std::string& field);

// How the best epoch of a fold is chosen: early_stopping.monitor when set,
// else checkpoint.monitor when save_best, else val.loss (min).
absl::StatusOr<Monitor> SelectionMonitor(const traind::v1::JobSpec& spec);

// True when the spec validates (cross-validation, holdout or a validation
// file).
bool HasValidation(const traind::v1::JobSpec& spec);

// training.precision of a job on the CPU: fp32 (or unspecified) always,
// bf16 when `cpu_bf16`; tf32 is a GPU mode. The InvalidSpecError names the
// field. Used at submit (ValidateJobSpec) and by the worker's CPU backend.
absl::Status CheckCpuPrecision(traind::v1::Precision precision, bool cpu_bf16);

}  // namespace traind::spec

#endif  // TRAIND_SPEC_CHECKS_H_
