// The fit loop: trains one task of a job spec and reports every epoch.
//
// Its parts (worker/engine/fit/): fit_task (set-up: features, model,
// optimizer, loss, buffers), fit_loop (epochs, steps, windows, validation,
// checkpoints), callbacks (selection, early stopping, reduce-on-plateau,
// best checkpoint, reporting; each owns its checkpointed state),
// parallel_strategy (one rank or data parallelism), step_graph,
// artifacts (the files a task writes), tensorboard (its event file and
// callback) and backend_factory.
#ifndef TRAIND_WORKER_ENGINE_FIT_H_
#define TRAIND_WORKER_ENGINE_FIT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "data/dataset.h"
#include "data/split.h"
#include "traind/v1/job.pb.h"

namespace traind::engine {

class Backend;
class BackendFactory;
class Communicator;

// Receives progress from Fit, on Fit's thread.
class FitObserver {
 public:
  virtual ~FitObserver() = default;
  // After every epoch (after validation and the epoch's handlers). A non-ok
  // status stops training; Fit returns it.
  virtual absl::Status OnEpochEnd(const traind::v1::EpochMetrics& metrics) = 0;
  // Polled after every batch; true stops the run: Fit writes a checkpoint of
  // the last completed epoch (when checkpointing) and returns CancelledError.
  virtual bool StopRequested() = 0;
  // Called once, before the first resumed epoch, when Fit resumes from a
  // checkpoint after `completed_epochs` epochs; the next OnEpochEnd reports
  // epoch completed_epochs + 1.
  virtual void OnResume(int32_t completed_epochs) {}
  // Something went wrong that does not stop training (a corrupt checkpoint
  // skipped, a checkpoint that could not be written).
  virtual void OnWarning(absl::string_view message) {}
  // Milestones, for timing (each names the phase that just ended):
  // "prepare" (features, network, primitives and buffers made; a resume
  // read), "first_batch" (the first training step done on the CPU, issued
  // on a GPU), "train" (the last epoch ended), "finish" (the final
  // validation, importance and artifacts).
  virtual void OnPhase(absl::string_view phase) {}
};

struct FitOptions {
  int32_t task = 0;     // copied into EpochMetrics.task
  int32_t attempt = 1;  // copied into EpochMetrics.attempt
  // Where checkpoints live (created if missing); empty: no checkpoints and
  // no resume. A valid checkpoint of the same spec and task there is resumed
  // from (the latest one); corrupt ones are reported through
  // FitObserver::OnWarning and skipped. Data parallelism: every rank resumes
  // from it (give every rank the same directory); only rank 0 writes.
  std::string checkpoint_dir;
  // Where the task's artifacts go (created if missing); empty: none.
  // model.ckpt holds the final model (the best epoch's when the selection
  // restored it, else the last epoch's) with its fitted features and target
  // encoding, in the model format (model_file.h), for every task, and
  // model.onnx the same model as one ONNX graph (onnx_export.h; a model it
  // cannot export is a warning);
  // predictions.csv, for a task with validation rows, that model's
  // predictions of them (columns: PredictionsCsv in fit/artifacts.h). Data
  // parallelism: rank 0's decides, and only rank 0 writes (and sets
  // FoldResult's predictions_path / model_path).
  std::string artifacts_dir;
  // The run directory of the task's TensorBoard scalars (created if
  // missing); empty: none. After every epoch, train/<metric>, val/<metric>
  // and learning_rate at step = epoch go to the event file there
  // (fit/tensorboard.h), which a resumed run continues after the epoch it
  // resumes from; a file that cannot be written is an OnWarning, not an
  // error. Data parallelism: only rank 0 writes.
  std::string tensorboard_dir;
  // Tests and warm starts: replaces the initialized trainable parameters, in
  // Network::parameters() order ([in, out] row-major weights). Not owned.
  const std::vector<std::vector<float>>* initial_parameters = nullptr;
  // The backend to train on (not owned; outlives Fit). Null: Fit has
  // backend_factory (null: the CPU backend's, fit/backend_factory.h) make
  // one for spec.training().precision(). A given backend was made for a
  // precision by its creator (the worker passes the spec's). A spec with
  // resources.device: gpu is refused on a CPU backend (DeviceOf in
  // fit/backend_factory.h).
  Backend* backend = nullptr;
  BackendFactory* backend_factory = nullptr;  // not owned; outlives Fit
  // Data parallelism (not owned; outlives Fit). With a communicator of size
  // N, this call is rank communicator->rank() of N processes (or threads)
  // that call Fit with the same spec, data and rows:
  // - training.batch_size is the global batch. Every rank draws the same
  //   shuffled order; each global batch is split into N contiguous shares
  //   whose sizes differ by at most one row (a rank may get none of a small
  //   last batch; it still takes part in every collective).
  // - Each share's loss gradient is scaled by the global batch's loss
  //   weight, and the gradients (one flat buffer, see Network) are summed
  //   across ranks in buckets of allreduce_bucket_bytes, each started
  //   (Communicator::StartAllReduceSum) as soon as the backward pass has
  //   finished it and waited for before every update; so the
  //   update, gradient clipping included, is the one-rank update of the
  //   global batch. Dropout masks are drawn by global row, as with one rank.
  // - Batch norm is synchronized (as PyTorch's SyncBatchNorm): the column
  //   sums of its forward pass (the mean, then the squared deviations from
  //   it) and of its backward pass are summed across ranks, so every share
  //   is normalized with the global batch's statistics and every rank
  //   updates the running statistics as one rank would. A rank without rows
  //   in a batch contributes zero sums.
  // - Train metrics, validation (each rank evaluates a share of rows.val)
  //   and EpochMetrics.seconds (rank 0's) are reduced so that every rank
  //   reports the same EpochMetrics and takes the same early-stopping and
  //   best-epoch decisions; they equal one rank's within float rounding.
  // - Observers run on every rank. A stop requested on any rank stops every
  //   rank after the same batch. A rank that fails calls
  //   communicator->Abort() with its error, so the others fail fast (their
  //   error names it) instead of waiting; Fit succeeds on no rank unless it
  //   succeeds on all.
  // Null: one rank.
  Communicator* communicator = nullptr;
  // Data parallelism: the size of the pieces the gradients (and, as
  // doubles, the predictions for the metrics) are summed in.
  int64_t allreduce_bucket_bytes = int64_t{4} << 20;
  // Step graphs: with one rank and no dropout, the forward pass, loss and
  // backward pass of a full training batch are recorded once
  // (Backend::Capture; a CUDA graph on a GPU) and replayed as one launch;
  // the results are those of running the ops one by one. Backends without
  // graphs (the CPU's) run the ops one by one regardless.
  bool step_graphs = true;
  // With one rank, SGD with momentum (without Nesterov or clipping) updates
  // the weights of layers whose kernels can (the CPU backend's row-slab
  // dense layers) inside their backward pass (Optimizer::BeginStep): their
  // gradients are never written and read back. False: every parameter is
  // updated from its gradient after the backward pass (the same training to
  // rounding; for comparisons).
  bool update_in_backward = true;
};

// Trains spec.model on rows.train of `data` and validates on rows.val: task
// `task` of the spec (its index in PlanTasks' order: with repeated k-fold,
// the fold within its repeat is task % cross_validation.folds;
// FoldResult.fold is the task index).
//
// - Features go through a FeaturePipeline fitted on rows.train only
//   (imputation, data.scaling, one-hot categorical columns).
// - Loss, optimizer, schedule and clipping as the spec says.
// - spec.training(): `epochs` passes, or `batches` optimizer steps in all (the
//   last, partial epoch is reported as an epoch); batches of batch_size rows,
//   the last batch of an epoch possibly smaller; training rows reshuffled
//   every epoch unless training.shuffle is false.
// - Initialization, shuffling and dropout are drawn from PRNGs seeded from
//   (spec.seed(), task): the same inputs give bit-identical results for the
//   same number of threads, and a resumed run continues exactly as the
//   uninterrupted one.
// - Train metrics come from each batch's training forward pass (before its
//   update), over the epoch; validation metrics from a full evaluation pass
//   over rows.val every training.validate_every epochs and after the last.
// - Early stopping, best-epoch selection (SelectionMonitor) and checkpoints
//   as spec.early_stopping() / spec.checkpoint() say. Monitors of val.*
//   metrics are inactive without validation rows (a refit task).
//
// Returns the task's result: best_epoch and `selection`, `val` and `train`
// at the best epoch, `final_train` of the last epoch, predictions_path /
// model_path when written (model_path for every task with artifacts).
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
absl::StatusOr<traind::v1::FoldResult> Fit(const traind::v1::JobSpec& spec,
                                           const data::Dataset& data, const data::FoldRows& rows,
                                           int32_t task, const FitOptions& options,
                                           FitObserver* observer);

}  // namespace traind::engine

#endif  // TRAIND_WORKER_ENGINE_FIT_H_
