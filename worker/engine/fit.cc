#include "worker/engine/fit.h"

#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/types/span.h"
#include "worker/engine/backend/backend.h"
#include "worker/engine/backend/cpu/cpu_backend.h"
#include "worker/engine/checkpoint.h"
#include "worker/engine/data/features.h"
#include "worker/engine/losses.h"
#include "worker/engine/metrics.h"
#include "worker/engine/network.h"
#include "worker/engine/optimizers.h"
#include "worker/engine/random.h"
#include "worker/engine/schedules.h"
#include "worker/engine/spec_check.h"
#include "worker/engine/spec_validation.h"
#include "worker/engine/status.h"

namespace traind::engine {
namespace {

using traind::v1::EpochMetrics;
using traind::v1::FoldResult;
using traind::v1::JobSpec;

absl::Status CheckInputs(const JobSpec& spec, const Dataset& data, const FoldRows& rows) {
  const bool classes = data.target == TargetKind::kClasses || data.target == TargetKind::kBinary;
  if (data.rows <= 0 || data.x.size() != static_cast<size_t>(data.rows * data.features) ||
      (classes && data.y.size() != static_cast<size_t>(data.rows)) ||
      (!classes && data.targets.size() != static_cast<size_t>(data.rows * data.outputs))) {
    return absl::InvalidArgumentError(
        absl::StrFormat("Fit: inconsistent dataset (%d rows, %d features, %d values, %d labels)",
                        data.rows, data.features, data.x.size(), data.y.size()));
  }
  for (const std::vector<int64_t>* list : {&rows.train, &rows.val}) {
    for (int64_t r : *list) {
      if (r < 0 || r >= data.rows) {
        return absl::InvalidArgumentError(
            absl::StrFormat("Fit: row %d is not in [0, %d)", r, data.rows));
      }
    }
  }
  if (rows.train.empty()) return InvalidSpecError("the fold has no training rows");
  if (spec.resources().device() != traind::v1::CPU) {
    return InvalidSpecError(
        "resources.device: this engine trains on the CPU only (no GPU backend yet)");
  }
  if (TargetKindOf(spec) != data.target) {
    return absl::InvalidArgumentError("Fit: the dataset was loaded for another loss");
  }
  return absl::OkStatus();
}

// Tracks the best value of a monitored metric.
struct Tracker {
  Monitor monitor;
  bool active = false;
  double min_delta = 0;
  bool has_best = false;
  double best = 0;
  int32_t best_epoch = 0;

