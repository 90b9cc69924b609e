#include "worker/engine/fit/fit_loop.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "base/random.h"
#include "base/status.h"
#include "spec/task_plan.h"
#include "spec/validation.h"
#include "worker/engine/fit/artifacts.h"
#include "worker/engine/fit/importance.h"
#include "worker/engine/fit/tensorboard.h"
#include "worker/engine/model_file.h"
#include "worker/engine/onnx_export.h"

namespace traind::engine {

using traind::v1::EpochMetrics;
using traind::v1::FoldResult;

// ------------------------------------------------------------------ setup

absl::Status FitLoop::Prepare() {
  TRAIND_RETURN_IF_ERROR(task_.Prepare(factory_, &parallel_));
  const CallbackPlan& plan = task_.callbacks;
  // In this order after every epoch: the best checkpoint's snapshot holds
  // the selection, early stopping and plateau state of its epoch.
  auto selection = std::make_unique<BestSelection>(plan.selection, task_.model_state.get());
  selection_ = selection.get();
  callbacks_.push_back(std::move(selection));
  if (plan.early_stopping) callbacks_.push_back(std::make_unique<EarlyStopping>(plan.early));
  if (plan.plateau) {
    callbacks_.push_back(
        std::make_unique<ReduceOnPlateau>(plan.plateau_tracker, task_.schedule.get()));
  }
  if (plan.best_checkpoint) {
    callbacks_.push_back(std::make_unique<BestCheckpoint>(
        plan.best, [this](int32_t epoch) { return WriteBestCheckpoint(epoch); }));
  }
  callbacks_.push_back(std::make_unique<Reporting>(observer_));
  // Last: an epoch goes to the observer (the daemon) before the
  // dashboards' file. Rank 0 alone writes it.
  if (!task_.options.tensorboard_dir.empty() && parallel_.writes()) {
    callbacks_.push_back(std::make_unique<TensorBoardScalars>(
        task_.options.tensorboard_dir, [this](const absl::Status& s) { Warn(s); }));
  }

  bool graphs = task_.options.step_graphs && parallel_.allows_step_graphs();
  for (const traind::v1::Layer& layer : task_.spec.model().layers()) {
    // A new mask every step.
    if (layer.has_dropout() && layer.dropout().rate() > 0) graphs = false;
  }
  graph_ = std::make_unique<StepGraph>(task_.backend, task_.loss_kernel.get(),
                                       /*graph_slot=*/task_.window, task_.batch_size, task_.outputs,
                                       graphs, [this](const absl::Status& s) { Warn(s); });

  shuffle_rng_ = Rng(task_.shuffle_seed);
  order_ = task_.rows.train;
  write_artifacts_ = !task_.options.artifacts_dir.empty();
  // FoldResult.fold is the task index; the fold within its repeat is
  // task % cross_validation.folds (job.proto).
  const int32_t t = task_.task;
  result_.set_fold(t);
  const spec::TaskPlan tasks = spec::PlanTasks(task_.spec);
  if (t >= 0 && t < tasks.fold_tasks) result_.set_repeat(t / tasks.folds);
  result_.set_refit(tasks.refit && t == tasks.fold_tasks);
  result_.set_train_rows(static_cast<int64_t>(task_.rows.train.size()));
  result_.set_val_rows(static_cast<int64_t>(task_.rows.val.size()));
  const MetricTracker& tracker = plan.selection.tracker;
  result_.set_selection(tracker.active() ? tracker.monitor().Describe() : "last epoch");
  return absl::OkStatus();
}

// Data parallelism: the ranks were given the same task and resumed from
// the same checkpoint; rank 0's artifacts_dir decides whether artifacts
// are written (by rank 0, after a final validation pass of all ranks).
absl::Status FitLoop::CheckRanksAgree() {
  // The checkpoint identity covers the training rows; the validation rows
  // must agree too, or the ranks' collectives differ.
  auto task_crc = [this]() -> uint32_t {
    const std::string spec_bytes = task_.spec.SerializeAsString();
    const std::vector<int64_t> identity = Identity();
    uint32_t crc = Crc32(spec_bytes.data(), spec_bytes.size());
    crc = Crc32(identity.data(), identity.size() * sizeof(int64_t), crc);
    return Crc32(task_.rows.val.data(), task_.rows.val.size() * sizeof(int64_t), crc);
  };
  return parallel_.CheckAgreement(task_crc, epochs_done_, &write_artifacts_, &every_rank_fails_);
}

absl::StatusOr<FoldResult> FitLoop::Run() {
  TRAIND_RETURN_IF_ERROR(Prepare());
  TRAIND_RETURN_IF_ERROR(MaybeResume());
  TRAIND_RETURN_IF_ERROR(CheckRanksAgree());
  Phase("prepare");
  TRAIND_RETURN_IF_ERROR(Train());
  Phase("train");
  TRAIND_RETURN_IF_ERROR(Finish());
  Phase("finish");
  TRAIND_RETURN_IF_ERROR(parallel_.AllSucceeded());
  return result_;
}

void FitLoop::Phase(absl::string_view phase) {
  if (observer_ != nullptr) observer_->OnPhase(phase);
}

void FitLoop::Warn(const absl::Status& s) {
  if (!s.ok() && observer_ != nullptr) observer_->OnWarning(s.message());
}

bool FitLoop::StopsTraining() const {
  return std::any_of(callbacks_.begin(), callbacks_.end(),
                     [](const std::unique_ptr<FitCallback>& c) { return c->stops_training(); });
}

// ------------------------------------------------------------------- loop

absl::Status FitLoop::Train() {
  const int64_t n = static_cast<int64_t>(task_.rows.train.size());
  const int64_t k = task_.outputs;
  const int64_t batch_size = task_.batch_size;
  const int32_t validate_every = std::max(1, task_.spec.training().validate_every());
  first_step_ = steps_;
  EpochMetrics report;
  for (int32_t epoch = epochs_done_ + 1; steps_ < task_.max_steps && !StopsTraining(); ++epoch) {
    const auto start_time = std::chrono::steady_clock::now();
    const double lr = task_.schedule->LearningRate(epoch - 1);
    if (task_.shuffle) Shuffle(order_.data(), order_.size(), shuffle_rng_);
    // Data parallelism: each rank fills its own rows of the predictions.
    TRAIND_RETURN_IF_ERROR(parallel_.ClearOthersRows(task_.backend, &task_.train_pred_dev));
    LossSums train_loss;
    int64_t seen = 0;
    int64_t window = 0;  // the first batch of the current window
    for (int64_t b = 0; b < task_.batches_per_epoch && steps_ < task_.max_steps; ++b) {
      const int64_t start = b * batch_size;
      const int64_t size = std::min(batch_size, n - start);
      TRAIND_RETURN_IF_ERROR(TrainStep(absl::MakeConstSpan(order_).subspan(
                                           static_cast<size_t>(start), static_cast<size_t>(size)),
                                       start, window * batch_size, b - window, lr, epoch,
                                       &train_loss.weight_sum));
      seen += size;
      if (steps_++ == first_step_) Phase("first_batch");
      if (b + 1 - window == task_.window) {
        TRAIND_RETURN_IF_ERROR(ReadTrainWindow(epoch, window, b + 1, seen, &train_loss));
        window = b + 1;
      }
      // Whether any rank was asked to stop (one reduction per step).
      TRAIND_ASSIGN_OR_RETURN(
          const bool stop, parallel_.AnyRank(observer_ != nullptr && observer_->StopRequested()));
      if (stop) {
        // A stop after a divergence reports the divergence.
        TRAIND_RETURN_IF_ERROR(ReadTrainWindow(epoch, window, b + 1, seen, &train_loss));
        if (snapshot_valid_) WritePeriodic(epochs_done_);
        every_rank_fails_ = true;  // the stop was agreed across ranks
        return CancelledError(
            absl::StrFormat("stopped on request at epoch %d, batch %d", epoch, b + 1));
      }
    }
    const int64_t batches = (seen + batch_size - 1) / batch_size;
    TRAIND_RETURN_IF_ERROR(ReadTrainWindow(epoch, window, batches, seen, &train_loss));
    report.Clear();
    report.set_task(task_.options.task);
    report.set_attempt(task_.options.attempt);
    report.set_epoch(epoch);
    report.set_batches(steps_);
    TRAIND_RETURN_IF_ERROR(parallel_.SumRows(task_.train_pred.data(), seen * k, nullptr));
    WriteMetrics(task_.metrics.train,
                 task_.Pass(seen, task_.train_pred, task_.train_classes, task_.train_values),
                 train_loss.mean(), task_.top_k, report.mutable_train());
    const bool last = steps_ >= task_.max_steps;
    if (task_.has_val && (epoch % validate_every == 0 || last)) {
      LossSums val_loss;
      TRAIND_RETURN_IF_ERROR(Validate(&val_loss));
      if (!std::isfinite(val_loss.mean())) {
        every_rank_fails_ = true;
        return DivergedError(absl::StrFormat("validation loss became %s at epoch %d",
                                             std::isnan(val_loss.mean()) ? "nan" : "inf", epoch));
      }
      WriteMetrics(task_.metrics.val,
                   task_.Pass(static_cast<int64_t>(task_.rows.val.size()), task_.val_pred,
                              task_.val_classes, task_.val_values),
                   val_loss.mean(), task_.top_k, report.mutable_val());
    }
    // Rank 0's time: every rank reports the same metrics.
    TRAIND_ASSIGN_OR_RETURN(
        const double seconds,
        parallel_.RankZeroValue(
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start_time).count()));
    report.set_seconds(seconds);
    TRAIND_RETURN_IF_ERROR(EndEpoch(epoch, lr, &report));
  }
  return absl::OkStatus();
}

