// Metrics of a pass (an epoch's training batches or a validation pass) from
// its predictions, as scikit-learn computes them.
#ifndef TRAIND_WORKER_ENGINE_METRICS_H_
#define TRAIND_WORKER_ENGINE_METRICS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "google/protobuf/map.h"
#include "spec/checks.h"
#include "traind/v1/job.pb.h"

namespace traind::engine {

// The predictions of a pass and the true targets, row by row.
struct PassPredictions {
  data::TargetKind target = data::TargetKind::kClasses;
  int64_t rows = 0;
  int64_t width = 0;
  // [rows, width]: class probabilities (kClasses), positive-class / label
  // probabilities (kBinary: width 1, kMultiLabel), predicted values.
  const float* scores = nullptr;
  const int32_t* classes = nullptr;  // [rows] true classes (kClasses, kBinary)
  const float* values = nullptr;     // [rows, width] true 0/1 labels or values
};

// One metric (never LOSS: the loss comes from the loss function).
// - accuracy: argmax (classes), p > 0.5 (binary), all labels right
//   (multi-label).
// - top_k_accuracy: the true class has fewer than k strictly larger scores.
// - precision/recall/f1: macro over the classes present in the truth or the
//   predictions (scikit-learn's labels), micro, weighted by support;
//   zero_division = 0. Binary targets count as two classes; multi-label per
//   label (p > 0.5), macro over all labels.
// - roc_auc: Mann-Whitney with ties counted half; macro over the labels
//   with both values present (multi-label); for 2-class softmax, p[:, 1].
//   NaN when undefined (one class only).
// - log_loss: mean -log p of the truth, p clipped to [1e-15, 1 - 1e-15];
//   multi-label: mean over all labels.
// - mse, mae: mean over all values; rmse: mean over outputs of each
//   output's sqrt(mse); r2: mean over outputs of 1 - SS_res / SS_tot (1 when
//   both are 0, 0 when only SS_tot is).
double ComputeMetric(traind::v1::Metric metric, const PassPredictions& p, int top_k);

// out[MetricName(m)] for each m in `metrics`; LOSS is `loss`.
void WriteMetrics(const std::vector<traind::v1::Metric>& metrics, const PassPredictions& p,
                  double loss, int top_k, google::protobuf::Map<std::string, double>* out);

}  // namespace traind::engine

#endif  // TRAIND_WORKER_ENGINE_METRICS_H_
