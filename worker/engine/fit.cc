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

#include "absl/strings/match.h"
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
#include "worker/engine/parallel/communicator.h"
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
  if (classes) {
    // The codes index class weights on the host and on the device.
    const int64_t codes = static_cast<int64_t>(data.classes.size());
    for (size_t r = 0; r < data.y.size(); ++r) {
      if (data.y[r] < 0 || data.y[r] >= codes) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "Fit: row %d has class code %d, not in [0, %d)", r, data.y[r], codes));
      }
    }
  }
  if (rows.train.empty()) return InvalidSpecError("the fold has no training rows");
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

// The rows of a batch of `rows` that rank `rank` of `ranks` trains or
// evaluates: a contiguous share, the first rows % ranks ranks one row more
// than the others (possibly none).
struct Share {
  int64_t first = 0;
  int64_t rows = 0;
};
Share ShareOf(int64_t rows, int rank, int ranks) {
  const int64_t base = rows / ranks, extra = rows % ranks;
  return {rank * base + std::min<int64_t>(rank, extra), base + (rank < extra ? 1 : 0)};
}

// Input, target and loss-gradient buffers for one batch size.
struct BatchBuffers {
  int64_t batch = 0;
  Tensor x;         // [batch, width]
  Tensor targets;   // [batch] class codes, or [batch, outputs] values
  Tensor doutputs;  // [batch, outputs]
};

// The losses and predictions of a run of batches stay on the backend until
// the run ends (a window): at most 256 batches and, unless one batch is
// larger, 32768 rows. Reading a window back (divergence check, metrics'
// predictions) is the one wait for the device in a run of steps, and the
// device memory it takes does not grow with the data.
constexpr int64_t kMaxWindowBatches = 256;
constexpr int64_t kMaxWindowRows = 32768;


class FoldTrainer {
 public:
  FoldTrainer(const JobSpec& spec, const Dataset& data, const FoldRows& rows, int32_t fold,
              const FitOptions& options, FitObserver* observer)
      : spec_(spec),
        data_(data),
        rows_(rows),
        fold_(fold),
        options_(options),
        observer_(observer),
        comm_(options.communicator),
        rank_(comm_ != nullptr ? comm_->rank() : 0),
        ranks_(comm_ != nullptr ? comm_->size() : 1),
        writer_(rank_ == 0) {}

  // True when Run's error is one every rank returns at the same point (a
  // divergence or stop seen in reduced values, ranks that disagree), so no
  // rank waits for another.
  bool every_rank_fails() const { return every_rank_fails_; }

  absl::StatusOr<FoldResult> Run() {
    TRAIND_RETURN_IF_ERROR(Prepare());
    TRAIND_RETURN_IF_ERROR(MaybeResume());
    TRAIND_RETURN_IF_ERROR(CheckRanksAgree());
    TRAIND_RETURN_IF_ERROR(Train());
    TRAIND_RETURN_IF_ERROR(Finish());
    if (comm_ != nullptr) {
      // Every rank got here: none returns success while another failed.
      double done = 1;
      TRAIND_RETURN_IF_ERROR(comm_->AllReduceSum(&done, 1));
    }
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

    backend_ = options_.backend;
    if (backend_ == nullptr) {
      TRAIND_ASSIGN_OR_RETURN(owned_backend_, CreateCpuBackend(spec_.training().precision()));
      backend_ = owned_backend_.get();
    }
    TRAIND_ASSIGN_OR_RETURN(Network network, Network::Create(backend_, width_, spec_.model()));
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
    TRAIND_ASSIGN_OR_RETURN(optimizer_, CreateOptimizer(spec_.optimizer(), backend_, params_));
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
    // The loss on the backend's device: batches of at most the largest
    // share of a training batch (validation uses the same chunks), one
    // value slot per batch (or chunk) of a window.
    const int64_t chunk = (batch_size_ + ranks_ - 1) / ranks_;
    const int64_t val_rows = static_cast<int64_t>(rows_.val.size());
    window_ = std::clamp<int64_t>(kMaxWindowRows / batch_size_, 1, kMaxWindowBatches);
    // One more slot: the step graph's.
    TRAIND_ASSIGN_OR_RETURN(loss_kernel_,
                            backend_->CreateLossKernel(loss_->KernelOptions(chunk, window_ + 1)));
    slot_values_.resize(static_cast<size_t>(window_));
    // A window's predictions, where the loss computes them.
    TRAIND_ASSIGN_OR_RETURN(
        train_pred_dev_,
        backend_->Allocate2d(DType::kF32, std::max<int64_t>(1, std::min(n, window_ * batch_size_)),
                             outputs_));
    TRAIND_ASSIGN_OR_RETURN(
        val_pred_dev_,
        backend_->Allocate2d(DType::kF32, std::max<int64_t>(1, std::min(val_rows, window_ * chunk)),
                             outputs_));
    graphs_ = options_.step_graphs && comm_ == nullptr;
    for (const traind::v1::Layer& layer : spec_.model().layers()) {
      // A new mask every step.
      if (layer.has_dropout() && layer.dropout().rate() > 0) graphs_ = false;
    }
    TRAIND_ASSIGN_OR_RETURN(no_targets_,
                            backend_->Allocate2d(values_.empty() ? DType::kS32 : DType::kF32, 1, 1));
    // Host buffers, allocated once.
    const size_t k = static_cast<size_t>(outputs_);
    train_pred_.resize(static_cast<size_t>(n) * k);
    train_classes_.resize(static_cast<size_t>(n));
    train_values_.resize(values_.empty() ? 0 : static_cast<size_t>(n) * k);
    val_pred_.resize(rows_.val.size() * k);
    val_classes_.resize(rows_.val.size());
    val_values_.resize(values_.empty() ? 0 : rows_.val.size() * k);
    // Every rank reports metrics over all validation rows: their targets are
    // set once, whoever evaluates them.
    FillTargets(rows_.val, val_classes_.data(), val_values_.empty() ? nullptr : val_values_.data());
    write_artifacts_ = !options_.artifacts_dir.empty();
    if (comm_ != nullptr) PrepareDataParallel();

    result_.set_fold(fold_);
    const TaskPlan plan = PlanTasks(spec_);
    if (fold_ >= 0 && fold_ < plan.fold_tasks) result_.set_repeat(fold_ / plan.folds);
    result_.set_refit(plan.refit && fold_ == plan.fold_tasks);
    result_.set_train_rows(n);
    result_.set_val_rows(static_cast<int64_t>(rows_.val.size()));
    result_.set_selection(selection_.active ? selection_.monitor.Describe() : "last epoch");
    return absl::OkStatus();
  }

