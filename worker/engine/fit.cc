#include "worker/engine/fit.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/types/span.h"
#include "worker/engine/backend/backend.h"
#include "worker/engine/backend/cpu/cpu_backend.h"
#include "worker/engine/data/scaler.h"
#include "worker/engine/metrics.h"
#include "worker/engine/network.h"
#include "worker/engine/optimizers.h"
#include "worker/engine/random.h"
#include "worker/engine/spec_check.h"
#include "worker/engine/status.h"

namespace traind::engine {
namespace {

using traind::v1::EpochMetrics;
using traind::v1::FoldResult;
using traind::v1::JobSpec;
using traind::v1::Metric;

absl::Status CheckInputs(const JobSpec& spec, const Dataset& data, const FoldRows& rows) {
  if (data.rows <= 0 || data.features <= 0 ||
      data.x.size() != static_cast<size_t>(data.rows * data.features) ||
      data.y.size() != static_cast<size_t>(data.rows)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "Fit: inconsistent dataset (%d rows, %d features, %d values, %d labels)", data.rows,
        data.features, data.x.size(), data.y.size()));
  }
  for (const std::vector<int64_t>* list : {&rows.train, &rows.val}) {
    for (int64_t r : *list) {
      if (r < 0 || r >= data.rows) {
        return absl::InvalidArgumentError(
            absl::StrFormat("Fit: row %d is not in [0, %d)", r, data.rows));
      }
    }
  }
  if (rows.train.empty()) {
    return InvalidSpecError("the fold has no training rows");
  }
  if (spec.resources().device() != traind::v1::CPU) {
    return InvalidSpecError("resources.device: this engine trains on the CPU only (no GPU backend yet)");
  }
  const auto& layers = spec.model().layers();
  const int last = layers.size() - 1;
  const int64_t classes = static_cast<int64_t>(data.classes.size());
  if (layers[last].dense().units() != classes) {
    return InvalidSpecError(absl::StrFormat(
        "model.layers[%d].dense.units: %d units, but the data has %d classes", last,
        layers[last].dense().units(), classes));
  }
  return absl::OkStatus();
}

// Input, label and loss-gradient buffers for one batch size.
struct BatchBuffers {
  int64_t batch = 0;
  Tensor x;        // [batch, features]
  Tensor labels;   // [batch] s32
  Tensor dlogits;  // [batch, classes]
};

class FoldTrainer {
 public:
  FoldTrainer(const JobSpec& spec, const Dataset& data, const FoldRows& rows, int32_t fold,
              const FitOptions& options, FitObserver* observer)
      : spec_(spec), data_(data), rows_(rows), fold_(fold), options_(options),
        observer_(observer) {}

  absl::StatusOr<FoldResult> Run() {
    TRAIND_ASSIGN_OR_RETURN(train_metrics_,
                            ResolveMetrics(spec_.metrics().train(), "metrics.train"));
    TRAIND_ASSIGN_OR_RETURN(val_metrics_, ResolveMetrics(spec_.metrics().val(), "metrics.val"));
    TRAIND_RETURN_IF_ERROR(PrepareFeatures());
    TRAIND_ASSIGN_OR_RETURN(backend_, CreateCpuBackend());
    TRAIND_ASSIGN_OR_RETURN(Network network,
                            Network::Create(backend_.get(), data_.features, spec_.model()));
    network_ = std::make_unique<Network>(std::move(network));
    Rng init_rng(DeriveSeed(spec_.seed(), static_cast<uint64_t>(fold_), kInitStream));
    TRAIND_RETURN_IF_ERROR(network_->Initialize(init_rng));
    TRAIND_ASSIGN_OR_RETURN(optimizer_, CreateOptimizer(spec_.optimizer(), backend_.get(),
                                                        network_->parameters()));
    return Train();
  }

 private:
  // Standardized copy of the features (statistics from the training rows),
  // or the dataset's own values.
  absl::Status PrepareFeatures() {
    features_ = data_.x.data();
    if (!spec_.data().standardize()) return absl::OkStatus();
    Standardizer scaler;
    scaler.Fit(data_, rows_.train);
    scaled_ = data_.x;
    scaler.Transform(scaled_.data(), data_.rows, data_.features);
    features_ = scaled_.data();
    return absl::OkStatus();
  }

  absl::StatusOr<BatchBuffers*> BuffersFor(int64_t batch) {
    for (const std::unique_ptr<BatchBuffers>& b : buffers_) {
      if (b->batch == batch) return b.get();
    }
    auto b = std::make_unique<BatchBuffers>();
    b->batch = batch;
    TRAIND_ASSIGN_OR_RETURN(b->x, backend_->Allocate2d(DType::kF32, batch, data_.features));
    TRAIND_ASSIGN_OR_RETURN(b->labels, backend_->Allocate1d(DType::kS32, batch));
    TRAIND_ASSIGN_OR_RETURN(b->dlogits,
                            backend_->Allocate2d(DType::kF32, batch, network_->outputs()));
    buffers_.push_back(std::move(b));
    return buffers_.back().get();
  }