// The callbacks (the epoch trained at learning rate `lr`), then the
// epoch's checkpoint.
absl::Status FitLoop::EndEpoch(int32_t epoch, double lr, EpochMetrics* report) {
  epochs_done_ = epoch;  // checkpoints taken from here on are of this epoch
  EpochEnd end;
  end.epoch = epoch;
  end.metrics = report;
  end.learning_rate = lr;
  end.result = &result_;
  for (const std::unique_ptr<FitCallback>& callback : callbacks_) {
    TRAIND_RETURN_IF_ERROR(callback->OnEpochEnd(end));
  }
  if (!parallel_.writes() || task_.options.checkpoint_dir.empty()) return absl::OkStatus();
  snapshot_valid_ = false;
  TRAIND_RETURN_IF_ERROR(Snapshot(&snapshot_));
  snapshot_valid_ = true;
  const int32_t every = task_.spec.has_checkpoint() ? task_.spec.checkpoint().every_epochs() : 0;
  if (every > 0 && epoch % every == 0) WritePeriodic(epoch);
  return absl::OkStatus();
}

// One optimizer step with learning rate `lr` on the global batch `batch`,
// which starts at position `start` of the epoch's order: this rank's share
// of it forward and backward (its loss sum in the loss kernel's slot
// `slot`, its predictions in train_pred_dev from row `start -
// window_start`), the gradients summed across ranks, the update. Every rank
// sets the targets of the whole batch in train_classes/train_values and
// adds its weight to *weight.
absl::Status FitLoop::TrainStep(absl::Span<const int64_t> batch, int64_t start,
                                int64_t window_start, int64_t slot, double lr, int32_t epoch,
                                double* weight) {
  const int64_t k = task_.outputs;
  const int64_t size = static_cast<int64_t>(batch.size());
  const Share share = parallel_.ShareOf(size);
  const int64_t at = start + share.first;  // the share's position in the epoch's order
  int32_t* classes = task_.train_classes.data() + start;
  float* values = task_.train_values.empty() ? nullptr : task_.train_values.data() + start * k;
  task_.FillTargets(batch, classes, values);
  // The update follows the global batch's mean loss: every rank's gradient
  // is scaled by the whole batch's weight (known on the host).
  const double batch_weight = task_.WeightOf(classes, values, size);
  *weight += batch_weight;
  const double scale = batch_weight > 0 ? 1.0 / batch_weight : 0.0;
  if (share.rows > 0) {
    TRAIND_ASSIGN_OR_RETURN(BatchBuffers * b,
                            task_.GatherBatch(batch.subspan(static_cast<size_t>(share.first),
                                                            static_cast<size_t>(share.rows)),
                                              epoch));
    Tensor pred = task_.train_pred_dev.Rows(at - window_start, share.rows);
    if (graph_->enabled() && size == task_.batch_size) {
      // One rank (step graphs): the whole batch, no collectives.
      TRAIND_RETURN_IF_ERROR(graph_->Run(
          [&](double grad_scale, int64_t graph_slot, Tensor* graph_pred) -> absl::Status {
            TRAIND_RETURN_IF_ERROR(task_.ForwardLoss(b, /*train=*/true, 0, task_.batch_size, steps_,
                                                     grad_scale, graph_slot, graph_pred));
            return parallel_.Backward(b->x, &b->doutputs);
          },
          scale, slot, &pred));
      return task_.optimizer->Step(lr);
    }
    // One rank: nothing sums the gradients, so layers may update their
    // parameters inside the backward pass (Optimizer::BeginStep).
    if (parallel_.ranks() == 1 && task_.options.update_in_backward) {
      task_.optimizer->BeginStep(lr);
    }
    TRAIND_RETURN_IF_ERROR(
        task_.ForwardLoss(b, /*train=*/true, share.first, size, steps_, scale, slot, &pred));
    TRAIND_RETURN_IF_ERROR(parallel_.Backward(b->x, &b->doutputs));
  } else {
    TRAIND_RETURN_IF_ERROR(task_.ClearSlot(slot));
    // No rows here this step: batch norm's statistics still need this rank,
    // and a zero gradient joins the sum.
    TRAIND_RETURN_IF_ERROR(task_.network->JoinForward(task_.ModeFor(/*train=*/true, size, steps_)));
    TRAIND_RETURN_IF_ERROR(parallel_.JoinBackward(task_.backend));
  }
  TRAIND_RETURN_IF_ERROR(parallel_.FinishGradients());
  // Clipping (inside Step) sees the summed gradient.
  return task_.optimizer->Step(lr);
}