  // Data parallelism: the gradient buckets, the state every rank keeps in
  // step, the host buffer of reductions.
  void PrepareDataParallel() {
    // Buckets from the end of the flat gradients: backward finishes the
    // last layers first.
    const int64_t total = network_->gradients().size();
    const int64_t per =
        std::max<int64_t>(Network::kGradientAlignment,
                          options_.allreduce_bucket_bytes / static_cast<int64_t>(sizeof(float)));
    for (int64_t end = total; end > 0; end -= per) {
      buckets_.emplace_back(std::max<int64_t>(0, end - per), end);
    }
    const int64_t rows = std::max<int64_t>(static_cast<int64_t>(rows_.train.size()),
                                           static_cast<int64_t>(rows_.val.size()));
    reduce_piece_ = std::max<int64_t>(16, options_.allreduce_bucket_bytes /
                                              static_cast<int64_t>(sizeof(double)));
    reduce_.resize(static_cast<size_t>(std::min<int64_t>(2 + rows * outputs_, reduce_piece_)));
  }

  // Data parallelism: the ranks were given the same task and resumed from
  // the same checkpoint; rank 0's artifacts_dir decides whether artifacts
  // are written (by rank 0, after a final validation pass of all ranks).
  absl::Status CheckRanksAgree() {
    if (comm_ == nullptr) return absl::OkStatus();
    constexpr int kFields = 3;
    std::vector<double> all(static_cast<size_t>(ranks_ * kFields), 0.0);
    double* mine = all.data() + rank_ * kFields;
    const std::string spec_bytes = spec_.SerializeAsString();
    const std::vector<int64_t> identity = Identity();
    mine[0] = epochs_done_;
    // The checkpoint identity covers the training rows; the validation rows
    // and the bucket size must agree too, or the ranks' collectives differ.
    const int64_t bucket = options_.allreduce_bucket_bytes;
    uint32_t crc = Crc32(spec_bytes.data(), spec_bytes.size());
    crc = Crc32(identity.data(), identity.size() * sizeof(int64_t), crc);
    crc = Crc32(rows_.val.data(), rows_.val.size() * sizeof(int64_t), crc);
    crc = Crc32(&bucket, sizeof(bucket), crc);
    mine[1] = crc;
    mine[2] = options_.artifacts_dir.empty() ? 0 : 1;
    TRAIND_RETURN_IF_ERROR(comm_->AllReduceSum(all.data(), static_cast<int64_t>(all.size())));
    every_rank_fails_ = true;  // every rank sees the same sums
    for (int r = 1; r < ranks_; ++r) {
      const double* other = all.data() + r * kFields;
      if (other[1] != all[1]) {
        return absl::FailedPreconditionError(absl::StrFormat(
            "data parallelism: rank %d was given another spec, task or rows than rank 0", r));
      }
      if (other[0] != all[0]) {
        return absl::FailedPreconditionError(absl::StrFormat(
            "data parallelism: rank %d resumed after epoch %d, rank 0 after epoch %d (every "
            "rank needs the same checkpoint_dir)",
            r, static_cast<int>(other[0]), static_cast<int>(all[0])));
      }
    }
    every_rank_fails_ = false;
    write_artifacts_ = all[2] != 0;
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
    if (values_.empty()) {
      TRAIND_ASSIGN_OR_RETURN(b->targets, backend_->Allocate1d(DType::kS32, batch));
    } else {
      TRAIND_ASSIGN_OR_RETURN(b->targets, backend_->Allocate2d(DType::kF32, batch, outputs_));
    }
    TRAIND_ASSIGN_OR_RETURN(b->doutputs, backend_->Allocate2d(DType::kF32, batch, outputs_));
    buffers_.push_back(std::move(b));
    return buffers_.back().get();
  }

