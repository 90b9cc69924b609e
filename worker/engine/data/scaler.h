// Feature standardization (scikit-learn's StandardScaler).
#ifndef TRAIND_WORKER_ENGINE_DATA_SCALER_H_
#define TRAIND_WORKER_ENGINE_DATA_SCALER_H_

#include <cstdint>
#include <vector>

#include "data/dataset.h"

namespace traind::engine {

// x' = (x - mean) / scale per feature, with the mean and the population
// standard deviation (ddof = 0) fitted on chosen rows only. A constant feature
// (zero standard deviation) gets scale 1, so it becomes 0.
//
// Thread safety: const methods may be called concurrently.
class Standardizer {
 public:
  Standardizer() = default;
  // A fitted scaler from stored statistics (e.g. a checkpoint).
  // REQUIRES: mean.size() == scale.size(); every scale > 0.
  Standardizer(std::vector<double> mean, std::vector<double> scale);

  // Fits on d.x's rows `rows` (accumulated in double, two passes).
  // REQUIRES: every index in rows is in [0, d.rows). No rows: mean 0, scale 1.
  void Fit(const data::Dataset& d, const std::vector<int64_t>& rows);

  // Standardizes x: [rows, features] in place.
  // REQUIRES: fitted, features == this->features().
  void Transform(float* x, int64_t rows, int64_t features) const;

  const std::vector<double>& mean() const { return mean_; }
  const std::vector<double>& scale() const { return scale_; }
  int64_t features() const { return static_cast<int64_t>(mean_.size()); }

 private:
  std::vector<double> mean_;
  std::vector<double> scale_;
};

}  // namespace traind::engine

#endif  // TRAIND_WORKER_ENGINE_DATA_SCALER_H_
