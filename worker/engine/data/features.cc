#include "worker/engine/data/features.h"

#include <algorithm>
#include <cmath>

namespace traind::engine {

void FeaturePipeline::Fit(const traind::v1::DataSpec& spec, const data::Dataset& data,
                          const std::vector<int64_t>& train) {
  const int64_t f = data.features;
  impute.assign(static_cast<size_t>(f), 0.0);
  offset.assign(static_cast<size_t>(f), 0.0);
  scale.assign(static_cast<size_t>(f), 1.0);
  std::vector<double> values;
  values.reserve(train.size());
  traind::v1::Scaling scaling = spec.scaling();
  if (scaling == traind::v1::SCALING_UNSPECIFIED && spec.standardize())
    scaling = traind::v1::STANDARD;
  for (int64_t j = 0; j < f; ++j) {
    values.clear();
    for (int64_t r : train) {
      const float v = data.x[static_cast<size_t>(r * f + j)];
      if (!std::isnan(v)) values.push_back(v);
    }
    double fill = 0;
    if (!values.empty()) {
      if (spec.missing() == traind::v1::IMPUTE_MEDIAN) {
        std::vector<double> sorted = values;
        std::sort(sorted.begin(), sorted.end());
        const size_t n = sorted.size();
        fill = n % 2 == 1 ? sorted[n / 2] : 0.5 * (sorted[n / 2 - 1] + sorted[n / 2]);
      } else {
        double sum = 0;
        for (double v : values) sum += v;
        fill = sum / static_cast<double>(values.size());
      }
    }
    impute[j] = fill;
    // Scaling statistics over the imputed training column (missing values
    // count as the fill value, as scikit-learn's imputer-then-scaler does).
    const size_t missing = train.size() - values.size();
    for (size_t k = 0; k < missing; ++k) values.push_back(fill);
    if (values.empty()) continue;
    if (scaling == traind::v1::STANDARD) {
      double sum = 0;
      for (double v : values) sum += v;
      const double mean = sum / static_cast<double>(values.size());
      double sq = 0;
      for (double v : values) sq += (v - mean) * (v - mean);
      const double sd = std::sqrt(sq / static_cast<double>(values.size()));
      offset[j] = mean;
      scale[j] = sd > 0 ? sd : 1.0;
    } else if (scaling == traind::v1::MIN_MAX) {
      const auto [lo, hi] = std::minmax_element(values.begin(), values.end());
      offset[j] = *lo;
      scale[j] = *hi - *lo > 0 ? *hi - *lo : 1.0;
    }
  }
  categories.assign(data.categorical.size(), {});
  for (size_t k = 0; k < data.categorical.size(); ++k) {
    const data::CategoricalColumn& column = data.categorical[k];
    std::vector<bool> seen(column.values.size(), false);
    for (int64_t r : train) {
      const int32_t code = column.codes[static_cast<size_t>(r)];
      if (code >= 0) seen[static_cast<size_t>(code)] = true;
    }
    for (size_t c = 0; c < seen.size(); ++c) {
      if (seen[c]) categories[k].push_back(static_cast<int32_t>(c));
    }
  }
}

int64_t FeaturePipeline::width() const {
  int64_t w = static_cast<int64_t>(impute.size());
  for (const auto& c : categories) w += static_cast<int64_t>(c.size());
  return w;
}

void FeaturePipeline::Transform(const data::Dataset& data, FeatureMatrix* out) const {
  const int64_t f = data.features;
  const int64_t w = width();
  out->assign(static_cast<size_t>(data.rows * w), 0.0f);
  // Category code -> output column, per categorical column (-1: none).
  std::vector<std::vector<int64_t>> column_of(categories.size());
  int64_t next = f;
  for (size_t k = 0; k < categories.size(); ++k) {
    column_of[k].assign(data.categorical[k].values.size(), -1);
    for (int32_t code : categories[k]) column_of[k][static_cast<size_t>(code)] = next++;
  }
  for (int64_t r = 0; r < data.rows; ++r) {
    float* row = out->data() + r * w;
    const float* in = data.x.data() + r * f;
    for (int64_t j = 0; j < f; ++j) {
      const double v = std::isnan(in[j]) ? impute[j] : in[j];
      row[j] = static_cast<float>((v - offset[j]) / scale[j]);
    }
    for (size_t k = 0; k < categories.size(); ++k) {
      const int32_t code = data.categorical[k].codes[static_cast<size_t>(r)];
      if (code < 0) continue;
      const int64_t c = column_of[k][static_cast<size_t>(code)];
      if (c >= 0) row[c] = 1.0f;
    }
  }
}

}  // namespace traind::engine