  // ------------------------------------------------------------- batches

  // classes/values[i] = the targets of rows[i] (each [rows.size(), ...]).
  void FillTargets(absl::Span<const int64_t> rows, int32_t* classes, float* values) const {
    const int64_t k = outputs_;
    for (size_t i = 0; i < rows.size(); ++i) {
      const int64_t r = rows[i];
      if (!data_.y.empty()) classes[i] = data_.y[static_cast<size_t>(r)];
      if (!values_.empty()) {
        std::memcpy(values + static_cast<int64_t>(i) * k, values_.data() + r * k,
                    static_cast<size_t>(k) * sizeof(float));
      }
    }
  }

  // The buffers of a batch of `rows`, with their features and targets.
  absl::StatusOr<BatchBuffers*> GatherBatch(absl::Span<const int64_t> rows) {
    TRAIND_ASSIGN_OR_RETURN(BatchBuffers * b, BuffersFor(static_cast<int64_t>(rows.size())));
    TRAIND_RETURN_IF_ERROR(backend_->GatherRows(features_.data(), width_, rows, &b->x));
    if (values_.empty()) {
      TRAIND_RETURN_IF_ERROR(backend_->GatherLabels(data_.y.data(), rows, &b->targets));
    } else {
      TRAIND_RETURN_IF_ERROR(backend_->GatherRows(values_.data(), outputs_, rows, &b->targets));
    }
    return b;
  }

  // Forward pass and loss of batch *b on the backend: its predictions in
  // *pred (a [rows, outputs] view), its loss sum in the loss kernel's slot
  // `slot`; when training, the gradient of the loss sum times `grad_scale`
  // in b->doutputs, for the backward pass. `first_row`: the position of the
  // batch's first row in the global batch (dropout masks are drawn by
  // global row) of `batch_rows` rows (batch norm's statistics are the
  // global batch's).
  absl::Status ForwardLoss(BatchBuffers* b, bool train, int64_t first_row, int64_t batch_rows,
                           double grad_scale, int64_t slot, Tensor* pred) {
    const ForwardMode mode = ModeFor(train, batch_rows);
    // x: [batch, width] -> outputs: [batch, k]
    TRAIND_ASSIGN_OR_RETURN(Tensor * outputs, network_->Forward(b->x, mode, first_row));
    return loss_kernel_->Compute(*outputs, b->targets, grad_scale, train ? &b->doutputs : nullptr,
                                 pred, slot);
  }