// Ends the window of training batches [first, end) of epoch `epoch`, which
// covers the epoch's rows [first · batch_size, end_row): their loss sums
// (summed across ranks) into *sums, their predictions (this rank's rows)
// into train_pred. A batch whose loss is not finite fails the task:
// DivergedError naming it (every rank sees the same sums).
absl::Status FitLoop::ReadTrainWindow(int32_t epoch, int64_t first, int64_t end, int64_t end_row,
                                      LossSums* sums) {
  const int64_t count = end - first;
  if (count <= 0) return absl::OkStatus();
  const int64_t first_row = first * task_.batch_size;
  Tensor pred = task_.train_pred_dev.Rows(0, end_row - first_row);
  TRAIND_RETURN_IF_ERROR(
      task_.backend->CopyToHost(pred, task_.train_pred.data() + first_row * task_.outputs));
  TRAIND_RETURN_IF_ERROR(task_.loss_kernel->ReadSlots(0, count, task_.slot_values.data()));
  TRAIND_RETURN_IF_ERROR(parallel_.SumValues(task_.slot_values.data(), count));
  // The next window's rows of the other ranks stay 0.
  TRAIND_RETURN_IF_ERROR(parallel_.ClearOthersRows(task_.backend, &task_.train_pred_dev));
  for (int64_t i = 0; i < count; ++i) {
    const double v = task_.slot_values[static_cast<size_t>(i)];
    if (!std::isfinite(v)) {
      every_rank_fails_ = true;  // the batch's loss is summed across ranks
      return DivergedError(absl::StrFormat("loss became %s at epoch %d, batch %d",
                                           std::isnan(v) ? "nan" : "inf", epoch, first + i + 1));
    }
    sums->value_sum += v;
  }
  return absl::OkStatus();
}

