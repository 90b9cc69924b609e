#include "worker/engine/fit/callbacks.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_format.h"
#include "base/status.h"
#include "worker/engine/fit.h"
#include "worker/engine/schedules.h"

namespace traind::engine {

using traind::v1::EpochMetrics;

bool MetricTracker::ValueOf(const EpochMetrics& m, double* value) const {
  const auto& map = monitor_.val ? m.val() : m.train();
  auto it = map.find(monitor_.key());
  if (it == map.end() || std::isnan(it->second)) return false;
  *value = it->second;
  return true;
}

bool MetricTracker::Improves(double value, double reference) const {
  return monitor_.maximize ? value - min_delta_ > reference : value + min_delta_ < reference;
}

bool MetricTracker::Update(double value, int32_t epoch) {
  if (has_best_ && !Improves(value, best_)) return false;
  SetBest(value, epoch);
  return true;
}

void MetricTracker::SetBest(double value, int32_t epoch) {
  has_best_ = true;
  best_ = value;
  best_epoch_ = epoch;
}

void MetricTracker::Save(StateWriter* out) const {
  out->PutBool("has_best", has_best_);
  out->PutDouble("best", best_);
  out->PutInt("best_epoch", best_epoch_);
}

absl::Status MetricTracker::Load(const StateReader& in) {
  TRAIND_ASSIGN_OR_RETURN(const bool has_best, in.GetBool("has_best"));
  TRAIND_ASSIGN_OR_RETURN(const double best, in.GetDouble("best"));
  TRAIND_ASSIGN_OR_RETURN(const int64_t best_epoch, in.GetInt("best_epoch"));
  has_best_ = has_best;
  best_ = best;
  best_epoch_ = static_cast<int32_t>(best_epoch);
  return absl::OkStatus();
}

// ------------------------------------------------------------ selection

BestSelection::BestSelection(const Options& options, ModelStateAccess* model)
    : tracker_(options.tracker),
      keep_best_(options.keep_best && model != nullptr),
      restore_best_(options.restore_best),
      model_(model) {}

absl::Status BestSelection::OnEpochEnd(const EpochEnd& end) {
  double value = 0;
  if (tracker_.active() &&
      !(tracker_.ValueOf(*end.metrics, &value) && tracker_.Update(value, end.epoch))) {
    return absl::OkStatus();
  }
  end.result->set_best_epoch(end.epoch);
  *end.result->mutable_val() = end.metrics->val();
  *end.result->mutable_train() = end.metrics->train();
  if (tracker_.active() && keep_best_) {
    TRAIND_RETURN_IF_ERROR(model_->Read(&best_state_));
    has_best_state_ = true;
  }
  return absl::OkStatus();
}

absl::Status BestSelection::OnTrainEnd() {
  if (!restore_best_ || !has_best_state_) return absl::OkStatus();
  TRAIND_RETURN_IF_ERROR(model_->Write(best_state_));
  restored_ = true;
  return absl::OkStatus();
}

void BestSelection::SaveState(StateWriter* out) const {
  tracker_.Save(out);
  out->PutBool("has_best_state", has_best_state_);
  if (!has_best_state_) return;
  const std::vector<std::string>& names = model_->names();
  for (size_t i = 0; i < best_state_.size(); ++i) {
    out->PutFloats("best_state." + names[i], best_state_[i].data(), best_state_[i].size());
  }
}

absl::Status BestSelection::LoadState(const StateReader& in) {
  TRAIND_ASSIGN_OR_RETURN(const bool has_best_state, in.GetBool("has_best_state"));
  std::vector<std::vector<float>> best;
  if (has_best_state) {
    if (model_ == nullptr) return DataError("a best model state, but none is kept");
    const std::vector<std::string>& names = model_->names();
    const std::vector<size_t>& sizes = model_->sizes();
    best.resize(names.size());
    for (size_t i = 0; i < names.size(); ++i) {
      best[i].resize(sizes[i]);
      TRAIND_RETURN_IF_ERROR(in.GetFloats("best_state." + names[i], best[i].data(), sizes[i]));
    }
  }
  TRAIND_RETURN_IF_ERROR(tracker_.Load(in));
  has_best_state_ = has_best_state;
  best_state_ = std::move(best);
  return absl::OkStatus();
}

// ------------------------------------------------------- early stopping

absl::Status EarlyStopping::OnEpochEnd(const EpochEnd& end) {
  double value = 0;
  if (!tracker_.active() || end.epoch <= options_.start_from_epoch ||
      !tracker_.ValueOf(*end.metrics, &value)) {
    return absl::OkStatus();
  }
  ++wait_;
  if (!tracker_.has_best() || tracker_.Improves(value, tracker_.best())) {
    tracker_.SetBest(value, end.epoch);
    if (!options_.has_baseline || tracker_.Improves(value, options_.baseline)) wait_ = 0;
  }
  if (wait_ >= std::max(1, options_.patience)) {
    stopped_ = true;
    end.result->set_stopped_early(true);
  }
  return absl::OkStatus();
}

void EarlyStopping::SaveState(StateWriter* out) const {
  tracker_.Save(out);
  out->PutInt("wait", wait_);
  out->PutBool("stopped", stopped_);
}

absl::Status EarlyStopping::LoadState(const StateReader& in) {
  TRAIND_ASSIGN_OR_RETURN(const int64_t wait, in.GetInt("wait"));
  TRAIND_ASSIGN_OR_RETURN(const bool stopped, in.GetBool("stopped"));
  TRAIND_RETURN_IF_ERROR(tracker_.Load(in));
  wait_ = wait;
  stopped_ = stopped;
  return absl::OkStatus();
}

// ---------------------------------------------------- reduce on plateau

absl::Status ReduceOnPlateau::OnEpochEnd(const EpochEnd& end) {
  double value = 0;
  if (tracker_.active() && tracker_.ValueOf(*end.metrics, &value)) {
    schedule_->Observe(value, tracker_.monitor().maximize);
  }
  return absl::OkStatus();
}

namespace {
// LearningRateSchedule::State()'s order.
constexpr const char* kScheduleKeys[] = {"learning_rate", "best", "has_best", "bad_epochs",
                                         "cooldown"};
}  // namespace

void ReduceOnPlateau::SaveState(StateWriter* out) const {
  const std::vector<double> state = schedule_->State();
  for (size_t i = 0; i < state.size() && i < std::size(kScheduleKeys); ++i) {
    out->PutDouble(kScheduleKeys[i], state[i]);
  }
}

absl::Status ReduceOnPlateau::LoadState(const StateReader& in) {
  std::vector<double> state;
  for (const char* key : kScheduleKeys) {
    TRAIND_ASSIGN_OR_RETURN(const double v, in.GetDouble(key));
    state.push_back(v);
  }
  schedule_->Restore(state);
  return absl::OkStatus();
}

// ------------------------------------------------------ best checkpoint

absl::Status BestCheckpoint::OnEpochEnd(const EpochEnd& end) {
  double value = 0;
  if (tracker_.active() && tracker_.ValueOf(*end.metrics, &value) &&
      tracker_.Update(value, end.epoch)) {
    return write_(end.epoch);
  }
  return absl::OkStatus();
}

void BestCheckpoint::SaveState(StateWriter* out) const { tracker_.Save(out); }

absl::Status BestCheckpoint::LoadState(const StateReader& in) { return tracker_.Load(in); }

// ------------------------------------------------------------ reporting

absl::Status Reporting::OnEpochEnd(const EpochEnd& end) {
  *end.result->mutable_final_train() = end.metrics->train();
  end.result->set_epochs_run(end.epoch);
  if (observer_ == nullptr) return absl::OkStatus();
  return observer_->OnEpochEnd(*end.metrics);
}

absl::Status Reporting::OnResume(int32_t completed_epochs) {
  if (observer_ != nullptr) observer_->OnResume(completed_epochs);
  return absl::OkStatus();
}

}  // namespace traind::engine