  // Forward, loss and backward of a full training batch *b of one rank:
  // the step graph's replay; the first full batch runs op by op (planning
  // every kernel and buffer), and the second records the graph first. The
  // graph reads the gradient scale stored before each launch, and writes
  // the predictions and the loss to buffers of its own, copied to *pred and
  // slot `slot` after it.
  absl::Status FullBatchStep(BatchBuffers* b, double scale, int64_t slot, Tensor* pred) {
    const int64_t graph_slot = window_;  // the loss kernel's extra slot
    if (step_graph_ == nullptr && graph_warm_) {
      if (graph_pred_.empty()) {
        TRAIND_ASSIGN_OR_RETURN(graph_pred_,
                                backend_->Allocate2d(DType::kF32, batch_size_, outputs_));
      }
      absl::StatusOr<std::unique_ptr<OpGraph>> graph = backend_->Capture([&]() -> absl::Status {
        TRAIND_RETURN_IF_ERROR(ForwardLoss(b, /*train=*/true, 0, batch_size_,
                                           LossKernel::kStoredGradScale, graph_slot,
                                           &graph_pred_));
        return network_->Backward(b->x, &b->doutputs);
      });
      if (graph.ok()) {
        step_graph_ = std::move(graph).value();
      } else {
        // Not this backend (the CPU's), or an op it cannot record: the
        // ops one by one from now on.
        graphs_ = false;
        if (!absl::IsUnimplemented(graph.status())) {
          Warn(absl::Status(graph.status().code(),
                            absl::StrCat("training without a step graph: ",
                                         graph.status().message())));
        }
      }
    }
    if (step_graph_ != nullptr) {
      TRAIND_RETURN_IF_ERROR(loss_kernel_->StoreGradScale(scale));
      TRAIND_RETURN_IF_ERROR(step_graph_->Launch());
      TRAIND_RETURN_IF_ERROR(backend_->Copy(graph_pred_, pred));
      return loss_kernel_->CopySlot(graph_slot, slot);
    }
    graph_warm_ = true;
    TRAIND_RETURN_IF_ERROR(ForwardLoss(b, /*train=*/true, 0, batch_size_, scale, slot, pred));
    return network_->Backward(b->x, &b->doutputs);
  }

  // The loss kernel's slot `slot` = 0: a rank without rows in a batch.
  absl::Status ClearSlot(int64_t slot) {
    Tensor none = val_pred_dev_.Rows(0, 0);
    Tensor no_targets = no_targets_.Rows(0, 0);
    return loss_kernel_->Compute(none, no_targets, 0, nullptr, nullptr, slot);
  }

  // The weight of `count` rows of targets at classes/values (host arrays).
  double WeightOf(const int32_t* classes, const float* values, int64_t count) const {
    BatchTargets targets;
    targets.classes = classes;
    targets.values = values;
    return loss_->Weight(targets, count);
  }

  // The forward pass of this step: a training pass of a global batch of
  // `batch_rows` rows, split across the ranks, or an evaluation pass.
  ForwardMode ModeFor(bool train, int64_t batch_rows) const {
    ForwardMode mode;
    mode.training = train;
    mode.seed = DeriveSeed(dropout_seed_, static_cast<uint64_t>(steps_));
    if (train) {
      mode.communicator = comm_;
      mode.batch_rows = batch_rows;
    }
    return mode;
  }

  // One optimizer step with learning rate `lr` on the global batch `batch`,
  // which starts at position `start` of the epoch's order: this rank's
  // share of it forward and backward (its loss sum in the loss kernel's
  // slot `slot`, its predictions in train_pred_dev_ from row `start -
  // window_start`), the gradients summed across ranks, the update. Every rank sets the targets of the whole
  // batch in train_classes_/train_values_ and adds its weight to *weight.
  // *stop: some rank's observer asked to stop (data parallelism; one
  // reduction per step).
  absl::Status TrainStep(absl::Span<const int64_t> batch, int64_t start, int64_t window_start,
                         int64_t slot, double lr, double* weight, bool* stop) {
    const int64_t k = outputs_;
    const int64_t size = static_cast<int64_t>(batch.size());
    const Share share = ShareOf(size, rank_, ranks_);
    const int64_t at = start + share.first;  // the share's position in the epoch's order
    int32_t* classes = train_classes_.data() + start;
    float* values = train_values_.empty() ? nullptr : train_values_.data() + start * k;
    FillTargets(batch, classes, values);
    // The update follows the global batch's mean loss: every rank's
    // gradient is scaled by the whole batch's weight (known on the host).
    const double batch_weight = WeightOf(classes, values, size);
    *weight += batch_weight;
    const double scale = batch_weight > 0 ? 1.0 / batch_weight : 0.0;
    BatchBuffers* b = nullptr;
    if (share.rows > 0) {
      TRAIND_ASSIGN_OR_RETURN(b, GatherBatch(batch.subspan(static_cast<size_t>(share.first),
                                                           static_cast<size_t>(share.rows))));
      Tensor pred = train_pred_dev_.Rows(at - window_start, share.rows);
      if (graphs_ && size == batch_size_) {
        // One rank (graphs_): no collectives, and the step ends here.
        TRAIND_RETURN_IF_ERROR(FullBatchStep(b, scale, slot, &pred));
        return optimizer_->Step(lr);
      }
      TRAIND_RETURN_IF_ERROR(ForwardLoss(b, /*train=*/true, share.first, size, scale, slot, &pred));
    } else {
      TRAIND_RETURN_IF_ERROR(ClearSlot(slot));
      // No rows here this step: batch norm's statistics still need this rank.
      TRAIND_RETURN_IF_ERROR(network_->JoinForward(ModeFor(/*train=*/true, size)));
    }
    if (comm_ != nullptr) {
      // Whether any rank was asked to stop.
      double asked = observer_ != nullptr && observer_->StopRequested() ? 1.0 : 0.0;
      TRAIND_RETURN_IF_ERROR(comm_->AllReduceSum(&asked, 1));
      *stop = asked > 0;
    }
    next_bucket_ = 0;
    if (share.rows > 0) {
      if (comm_ == nullptr) {
        TRAIND_RETURN_IF_ERROR(network_->Backward(b->x, &b->doutputs));
      } else {
        // Each bucket's sum starts as soon as backward has finished it, and
        // runs while backward goes on.
        TRAIND_RETURN_IF_ERROR(network_->Backward(b->x, &b->doutputs, [this](size_t layer) {
          return ReduceBucketsFrom(network_->gradients_ready_from(layer));
        }));
      }
    } else {
      // No rows here this step: a zero gradient joins the sum, and the
      // collectives of the backward pass, in the same order.
      if (network_->gradients().size() > 0) {
        TRAIND_RETURN_IF_ERROR(backend_->Fill(0.0f, &network_->gradients()));
      }
      if (comm_ != nullptr) {
        TRAIND_RETURN_IF_ERROR(network_->JoinBackward([this](size_t layer) {
          return ReduceBucketsFrom(network_->gradients_ready_from(layer));
        }));
      }
    }
    if (comm_ != nullptr) {
      TRAIND_RETURN_IF_ERROR(ReduceBucketsFrom(0));
      TRAIND_RETURN_IF_ERROR(comm_->WaitAll());
    }
    // Clipping (inside Step) sees the summed gradient.
    return optimizer_->Step(lr);
  }