// A full evaluation pass over rows.val -> val_pred etc., *sums. Each rank
// evaluates its share of the rows, and the predictions and sums are then
// summed across ranks.
absl::Status FitLoop::Validate(LossSums* sums) {
  const std::vector<int64_t>& val = task_.rows.val;
  const int64_t n = static_cast<int64_t>(val.size());
  const int64_t k = task_.outputs;
  const Share share = parallel_.ShareOf(n);
  parallel_.ClearOthersRows(&task_.val_pred);
  // Batches of the largest training share: their buffers exist already.
  const int64_t chunk = task_.chunk;
  const int64_t end = share.first + share.rows;
  LossSums mine;
  int64_t window_start = share.first, slot = 0;
  for (int64_t start = share.first; start < end; start += chunk) {
    const int64_t size = std::min(chunk, end - start);
    TRAIND_ASSIGN_OR_RETURN(BatchBuffers * b,
                            task_.GatherBatch(absl::MakeConstSpan(val).subspan(
                                static_cast<size_t>(start), static_cast<size_t>(size))));
    Tensor pred = task_.val_pred_dev.Rows(start - window_start, size);
    TRAIND_RETURN_IF_ERROR(task_.ForwardLoss(b, /*train=*/false, 0, size, steps_,
                                             /*grad_scale=*/0, slot++, &pred));
    mine.weight_sum += task_.WeightOf(
        task_.val_classes.data() + start,
        task_.val_values.empty() ? nullptr : task_.val_values.data() + start * k, size);
    if (slot == task_.window || start + size == end) {
      // The window's predictions and loss sums: the one wait of a window.
      Tensor done = task_.val_pred_dev.Rows(0, start + size - window_start);
      TRAIND_RETURN_IF_ERROR(
          task_.backend->CopyToHost(done, task_.val_pred.data() + window_start * k));
      TRAIND_RETURN_IF_ERROR(task_.loss_kernel->ReadSlots(0, slot, task_.slot_values.data()));
      for (int64_t i = 0; i < slot; ++i)
        mine.value_sum += task_.slot_values[static_cast<size_t>(i)];
      window_start = start + size;
      slot = 0;
    }
  }
  TRAIND_RETURN_IF_ERROR(parallel_.SumRows(task_.val_pred.data(), n * k, &mine));
  sums->Add(mine);
  return absl::OkStatus();
}

