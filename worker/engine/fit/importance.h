// Permutation feature importance (JobSpec.importance, job.proto): after
// training, each fold task shuffles one feature's values among its
// validation rows, scores the model on them, and restores them.
//
// Thread safety: pure functions over the caller's buffers.
#ifndef TRAIND_WORKER_ENGINE_FIT_IMPORTANCE_H_
#define TRAIND_WORKER_ENGINE_FIT_IMPORTANCE_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "data/dataset.h"
#include "traind/v1/job.pb.h"
#include "worker/engine/data/features.h"

namespace traind::engine {

// A feature as the network sees it: columns [first, first + count) of the
// feature pipeline's output.
struct InputFeature {
  std::string name;
  int64_t first = 0;
  int64_t count = 0;
};

// The features of `data` after `pipeline` (FeaturePipeline's column order):
// each numeric column, then each categorical column as one feature (its
// one-hot columns together; a column with no category seen in training
// has none and is left out).
std::vector<InputFeature> InputFeatures(const data::Dataset& data, const FeaturePipeline& pipeline);

// ImportanceSpec.repeats with its default (5).
int ImportanceRepeats(const traind::v1::ImportanceSpec& spec);

// Permutation importance of each of `features` over `rows` of `matrix`
// ([*, width], row-major): for each feature and each of `repeats` repeats,
// the feature's columns of `rows` are permuted among the rows (the
// permutation drawn from DeriveSeed(seed, feature index, repeat)),
// `score()` scores the model on the matrix, and the values are restored.
// A repeat's importance is baseline - score (`maximize`) or score -
// baseline: positive when shuffling the feature made the model worse.
// Returns one entry per feature, in order, with each repeat's value, their
// mean and population std. `matrix` holds its original values on return,
// an error from `score` or not.
absl::StatusOr<std::vector<traind::v1::FeatureImportance>> PermutationImportance(
    absl::Span<const InputFeature> features, int repeats, uint64_t seed,
    absl::Span<const int64_t> rows, int64_t width, float* matrix, double baseline, bool maximize,
    const std::function<absl::StatusOr<double>()>& score);

}  // namespace traind::engine

#endif  // TRAIND_WORKER_ENGINE_FIT_IMPORTANCE_H_
