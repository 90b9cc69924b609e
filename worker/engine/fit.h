// The fit loop: trains one fold of a job spec and reports every epoch.
#ifndef TRAIND_WORKER_ENGINE_FIT_H_
#define TRAIND_WORKER_ENGINE_FIT_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "traind/v1/job.pb.h"
#include "worker/engine/data/dataset.h"
#include "worker/engine/data/split.h"

namespace traind::engine {

// Receives progress from Fit, on Fit's thread.
class FitObserver {
 public:
  virtual ~FitObserver() = default;
  // After every epoch (after validation). A non-ok status stops training;
  // Fit returns it.
  virtual absl::Status OnEpochEnd(const traind::v1::EpochMetrics& metrics) = 0;
  // Polled after every batch; true stops the run: Fit returns CancelledError.
  virtual bool StopRequested() = 0;
};

struct FitOptions {
  int32_t task = 0;     // copied into EpochMetrics.task
  int32_t attempt = 1;  // copied into EpochMetrics.attempt
};

// Trains spec.model on rows.train of `data` and validates on rows.val after
// every epoch.
//
// - Features are standardized with statistics fitted on rows.train only when
//   spec.data().standardize().
// - Loss: softmax cross-entropy, the batch mean. Optimizer: spec.optimizer().
// - spec.training(): `epochs` passes, or `batches` optimizer steps in all (the
//   last, partial epoch is reported as an epoch); batches of batch_size rows,
//   the last batch of an epoch possibly smaller; training rows reshuffled every
//   epoch unless training.shuffle is false.
// - Initialization and shuffling are drawn from PRNGs seeded from (spec.seed(),
//   fold): the same inputs give bit-identical results for the same number of
//   threads.
// - Train metrics accumulate over the epoch's batches (from each batch's
//   forward pass, before its update); validation metrics come from a full
//   pass over rows.val after the epoch. Empty metric lists mean {loss,
//   accuracy}.
//
// Returns the fold's result: best_epoch has the lowest validation loss (the
// first on ties; the last epoch when rows.val is empty, and then `val` is
// empty), `val` holds its validation metrics, `final_train` the last epoch's
// training metrics.
//
// Errors: InvalidSpecError (field path in the message) for a spec that cannot
// run on this data (e.g. "model.layers[2].dense.units: 4 units, but the data
// has 3 classes"); DivergedError when a batch's loss is NaN or infinite
// ("loss became nan at epoch 3, batch 17", batches counted from 1 within the
// epoch); CancelledError when the observer asks to stop; the observer's own
// error; OutOfMemoryError / DeviceError from the backend.
//
// `observer` may be null. Row indices out of [0, data.rows), or a dataset
// whose sizes disagree, are an absl::InvalidArgumentError.
absl::StatusOr<traind::v1::FoldResult> Fit(const traind::v1::JobSpec& spec, const Dataset& data,
                                           const FoldRows& rows, int32_t fold,
                                           const FitOptions& options, FitObserver* observer);

}  // namespace traind::engine

#endif  // TRAIND_WORKER_ENGINE_FIT_H_
