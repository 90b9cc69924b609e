// The memory a task of a spec needs, for the scheduler's placement.
#ifndef TRAIND_SPEC_MEMORY_ESTIMATE_H_
#define TRAIND_SPEC_MEMORY_ESTIMATE_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "traind/v1/job.pb.h"

namespace traind::spec {

// What EstimateMemoryBytes adds up, in bytes.
struct MemoryEstimate {
  int64_t parameters = 0;       // weights, biases, norm scales and running statistics
  int64_t gradients = 0;        // one per trainable parameter
  int64_t optimizer_state = 0;  // momenta (sgd 1x with momentum, adam/adamw 2x, rmsprop 1-2x)
  int64_t best_weights = 0;     // host copy for early_stopping.restore_best / save_best
  int64_t activations = 0;      // per batch size: outputs, gradients, masks, saved statistics,
                                // for the training batch and the evaluation batch
  int64_t workspace = 0;        // kernels' scratch space and fixed overhead
  int64_t total() const {
    return parameters + gradients + optimizer_state + best_weights + activations + workspace;
  }
};

// For a spec that CheckTrainingSpec accepts, with `features` model inputs
// (after one-hot encoding) and `outputs` model outputs. Excludes the data
// set itself (its size depends on the file, not the spec). float32 tensors.
MemoryEstimate EstimateMemory(const traind::v1::JobSpec& spec, int64_t features, int64_t outputs);
int64_t EstimateMemoryBytes(const traind::v1::JobSpec& spec, int64_t features, int64_t outputs);

// What one task of a validated job needs, for placement. The model's part
// is the largest of the spec's and its search trials' (their layers and
// batch sizes may differ); the host's adds the table the worker holds (the
// parsed values and the folds' copies, 24 bytes a cell of `rows` rows of
// `features` + `outputs` columns) and the worker process itself (256 MiB).
// A batch_size above `rows` counts as `rows` (all of them at a time).
struct TaskMemory {
  int64_t model_bytes = 0;  // on the device (EstimateMemoryBytes)
  int64_t host_bytes = 0;   // on the host
};
absl::StatusOr<TaskMemory> EstimateTaskMemory(const traind::v1::JobSpec& spec, int64_t features,
                                              int64_t outputs, int64_t rows);

}  // namespace traind::spec

#endif  // TRAIND_SPEC_MEMORY_ESTIMATE_H_