  // Ends the window of training batches [first, end) of epoch `epoch`,
  // which covers the epoch's rows [first · batch_size, end_row): their loss
  // sums (summed across ranks) into *sums, their predictions (this rank's
  // rows) into train_pred_. A batch whose loss is not finite fails the
  // fold: DivergedError naming it (every rank sees the same sums).
  absl::Status ReadTrainWindow(int32_t epoch, int64_t first, int64_t end, int64_t end_row,
                               LossSums* sums) {
    const int64_t count = end - first;
    if (count <= 0) return absl::OkStatus();
    const int64_t first_row = first * batch_size_;
    Tensor pred = train_pred_dev_.Rows(0, end_row - first_row);
    TRAIND_RETURN_IF_ERROR(backend_->CopyToHost(pred, train_pred_.data() + first_row * outputs_));
    TRAIND_RETURN_IF_ERROR(loss_kernel_->ReadSlots(0, count, slot_values_.data()));
    if (comm_ != nullptr) {
      TRAIND_RETURN_IF_ERROR(comm_->AllReduceSum(slot_values_.data(), count));
      // The next window's rows of the other ranks stay 0.
      TRAIND_RETURN_IF_ERROR(backend_->Fill(0.0f, &train_pred_dev_));
    }
    for (int64_t i = 0; i < count; ++i) {
      const double v = slot_values_[static_cast<size_t>(i)];
      if (!std::isfinite(v)) {
        every_rank_fails_ = true;  // the batch's loss is summed across ranks
        return DivergedError(absl::StrFormat("loss became %s at epoch %d, batch %d",
                                             std::isnan(v) ? "nan" : "inf", epoch,
                                             first + i + 1));
      }
      sums->value_sum += v;
    }
    return absl::OkStatus();
  }

  // Starts summing, across ranks, the gradient buckets not yet started that
  // start at or after flat offset `ready`, in bucket order (the same on
  // every rank); the step waits for them (WaitAll) before the update.
  absl::Status ReduceBucketsFrom(int64_t ready) {
    float* grads = network_->gradients().f32();
    while (next_bucket_ < buckets_.size() && buckets_[next_bucket_].first >= ready) {
      const auto [begin, end] = buckets_[next_bucket_++];
      TRAIND_RETURN_IF_ERROR(comm_->StartAllReduceSum(grads + begin, end - begin));
    }
    return absl::OkStatus();
  }