// ---------------------------------------------------------------- finish

// Permutation importance (importance.h) of the final model, whose
// validation pass gave `baseline`: the selection metric when it is a
// validation metric, else val.loss.
absl::Status FitLoop::Importance(const LossSums& baseline) {
  if (task_.features.empty()) {
    return InvalidSpecError("importance: only for tables (this task's rows are images)");
  }
  spec::Monitor monitor = task_.callbacks.selection.tracker.monitor();
  if (!monitor.val) monitor = spec::Monitor();
  const int64_t n = static_cast<int64_t>(task_.rows.val.size());
  auto value = [&](const LossSums& sums) -> absl::StatusOr<double> {
    google::protobuf::Map<std::string, double> metrics;
    WriteMetrics(task_.metrics.val,
                 task_.Pass(n, task_.val_pred, task_.val_classes, task_.val_values), sums.mean(),
                 task_.top_k, &metrics);
    const auto it = metrics.find(monitor.key());
    if (it == metrics.end()) {
      return absl::InternalError(absl::StrCat("importance: ", monitor.Describe(), " not computed"));
    }
    return it->second;
  };
  TRAIND_ASSIGN_OR_RETURN(const double base, value(baseline));
  const std::vector<InputFeature> features = InputFeatures(task_.data, task_.pipeline);
  TRAIND_ASSIGN_OR_RETURN(
      std::vector<traind::v1::FeatureImportance> importance,
      PermutationImportance(
          features, ImportanceRepeats(task_.spec.importance()),
          DeriveSeed(task_.spec.seed(), kImportanceStream, static_cast<uint64_t>(task_.task)),
          task_.rows.val, task_.width, task_.features.data(), base, monitor.maximize,
          [&]() -> absl::StatusOr<double> {
            // A stop request ends the task between passes, as between steps.
            TRAIND_ASSIGN_OR_RETURN(const bool stop, parallel_.AnyRank(observer_ != nullptr &&
                                                                       observer_->StopRequested()));
            if (stop) {
              every_rank_fails_ = true;
              return CancelledError("stopped on request while measuring feature importance");
            }
            LossSums sums;
            TRAIND_RETURN_IF_ERROR(Validate(&sums));
            return value(sums);
          }));
  for (traind::v1::FeatureImportance& f : importance) *result_.add_importance() = std::move(f);
  result_.set_importance_metric(monitor.Describe());
  // val_pred holds the last shuffled pass's predictions: nothing after this
  // reads them (predictions.csv was written before).
  return absl::OkStatus();
}

