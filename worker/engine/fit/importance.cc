#include "worker/engine/fit/importance.h"

#include <algorithm>
#include <cmath>
#include <random>

#include "base/random.h"

namespace traind::engine {

std::vector<InputFeature> InputFeatures(const data::Dataset& data,
                                        const FeaturePipeline& pipeline) {
  std::vector<InputFeature> features;
  int64_t column = 0;
  for (const std::string& name : data.feature_names) features.push_back({name, column++, 1});
  for (size_t k = 0; k < data.categorical.size() && k < pipeline.categories.size(); ++k) {
    const int64_t count = static_cast<int64_t>(pipeline.categories[k].size());
    if (count > 0) features.push_back({data.categorical[k].name, column, count});
    column += count;
  }
  return features;
}

int ImportanceRepeats(const traind::v1::ImportanceSpec& spec) {
  return spec.repeats() > 0 ? spec.repeats() : 5;
}

absl::StatusOr<std::vector<traind::v1::FeatureImportance>> PermutationImportance(
    absl::Span<const InputFeature> features, int repeats, uint64_t seed,
    absl::Span<const int64_t> rows, int64_t width, float* matrix, double baseline, bool maximize,
    const std::function<absl::StatusOr<double>()>& score) {
  std::vector<traind::v1::FeatureImportance> out;
  const size_t n = rows.size();
  std::vector<float> saved;
  std::vector<size_t> order(n);
  for (size_t f = 0; f < features.size(); ++f) {
    const InputFeature& feature = features[f];
    const size_t count = static_cast<size_t>(feature.count);
    // The rows' values of the feature, in row order.
    saved.resize(n * count);
    for (size_t i = 0; i < n; ++i) {
      const float* src = matrix + rows[i] * width + feature.first;
      std::copy(src, src + count, saved.begin() + static_cast<std::ptrdiff_t>(i * count));
    }
    auto put = [&](const std::vector<size_t>& from) {
      for (size_t i = 0; i < n; ++i) {
        const float* src = saved.data() + from[i] * count;
        std::copy(src, src + count, matrix + rows[i] * width + feature.first);
      }
    };
    traind::v1::FeatureImportance result;
    result.set_feature(feature.name);
    double sum = 0;
    for (int r = 0; r < repeats; ++r) {
      for (size_t i = 0; i < n; ++i) order[i] = i;
      std::mt19937_64 rng(DeriveSeed(seed, f, static_cast<uint64_t>(r)));
      std::shuffle(order.begin(), order.end(), rng);
      put(order);
      absl::StatusOr<double> s = score();
      for (size_t i = 0; i < n; ++i) order[i] = i;
      put(order);  // restored
      if (!s.ok()) return s.status();
      const double value = maximize ? baseline - *s : *s - baseline;
      result.add_values(value);
      sum += value;
    }
    const double mean = repeats > 0 ? sum / repeats : 0;
    double squares = 0;
    for (double v : result.values()) squares += (v - mean) * (v - mean);
    result.set_mean(mean);
    result.set_std(repeats > 0 ? std::sqrt(squares / repeats) : 0);
    out.push_back(std::move(result));
  }
  return out;
}

}  // namespace traind::engine
