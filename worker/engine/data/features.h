// The per-fold feature pipeline: imputation, scaling and one-hot encoding,
// fitted on the training rows only.
#ifndef TRAIND_WORKER_ENGINE_DATA_FEATURES_H_
#define TRAIND_WORKER_ENGINE_DATA_FEATURES_H_

#include <cstdint>
#include <string>
#include <vector>

#include "data/dataset.h"
#include "traind/v1/job.pb.h"
#include "worker/engine/data/huge_pages.h"

namespace traind::engine {

// Output columns: the numeric features in order, each imputed (when
// data.missing imputes: the training rows' mean or median of the column, 0
// when they have no value) and then scaled (data.scaling), followed by one
// 0/1 column per (categorical column, category seen in the training rows),
// categories ascending. A category not seen in training, or a missing one,
// encodes as all zeros.
//
// Thread safety: const methods may be called concurrently.
class FeaturePipeline {
 public:
  FeaturePipeline() = default;

  // Fits on data's rows `train` as data.scaling / data.missing say.
  // Images (data.image_shape; no imputation): per channel, data.normalize's
  // mean and std, or the scaling's statistics over every pixel of the
  // channel in the training rows; for bytes the scale includes the 1/255.
  // REQUIRES: every index in train is in [0, data.rows).
  void Fit(const traind::v1::DataSpec& spec, const data::Dataset& data,
           const std::vector<int64_t>& train);

  // All rows of `data`: out = [data.rows, width()].
  void Transform(const data::Dataset& data, FeatureMatrix* out) const;

  int64_t width() const;

 private:
  void FitImages(const traind::v1::DataSpec& spec, const data::Dataset& data,
                 const std::vector<int64_t>& train);

 public:
  // Fitted state (for checkpoints and tests).
  std::vector<double> impute;  // per numeric feature
  std::vector<double> offset;  // x' = (x - offset) / scale
  std::vector<double> scale;
  // Per categorical column: the code in the data's values of each output
  // column.
  std::vector<std::vector<int32_t>> categories;
};

}  // namespace traind::engine

#endif  // TRAIND_WORKER_ENGINE_DATA_FEATURES_H_