absl::Status FitLoop::Finish() {
  for (const std::unique_ptr<FitCallback>& callback : callbacks_) {
    TRAIND_RETURN_IF_ERROR(callback->OnTrainEnd());
  }
  // Only rank 0 writes artifacts; with validation rows every rank takes
  // part in the last validation pass (and the importance's passes, which a
  // task computes with or without artifacts).
  const bool importance = task_.has_val && task_.spec.has_importance();
  if (!write_artifacts_ && !importance) return absl::OkStatus();
  const bool writes = write_artifacts_ && parallel_.writes();
  const std::string& dir = task_.options.artifacts_dir;
  if (writes) TRAIND_RETURN_IF_ERROR(MakeDirs(dir));
  if (task_.has_val) {
    LossSums sums;
    TRAIND_RETURN_IF_ERROR(Validate(&sums));
    if (writes) {
      const std::string path = dir + "/predictions.csv";
      TRAIND_RETURN_IF_ERROR(WriteTextFile(
          path, ValidationPredictionsCsv(task_.spec, task_.data, task_.task, task_.outputs,
                                         task_.rows.val, task_.val_pred.data())));
      result_.set_predictions_path(path);
    }
    if (importance) TRAIND_RETURN_IF_ERROR(Importance(sums));
  }
  if (!writes) return absl::OkStatus();
  // The model whose predictions predictions.csv holds.
  TRAIND_ASSIGN_OR_RETURN(const TrainedModel model, FinalModel());
  const std::string path = dir + "/model.ckpt";
  TRAIND_RETURN_IF_ERROR(WriteModelFile(model, path));
  result_.set_model_path(path);
  // The same model as one ONNX graph (onnx_export.h). The model file is what
  // traind predicts with: a model that cannot be exported is a warning, not
  // a failed task.
  if (absl::Status onnx = WriteOnnxFile(model, dir + "/model.onnx"); !onnx.ok()) {
    Warn(absl::Status(onnx.code(), absl::StrCat("model.onnx not written: ", onnx.message())));
  }
  return absl::OkStatus();
}

// The final model (the best epoch's when the selection restored it, else
// the last epoch's) with the task's fitted features and target encoding.
absl::StatusOr<TrainedModel> FitLoop::FinalModel() const {
  const data::Dataset& data = task_.data;
  const FeaturePipeline& pipeline = task_.pipeline;
  TrainedModel model;
  model.spec = task_.spec;
  model.task = task_.task;
  model.epoch =
      selection_ != nullptr && selection_->restored() ? result_.best_epoch() : epochs_done_;
  model.feature_names = data.feature_names;
  model.impute = pipeline.impute;
  model.offset = pipeline.offset;
  model.scale = pipeline.scale;
  for (size_t k = 0; k < pipeline.categories.size(); ++k) {
    TrainedModel::Categorical column;
    column.name = data.categorical[k].name;
    for (int32_t code : pipeline.categories[k]) {
      column.categories.push_back(data.categorical[k].values[static_cast<size_t>(code)]);
    }
    model.categorical.push_back(std::move(column));
  }
  model.target = data.target;
  model.classes = data.classes;
  model.target_names = data.target_names;
  for (const Parameter& p : task_.state) {
    TrainedModel::NamedTensor t;
    t.name = p.name;
    const Tensor& value = *p.value;
    t.shape = value.rank() == 2 ? std::vector<int64_t>{value.rows(), value.cols()}
                                : std::vector<int64_t>{value.size()};
    t.values.resize(static_cast<size_t>(value.size()));
    TRAIND_RETURN_IF_ERROR(task_.backend->CopyToHost(value, t.values.data()));
    model.state.push_back(std::move(t));
  }
  return model;
}

// ----------------------------------------------------------- checkpoints

namespace {
// Identity()'s order.
constexpr const char* kIdentityKeys[] = {"task",           "train_rows", "val_rows",
                                         "train_rows_crc", "width",      "outputs"};
}  // namespace

std::vector<int64_t> FitLoop::Identity() const {
  const std::vector<int64_t>& train = task_.rows.train;
  return {task_.task,
          static_cast<int64_t>(train.size()),
          static_cast<int64_t>(task_.rows.val.size()),
          static_cast<int64_t>(Crc32(train.data(), train.size() * sizeof(int64_t))),
          task_.width,
          task_.outputs};
}

bool FitLoop::SameTask(const CheckpointReader& r) const {
  StateReader meta(r, "meta");
  absl::StatusOr<std::string> spec = meta.GetString("spec");
  if (!spec.ok() || *spec != task_.spec.SerializeAsString()) return false;
  const std::vector<int64_t> identity = Identity();
  for (size_t i = 0; i < identity.size(); ++i) {
    absl::StatusOr<int64_t> v = meta.GetInt(kIdentityKeys[i]);
    if (!v.ok() || *v != identity[i]) return false;
  }
  return true;
}

