// Fit callbacks: what happens after an epoch (best-epoch selection, early
// stopping, the plateau schedule, the best checkpoint, reporting), each a
// small class that owns its state and stores it in checkpoints by name
// ("<name>.<key>", e.g. "early_stopping.wait"), as Keras' and Lightning's
// callbacks do. The fit loop calls them in order after every epoch; each
// can be driven in a test by a list of metric values, without a fit. The
// TensorBoard scalars are one too (fit/tensorboard.h).
//
// Thread safety: a callback is used by one thread at a time.
#ifndef TRAIND_WORKER_ENGINE_FIT_CALLBACKS_H_
#define TRAIND_WORKER_ENGINE_FIT_CALLBACKS_H_

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "spec/checks.h"
#include "traind/v1/job.pb.h"
#include "worker/engine/checkpoint.h"

namespace traind::engine {

class FitObserver;
class LearningRateSchedule;

// An epoch's end as the callbacks see it.
struct EpochEnd {
  int32_t epoch = 0;  // 1-based
  const traind::v1::EpochMetrics* metrics = nullptr;
  // The task's result so far: callbacks set their fields of it.
  traind::v1::FoldResult* result = nullptr;
  // The learning rate of the epoch's optimizer steps.
  double learning_rate = 0;
};

class FitCallback {
 public:
  virtual ~FitCallback() = default;

  // The owner name of its checkpointed state.
  virtual absl::string_view name() const = 0;
  // After every epoch, in the order of the fit loop's callbacks. A non-ok
  // status fails the task.
  virtual absl::Status OnEpochEnd(const EpochEnd& end) = 0;
  // Once, after the last epoch, before the final validation and artifacts.
  virtual absl::Status OnTrainEnd() { return absl::OkStatus(); }
  // Once, when the run resumes from a checkpoint after `completed_epochs`.
  virtual absl::Status OnResume(int32_t completed_epochs) { return absl::OkStatus(); }
  // True once this callback ends training (after the current epoch).
  virtual bool stops_training() const { return false; }

  // Its state, under name(); LoadState reads all of it or fails (a failed
  // load may leave the callback half restored: the loop then restores
  // every owner from the state it had before).
  virtual void SaveState(StateWriter* out) const {}
  virtual absl::Status LoadState(const StateReader& in) { return absl::OkStatus(); }
};

// The best value of a monitored metric, and its epoch.
class MetricTracker {
 public:
  MetricTracker() = default;
  MetricTracker(const spec::Monitor& monitor, bool active, double min_delta)
      : monitor_(monitor), active_(active), min_delta_(min_delta) {}

  const spec::Monitor& monitor() const { return monitor_; }
  // False for a monitor that cannot be computed (val.* without validation
  // rows): it never sees a value.
  bool active() const { return active_; }
  bool has_best() const { return has_best_; }
  double best() const { return best_; }
  int32_t best_epoch() const { return best_epoch_; }

  // The epoch's value of the monitor, if it was computed this epoch (and is
  // a number).
  bool ValueOf(const traind::v1::EpochMetrics& m, double* value) const;
  // True when `value` improves on `reference` by more than min_delta.
  bool Improves(double value, double reference) const;
  // Updates the best; true when `value` improved on it (or was the first).
  bool Update(double value, int32_t epoch);
  // Sets the best without comparing.
  void SetBest(double value, int32_t epoch);

  // "<prefix>has_best", "<prefix>best", "<prefix>best_epoch".
  void Save(StateWriter* out) const;
  absl::Status Load(const StateReader& in);

 private:
  spec::Monitor monitor_;
  bool active_ = false;
  double min_delta_ = 0;
  bool has_best_ = false;
  double best_ = 0;
  int32_t best_epoch_ = 0;
};

// The model's state (weights, biases, running statistics) as host arrays,
// in Network::state() order. Errors: the backend's (DeviceError).
class ModelStateAccess {
 public:
  virtual ~ModelStateAccess() = default;
  // The names and sizes of the arrays.
  virtual const std::vector<std::string>& names() const = 0;
  virtual const std::vector<size_t>& sizes() const = 0;
  // (*out)[i] = array i; *out is resized as needed.
  virtual absl::Status Read(std::vector<std::vector<float>>* out) = 0;
  virtual absl::Status Write(const std::vector<std::vector<float>>& in) = 0;
};

// Best-epoch selection ("selection"): sets the result's best_epoch, val and
// train at every epoch that improves the monitor (at every epoch when the
// tracker is inactive: the last epoch wins). With keep_best, a host copy of
// the model state of the best epoch is kept (and checkpointed); with
// restore_best, it is written back to the model when training ends.
class BestSelection final : public FitCallback {
 public:
  struct Options {
    MetricTracker tracker;
    bool keep_best = false;     // needs model
    bool restore_best = false;  // needs keep_best
  };
  // `model` is not owned (may be null without keep_best).
  BestSelection(const Options& options, ModelStateAccess* model);