  // Data parallelism: values[0, count) (this rank's rows set, the others'
  // zero) and *sums (unless null) summed across ranks, so every rank holds
  // all rows' predictions and the pass's loss sums.
  // In pieces of allreduce_bucket_bytes (reduce_piece_ doubles): the
  // buffers of a reduction (on the host, and NCCL's staging on the device)
  // do not grow with the data. Each value is summed alone, so the pieces
  // change no result.
  absl::Status ReduceRows(float* values, int64_t count, LossSums* sums) {
    reduce_[0] = sums != nullptr ? sums->value_sum : 0.0;
    reduce_[1] = sums != nullptr ? sums->weight_sum : 0.0;
    int64_t head = 2;  // the sums ride with the first piece
    for (int64_t first = 0; first < count || head > 0; head = 0) {
      const int64_t n = std::min(count - first, reduce_piece_ - head);
      for (int64_t i = 0; i < n; ++i) reduce_[static_cast<size_t>(head + i)] = values[first + i];
      TRAIND_RETURN_IF_ERROR(comm_->AllReduceSum(reduce_.data(), head + n));
      if (head > 0 && sums != nullptr) {
        sums->value_sum = reduce_[0];
        sums->weight_sum = reduce_[1];
      }
      for (int64_t i = 0; i < n; ++i) {
        values[first + i] = static_cast<float>(reduce_[static_cast<size_t>(head + i)]);
      }
      first += n;
    }
    return absl::OkStatus();
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

  // A full evaluation pass over rows.val -> val_pred_ etc., *sums. With
  // data parallelism each rank evaluates its share of the rows, and the
  // predictions and sums are then summed across ranks.
  absl::Status Validate(LossSums* sums) {
    const int64_t n = static_cast<int64_t>(rows_.val.size());
    const int64_t k = outputs_;
    const Share share = ShareOf(n, rank_, ranks_);
    if (comm_ != nullptr) std::fill(val_pred_.begin(), val_pred_.end(), 0.0f);
    // Batches of the largest training share: their buffers exist already.
    const int64_t chunk = (batch_size_ + ranks_ - 1) / ranks_;
    const int64_t end = share.first + share.rows;
    LossSums mine;
    int64_t window_start = share.first, slot = 0;
    for (int64_t start = share.first; start < end; start += chunk) {
      const int64_t size = std::min(chunk, end - start);
      TRAIND_ASSIGN_OR_RETURN(
          BatchBuffers * b,
          GatherBatch(absl::MakeConstSpan(rows_.val).subspan(static_cast<size_t>(start),
                                                             static_cast<size_t>(size))));
      Tensor pred = val_pred_dev_.Rows(start - window_start, size);
      TRAIND_RETURN_IF_ERROR(
          ForwardLoss(b, /*train=*/false, 0, size, /*grad_scale=*/0, slot++, &pred));
      mine.weight_sum +=
          WeightOf(val_classes_.data() + start,
                   val_values_.empty() ? nullptr : val_values_.data() + start * k, size);
      if (slot == window_ || start + size == end) {
        // The window's predictions and loss sums: the one wait of a window.
        Tensor done = val_pred_dev_.Rows(0, start + size - window_start);
        TRAIND_RETURN_IF_ERROR(backend_->CopyToHost(done, val_pred_.data() + window_start * k));
        TRAIND_RETURN_IF_ERROR(loss_kernel_->ReadSlots(0, slot, slot_values_.data()));
        for (int64_t i = 0; i < slot; ++i) mine.value_sum += slot_values_[static_cast<size_t>(i)];
        window_start = start + size;
        slot = 0;
      }
    }
    if (comm_ != nullptr) TRAIND_RETURN_IF_ERROR(ReduceRows(val_pred_.data(), n * k, &mine));
    sums->Add(mine);
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
      // Data parallelism: each rank fills its own rows of the predictions.
      if (comm_ != nullptr) TRAIND_RETURN_IF_ERROR(backend_->Fill(0.0f, &train_pred_dev_));
      LossSums train_loss;
      int64_t seen = 0;
      int64_t window = 0;  // the first batch of the current window
      for (int64_t b = 0; b < batches_per_epoch_ && steps_ < max_steps_; ++b) {
        const int64_t start = b * batch_size_;
        const int64_t size = std::min(batch_size_, n - start);
        bool stop = false;
        TRAIND_RETURN_IF_ERROR(TrainStep(absl::MakeConstSpan(order_).subspan(
                                             static_cast<size_t>(start), static_cast<size_t>(size)),
                                         start, window * batch_size_, b - window, lr,
                                         &train_loss.weight_sum, &stop));
        seen += size;
        ++steps_;
        if (b + 1 - window == window_) {
          TRAIND_RETURN_IF_ERROR(ReadTrainWindow(epoch, window, b + 1, seen, &train_loss));
          window = b + 1;
        }
        if (comm_ == nullptr) stop = observer_ != nullptr && observer_->StopRequested();
        if (stop) {
          // A stop after a divergence reports the divergence.
          TRAIND_RETURN_IF_ERROR(ReadTrainWindow(epoch, window, b + 1, seen, &train_loss));
          TRAIND_RETURN_IF_ERROR(WriteStopCheckpoint());
          every_rank_fails_ = true;  // the stop was agreed across ranks
          return CancelledError(
              absl::StrFormat("stopped on request at epoch %d, batch %d", epoch, b + 1));
        }
      }
      const int64_t batches = (seen + batch_size_ - 1) / batch_size_;
      TRAIND_RETURN_IF_ERROR(ReadTrainWindow(epoch, window, batches, seen, &train_loss));
      report.Clear();
      report.set_task(options_.task);
      report.set_attempt(options_.attempt);
      report.set_epoch(epoch);
      report.set_batches(steps_);
      if (comm_ != nullptr) {
        TRAIND_RETURN_IF_ERROR(ReduceRows(train_pred_.data(), seen * k, nullptr));
      }
      WriteMetrics(metrics_.train, Pass(seen, train_pred_, train_classes_, train_values_),
                   train_loss.mean(), top_k_, report.mutable_train());
      const bool last = steps_ >= max_steps_;
      if (has_val_ && (epoch % validate_every == 0 || last)) {
        LossSums val_loss;
        TRAIND_RETURN_IF_ERROR(Validate(&val_loss));
        if (!std::isfinite(val_loss.mean())) {
          every_rank_fails_ = true;
          return DivergedError(absl::StrFormat("validation loss became %s at epoch %d",
                                               std::isnan(val_loss.mean()) ? "nan" : "inf", epoch));
        }
        WriteMetrics(
            metrics_.val,
            Pass(static_cast<int64_t>(rows_.val.size()), val_pred_, val_classes_, val_values_),
            val_loss.mean(), top_k_, report.mutable_val());
      }
      double seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start_time).count();
      if (comm_ != nullptr) {
        // Rank 0's time: every rank reports the same metrics.
        if (rank_ != 0) seconds = 0;
        TRAIND_RETURN_IF_ERROR(comm_->AllReduceSum(&seconds, 1));
      }
      report.set_seconds(seconds);
      TRAIND_RETURN_IF_ERROR(Handlers(epoch, report));
      *result_.mutable_final_train() = report.train();
      result_.set_epochs_run(epoch);
      if (observer_ != nullptr) TRAIND_RETURN_IF_ERROR(observer_->OnEpochEnd(report));
      epochs_done_ = epoch;
      if (writer_ && !options_.checkpoint_dir.empty()) {
        snapshot_valid_ = false;
        TRAIND_RETURN_IF_ERROR(Snapshot(&snapshot_));
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
      if (keep_best_) TRAIND_RETURN_IF_ERROR(SaveBestState());
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
        best_ckpt_.Update(value, epoch) && writer_) {
      CheckpointWriter writer;
      epochs_done_ = epoch;  // the snapshot is of this epoch
      TRAIND_RETURN_IF_ERROR(Snapshot(&writer));
      TRAIND_RETURN_IF_ERROR(MakeDirs(options_.checkpoint_dir));
      Warn(writer.WriteFile(options_.checkpoint_dir + "/best.ckpt"));
    }
    return absl::OkStatus();
  }