// The whole training state at the last completed epoch -> *w. A failed
// device copy leaves *w cleared, never half written.
absl::Status FitLoop::Snapshot(CheckpointWriter* w) {
  w->Clear();
  StateWriter meta(w, "meta");
  meta.PutString("spec", task_.spec.SerializeAsString());
  const std::vector<int64_t> identity = Identity();
  for (size_t i = 0; i < identity.size(); ++i) meta.PutInt(kIdentityKeys[i], identity[i]);
  meta.PutString("classes", absl::StrJoin(task_.data.classes, "\n"));

  StateWriter loop(w, "loop");
  loop.PutInt("epoch", epochs_done_);
  loop.PutInt("steps", steps_);
  loop.PutInt("shuffle_rng", static_cast<int64_t>(shuffle_rng_.state()));
  loop.PutInts("order", order_);
  loop.PutString("result", result_.SerializeAsString());

  auto copy = [&](const Tensor& t) -> absl::Status {
    host_state_.resize(static_cast<size_t>(t.size()));
    absl::Status copied = task_.backend->CopyToHost(t, host_state_.data());
    if (!copied.ok()) w->Clear();
    return copied;
  };
  StateWriter model(w, "state");
  for (const Parameter& p : task_.state) {
    TRAIND_RETURN_IF_ERROR(copy(*p.value));
    model.PutFloats(p.name, host_state_.data(), host_state_.size());
  }
  StateWriter optimizer(w, "optimizer");
  const std::vector<Tensor*> opt = task_.optimizer->state();
  for (size_t i = 0; i < opt.size(); ++i) {
    TRAIND_RETURN_IF_ERROR(copy(*opt[i]));
    optimizer.PutFloats(absl::StrCat(i), host_state_.data(), host_state_.size());
  }
  optimizer.PutInt("steps", task_.optimizer->steps());

  StateWriter pipeline(w, "pipeline");
  pipeline.PutDoubles("impute", task_.pipeline.impute);
  pipeline.PutDoubles("offset", task_.pipeline.offset);
  pipeline.PutDoubles("scale", task_.pipeline.scale);
  for (size_t k = 0; k < task_.pipeline.categories.size(); ++k) {
    const auto& categories = task_.pipeline.categories[k];
    pipeline.PutInts(absl::StrCat("categories.", k),
                     std::vector<int64_t>(categories.begin(), categories.end()));
  }
  for (const std::unique_ptr<FitCallback>& callback : callbacks_) {
    StateWriter state(w, callback->name());
    callback->SaveState(&state);
  }
  return absl::OkStatus();
}

// Reads everything first and changes nothing unless all of it is there
// with the right sizes: a bad checkpoint leaves the loop as it was.
absl::Status FitLoop::Restore(const CheckpointReader& r) {
  StateReader loop(r, "loop");
  TRAIND_ASSIGN_OR_RETURN(const int64_t epoch, loop.GetInt("epoch"));
  TRAIND_ASSIGN_OR_RETURN(const int64_t steps, loop.GetInt("steps"));
  TRAIND_ASSIGN_OR_RETURN(const int64_t rng, loop.GetInt("shuffle_rng"));
  TRAIND_ASSIGN_OR_RETURN(std::vector<int64_t> order, loop.GetInts("order"));
  TRAIND_ASSIGN_OR_RETURN(const std::string result_bytes, loop.GetString("result"));
  FoldResult result;
  if (order.size() != order_.size() || !result.ParseFromString(result_bytes)) {
    return DataError("malformed loop state");
  }
  StateReader model(r, "state");
  std::vector<std::vector<float>> state(task_.state.size());
  for (size_t i = 0; i < task_.state.size(); ++i) {
    state[i].resize(static_cast<size_t>(task_.state[i].value->size()));
    TRAIND_RETURN_IF_ERROR(model.GetFloats(task_.state[i].name, state[i].data(), state[i].size()));
  }
  StateReader optimizer(r, "optimizer");
  TRAIND_ASSIGN_OR_RETURN(const int64_t opt_steps, optimizer.GetInt("steps"));
  const std::vector<Tensor*> opt = task_.optimizer->state();
  std::vector<std::vector<float>> opt_state(opt.size());
  for (size_t i = 0; i < opt.size(); ++i) {
    opt_state[i].resize(static_cast<size_t>(opt[i]->size()));
    TRAIND_RETURN_IF_ERROR(
        optimizer.GetFloats(absl::StrCat(i), opt_state[i].data(), opt_state[i].size()));
  }
  TRAIND_RETURN_IF_ERROR(LoadCallbacks(r));
  // Apply.
  for (size_t i = 0; i < task_.state.size(); ++i) {
    TRAIND_RETURN_IF_ERROR(task_.backend->CopyFromHost(state[i].data(), task_.state[i].value));
  }
  for (size_t i = 0; i < opt.size(); ++i) {
    TRAIND_RETURN_IF_ERROR(task_.backend->CopyFromHost(opt_state[i].data(), opt[i]));
  }
  task_.optimizer->set_steps(opt_steps);
  result_ = std::move(result);
  epochs_done_ = static_cast<int32_t>(epoch);
  steps_ = steps;
  shuffle_rng_ = Rng(static_cast<uint64_t>(rng));
  order_ = std::move(order);
  return absl::OkStatus();
}

