#include "worker/engine/data/scaler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

namespace traind::engine {

Standardizer::Standardizer(std::vector<double> mean, std::vector<double> scale)
    : mean_(std::move(mean)), scale_(std::move(scale)) {}

void Standardizer::Fit(const data::Dataset& d, const std::vector<int64_t>& rows) {
  const size_t f = static_cast<size_t>(d.features);
  mean_.assign(f, 0.0);
  scale_.assign(f, 1.0);
  if (rows.empty()) return;
  std::vector<float> lo(f, std::numeric_limits<float>::infinity());
  std::vector<float> hi(f, -std::numeric_limits<float>::infinity());
  for (int64_t r : rows) {
    const float* x = d.x.data() + static_cast<size_t>(r) * f;
    for (size_t j = 0; j < f; ++j) {
      mean_[j] += x[j];
      lo[j] = std::min(lo[j], x[j]);
      hi[j] = std::max(hi[j], x[j]);
    }
  }
  const double n = static_cast<double>(rows.size());
  for (size_t j = 0; j < f; ++j) mean_[j] /= n;
  std::vector<double> sum_sq(f, 0.0);
  for (int64_t r : rows) {
    const float* x = d.x.data() + static_cast<size_t>(r) * f;
    for (size_t j = 0; j < f; ++j) {
      const double dev = x[j] - mean_[j];
      sum_sq[j] += dev * dev;
    }
  }
  for (size_t j = 0; j < f; ++j) {
    const double std = std::sqrt(sum_sq[j] / n);
    // A constant column can leave a rounding residue instead of an exact 0.
    const bool constant =
        lo[j] == hi[j] || std < 10 * std::numeric_limits<double>::epsilon() * std::abs(mean_[j]);
    scale_[j] = constant || std == 0 ? 1.0 : std;
  }
}

void Standardizer::Transform(float* x, int64_t rows, int64_t features) const {
  const size_t f = static_cast<size_t>(features);
  for (int64_t r = 0; r < rows; ++r) {
    float* row = x + static_cast<size_t>(r) * f;
    for (size_t j = 0; j < f; ++j) {
      row[j] = static_cast<float>((row[j] - mean_[j]) / scale_[j]);
    }
  }
}

}  // namespace traind::engine
