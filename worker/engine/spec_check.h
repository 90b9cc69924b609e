// Checks of the parts of a JobSpec that the engine runs: model, loss,
// optimizer, training and metrics. Needs no data and no oneDNN, so the server
// can reject a spec at submission with the same messages the worker would give.
#ifndef TRAIND_WORKER_ENGINE_SPEC_CHECK_H_
#define TRAIND_WORKER_ENGINE_SPEC_CHECK_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "google/protobuf/repeated_field.h"
#include "traind/v1/job.pb.h"

namespace traind::engine {

// InvalidSpecError naming the first bad field ("model.layers[1].dense.units:
// must be positive, got 0"), or ok. Does not check what needs the data (the
// input width, the number of classes) or the cross-validation section.
absl::Status CheckTrainingSpec(const traind::v1::JobSpec& spec);

// The sections CheckTrainingSpec checks, one by one (same messages).
absl::Status CheckModelSpec(const traind::v1::ModelSpec& model);
absl::Status CheckOptimizerSpec(const traind::v1::OptimizerSpec& optimizer);

// Lower-case metric name used as the key of metric maps: "loss", "accuracy".
// Empty for METRIC_UNSPECIFIED and unknown values.
std::string MetricName(traind::v1::Metric metric);

// The metrics a list asks for: {LOSS, ACCURACY} when empty; otherwise the
// list, without repeats. `field` ("metrics.train") is used in messages;
// METRIC_UNSPECIFIED or an unknown value is an InvalidSpecError.
absl::StatusOr<std::vector<traind::v1::Metric>> ResolveMetrics(
    const google::protobuf::RepeatedField<int>& metrics, const std::string& field);

}  // namespace traind::engine

#endif  // TRAIND_WORKER_ENGINE_SPEC_CHECK_H_