// Every callback's state, or none: a callback that fails to load puts every
// callback back as it was.
absl::Status FitLoop::LoadCallbacks(const CheckpointReader& r) {
  CheckpointWriter before;
  for (const std::unique_ptr<FitCallback>& callback : callbacks_) {
    StateWriter state(&before, callback->name());
    callback->SaveState(&state);
  }
  for (const std::unique_ptr<FitCallback>& callback : callbacks_) {
    absl::Status loaded = callback->LoadState(StateReader(r, callback->name()));
    if (loaded.ok()) continue;
    TRAIND_ASSIGN_OR_RETURN(const CheckpointReader back,
                            CheckpointReader::Parse(before.Serialize(), "callback state"));
    for (const std::unique_ptr<FitCallback>& c : callbacks_) {
      TRAIND_RETURN_IF_ERROR(c->LoadState(StateReader(back, c->name())));
    }
    return absl::Status(loaded.code(),
                        absl::StrCat(callback->name(), " state: ", loaded.message()));
  }
  return absl::OkStatus();
}

absl::Status FitLoop::MaybeResume() {
  if (task_.options.checkpoint_dir.empty()) return absl::OkStatus();
  for (const auto& [epoch, path] : PeriodicCheckpoints(task_.options.checkpoint_dir)) {
    absl::StatusOr<CheckpointReader> reader = CheckpointReader::ReadFile(path);
    if (!reader.ok()) {
      Warn(absl::DataLossError(absl::StrCat("skipping checkpoint: ", reader.status().message())));
      continue;
    }
    if (!SameTask(*reader)) {
      Warn(absl::FailedPreconditionError(
          absl::StrCat("skipping checkpoint ", path, ": another spec, task or split")));
      continue;
    }
    absl::Status s = Restore(*reader);
    if (!s.ok()) {
      // Restore changed nothing: try the next older one.
      Warn(absl::DataLossError(absl::StrCat("skipping checkpoint ", path, ": ", s.message())));
      continue;
    }
    TRAIND_RETURN_IF_ERROR(Snapshot(&snapshot_));
    snapshot_valid_ = true;
    for (const std::unique_ptr<FitCallback>& callback : callbacks_) {
      TRAIND_RETURN_IF_ERROR(callback->OnResume(epochs_done_));
    }
    return absl::OkStatus();
  }
  return absl::OkStatus();
}

// A periodic checkpoint of the last completed epoch (snapshot_), the
// oldest beyond checkpoint.keep removed. Only rank 0 writes; a file that
// cannot be written is a warning.
void FitLoop::WritePeriodic(int32_t epoch) {
  if (!parallel_.writes() || task_.options.checkpoint_dir.empty()) return;
  const std::string& dir = task_.options.checkpoint_dir;
  Warn(MakeDirs(dir));
  Warn(snapshot_.WriteFile(PeriodicCheckpointPath(dir, epoch)));
  const auto& spec = task_.spec;
  const int keep =
      spec.has_checkpoint() && spec.checkpoint().keep() > 0 ? spec.checkpoint().keep() : 5;
  Warn(PrunePeriodicCheckpoints(dir, keep));
}

// best.ckpt of the training state as of the epoch that improved (rank 0):
// EndEpoch has made it the last completed epoch.
absl::Status FitLoop::WriteBestCheckpoint(int32_t /*epoch*/) {
  if (!parallel_.writes()) return absl::OkStatus();
  CheckpointWriter writer;
  TRAIND_RETURN_IF_ERROR(Snapshot(&writer));
  TRAIND_RETURN_IF_ERROR(MakeDirs(task_.options.checkpoint_dir));
  Warn(writer.WriteFile(BestCheckpointPath(task_.options.checkpoint_dir)));
  return absl::OkStatus();
}

}  // namespace traind::engine
