// What a task trains with, set up once before its first epoch: the fitted
// feature pipeline and features, the model, optimizer, loss and schedule on
// the task's backend, the device buffers of batches and windows and the
// host buffers of predictions. The fit loop (fit_loop.h) runs epochs over
// it; FitTask itself has no training state beyond the model's.
//
// Thread safety: used by one thread at a time.
#ifndef TRAIND_WORKER_ENGINE_FIT_FIT_TASK_H_
#define TRAIND_WORKER_ENGINE_FIT_FIT_TASK_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "data/dataset.h"
#include "data/split.h"
#include "spec/checks.h"
#include "traind/v1/job.pb.h"
#include "worker/engine/backend/backend.h"
#include "worker/engine/data/features.h"
#include "worker/engine/data/image_batches.h"
#include "worker/engine/fit.h"
#include "worker/engine/fit/backend_factory.h"
#include "worker/engine/fit/callbacks.h"
#include "worker/engine/fit/parallel_strategy.h"
#include "worker/engine/losses.h"
#include "worker/engine/metrics.h"
#include "worker/engine/network.h"
#include "worker/engine/optimizers.h"
#include "worker/engine/schedules.h"

namespace traind::engine {

// Input, target and loss-gradient buffers for one batch size.
struct BatchBuffers {
  int64_t batch = 0;
  Tensor x;                   // [batch, width]
  std::vector<float> host_x;  // images: x built on the host
  Tensor targets;             // [batch] class codes, or [batch, outputs] values
  Tensor doutputs;            // [batch, outputs]
};

// The losses and predictions of a run of batches stay on the backend until
// the run ends (a window): at most 256 batches and, unless one batch is
// larger, 32768 rows. Reading a window back (divergence check, metrics'
// predictions) is the one wait for the device in a run of steps, and the
// device memory it takes does not grow with the data.
constexpr int64_t kMaxWindowBatches = 256;
constexpr int64_t kMaxWindowRows = 32768;

// The model's state on the backend, read and written as host arrays.
class NetworkState final : public ModelStateAccess {
 public:
  NetworkState(Backend* backend, std::vector<Parameter> state);
  const std::vector<std::string>& names() const override { return names_; }
  const std::vector<size_t>& sizes() const override { return sizes_; }
  absl::Status Read(std::vector<std::vector<float>>* out) override;
  absl::Status Write(const std::vector<std::vector<float>>& in) override;

 private:
  Backend* const backend_;
  std::vector<Parameter> state_;
  std::vector<std::string> names_;
  std::vector<size_t> sizes_;
};

// The callbacks a spec asks for, their monitors resolved (set-up errors
// name the spec field).
struct CallbackPlan {
  BestSelection::Options selection;
  bool early_stopping = false;
  EarlyStopping::Options early;
  bool best_checkpoint = false;
  MetricTracker best;
  bool plateau = false;
  MetricTracker plateau_tracker;
};
// `has_val`: the task has validation rows; `checkpointing`: a checkpoint
// directory is set.
absl::StatusOr<CallbackPlan> PlanCallbacks(const traind::v1::JobSpec& spec,
                                           const spec::ResolvedMetrics& metrics, bool has_val,
                                           bool checkpointing);

struct FitTask {
  FitTask(const traind::v1::JobSpec& spec, const data::Dataset& data, const data::FoldRows& rows,
          int32_t task, const FitOptions& options)
      : spec(spec), data(data), rows(rows), task(task), options(options) {}
  FitTask(const FitTask&) = delete;
  FitTask& operator=(const FitTask&) = delete;

  // Sets everything up, on the backend `options.backend` or one of
  // `factory` (null: the CPU's), for `strategy`'s shares of batches.
  absl::Status Prepare(BackendFactory* factory, ParallelStrategy* strategy);

