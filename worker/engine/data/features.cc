#include "worker/engine/data/features.h"

#include <algorithm>
#include <cmath>

namespace traind::engine {

namespace {

// A pixel's value: a byte, or a float of x (NaN: missing).
inline double Pixel(const data::Dataset& data, size_t i) {
  return data.pixels.empty() ? static_cast<double>(data.x[i]) : data.pixels[i];
}

}  // namespace

void FeaturePipeline::FitImages(const traind::v1::DataSpec& spec, const data::Dataset& data,
                                const std::vector<int64_t>& train) {
  const int64_t f = data.features;
  const int64_t channels = data.image_shape[0];
  const int64_t plane = f / channels;
  // Bytes are the model's input as they are: x / 255 is folded into the
  // scale, so (x / 255 - mean) / std = (x - 255 mean) / (255 std).
  const double unit = data.pixels.empty() ? 1.0 : 255.0;
  traind::v1::Scaling scaling = spec.scaling();
  if (scaling == traind::v1::SCALING_UNSPECIFIED && spec.standardize())
    scaling = traind::v1::STANDARD;
  std::vector<double> channel_offset(static_cast<size_t>(channels), 0.0);
  std::vector<double> channel_scale(static_cast<size_t>(channels), unit);
  if (spec.normalize().mean_size() > 0) {
    // Checked at submit: one value, or one per channel.
    for (int64_t c = 0; c < channels; ++c) {
      const int m = spec.normalize().mean_size() == 1 ? 0 : static_cast<int>(c);
      const int d = spec.normalize().std_size() == 1 ? 0 : static_cast<int>(c);
      channel_offset[c] = unit * spec.normalize().mean(m);
      channel_scale[c] = unit * spec.normalize().std(d);
    }
  } else if (scaling == traind::v1::STANDARD || scaling == traind::v1::MIN_MAX) {
    // Per channel, over every pixel of the training rows (torchvision's
    // per-channel mean and population std; min and max).
    for (int64_t c = 0; c < channels; ++c) {
      double sum = 0, lo = 0, hi = 0;
      bool first = true;
      for (int64_t r : train) {
        const size_t base = static_cast<size_t>(r * f + c * plane);
        for (int64_t p = 0; p < plane; ++p) {
          const double v = Pixel(data, base + static_cast<size_t>(p));
          sum += v;
          lo = first || v < lo ? v : lo;
          hi = first || v > hi ? v : hi;
          first = false;
        }
      }
      const double count = static_cast<double>(train.size()) * static_cast<double>(plane);
      if (count == 0) continue;
      if (scaling == traind::v1::MIN_MAX) {
        channel_offset[c] = lo;
        channel_scale[c] = hi - lo > 0 ? hi - lo : 1.0;
        continue;
      }
      const double mean = sum / count;
      double sq = 0;
      for (int64_t r : train) {
        const size_t base = static_cast<size_t>(r * f + c * plane);
        for (int64_t p = 0; p < plane; ++p) {
          const double d = Pixel(data, base + static_cast<size_t>(p)) - mean;
          sq += d * d;
        }
      }
      const double sd = std::sqrt(sq / count);
      channel_offset[c] = mean;
      channel_scale[c] = sd > 0 ? sd : 1.0;
    }
  }
  impute.assign(static_cast<size_t>(f), 0.0);
  offset.resize(static_cast<size_t>(f));
  scale.resize(static_cast<size_t>(f));
  for (int64_t c = 0; c < channels; ++c) {
    std::fill_n(offset.begin() + c * plane, plane, channel_offset[c]);
    std::fill_n(scale.begin() + c * plane, plane, channel_scale[c]);
  }
  categories.clear();
}

void FeaturePipeline::Fit(const traind::v1::DataSpec& spec, const data::Dataset& data,
                          const std::vector<int64_t>& train) {
  if (!data.image_shape.empty() && spec.missing() == traind::v1::MISSING_ERROR &&
      data.categorical.empty()) {
    FitImages(spec, data, train);
    return;
  }
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
  if (!data.pixels.empty()) {
    for (int64_t r = 0; r < data.rows; ++r) {
      float* row = out->data() + r * w;
      const uint8_t* in = data.pixels.data() + r * f;
      for (int64_t j = 0; j < f; ++j) row[j] = static_cast<float>((in[j] - offset[j]) / scale[j]);
    }
    return;
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
