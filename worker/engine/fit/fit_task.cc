#include "worker/engine/fit/fit_task.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/random.h"
#include "base/status.h"

namespace traind::engine {

using traind::v1::JobSpec;

absl::StatusOr<CallbackPlan> PlanCallbacks(const JobSpec& spec,
                                           const spec::ResolvedMetrics& metrics, bool has_val,
                                           bool checkpointing) {
  CallbackPlan plan;
  // A monitor of val.* is inactive without validation rows (a refit task).
  auto active = [has_val](const spec::Monitor& m) { return has_val || !m.val; };
  const bool save_best = spec.has_checkpoint() && spec.checkpoint().save_best();
  const bool explicit_selection = spec.has_early_stopping() || save_best;
  spec::Monitor selection;
  bool selection_active = has_val;
  if (explicit_selection) {
    TRAIND_ASSIGN_OR_RETURN(selection, spec::SelectionMonitor(spec));
    selection_active = active(selection);
  } else {
    selection.val = true;
    selection.metric = traind::v1::LOSS;
    selection.maximize = false;
  }
  double selection_delta = 0;
  if (spec.has_early_stopping()) {
    const auto& es = spec.early_stopping();
    TRAIND_ASSIGN_OR_RETURN(spec::Monitor m, spec::ResolveMonitor(es.monitor(), es.mode(), metrics,
                                                                  "early_stopping.monitor"));
    plan.early_stopping = true;
    plan.early.tracker = MetricTracker(m, active(m), es.min_delta());
    plan.early.patience = es.patience();
    plan.early.start_from_epoch = es.start_from_epoch();
    plan.early.has_baseline = es.has_baseline();
    plan.early.baseline = es.baseline();
    selection_delta = es.min_delta();
  }
  plan.selection.tracker = MetricTracker(selection, selection_active, selection_delta);
  if (save_best) {
    const auto& c = spec.checkpoint();
    const std::string text = c.monitor().empty() && spec.has_early_stopping()
                                 ? spec.early_stopping().monitor()
                                 : c.monitor();
    TRAIND_ASSIGN_OR_RETURN(spec::Monitor m,
                            spec::ResolveMonitor(text, c.mode(), metrics, "checkpoint.monitor"));
    plan.best_checkpoint = true;
    plan.best = MetricTracker(m, active(m) && checkpointing, 0);
  }
  if (spec.optimizer().schedule().has_reduce_on_plateau()) {
    const auto& r = spec.optimizer().schedule().reduce_on_plateau();
    TRAIND_ASSIGN_OR_RETURN(spec::Monitor m,
                            spec::ResolveMonitor(r.monitor(), r.mode(), metrics,
                                                 "optimizer.schedule.reduce_on_plateau.monitor"));
    plan.plateau = true;
    plan.plateau_tracker = MetricTracker(m, active(m), 0);
  }
  const bool restore_best = spec.has_early_stopping() && spec.early_stopping().restore_best();
  plan.selection.keep_best = selection_active && (restore_best || save_best);
  plan.selection.restore_best = restore_best;
  return plan;
}

// ------------------------------------------------------------ NetworkState

NetworkState::NetworkState(Backend* backend, std::vector<Parameter> state)
    : backend_(backend), state_(std::move(state)) {
  for (const Parameter& p : state_) {
    names_.push_back(p.name);
    sizes_.push_back(static_cast<size_t>(p.value->size()));
  }
}

absl::Status NetworkState::Read(std::vector<std::vector<float>>* out) {
  out->resize(state_.size());
  for (size_t i = 0; i < state_.size(); ++i) {
    (*out)[i].resize(sizes_[i]);
    TRAIND_RETURN_IF_ERROR(backend_->CopyToHost(*state_[i].value, (*out)[i].data()));
  }
  return absl::OkStatus();
}

absl::Status NetworkState::Write(const std::vector<std::vector<float>>& in) {
  if (in.size() != state_.size()) {
    return absl::InvalidArgumentError("NetworkState::Write: wrong number of arrays");
  }
  for (size_t i = 0; i < state_.size(); ++i) {
    if (in[i].size() != sizes_[i]) {
      return absl::InvalidArgumentError("NetworkState::Write: an array of the wrong size");
    }
    TRAIND_RETURN_IF_ERROR(backend_->CopyFromHost(in[i].data(), state_[i].value));
  }
  return absl::OkStatus();
}

// ------------------------------------------------------------------ setup

absl::Status FitTask::Prepare(BackendFactory* factory, ParallelStrategy* strategy) {
  parallel = strategy;
  TRAIND_ASSIGN_OR_RETURN(metrics, spec::ResolveSpecMetrics(spec));
  top_k = spec.metrics().top_k() > 0 ? spec.metrics().top_k() : 5;
  has_val = !rows.val.empty();
  TRAIND_ASSIGN_OR_RETURN(callbacks,
                          PlanCallbacks(spec, metrics, has_val, !options.checkpoint_dir.empty()));

  pipeline.Fit(spec.data(), data, rows.train);
  // Images of bytes stay bytes: each batch is normalized as it is built.
  if (data.pixels.empty()) pipeline.Transform(data, &features);
  if (!data.image_shape.empty()) {
    images = std::make_unique<ImageBatches>(
        spec.data(), data, pipeline, &features,
        DeriveSeed(spec.seed(), static_cast<uint64_t>(task), kAugmentStream));
  }
  width = pipeline.width();
  if (width == 0) return DataError(absl::StrCat(data.path, ": no feature columns"));
  outputs = data.ModelOutputs();
  TRAIND_RETURN_IF_ERROR(CheckOutputs());

  TRAIND_ASSIGN_OR_RETURN(backend_choice, ChooseBackend(spec, options.backend, factory));
  backend = backend_choice.backend;
  // An image (data.shape) or a row of the pipeline's features.
  TRAIND_ASSIGN_OR_RETURN(const spec::ValueShape input, spec::ModelInputShape(spec.data(), width));
  TRAIND_ASSIGN_OR_RETURN(Network created, Network::Create(backend, input, spec.model()));
  network = std::make_unique<Network>(std::move(created));
  Rng init_rng(DeriveSeed(spec.seed(), static_cast<uint64_t>(task), kInitStream));
  TRAIND_RETURN_IF_ERROR(network->Initialize(init_rng));
  params = network->parameters();
  state = network->state();
  model_state = std::make_unique<NetworkState>(backend, network->state());
  TRAIND_RETURN_IF_ERROR(SetInitialParameters());
  TRAIND_ASSIGN_OR_RETURN(optimizer, CreateOptimizer(spec.optimizer(), backend, params));
  TRAIND_ASSIGN_OR_RETURN(loss, Loss::Create(spec.loss(), data.target, outputs));

  const auto& training = spec.training();
  const int64_t n = static_cast<int64_t>(rows.train.size());
  // A batch larger than the training rows is all of them: the same epochs
  // (one batch each), without buffers sized for rows that do not exist.
  batch_size = std::min<int64_t>(training.batch_size(), std::max<int64_t>(1, n));
  batches_per_epoch = (n + batch_size - 1) / batch_size;
  max_steps = training.batches() > 0 ? training.batches() : training.epochs() * batches_per_epoch;
  total_epochs = (max_steps + batches_per_epoch - 1) / batches_per_epoch;
  schedule = std::make_unique<LearningRateSchedule>(spec.optimizer().schedule(),
                                                    optimizer->base_learning_rate(), total_epochs);
  shuffle = !training.has_shuffle() || training.shuffle();
  shuffle_seed = DeriveSeed(spec.seed(), static_cast<uint64_t>(task), kShuffleStream);
  dropout_seed = DeriveSeed(spec.seed(), static_cast<uint64_t>(task), kDropoutStream);

  // Targets as the loss wants them: class codes, or values [rows, outputs].
  if (data.target == data::TargetKind::kBinary) {
    values.resize(data.y.size());
    for (size_t i = 0; i < data.y.size(); ++i) values[i] = static_cast<float>(data.y[i]);
  } else if (data.target != data::TargetKind::kClasses) {
    values = data.targets;
  }
  // The loss on the backend's device: batches of at most the largest
  // share of a training batch (validation uses the same chunks), one
  // value slot per batch (or chunk) of a window.
  chunk = (batch_size + parallel->ranks() - 1) / parallel->ranks();
  const int64_t val_rows = static_cast<int64_t>(rows.val.size());
  window = std::clamp<int64_t>(kMaxWindowRows / batch_size, 1, kMaxWindowBatches);
  // One more slot: the step graph's.
  TRAIND_ASSIGN_OR_RETURN(loss_kernel,
                          backend->CreateLossKernel(loss->KernelOptions(chunk, window + 1)));
  slot_values.resize(static_cast<size_t>(window));
  // A window's predictions, where the loss computes them.
  TRAIND_ASSIGN_OR_RETURN(
      train_pred_dev,
      backend->Allocate2d(DType::kF32, std::max<int64_t>(1, std::min(n, window * batch_size)),
                          outputs));
  TRAIND_ASSIGN_OR_RETURN(
      val_pred_dev,
      backend->Allocate2d(DType::kF32, std::max<int64_t>(1, std::min(val_rows, window * chunk)),
                          outputs));
  TRAIND_ASSIGN_OR_RETURN(no_targets,
                          backend->Allocate2d(values.empty() ? DType::kS32 : DType::kF32, 1, 1));
  const size_t k = static_cast<size_t>(outputs);
  train_pred.resize(static_cast<size_t>(n) * k);
  train_classes.resize(static_cast<size_t>(n));
  train_values.resize(values.empty() ? 0 : static_cast<size_t>(n) * k);
  val_pred.resize(rows.val.size() * k);
  val_classes.resize(rows.val.size());
  val_values.resize(values.empty() ? 0 : rows.val.size() * k);
  // Every rank reports metrics over all validation rows: their targets are
  // set once, whoever evaluates them.
  FillTargets(rows.val, val_classes.data(), val_values.empty() ? nullptr : val_values.data());
  parallel->Prepare(network.get(), std::max(n, val_rows) * outputs);
  return absl::OkStatus();
}

absl::Status FitTask::SetInitialParameters() {
  if (options.initial_parameters == nullptr) return absl::OkStatus();
  const auto& initial = *options.initial_parameters;
  if (initial.size() != params.size()) {
    return absl::InvalidArgumentError("Fit: initial_parameters has the wrong count");
  }
  for (size_t i = 0; i < params.size(); ++i) {
    if (static_cast<int64_t>(initial[i].size()) != params[i].value->size()) {
      return absl::InvalidArgumentError("Fit: initial_parameters has a wrong size");
    }
    TRAIND_RETURN_IF_ERROR(backend->CopyFromHost(initial[i].data(), params[i].value));
  }
  return absl::OkStatus();
}

absl::Status FitTask::CheckOutputs() const {
  int last = 0;
  for (int i = 0; i < spec.model().layers_size(); ++i) {
    if (spec.model().layers(i).has_dense()) last = i;
  }
  const int64_t units = spec.model().layers(last).dense().units();
  if (units == outputs) return absl::OkStatus();
  const std::string what =
      data.target == data::TargetKind::kClasses  ? absl::StrFormat("%d classes", outputs)
      : data.target == data::TargetKind::kBinary ? std::string("a binary target (1 output)")
                                                 : absl::StrFormat("%d target columns", outputs);
  return InvalidSpecError(absl::StrFormat(
      "model.layers[%d].dense.units: %d units, but the data has %s", last, units, what));
}

// ---------------------------------------------------------------- batches

absl::StatusOr<BatchBuffers*> FitTask::BuffersFor(int64_t batch) {
  for (const std::unique_ptr<BatchBuffers>& b : buffers) {
    if (b->batch == batch) return b.get();
  }
  auto b = std::make_unique<BatchBuffers>();
  b->batch = batch;
  TRAIND_ASSIGN_OR_RETURN(b->x, backend->Allocate2d(DType::kF32, batch, width));
  if (values.empty()) {
    TRAIND_ASSIGN_OR_RETURN(b->targets, backend->Allocate1d(DType::kS32, batch));
  } else {
    TRAIND_ASSIGN_OR_RETURN(b->targets, backend->Allocate2d(DType::kF32, batch, outputs));
  }
  TRAIND_ASSIGN_OR_RETURN(b->doutputs, backend->Allocate2d(DType::kF32, batch, outputs));
  buffers.push_back(std::move(b));
  return buffers.back().get();
}

void FitTask::FillTargets(absl::Span<const int64_t> batch_rows, int32_t* classes,
                          float* out_values) const {
  const int64_t k = outputs;
  for (size_t i = 0; i < batch_rows.size(); ++i) {
    const int64_t r = batch_rows[i];
    if (!data.y.empty()) classes[i] = data.y[static_cast<size_t>(r)];
    if (!values.empty()) {
      std::memcpy(out_values + static_cast<int64_t>(i) * k, values.data() + r * k,
                  static_cast<size_t>(k) * sizeof(float));
    }
  }
}

absl::StatusOr<BatchBuffers*> FitTask::GatherBatch(absl::Span<const int64_t> batch_rows,
                                                   int64_t epoch) {
  TRAIND_ASSIGN_OR_RETURN(BatchBuffers * b, BuffersFor(static_cast<int64_t>(batch_rows.size())));
  if (images != nullptr && (!data.pixels.empty() || (epoch >= 1 && images->augments()))) {
    b->host_x.resize(batch_rows.size() * static_cast<size_t>(width));
    images->Fill(batch_rows, epoch, b->host_x.data());
    TRAIND_RETURN_IF_ERROR(backend->CopyFromHost(b->host_x.data(), &b->x));
  } else {
    TRAIND_RETURN_IF_ERROR(backend->GatherRows(features.data(), width, batch_rows, &b->x));
  }
  if (values.empty()) {
    TRAIND_RETURN_IF_ERROR(backend->GatherLabels(data.y.data(), batch_rows, &b->targets));
  } else {
    TRAIND_RETURN_IF_ERROR(backend->GatherRows(values.data(), outputs, batch_rows, &b->targets));
  }
  return b;
}

double FitTask::WeightOf(const int32_t* classes, const float* target_values, int64_t count) const {
  BatchTargets targets;
  targets.classes = classes;
  targets.values = target_values;
  return loss->Weight(targets, count);
}

ForwardMode FitTask::ModeFor(bool train, int64_t batch_rows, int64_t step) const {
  ForwardMode mode;
  mode.training = train;
  mode.seed = DeriveSeed(dropout_seed, static_cast<uint64_t>(step));
  if (train) {
    mode.communicator = parallel->batch_norm_communicator();
    mode.batch_rows = batch_rows;
  }
  return mode;
}

absl::Status FitTask::ForwardLoss(BatchBuffers* b, bool train, int64_t first_row,
                                  int64_t batch_rows, int64_t step, double grad_scale, int64_t slot,
                                  Tensor* pred) {
  const ForwardMode mode = ModeFor(train, batch_rows, step);
  // x: [batch, width] -> outputs: [batch, k]
  TRAIND_ASSIGN_OR_RETURN(Tensor * out, network->Forward(b->x, mode, first_row));
  return loss_kernel->Compute(*out, b->targets, grad_scale, train ? &b->doutputs : nullptr, pred,
                              slot);
}

absl::Status FitTask::ClearSlot(int64_t slot) {
  Tensor none = val_pred_dev.Rows(0, 0);
  Tensor none_targets = no_targets.Rows(0, 0);
  return loss_kernel->Compute(none, none_targets, 0, nullptr, nullptr, slot);
}

PassPredictions FitTask::Pass(int64_t count, const std::vector<float>& pred,
                              const std::vector<int32_t>& classes,
                              const std::vector<float>& target_values) const {
  PassPredictions p;
  p.target = data.target;
  p.rows = count;
  p.width = outputs;
  p.scores = pred.data();
  p.classes = classes.data();
  p.values = target_values.empty() ? nullptr : target_values.data();
  return p;
}

}  // namespace traind::engine