  absl::string_view name() const override { return "selection"; }
  absl::Status OnEpochEnd(const EpochEnd& end) override;
  absl::Status OnTrainEnd() override;
  void SaveState(StateWriter* out) const override;
  absl::Status LoadState(const StateReader& in) override;

  const MetricTracker& tracker() const { return tracker_; }
  bool has_best_state() const { return has_best_state_; }
  // True once OnTrainEnd has written the best epoch's state to the model.
  bool restored() const { return restored_; }

 private:
  MetricTracker tracker_;
  const bool keep_best_, restore_best_;
  ModelStateAccess* const model_;
  bool has_best_state_ = false;
  bool restored_ = false;
  std::vector<std::vector<float>> best_state_;
};

// Early stopping ("early_stopping", Keras' EarlyStopping): after epoch
// start_from_epoch, each epoch with the monitor's value counts towards
// patience unless it improves on the best by more than min_delta (and, with
// a baseline, beats the baseline); after `patience` such epochs in a row
// training stops and the result says stopped_early.
class EarlyStopping final : public FitCallback {
 public:
  struct Options {
    MetricTracker tracker;
    int32_t patience = 1;  // values below 1 count as 1
    int32_t start_from_epoch = 0;
    bool has_baseline = false;
    double baseline = 0;
  };
  explicit EarlyStopping(const Options& options) : options_(options), tracker_(options.tracker) {}

  absl::string_view name() const override { return "early_stopping"; }
  absl::Status OnEpochEnd(const EpochEnd& end) override;
  bool stops_training() const override { return stopped_; }
  void SaveState(StateWriter* out) const override;
  absl::Status LoadState(const StateReader& in) override;

  int64_t wait() const { return wait_; }

 private:
  const Options options_;
  MetricTracker tracker_;
  int64_t wait_ = 0;
  bool stopped_ = false;
};

// Reduce-on-plateau ("reduce_on_plateau"): gives the monitor's value of
// every epoch to the schedule (LearningRateSchedule::Observe), whose state
// (the current rate, the best value, bad epochs, cooldown) it stores.
class ReduceOnPlateau final : public FitCallback {
 public:
  // `schedule` is not owned.
  ReduceOnPlateau(const MetricTracker& tracker, LearningRateSchedule* schedule)
      : tracker_(tracker), schedule_(schedule) {}

  absl::string_view name() const override { return "reduce_on_plateau"; }
  absl::Status OnEpochEnd(const EpochEnd& end) override;
  void SaveState(StateWriter* out) const override;
  absl::Status LoadState(const StateReader& in) override;

 private:
  MetricTracker tracker_;
  LearningRateSchedule* const schedule_;
};

// The best checkpoint ("best_checkpoint", Keras' ModelCheckpoint with
// save_best_only): at every epoch that improves its monitor, calls `write`
// with the epoch (the fit loop writes best.ckpt of the training state as of
// that epoch). Not active: never writes.
class BestCheckpoint final : public FitCallback {
 public:
  using Write = std::function<absl::Status(int32_t epoch)>;
  BestCheckpoint(const MetricTracker& tracker, Write write)
      : tracker_(tracker), write_(std::move(write)) {}

  absl::string_view name() const override { return "best_checkpoint"; }
  absl::Status OnEpochEnd(const EpochEnd& end) override;
  void SaveState(StateWriter* out) const override;
  absl::Status LoadState(const StateReader& in) override;

  const MetricTracker& tracker() const { return tracker_; }

 private:
  MetricTracker tracker_;
  Write write_;
};

// Reporting ("reporting"): the result's final_train and epochs_run, then
// the observer's OnEpochEnd (its error fails the task) and OnResume. No
// state. `observer` may be null; not owned.
class Reporting final : public FitCallback {
 public:
  explicit Reporting(FitObserver* observer) : observer_(observer) {}

  absl::string_view name() const override { return "reporting"; }
  absl::Status OnEpochEnd(const EpochEnd& end) override;
  absl::Status OnResume(int32_t completed_epochs) override;

 private:
  FitObserver* const observer_;
};

}  // namespace traind::engine

#endif  // TRAIND_WORKER_ENGINE_FIT_CALLBACKS_H_