  // Forward pass (and, when training, backward pass and update) of one batch.
  // rows: the batch's row indices -> *stats
  absl::Status RunBatch(absl::Span<const int64_t> rows, bool train, LossStats* stats) {
    TRAIND_ASSIGN_OR_RETURN(BatchBuffers * b, BuffersFor(static_cast<int64_t>(rows.size())));
    TRAIND_RETURN_IF_ERROR(backend_->GatherRows(features_, data_.features, rows, &b->x));
    TRAIND_RETURN_IF_ERROR(backend_->GatherLabels(data_.y.data(), rows, &b->labels));
    // x: [batch, features] -> logits: [batch, classes]
    TRAIND_ASSIGN_OR_RETURN(Tensor * logits, network_->Forward(b->x));
    TRAIND_RETURN_IF_ERROR(
        backend_->SoftmaxCrossEntropy(*logits, b->labels, train ? &b->dlogits : nullptr, stats));
    if (!train || !std::isfinite(stats->loss_sum)) return absl::OkStatus();
    TRAIND_RETURN_IF_ERROR(network_->Backward(b->x, &b->dlogits));
    return optimizer_->Step();
  }

  // A full pass over the validation rows in batches of the training size.
  absl::Status Validate(MetricAccumulator* metrics) {
    const int64_t batch_size = spec_.training().batch_size();
    const int64_t n = static_cast<int64_t>(rows_.val.size());
    for (int64_t start = 0; start < n; start += batch_size) {
      const int64_t size = std::min(batch_size, n - start);
      LossStats stats;
      TRAIND_RETURN_IF_ERROR(
          RunBatch(absl::MakeConstSpan(rows_.val).subspan(static_cast<size_t>(start),
                                                          static_cast<size_t>(size)),
                   /*train=*/false, &stats));
      metrics->Add(stats, size);
    }
    return absl::OkStatus();
  }

  absl::StatusOr<FoldResult> Train() {
    const traind::v1::TrainingSpec& training = spec_.training();
    const int64_t batch_size = training.batch_size();
    const int64_t n = static_cast<int64_t>(rows_.train.size());
    const int64_t batches_per_epoch = (n + batch_size - 1) / batch_size;
    const int64_t max_steps =
        training.batches() > 0 ? training.batches() : training.epochs() * batches_per_epoch;
    const bool shuffle = !training.has_shuffle() || training.shuffle();
    Rng shuffle_rng(DeriveSeed(spec_.seed(), static_cast<uint64_t>(fold_), kShuffleStream));
    std::vector<int64_t> order = rows_.train;

    FoldResult result;
    result.set_fold(fold_);
    result.set_train_rows(n);
    result.set_val_rows(static_cast<int64_t>(rows_.val.size()));
    double best_loss = 0;
    EpochMetrics report;
    MetricAccumulator train_acc, val_acc;
    int64_t steps = 0;
    for (int32_t epoch = 1; steps < max_steps; ++epoch) {
      const auto start_time = std::chrono::steady_clock::now();
      if (shuffle) Shuffle(order.data(), order.size(), shuffle_rng);
      train_acc.Reset();
      for (int64_t b = 0; b < batches_per_epoch && steps < max_steps; ++b) {
        const int64_t start = b * batch_size;
        const int64_t size = std::min(batch_size, n - start);
        LossStats stats;
        TRAIND_RETURN_IF_ERROR(RunBatch(
            absl::MakeConstSpan(order).subspan(static_cast<size_t>(start), static_cast<size_t>(size)),
            /*train=*/true, &stats));
        if (!std::isfinite(stats.loss_sum)) {
          return DivergedError(absl::StrFormat("loss became %s at epoch %d, batch %d",
                                               std::isnan(stats.loss_sum) ? "nan" : "inf", epoch,
                                               b + 1));
        }
        train_acc.Add(stats, size);
        ++steps;
        if (observer_ != nullptr && observer_->StopRequested()) {
          return CancelledError(
              absl::StrFormat("stopped on request at epoch %d, batch %d", epoch, b + 1));
        }
      }
      report.Clear();
      report.set_task(options_.task);
      report.set_attempt(options_.attempt);
      report.set_epoch(epoch);
      report.set_batches(steps);
      train_acc.WriteTo(train_metrics_, report.mutable_train());
      if (!rows_.val.empty()) {
        val_acc.Reset();
        TRAIND_RETURN_IF_ERROR(Validate(&val_acc));
        if (!std::isfinite(val_acc.loss())) {
          return DivergedError(absl::StrFormat("validation loss became %s at epoch %d",
                                               std::isnan(val_acc.loss()) ? "nan" : "inf", epoch));
        }
        val_acc.WriteTo(val_metrics_, report.mutable_val());
      }
      report.set_seconds(
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start_time).count());

      if (rows_.val.empty()) {
        result.set_best_epoch(epoch);
      } else if (result.best_epoch() == 0 || val_acc.loss() < best_loss) {
        best_loss = val_acc.loss();
        result.set_best_epoch(epoch);
        *result.mutable_val() = report.val();
      }
      *result.mutable_final_train() = report.train();
      result.set_epochs_run(epoch);
      if (observer_ != nullptr) TRAIND_RETURN_IF_ERROR(observer_->OnEpochEnd(report));
    }
    return result;
  }

  const JobSpec& spec_;
  const Dataset& data_;
  const FoldRows& rows_;
  const int32_t fold_;
  const FitOptions options_;
  FitObserver* const observer_;

  std::vector<Metric> train_metrics_, val_metrics_;
  std::vector<float> scaled_;
  const float* features_ = nullptr;  // [data.rows, data.features]
  // Declared before what they own memory for: destroyed last.
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Network> network_;
  std::unique_ptr<Optimizer> optimizer_;
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