  // The buffers of a batch of `batch_rows`, with their features and targets;
  // images of a training batch of epoch `epoch` (>= 1) are augmented.
  absl::StatusOr<BatchBuffers*> GatherBatch(absl::Span<const int64_t> batch_rows,
                                            int64_t epoch = 0);
  // classes/values[i] = the targets of batch_rows[i] (each [rows, ...]).
  void FillTargets(absl::Span<const int64_t> batch_rows, int32_t* classes, float* values) const;
  // The loss weight of `count` rows of targets at classes/values (host).
  double WeightOf(const int32_t* classes, const float* values, int64_t count) const;
  // Forward pass and loss of *b: its predictions in *pred (a [rows,
  // outputs] view), its loss sum in the loss kernel's slot `slot`; when
  // training, the gradient of the loss sum times `grad_scale` in
  // b->doutputs. `first_row`: the batch's first row in the global batch
  // (dropout masks are drawn by global row) of `batch_rows` rows (batch
  // norm's statistics are the global batch's); `step` seeds dropout.
  absl::Status ForwardLoss(BatchBuffers* b, bool train, int64_t first_row, int64_t batch_rows,
                           int64_t step, double grad_scale, int64_t slot, Tensor* pred);
  // The forward pass of a step: a training pass of a global batch of
  // `batch_rows` rows (split across the ranks), or an evaluation pass.
  ForwardMode ModeFor(bool train, int64_t batch_rows, int64_t step) const;
  // The loss kernel's slot `slot` = 0: a rank without rows in a batch.
  absl::Status ClearSlot(int64_t slot);
  // The metrics' view of a pass over `count` rows.
  PassPredictions Pass(int64_t count, const std::vector<float>& pred,
                       const std::vector<int32_t>& classes, const std::vector<float>& values) const;

  const traind::v1::JobSpec& spec;
  const data::Dataset& data;
  const data::FoldRows& rows;
  const int32_t task;  // the task index (seeds; FoldResult.fold)
  const FitOptions options;
  ParallelStrategy* parallel = nullptr;

  spec::ResolvedMetrics metrics;
  int top_k = 5;
  bool has_val = false;
  CallbackPlan callbacks;

  FeaturePipeline pipeline;
  // [data.rows, width], in huge pages where the kernel has them; empty for
  // images of bytes (built per batch by `images`).
  FeatureMatrix features;
  std::unique_ptr<ImageBatches> images;  // images (data.image_shape), else null
  int64_t width = 0, outputs = 0;
  std::vector<float> values;  // [data.rows, outputs] targets (not kClasses)

  int64_t batch_size = 0, batches_per_epoch = 0, max_steps = 0, total_epochs = 0;
  bool shuffle = true;
  uint64_t shuffle_seed = 0, dropout_seed = 0;
  int64_t window = 1;  // batches (validation: chunks) per window
  int64_t chunk = 1;   // rows per validation batch: the largest training share

  // Host buffers, allocated once: a pass's predictions and targets.
  std::vector<float> train_pred, train_values, val_pred, val_values;
  std::vector<int32_t> train_classes, val_classes;
  std::vector<double> slot_values;

  // Declared before what they own memory for: destroyed last.
  TaskBackend backend_choice;
  Backend* backend = nullptr;
  std::unique_ptr<Network> network;
  std::vector<Parameter> params, state;
  std::unique_ptr<NetworkState> model_state;
  std::unique_ptr<Optimizer> optimizer;
  std::unique_ptr<Loss> loss;
  std::unique_ptr<LearningRateSchedule> schedule;
  std::vector<std::unique_ptr<BatchBuffers>> buffers;
  // The loss on the backend (one value slot per batch or validation chunk
  // of a window, and one for the step graph), a window's predictions of
  // training rows (in the epoch's order) and of validation rows, a [1, 1]
  // tensor of the targets' type (0-row views of it clear a slot).
  std::unique_ptr<LossKernel> loss_kernel;
  Tensor train_pred_dev, val_pred_dev, no_targets;

 private:
  absl::Status CheckOutputs() const;
  absl::Status SetInitialParameters();
  absl::StatusOr<BatchBuffers*> BuffersFor(int64_t batch);
};

}  // namespace traind::engine

#endif  // TRAIND_WORKER_ENGINE_FIT_FIT_TASK_H_