  absl::Status SaveBestState() {
    if (best_state_.empty()) {
      best_state_.resize(state_.size());
      for (size_t i = 0; i < state_.size(); ++i) {
        best_state_[i].resize(static_cast<size_t>(state_[i].value->size()));
      }
    }
    for (size_t i = 0; i < state_.size(); ++i) {
      TRAIND_RETURN_IF_ERROR(backend_->CopyToHost(*state_[i].value, best_state_[i].data()));
    }
    has_best_state_ = true;
    return absl::OkStatus();
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

  // The whole training state at the last completed epoch -> *w. A failed
  // device copy leaves *w cleared, never half written.
  absl::Status Snapshot(CheckpointWriter* w) {
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
      absl::Status copied = backend_->CopyToHost(*p.value, host_state_.data());
      if (!copied.ok()) {
        w->Clear();
        return copied;
      }
      w->PutFloats("state." + p.name, host_state_.data(), host_state_.size());
    }
    const std::vector<Tensor*> opt = optimizer_->state();
    for (size_t i = 0; i < opt.size(); ++i) {
      host_state_.resize(static_cast<size_t>(opt[i]->size()));
      absl::Status copied = backend_->CopyToHost(*opt[i], host_state_.data());
      if (!copied.ok()) {
        w->Clear();
        return copied;
      }
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
    return absl::OkStatus();
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
    if (!writer_ || options_.checkpoint_dir.empty() || !snapshot_valid_) return absl::OkStatus();
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
      TRAIND_RETURN_IF_ERROR(Snapshot(&snapshot_));
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
    // Only rank 0 writes artifacts; with validation rows every rank takes
    // part in the last validation pass.
    if (!write_artifacts_) return absl::OkStatus();
    if (writer_) TRAIND_RETURN_IF_ERROR(MakeDirs(options_.artifacts_dir));
    if (has_val_) {
      LossSums sums;
      TRAIND_RETURN_IF_ERROR(Validate(&sums));
      if (!writer_) return absl::OkStatus();
      TRAIND_RETURN_IF_ERROR(WritePredictions(options_.artifacts_dir + "/predictions.csv"));
      result_.set_predictions_path(options_.artifacts_dir + "/predictions.csv");
    } else if (writer_) {
      CheckpointWriter writer;
      TRAIND_RETURN_IF_ERROR(Snapshot(&writer));
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
  // Data parallelism: null with one rank. Only rank 0 (writer_) writes
  // checkpoints and artifacts.
  Communicator* const comm_;
  const int rank_, ranks_;
  const bool writer_;
  bool write_artifacts_ = false;
  bool every_rank_fails_ = false;

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
  std::vector<float> host_state_;
  std::vector<float> train_pred_, train_values_, val_pred_, val_values_;
  std::vector<int32_t> train_classes_, val_classes_;
  CheckpointWriter snapshot_;
  bool snapshot_valid_ = false;

  // Data parallelism: gradient buckets [begin, end) of the flat gradients,
  // last first; host buffer of the reductions of predictions.
  std::vector<std::pair<int64_t, int64_t>> buckets_;
  size_t next_bucket_ = 0;
  std::vector<double> reduce_;
  int64_t reduce_piece_ = 16;

  // Declared before what they own memory for: destroyed last.
  std::unique_ptr<Backend> owned_backend_;  // when FitOptions::backend is null
  Backend* backend_ = nullptr;
  std::unique_ptr<Network> network_;
  std::vector<Parameter> params_, state_;
  std::unique_ptr<Optimizer> optimizer_;
  std::unique_ptr<Loss> loss_;
  std::unique_ptr<LearningRateSchedule> schedule_;
  std::vector<std::unique_ptr<BatchBuffers>> buffers_;
  // The loss on the backend (one value slot per batch or validation chunk
  // of a window), a window's predictions of training rows (in the epoch's
  // order) and of validation rows, a [1, 1] tensor of the targets' type
  // (0-row views of it clear a slot).
  std::unique_ptr<LossKernel> loss_kernel_;
  Tensor train_pred_dev_, val_pred_dev_, no_targets_;
  std::vector<double> slot_values_;
  int64_t window_ = 1;  // batches (validation: chunks) per window
  // Step graphs (FitOptions::step_graphs): whether this run may use one,
  // the graph once recorded, its predictions; warm once a full batch ran op
  // by op.
  bool graphs_ = false;
  bool graph_warm_ = false;
  Tensor graph_pred_;
  std::unique_ptr<OpGraph> step_graph_;
};

}  // namespace

absl::StatusOr<FoldResult> Fit(const JobSpec& spec, const Dataset& data, const FoldRows& rows,
                               int32_t fold, const FitOptions& options, FitObserver* observer) {
  bool every_rank_fails = false;
  absl::StatusOr<FoldResult> result = [&]() -> absl::StatusOr<FoldResult> {
    TRAIND_RETURN_IF_ERROR(CheckTrainingSpec(spec));
    TRAIND_RETURN_IF_ERROR(CheckInputs(spec, data, rows));
    const bool cpu = options.backend == nullptr || absl::StartsWith(options.backend->name(), "cpu");
    if (spec.resources().device() == traind::v1::GPU && cpu) {
      return InvalidSpecError(
          "resources.device: gpu, but this run trains on the CPU backend (a GPU job needs the "
          "CUDA backend)");
    }
    const Communicator* comm = options.communicator;
    if (comm != nullptr && (comm->size() < 1 || comm->rank() < 0 || comm->rank() >= comm->size())) {
      return absl::InvalidArgumentError(
          absl::StrFormat("Fit: communicator of rank %d of %d ranks", comm->rank(), comm->size()));
    }
    FoldTrainer trainer(spec, data, rows, fold, options, observer);
    absl::StatusOr<FoldResult> trained = trainer.Run();
    every_rank_fails = trainer.every_rank_fails();
    return trained;
  }();
  // A rank that fails alone must not leave the others waiting in a
  // collective.
  if (!result.ok() && options.communicator != nullptr && !every_rank_fails) {
    options.communicator->Abort(result.status().message());
  }
  return result;
}

}  // namespace traind::engine
