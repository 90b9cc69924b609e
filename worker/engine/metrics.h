// Metric accumulation over a pass (an epoch's training batches or a
// validation pass).
#ifndef TRAIND_WORKER_ENGINE_METRICS_H_
#define TRAIND_WORKER_ENGINE_METRICS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "google/protobuf/map.h"
#include "traind/v1/job.pb.h"
#include "worker/engine/backend/backend.h"

namespace traind::engine {

class MetricAccumulator {
 public:
  // Adds a batch's sums (LossStats of `rows` rows).
  void Add(const LossStats& stats, int64_t rows) {
    loss_sum_ += stats.loss_sum;
    correct_ += stats.correct;
    rows_ += rows;
  }
  void Reset() { *this = MetricAccumulator(); }

  int64_t rows() const { return rows_; }
  // Row-weighted mean loss; 0 with no rows.
  double loss() const { return rows_ > 0 ? loss_sum_ / static_cast<double>(rows_) : 0.0; }
  // Fraction of rows classified correctly; 0 with no rows.
  double accuracy() const {
    return rows_ > 0 ? static_cast<double>(correct_) / static_cast<double>(rows_) : 0.0;
  }
  double value(traind::v1::Metric metric) const;

  // out[MetricName(m)] = value(m) for each m in `metrics`.
  void WriteTo(const std::vector<traind::v1::Metric>& metrics,
               google::protobuf::Map<std::string, double>* out) const;

 private:
  double loss_sum_ = 0;
  int64_t correct_ = 0;
  int64_t rows_ = 0;
};

}  // namespace traind::engine

#endif  // TRAIND_WORKER_ENGINE_METRICS_H_