  // The epoch's value of the monitor, if it was computed this epoch.
  bool ValueOf(const EpochMetrics& m, double* value) const {
    const auto& map = monitor.val ? m.val() : m.train();
    auto it = map.find(monitor.key());
    if (it == map.end() || std::isnan(it->second)) return false;
    *value = it->second;
    return true;
  }
  bool Improves(double value, double reference) const {
    return monitor.maximize ? value - min_delta > reference : value + min_delta < reference;
  }
  // Updates best; true when `value` improved on it.
  bool Update(double value, int32_t epoch) {
    if (has_best && !Improves(value, best)) return false;
    has_best = true;
    best = value;
    best_epoch = epoch;
    return true;
  }
};

std::string CsvField(const std::string& s) {
  if (s.find_first_of(",\"\r\n") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}

absl::Status MakeDirs(const std::string& path) {
  std::string partial;
  for (size_t i = 0; i <= path.size(); ++i) {
    if (i == path.size() || path[i] == '/') {
      partial = path.substr(0, i);
      if (!partial.empty() && mkdir(partial.c_str(), 0755) != 0 && errno != EEXIST) {
        return absl::InternalError(absl::StrCat(partial, ": cannot create: ", strerror(errno)));
      }
    }
  }
  return absl::OkStatus();
}

// Input and loss-gradient buffers for one batch size.
struct BatchBuffers {
  int64_t batch = 0;
  Tensor x;         // [batch, width]
  Tensor doutputs;  // [batch, outputs]
};

class FoldTrainer {
 public:
  FoldTrainer(const JobSpec& spec, const Dataset& data, const FoldRows& rows, int32_t fold,
              const FitOptions& options, FitObserver* observer)
      : spec_(spec),
        data_(data),
        rows_(rows),
        fold_(fold),
        options_(options),
        observer_(observer) {}

  absl::StatusOr<FoldResult> Run() {
    TRAIND_RETURN_IF_ERROR(Prepare());
    TRAIND_RETURN_IF_ERROR(MaybeResume());
    TRAIND_RETURN_IF_ERROR(Train());
    TRAIND_RETURN_IF_ERROR(Finish());
    return result_;
  }

 private:
  // ---------------------------------------------------------------- setup

  absl::Status Prepare() {
    TRAIND_ASSIGN_OR_RETURN(metrics_, ResolveSpecMetrics(spec_));
    top_k_ = spec_.metrics().top_k() > 0 ? spec_.metrics().top_k() : 5;
    has_val_ = !rows_.val.empty();
    TRAIND_RETURN_IF_ERROR(PrepareTrackers());

    pipeline_.Fit(spec_.data(), data_, rows_.train);
    pipeline_.Transform(data_, &features_);
    width_ = pipeline_.width();
    if (width_ == 0) return DataError(absl::StrCat(data_.path, ": no feature columns"));
    outputs_ = data_.ModelOutputs();
    TRAIND_RETURN_IF_ERROR(CheckOutputs());

    TRAIND_ASSIGN_OR_RETURN(backend_, CreateCpuBackend());
    TRAIND_ASSIGN_OR_RETURN(Network network,
                            Network::Create(backend_.get(), width_, spec_.model()));
    network_ = std::make_unique<Network>(std::move(network));
    Rng init_rng(DeriveSeed(spec_.seed(), static_cast<uint64_t>(fold_), kInitStream));
    TRAIND_RETURN_IF_ERROR(network_->Initialize(init_rng));
    params_ = network_->parameters();
    state_ = network_->state();
    if (options_.initial_parameters != nullptr) {
      const auto& initial = *options_.initial_parameters;
      if (initial.size() != params_.size()) {
        return absl::InvalidArgumentError("Fit: initial_parameters has the wrong count");
      }
      for (size_t i = 0; i < params_.size(); ++i) {
        if (static_cast<int64_t>(initial[i].size()) != params_[i].value->size()) {
          return absl::InvalidArgumentError("Fit: initial_parameters has a wrong size");
        }
        TRAIND_RETURN_IF_ERROR(backend_->CopyFromHost(initial[i].data(), params_[i].value));
      }
    }
    TRAIND_ASSIGN_OR_RETURN(optimizer_,
                            CreateOptimizer(spec_.optimizer(), backend_.get(), params_));
    TRAIND_ASSIGN_OR_RETURN(loss_, Loss::Create(spec_.loss(), data_.target, outputs_));

    const auto& training = spec_.training();
    batch_size_ = training.batch_size();
    const int64_t n = static_cast<int64_t>(rows_.train.size());
    batches_per_epoch_ = (n + batch_size_ - 1) / batch_size_;
    max_steps_ =
        training.batches() > 0 ? training.batches() : training.epochs() * batches_per_epoch_;
    total_epochs_ = (max_steps_ + batches_per_epoch_ - 1) / batches_per_epoch_;
    schedule_ = std::make_unique<LearningRateSchedule>(
        spec_.optimizer().schedule(), optimizer_->base_learning_rate(), total_epochs_);
    shuffle_ = !training.has_shuffle() || training.shuffle();
    shuffle_rng_ = Rng(DeriveSeed(spec_.seed(), static_cast<uint64_t>(fold_), kShuffleStream));
    dropout_seed_ = DeriveSeed(spec_.seed(), static_cast<uint64_t>(fold_), kDropoutStream);
    order_ = rows_.train;

    // Targets as the loss wants them: class codes, or values [rows, outputs].
    if (data_.target == TargetKind::kBinary) {
      values_.resize(data_.y.size());
      for (size_t i = 0; i < data_.y.size(); ++i) values_[i] = static_cast<float>(data_.y[i]);
    } else if (data_.target != TargetKind::kClasses) {
      values_ = data_.targets;
    }
    // Host buffers, allocated once.
    const size_t k = static_cast<size_t>(outputs_);
    host_out_.resize(static_cast<size_t>(batch_size_) * k);
    host_grad_.resize(host_out_.size());
    train_pred_.resize(static_cast<size_t>(n) * k);
    train_classes_.resize(static_cast<size_t>(n));
    train_values_.resize(values_.empty() ? 0 : static_cast<size_t>(n) * k);
    val_pred_.resize(rows_.val.size() * k);
    val_classes_.resize(rows_.val.size());
    val_values_.resize(values_.empty() ? 0 : rows_.val.size() * k);

    result_.set_fold(fold_);
    const TaskPlan plan = PlanTasks(spec_);
    if (fold_ >= 0 && fold_ < plan.fold_tasks) result_.set_repeat(fold_ / plan.folds);
    result_.set_refit(plan.refit && fold_ == plan.fold_tasks);
    result_.set_train_rows(n);
    result_.set_val_rows(static_cast<int64_t>(rows_.val.size()));
    result_.set_selection(selection_.active ? selection_.monitor.Describe() : "last epoch");
    return absl::OkStatus();
  }

  absl::Status PrepareTrackers() {
    const bool explicit_selection =
        spec_.has_early_stopping() || (spec_.has_checkpoint() && spec_.checkpoint().save_best());
    if (explicit_selection) {
      TRAIND_ASSIGN_OR_RETURN(selection_.monitor, SelectionMonitor(spec_));
      selection_.active = has_val_ || !selection_.monitor.val;
    } else {
      selection_.monitor.val = true;
      selection_.monitor.metric = traind::v1::LOSS;
      selection_.monitor.maximize = false;
      selection_.active = has_val_;
    }
    if (spec_.has_early_stopping()) {
      const auto& es = spec_.early_stopping();
      TRAIND_ASSIGN_OR_RETURN(early_.monitor, ResolveMonitor(es.monitor(), es.mode(), metrics_,
                                                             "early_stopping.monitor"));
      early_.active = has_val_ || !early_.monitor.val;
      early_.min_delta = es.min_delta();
      selection_.min_delta = es.min_delta();
    }
    if (spec_.has_checkpoint() && spec_.checkpoint().save_best()) {
      const auto& c = spec_.checkpoint();
      const std::string text = c.monitor().empty() && spec_.has_early_stopping()
                                   ? spec_.early_stopping().monitor()
                                   : c.monitor();
      TRAIND_ASSIGN_OR_RETURN(best_ckpt_.monitor,
                              ResolveMonitor(text, c.mode(), metrics_, "checkpoint.monitor"));
      best_ckpt_.active = (has_val_ || !best_ckpt_.monitor.val) && !options_.checkpoint_dir.empty();
    }
    if (spec_.optimizer().schedule().has_reduce_on_plateau()) {
      const auto& r = spec_.optimizer().schedule().reduce_on_plateau();
      TRAIND_ASSIGN_OR_RETURN(plateau_.monitor,
                              ResolveMonitor(r.monitor(), r.mode(), metrics_,
                                             "optimizer.schedule.reduce_on_plateau.monitor"));
      plateau_.active = has_val_ || !plateau_.monitor.val;
    }
    keep_best_ = selection_.active &&
                 ((spec_.has_early_stopping() && spec_.early_stopping().restore_best()) ||
                  (spec_.has_checkpoint() && spec_.checkpoint().save_best()));
    return absl::OkStatus();
  }

  absl::Status CheckOutputs() {
    int last = 0;
    for (int i = 0; i < spec_.model().layers_size(); ++i) {
      if (spec_.model().layers(i).has_dense()) last = i;
    }
    const int64_t units = spec_.model().layers(last).dense().units();
    if (units == outputs_) return absl::OkStatus();
    const std::string what =
        data_.target == TargetKind::kClasses  ? absl::StrFormat("%d classes", outputs_)
        : data_.target == TargetKind::kBinary ? std::string("a binary target (1 output)")
                                              : absl::StrFormat("%d target columns", outputs_);
    return InvalidSpecError(absl::StrFormat(
        "model.layers[%d].dense.units: %d units, but the data has %s", last, units, what));
  }

  absl::StatusOr<BatchBuffers*> BuffersFor(int64_t batch) {
    for (const std::unique_ptr<BatchBuffers>& b : buffers_) {
      if (b->batch == batch) return b.get();
    }
    auto b = std::make_unique<BatchBuffers>();
    b->batch = batch;
    TRAIND_ASSIGN_OR_RETURN(b->x, backend_->Allocate2d(DType::kF32, batch, width_));
    TRAIND_ASSIGN_OR_RETURN(b->doutputs, backend_->Allocate2d(DType::kF32, batch, outputs_));
    buffers_.push_back(std::move(b));
    return buffers_.back().get();
  }

  // ------------------------------------------------------------- batches

  // Forward pass of `rows` (and, when training, the backward pass and the
  // update with `lr`). Predictions go to pred/classes/values at the batch's
  // rows (each [rows.size(), ...]).
  absl::Status RunBatch(absl::Span<const int64_t> rows, bool train, double lr, float* pred,
                        int32_t* classes, float* values, LossSums* sums) {
    const int64_t batch = static_cast<int64_t>(rows.size());
    const int64_t k = outputs_;
    TRAIND_ASSIGN_OR_RETURN(BatchBuffers * b, BuffersFor(batch));
    TRAIND_RETURN_IF_ERROR(backend_->GatherRows(features_.data(), width_, rows, &b->x));
    // Targets of the batch, on the host.
    for (int64_t i = 0; i < batch; ++i) {
      const int64_t r = rows[static_cast<size_t>(i)];
      if (!data_.y.empty()) classes[i] = data_.y[static_cast<size_t>(r)];
      if (!values_.empty()) {
        std::memcpy(values + i * k, values_.data() + r * k, static_cast<size_t>(k) * sizeof(float));
      }
    }
    ForwardMode mode;
    mode.training = train;
    mode.seed = DeriveSeed(dropout_seed_, static_cast<uint64_t>(steps_));
    // x: [batch, width] -> outputs: [batch, k]
    TRAIND_ASSIGN_OR_RETURN(Tensor * outputs, network_->Forward(b->x, mode));
    TRAIND_RETURN_IF_ERROR(backend_->CopyToHost(*outputs, host_out_.data()));
    BatchTargets targets;
    targets.classes = classes;
    targets.values = values;
    loss_->Compute(host_out_.data(), batch, targets, train ? host_grad_.data() : nullptr, sums);
    loss_->Predict(host_out_.data(), batch, pred);
    if (!train || !std::isfinite(sums->value_sum)) return absl::OkStatus();
    TRAIND_RETURN_IF_ERROR(backend_->CopyFromHost(host_grad_.data(), &b->doutputs));
    TRAIND_RETURN_IF_ERROR(network_->Backward(b->x, &b->doutputs));
    return optimizer_->Step(lr);
  }

  PassPredictions Pass(int64_t rows, const std::vector<float>& pred,
                       const std::vector<int32_t>& classes,
                       const std::vector<float>& values) const {
    PassPredictions p;
    p.target = data_.target;
    p.rows = rows;
    p.width = outputs_;
    p.scores = pred.data();
    p.classes = classes.data();
    p.values = values.empty() ? nullptr : values.data();
    return p;
  }

  // A full evaluation pass over rows.val -> val_pred_ etc., *sums.
  absl::Status Validate(LossSums* sums) {
    const int64_t n = static_cast<int64_t>(rows_.val.size());
    const int64_t k = outputs_;
    for (int64_t start = 0; start < n; start += batch_size_) {
      const int64_t size = std::min(batch_size_, n - start);
      LossSums batch;
      TRAIND_RETURN_IF_ERROR(
          RunBatch(absl::MakeConstSpan(rows_.val).subspan(static_cast<size_t>(start),
                                                          static_cast<size_t>(size)),
                   /*train=*/false, 0, val_pred_.data() + start * k, val_classes_.data() + start,
                   val_values_.empty() ? nullptr : val_values_.data() + start * k, &batch));
      sums->Add(batch);
    }
    return absl::OkStatus();
  }

  // ---------------------------------------------------------------- loop

  absl::Status Train() {
    const int64_t n = static_cast<int64_t>(rows_.train.size());
    const int64_t k = outputs_;
    const int32_t validate_every = std::max(1, spec_.training().validate_every());
    EpochMetrics report;
    for (int32_t epoch = epochs_done_ + 1; steps_ < max_steps_ && !stopped_; ++epoch) {
      const auto start_time = std::chrono::steady_clock::now();
      const double lr = schedule_->LearningRate(epoch - 1);
      if (shuffle_) Shuffle(order_.data(), order_.size(), shuffle_rng_);
      LossSums train_loss;
      int64_t seen = 0;
      for (int64_t b = 0; b < batches_per_epoch_ && steps_ < max_steps_; ++b) {
        const int64_t start = b * batch_size_;
        const int64_t size = std::min(batch_size_, n - start);
        LossSums sums;
        TRAIND_RETURN_IF_ERROR(RunBatch(
            absl::MakeConstSpan(order_).subspan(static_cast<size_t>(start),
                                                static_cast<size_t>(size)),
            /*train=*/true, lr, train_pred_.data() + start * k, train_classes_.data() + start,
            train_values_.empty() ? nullptr : train_values_.data() + start * k, &sums));
        if (!std::isfinite(sums.value_sum)) {
          return DivergedError(absl::StrFormat("loss became %s at epoch %d, batch %d",
                                               std::isnan(sums.value_sum) ? "nan" : "inf", epoch,
                                               b + 1));
        }
        train_loss.Add(sums);
        seen += size;
        ++steps_;
        if (observer_ != nullptr && observer_->StopRequested()) {
          TRAIND_RETURN_IF_ERROR(WriteStopCheckpoint());
          return CancelledError(
              absl::StrFormat("stopped on request at epoch %d, batch %d", epoch, b + 1));
        }
      }
      report.Clear();
      report.set_task(options_.task);
      report.set_attempt(options_.attempt);
      report.set_epoch(epoch);
      report.set_batches(steps_);
      WriteMetrics(metrics_.train, Pass(seen, train_pred_, train_classes_, train_values_),
                   train_loss.mean(), top_k_, report.mutable_train());
      const bool last = steps_ >= max_steps_;
      if (has_val_ && (epoch % validate_every == 0 || last)) {
        LossSums val_loss;
        TRAIND_RETURN_IF_ERROR(Validate(&val_loss));
        if (!std::isfinite(val_loss.mean())) {
          return DivergedError(absl::StrFormat("validation loss became %s at epoch %d",
                                               std::isnan(val_loss.mean()) ? "nan" : "inf", epoch));
        }
        WriteMetrics(
            metrics_.val,
            Pass(static_cast<int64_t>(rows_.val.size()), val_pred_, val_classes_, val_values_),
            val_loss.mean(), top_k_, report.mutable_val());
      }
      report.set_seconds(
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start_time).count());
      TRAIND_RETURN_IF_ERROR(Handlers(epoch, report));
      *result_.mutable_final_train() = report.train();
      result_.set_epochs_run(epoch);
      if (observer_ != nullptr) TRAIND_RETURN_IF_ERROR(observer_->OnEpochEnd(report));
      epochs_done_ = epoch;
      if (!options_.checkpoint_dir.empty()) {
        Snapshot(&snapshot_);
        snapshot_valid_ = true;
        const int32_t every = spec_.has_checkpoint() ? spec_.checkpoint().every_epochs() : 0;
        if (every > 0 && epoch % every == 0) WritePeriodic(epoch);
      }
    }
    return absl::OkStatus();
  }

  // Best-epoch selection, early stopping, the plateau schedule and the best
  // checkpoint, after an epoch.
  absl::Status Handlers(int32_t epoch, const EpochMetrics& report) {
    double value = 0;
    if (!selection_.active) {
      result_.set_best_epoch(epoch);
      *result_.mutable_val() = report.val();
      *result_.mutable_train() = report.train();
    } else if (selection_.ValueOf(report, &value) && selection_.Update(value, epoch)) {
      result_.set_best_epoch(epoch);
      *result_.mutable_val() = report.val();
      *result_.mutable_train() = report.train();
      if (keep_best_) SaveBestState();
    }
    if (early_.active && epoch > spec_.early_stopping().start_from_epoch() &&
        early_.ValueOf(report, &value)) {
      const auto& es = spec_.early_stopping();
      ++wait_;
      if (!early_.has_best || early_.Improves(value, early_.best)) {
        early_.has_best = true;
        early_.best = value;
        early_.best_epoch = epoch;
        if (!es.has_baseline() || early_.Improves(value, es.baseline())) wait_ = 0;
      }
      if (wait_ >= std::max(1, es.patience())) {
        stopped_ = true;
        result_.set_stopped_early(true);
      }
    }
    if (plateau_.active && plateau_.ValueOf(report, &value)) {
      schedule_->Observe(value, plateau_.monitor.maximize);
    }
    if (best_ckpt_.active && best_ckpt_.ValueOf(report, &value) &&
        best_ckpt_.Update(value, epoch)) {
      CheckpointWriter writer;
      epochs_done_ = epoch;  // the snapshot is of this epoch
      Snapshot(&writer);
      TRAIND_RETURN_IF_ERROR(MakeDirs(options_.checkpoint_dir));
      Warn(writer.WriteFile(options_.checkpoint_dir + "/best.ckpt"));
    }
    return absl::OkStatus();
  }

  void SaveBestState() {
    if (best_state_.empty()) {
      best_state_.resize(state_.size());
      for (size_t i = 0; i < state_.size(); ++i) {
        best_state_[i].resize(static_cast<size_t>(state_[i].value->size()));
      }
    }
    for (size_t i = 0; i < state_.size(); ++i) {
      (void)backend_->CopyToHost(*state_[i].value, best_state_[i].data());
    }
    has_best_state_ = true;
  }

  void Warn(const absl::Status& s) {
    if (!s.ok() && observer_ != nullptr) observer_->OnWarning(s.message());
  }

  // --------------------------------------------------------- checkpoints

  std::vector<int64_t> Counters() const {
    return {epochs_done_,
            steps_,
            static_cast<int64_t>(shuffle_rng_.state()),
            wait_,
            stopped_ ? 1 : 0,
            has_best_state_ ? 1 : 0,
            selection_.has_best ? 1 : 0,
            selection_.best_epoch,
            early_.has_best ? 1 : 0,
            early_.best_epoch,
            best_ckpt_.has_best ? 1 : 0,
            best_ckpt_.best_epoch};
  }

  std::vector<int64_t> Identity() const {
    return {fold_,
            static_cast<int64_t>(rows_.train.size()),
            static_cast<int64_t>(rows_.val.size()),
            static_cast<int64_t>(Crc32(rows_.train.data(), rows_.train.size() * sizeof(int64_t))),
            width_,
            outputs_};
  }

  // The whole training state at the last completed epoch -> *w.
  void Snapshot(CheckpointWriter* w) {
    w->Clear();
    w->PutString("meta.spec", spec_.SerializeAsString());
    w->PutInt64s("meta.identity", Identity());
    w->PutString("meta.classes", absl::StrJoin(data_.classes, "\n"));
    w->PutInt64s("counters", Counters());
    w->PutDoubles("trackers", {selection_.best, early_.best, best_ckpt_.best});
    w->PutDoubles("schedule", schedule_->State());
    w->PutInt64s("order", order_);
    w->PutString("result", result_.SerializeAsString());
    host_state_.clear();
    for (const Parameter& p : state_) {
      host_state_.resize(static_cast<size_t>(p.value->size()));
      (void)backend_->CopyToHost(*p.value, host_state_.data());
      w->PutFloats("state." + p.name, host_state_.data(), host_state_.size());
    }
    const std::vector<Tensor*> opt = optimizer_->state();
    for (size_t i = 0; i < opt.size(); ++i) {
      host_state_.resize(static_cast<size_t>(opt[i]->size()));
      (void)backend_->CopyToHost(*opt[i], host_state_.data());
      w->PutFloats(absl::StrCat("optimizer.", i), host_state_.data(), host_state_.size());
    }
    w->PutInt64s("optimizer.steps", {optimizer_->steps()});
    if (has_best_state_) {
      for (size_t i = 0; i < state_.size(); ++i) {
        w->PutFloats("best." + state_[i].name, best_state_[i].data(), best_state_[i].size());
      }
    }
    w->PutDoubles("pipeline.impute", pipeline_.impute);
    w->PutDoubles("pipeline.offset", pipeline_.offset);
    w->PutDoubles("pipeline.scale", pipeline_.scale);
    for (size_t k = 0; k < pipeline_.categories.size(); ++k) {
      std::vector<int64_t> codes(pipeline_.categories[k].begin(), pipeline_.categories[k].end());
      w->PutInt64s(absl::StrCat("pipeline.categories.", k), codes);
    }
  }

  // Reads everything first and changes nothing unless all of it is there
  // with the right sizes: a bad checkpoint leaves the trainer as it was.
  absl::Status Restore(const CheckpointReader& r) {
    TRAIND_ASSIGN_OR_RETURN(std::vector<int64_t> c, r.GetInt64s("counters"));
    TRAIND_ASSIGN_OR_RETURN(std::vector<double> trackers, r.GetDoubles("trackers"));
    TRAIND_ASSIGN_OR_RETURN(std::vector<double> schedule, r.GetDoubles("schedule"));
    TRAIND_ASSIGN_OR_RETURN(std::vector<int64_t> order, r.GetInt64s("order"));
    TRAIND_ASSIGN_OR_RETURN(std::string result_bytes, r.GetString("result"));
    TRAIND_ASSIGN_OR_RETURN(std::vector<int64_t> opt_steps, r.GetInt64s("optimizer.steps"));
    FoldResult result;
    if (c.size() != 12 || trackers.size() != 3 || order.size() != order_.size() ||
        opt_steps.size() != 1 || schedule.size() != 5 || !result.ParseFromString(result_bytes)) {
      return DataError("malformed counters");
    }
    std::vector<std::vector<float>> state(state_.size());
    for (size_t i = 0; i < state_.size(); ++i) {
      state[i].resize(static_cast<size_t>(state_[i].value->size()));
      TRAIND_RETURN_IF_ERROR(
          r.GetFloats("state." + state_[i].name, state[i].data(), state[i].size()));
    }
    const std::vector<Tensor*> opt = optimizer_->state();
    std::vector<std::vector<float>> opt_state(opt.size());
    for (size_t i = 0; i < opt.size(); ++i) {
      opt_state[i].resize(static_cast<size_t>(opt[i]->size()));
      TRAIND_RETURN_IF_ERROR(
          r.GetFloats(absl::StrCat("optimizer.", i), opt_state[i].data(), opt_state[i].size()));
    }
    std::vector<std::vector<float>> best;
    if (c[5] != 0) {
      best.resize(state_.size());
      for (size_t i = 0; i < state_.size(); ++i) {
        best[i].resize(static_cast<size_t>(state_[i].value->size()));
        TRAIND_RETURN_IF_ERROR(
            r.GetFloats("best." + state_[i].name, best[i].data(), best[i].size()));
      }
    }
    // Apply.
    for (size_t i = 0; i < state_.size(); ++i) {
      TRAIND_RETURN_IF_ERROR(backend_->CopyFromHost(state[i].data(), state_[i].value));
    }
    for (size_t i = 0; i < opt.size(); ++i) {
      TRAIND_RETURN_IF_ERROR(backend_->CopyFromHost(opt_state[i].data(), opt[i]));
    }
    optimizer_->set_steps(opt_steps[0]);
    result_ = std::move(result);
    epochs_done_ = static_cast<int32_t>(c[0]);
    steps_ = c[1];
    shuffle_rng_ = Rng(static_cast<uint64_t>(c[2]));
    wait_ = c[3];
    stopped_ = c[4] != 0;
    has_best_state_ = c[5] != 0;
    selection_.has_best = c[6] != 0;
    selection_.best_epoch = static_cast<int32_t>(c[7]);
    early_.has_best = c[8] != 0;
    early_.best_epoch = static_cast<int32_t>(c[9]);
    best_ckpt_.has_best = c[10] != 0;
    best_ckpt_.best_epoch = static_cast<int32_t>(c[11]);
    selection_.best = trackers[0];
    early_.best = trackers[1];
    best_ckpt_.best = trackers[2];
    schedule_->Restore(schedule);
    order_ = std::move(order);
    best_state_ = std::move(best);
    return absl::OkStatus();
  }

  // Periodic checkpoints "epoch-<N>.ckpt", newest first.
  std::vector<std::pair<int32_t, std::string>> Periodic() const {
    std::vector<std::pair<int32_t, std::string>> files;
    DIR* dir = opendir(options_.checkpoint_dir.c_str());
    if (dir == nullptr) return files;
    while (dirent* e = readdir(dir)) {
      int epoch = 0;
      char tail[8] = {0};
      if (std::sscanf(e->d_name, "epoch-%d.%5s", &epoch, tail) == 2 &&
          std::strcmp(tail, "ckpt") == 0 &&
          std::string(e->d_name) == absl::StrFormat("epoch-%06d.ckpt", epoch)) {
        files.emplace_back(epoch, options_.checkpoint_dir + "/" + e->d_name);
      }
    }
    closedir(dir);
    std::sort(files.rbegin(), files.rend());
    return files;
  }

  void WritePeriodic(int32_t epoch) {
    Warn(MakeDirs(options_.checkpoint_dir));
    Warn(snapshot_.WriteFile(
        absl::StrCat(options_.checkpoint_dir, "/", absl::StrFormat("epoch-%06d.ckpt", epoch))));
    const int keep =
        spec_.has_checkpoint() && spec_.checkpoint().keep() > 0 ? spec_.checkpoint().keep() : 5;
    const auto files = Periodic();
    for (size_t i = static_cast<size_t>(keep); i < files.size(); ++i) {
      std::remove(files[i].second.c_str());
    }
  }

  absl::Status WriteStopCheckpoint() {
    if (options_.checkpoint_dir.empty() || !snapshot_valid_) return absl::OkStatus();
    WritePeriodic(epochs_done_);
    return absl::OkStatus();
  }

  absl::Status MaybeResume() {
    if (options_.checkpoint_dir.empty()) return absl::OkStatus();
    const std::string spec_bytes = spec_.SerializeAsString();
    for (const auto& [epoch, path] : Periodic()) {
      absl::StatusOr<CheckpointReader> reader = CheckpointReader::ReadFile(path);
      if (!reader.ok()) {
        Warn(absl::DataLossError(absl::StrCat("skipping checkpoint: ", reader.status().message())));
        continue;
      }
      absl::StatusOr<std::string> stored = reader->GetString("meta.spec");
      absl::StatusOr<std::vector<int64_t>> identity = reader->GetInt64s("meta.identity");
      if (!stored.ok() || !identity.ok() || *stored != spec_bytes || *identity != Identity()) {
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
      Snapshot(&snapshot_);
      snapshot_valid_ = true;
      if (observer_ != nullptr) observer_->OnResume(epochs_done_);
      return absl::OkStatus();
    }
    return absl::OkStatus();
  }

  // -------------------------------------------------------------- finish

  absl::Status Finish() {
    const bool restore = spec_.has_early_stopping() && spec_.early_stopping().restore_best();
    if (restore && has_best_state_) {
      for (size_t i = 0; i < state_.size(); ++i) {
        TRAIND_RETURN_IF_ERROR(backend_->CopyFromHost(best_state_[i].data(), state_[i].value));
      }
    }
    if (options_.artifacts_dir.empty()) return absl::OkStatus();
    TRAIND_RETURN_IF_ERROR(MakeDirs(options_.artifacts_dir));
    if (has_val_) {
      LossSums sums;
      TRAIND_RETURN_IF_ERROR(Validate(&sums));
      TRAIND_RETURN_IF_ERROR(WritePredictions(options_.artifacts_dir + "/predictions.csv"));
      result_.set_predictions_path(options_.artifacts_dir + "/predictions.csv");
    } else {
      CheckpointWriter writer;
      Snapshot(&writer);
      TRAIND_RETURN_IF_ERROR(writer.WriteFile(options_.artifacts_dir + "/model.ckpt"));
      result_.set_model_path(options_.artifacts_dir + "/model.ckpt");
    }
    return absl::OkStatus();
  }

  absl::Status WritePredictions(const std::string& path) {
    std::vector<std::string> header = {"row"};
    switch (data_.target) {
      case TargetKind::kClasses:
        for (const std::string& c : data_.classes) header.push_back(CsvField("p_" + c));
        break;
      case TargetKind::kBinary:
        header.push_back(CsvField("p_" + data_.classes[1]));
        break;
      case TargetKind::kMultiLabel:
        for (const std::string& c : data_.target_names) header.push_back(CsvField("p_" + c));
        break;
      case TargetKind::kRegression:
        if (outputs_ == 1) {
          header.push_back("prediction");
        } else {
          for (const std::string& c : data_.target_names) header.push_back(CsvField(c));
        }
        break;
    }
    std::string text = absl::StrJoin(header, ",") + "\n";
    for (size_t i = 0; i < rows_.val.size(); ++i) {
      absl::StrAppend(&text, rows_.val[i]);
      for (int64_t j = 0; j < outputs_; ++j) {
        absl::StrAppend(&text, ",", absl::StrFormat("%.9g", val_pred_[i * outputs_ + j]));
      }
      text += "\n";
    }
    const std::string tmp = path + ".tmp";
    FILE* f = std::fopen(tmp.c_str(), "w");
    if (f == nullptr) return absl::InternalError(absl::StrCat(tmp, ": ", strerror(errno)));
    const bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
    if (std::fclose(f) != 0 || !ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
      return absl::InternalError(absl::StrCat(path, ": cannot write: ", strerror(errno)));
    }
    return absl::OkStatus();
  }

  const JobSpec& spec_;
  const Dataset& data_;
  const FoldRows& rows_;
  const int32_t fold_;
  const FitOptions options_;
  FitObserver* const observer_;

  ResolvedMetrics metrics_;
  int top_k_ = 5;
  bool has_val_ = false;
  Tracker selection_, early_, best_ckpt_, plateau_;
  bool keep_best_ = false;

  FeaturePipeline pipeline_;
  std::vector<float> features_;  // [data.rows, width_]
  int64_t width_ = 0, outputs_ = 0;
  std::vector<float> values_;  // [data.rows, outputs_] targets (not kClasses)

  int64_t batch_size_ = 0, batches_per_epoch_ = 0, max_steps_ = 0, total_epochs_ = 0;
  bool shuffle_ = true;
  Rng shuffle_rng_{0};
  uint64_t dropout_seed_ = 0;
  std::vector<int64_t> order_;

  // Loop state (checkpointed).
  int32_t epochs_done_ = 0;
  int64_t steps_ = 0;
  int64_t wait_ = 0;
  bool stopped_ = false;
  bool has_best_state_ = false;
  std::vector<std::vector<float>> best_state_;
  FoldResult result_;

  // Host buffers.
  std::vector<float> host_out_, host_grad_, host_state_;
  std::vector<float> train_pred_, train_values_, val_pred_, val_values_;
  std::vector<int32_t> train_classes_, val_classes_;
  CheckpointWriter snapshot_;
  bool snapshot_valid_ = false;

  // Declared before what they own memory for: destroyed last.
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Network> network_;
  std::vector<Parameter> params_, state_;
  std::unique_ptr<Optimizer> optimizer_;
  std::unique_ptr<Loss> loss_;
  std::unique_ptr<LearningRateSchedule> schedule_;
  std::vector<std::unique_ptr<BatchBuffers>> buffers_;
};

}  // namespace

absl::StatusOr<FoldResult> Fit(const JobSpec& spec, const Dataset& data, const FoldRows& rows,
                               int32_t fold, const FitOptions& options, FitObserver* observer) {
  TRAIND_RETURN_IF_ERROR(CheckTrainingSpec(spec));
  TRAIND_RETURN_IF_ERROR(CheckInputs(spec, data, rows));
  return FoldTrainer(spec, data, rows, fold, options, observer).Run();
}

}  // namespace traind::engine
