// The fit callbacks, each driven by a list of metric values (no fit): their
// decisions, and that a callback restored from its saved state mid-run
// decides as the uninterrupted one.
#include "worker/engine/fit/callbacks.h"

#include <cmath>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/engine/checkpoint.h"
#include "worker/engine/fit.h"
#include "worker/engine/schedules.h"

namespace traind::engine {
namespace {

using ::testing::ElementsAre;
using traind::v1::EpochMetrics;
using traind::v1::FoldResult;

spec::Monitor ValLoss() {
  spec::Monitor m;
  m.val = true;
  m.metric = traind::v1::LOSS;
  m.maximize = false;
  return m;
}

spec::Monitor ValAccuracy() {
  spec::Monitor m;
  m.val = true;
  m.metric = traind::v1::ACCURACY;
  m.maximize = true;
  return m;
}

EpochMetrics Epoch(int32_t epoch, double val_loss, double val_accuracy = 0.5) {
  EpochMetrics m;
  m.set_epoch(epoch);
  (*m.mutable_val())["loss"] = val_loss;
  (*m.mutable_val())["accuracy"] = val_accuracy;
  (*m.mutable_train())["loss"] = 2 * val_loss;
  return m;
}

// Feeds val.loss values (epochs from `first`) to `callback`; the epochs it
// saw before it stopped training.
int Feed(FitCallback* callback, const std::vector<double>& losses, FoldResult* result,
         int first = 1) {
  int epoch = first;
  for (double loss : losses) {
    if (callback->stops_training()) break;
    const EpochMetrics m = Epoch(epoch, loss);
    EpochEnd end;
    end.epoch = epoch;
    end.metrics = &m;
    end.result = result;
    EXPECT_TRUE(callback->OnEpochEnd(end).ok());
    ++epoch;
  }
  return epoch - first;
}

// The callback's state through a checkpoint's bytes, into `into`.
absl::Status RoundTrip(const FitCallback& from, FitCallback* into) {
  CheckpointWriter w;
  StateWriter out(&w, from.name());
  from.SaveState(&out);
  absl::StatusOr<CheckpointReader> r = CheckpointReader::Parse(w.Serialize(), "state");
  if (!r.ok()) return r.status();
  return into->LoadState(StateReader(*r, into->name()));
}

TEST(FitMetricTrackerTest, MinDeltaAndDirection) {
  MetricTracker loss(ValLoss(), true, 0.1);
  EXPECT_TRUE(loss.Update(1.0, 1));
  EXPECT_FALSE(loss.Update(0.95, 2));  // not better by more than 0.1
  EXPECT_TRUE(loss.Update(0.85, 3));
  EXPECT_EQ(loss.best_epoch(), 3);
  MetricTracker accuracy(ValAccuracy(), true, 0);
  EXPECT_TRUE(accuracy.Update(0.5, 1));
  EXPECT_FALSE(accuracy.Update(0.4, 2));
  EXPECT_TRUE(accuracy.Update(0.6, 3));
  double value = 0;
  EpochMetrics no_val;
  EXPECT_FALSE(accuracy.ValueOf(no_val, &value));
  (*no_val.mutable_val())["accuracy"] = std::nan("");
  EXPECT_FALSE(accuracy.ValueOf(no_val, &value));  // NaN is no value
}

TEST(FitEarlyStoppingTest, StopsAfterPatienceEpochsWithoutImprovement) {
  EarlyStopping::Options options;
  options.tracker = MetricTracker(ValLoss(), true, 0.01);
  options.patience = 3;
  EarlyStopping early(options);
  FoldResult result;
  // Best at epoch 3 (0.7); 0.695 is not better by more than 0.01.
  const int seen = Feed(&early, {1.0, 0.8, 0.7, 0.695, 0.75, 0.71, 0.5, 0.4}, &result);
  EXPECT_EQ(seen, 6);
  EXPECT_TRUE(early.stops_training());
  EXPECT_TRUE(result.stopped_early());
}

TEST(FitEarlyStoppingTest, BaselineAndStartFromEpoch) {
  EarlyStopping::Options options;
  options.tracker = MetricTracker(ValLoss(), true, 0);
  options.patience = 2;
  options.has_baseline = true;
  options.baseline = 0.0;  // never beaten: improvements do not reset the count
  {
    EarlyStopping early(options);
    FoldResult result;
    EXPECT_EQ(Feed(&early, {1.0, 0.9, 0.8, 0.7}, &result), 2);
  }
  options.start_from_epoch = 10;
  EarlyStopping later(options);
  FoldResult result;
  EXPECT_EQ(Feed(&later, std::vector<double>(30, 1.0), &result), 12);
}

TEST(FitEarlyStoppingTest, InactiveNeverStops) {
  EarlyStopping::Options options;
  options.tracker = MetricTracker(ValLoss(), /*active=*/false, 0);
  EarlyStopping early(options);
  FoldResult result;
  EXPECT_EQ(Feed(&early, std::vector<double>(20, 1.0), &result), 20);
  EXPECT_FALSE(result.stopped_early());
}

TEST(FitEarlyStoppingTest, RestoredStateDecidesAsTheUninterruptedRun) {
  EarlyStopping::Options options;
  options.tracker = MetricTracker(ValLoss(), true, 0);
  options.patience = 3;
  const std::vector<double> losses = {1.0, 0.9, 0.95, 0.96, 0.97, 0.99};
  EarlyStopping whole(options);
  FoldResult whole_result;
  const int seen = Feed(&whole, losses, &whole_result);
  ASSERT_EQ(seen, 5);

  EarlyStopping first(options);
  FoldResult result;
  Feed(&first, {losses.begin(), losses.begin() + 3}, &result);
  EXPECT_EQ(first.wait(), 1);
  EarlyStopping resumed(options);
  ASSERT_TRUE(RoundTrip(first, &resumed).ok());
  EXPECT_EQ(resumed.wait(), 1);
  EXPECT_EQ(Feed(&resumed, {losses.begin() + 3, losses.end()}, &result, 4), 2);
  EXPECT_TRUE(resumed.stops_training());
  // A stopped run stays stopped when restored.
  EarlyStopping again(options);
  ASSERT_TRUE(RoundTrip(resumed, &again).ok());
  EXPECT_TRUE(again.stops_training());
}

TEST(FitEarlyStoppingTest, StateIsStoredByName) {
  EarlyStopping::Options options;
  options.tracker = MetricTracker(ValLoss(), true, 0);
  EarlyStopping early(options);
  FoldResult result;
  Feed(&early, {1.0, 2.0}, &result);
  CheckpointWriter w;
  StateWriter out(&w, early.name());
  early.SaveState(&out);
  absl::StatusOr<CheckpointReader> r = CheckpointReader::Parse(w.Serialize(), "s");
  ASSERT_TRUE(r.ok());
  EXPECT_THAT(*r->GetInt64s("early_stopping.wait"), ElementsAre(1));
  EXPECT_THAT(*r->GetInt64s("early_stopping.stopped"), ElementsAre(1));
  EXPECT_THAT(*r->GetInt64s("early_stopping.best_epoch"), ElementsAre(1));
  EXPECT_THAT(*r->GetDoubles("early_stopping.best"), ElementsAre(1.0));
  // A missing record fails the load and names it.
  CheckpointWriter empty;
  absl::StatusOr<CheckpointReader> none = CheckpointReader::Parse(empty.Serialize(), "s");
  ASSERT_TRUE(none.ok());
  EarlyStopping fresh(options);
  absl::Status s = fresh.LoadState(StateReader(*none, fresh.name()));
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(s.message()), ::testing::HasSubstr("early_stopping.wait"));
}

// A model state of one array whose values a test sets.
class FakeModel : public ModelStateAccess {
 public:
  const std::vector<std::string>& names() const override { return names_; }
  const std::vector<size_t>& sizes() const override { return sizes_; }
  absl::Status Read(std::vector<std::vector<float>>* out) override {
    if (!read_error.ok()) return read_error;
    *out = {weights};
    return absl::OkStatus();
  }
  absl::Status Write(const std::vector<std::vector<float>>& in) override {
    weights = in[0];
    return absl::OkStatus();
  }
  std::vector<float> weights = {0, 0};
  absl::Status read_error;

 private:
  std::vector<std::string> names_ = {"layers[0].weight"};
  std::vector<size_t> sizes_ = {2};
};

TEST(FitBestSelectionTest, SelectsTheBestEpochAndRestoresItsState) {
  FakeModel model;
  BestSelection::Options options;
  options.tracker = MetricTracker(ValLoss(), true, 0);
  options.keep_best = true;
  options.restore_best = true;
  BestSelection selection(options, &model);
  FoldResult result;
  const std::vector<double> losses = {1.0, 0.5, 0.7, 0.6};
  for (int e = 1; e <= 4; ++e) {
    model.weights = {static_cast<float>(e), -static_cast<float>(e)};
    const EpochMetrics m = Epoch(e, losses[e - 1]);
    ASSERT_TRUE(selection.OnEpochEnd({e, &m, &result}).ok());
  }
  EXPECT_EQ(result.best_epoch(), 2);
  EXPECT_EQ(result.val().at("loss"), 0.5);
  EXPECT_EQ(result.train().at("loss"), 1.0);
  ASSERT_TRUE(selection.OnTrainEnd().ok());
  EXPECT_THAT(model.weights, ElementsAre(2.0f, -2.0f));

  // Saved and restored: the kept state comes back under its name.
  BestSelection restored(options, &model);
  ASSERT_TRUE(RoundTrip(selection, &restored).ok());
  EXPECT_TRUE(restored.has_best_state());
  EXPECT_EQ(restored.tracker().best_epoch(), 2);
  model.weights = {9, 9};
  ASSERT_TRUE(restored.OnTrainEnd().ok());
  EXPECT_THAT(model.weights, ElementsAre(2.0f, -2.0f));
}

TEST(FitBestSelectionTest, InactiveTakesTheLastEpochAndADeviceErrorFails) {
  FakeModel model;
  BestSelection::Options options;
  options.tracker = MetricTracker(ValLoss(), /*active=*/false, 0);
  BestSelection last(options, &model);
  FoldResult result;
  Feed(&last, {0.1, 0.5, 0.9}, &result);
  EXPECT_EQ(result.best_epoch(), 3);

  options.tracker = MetricTracker(ValLoss(), true, 0);
  options.keep_best = true;
  BestSelection failing(options, &model);
  model.read_error = absl::InternalError("device fault");
  const EpochMetrics m = Epoch(1, 1.0);
  EXPECT_EQ(failing.OnEpochEnd({1, &m, &result}).message(), "device fault");
}

TEST(FitReduceOnPlateauTest, ReducesAfterPatienceAndRestoresTheSchedule) {
  traind::v1::LearningRateSchedule spec;
  spec.mutable_reduce_on_plateau()->set_patience(1);
  spec.mutable_reduce_on_plateau()->set_factor(0.5);
  const std::vector<double> losses = {1.0, 1.0, 1.0, 0.5, 0.6, 0.6, 0.6};
  LearningRateSchedule schedule(spec, 0.1, 10);
  ReduceOnPlateau plateau(MetricTracker(ValLoss(), true, 0), &schedule);
  FoldResult result;
  std::vector<double> rates;
  for (size_t i = 0; i < losses.size(); ++i) {
    Feed(&plateau, {losses[i]}, &result, static_cast<int>(i) + 1);
    rates.push_back(schedule.LearningRate(static_cast<int64_t>(i) + 1));
  }
  EXPECT_THAT(rates, ElementsAre(0.1, 0.1, 0.05, 0.05, 0.05, 0.025, 0.025));

  // Restored after epoch 4: the same rates from there.
  LearningRateSchedule first_schedule(spec, 0.1, 10);
  ReduceOnPlateau first(MetricTracker(ValLoss(), true, 0), &first_schedule);
  Feed(&first, {losses.begin(), losses.begin() + 4}, &result);
  LearningRateSchedule resumed_schedule(spec, 0.1, 10);
  ReduceOnPlateau resumed(MetricTracker(ValLoss(), true, 0), &resumed_schedule);
  ASSERT_TRUE(RoundTrip(first, &resumed).ok());
  EXPECT_EQ(resumed_schedule.LearningRate(4), 0.05);
  Feed(&resumed, {losses.begin() + 4, losses.end()}, &result, 5);
  EXPECT_EQ(resumed_schedule.LearningRate(7), 0.025);
}

TEST(FitBestCheckpointTest, WritesAtImprovingEpochsOnly) {
  std::vector<int32_t> written;
  BestCheckpoint best(MetricTracker(ValLoss(), true, 0), [&](int32_t epoch) {
    written.push_back(epoch);
    return absl::OkStatus();
  });
  FoldResult result;
  Feed(&best, {1.0, 0.8, 0.9, 0.7, 0.7}, &result);
  EXPECT_THAT(written, ElementsAre(1, 2, 4));
  // Restored, it knows the best so far.
  BestCheckpoint resumed(MetricTracker(ValLoss(), true, 0), [&](int32_t epoch) {
    written.push_back(epoch);
    return absl::OkStatus();
  });
  ASSERT_TRUE(RoundTrip(best, &resumed).ok());
  written.clear();
  Feed(&resumed, {0.75, 0.6}, &result, 6);
  EXPECT_THAT(written, ElementsAre(7));

  BestCheckpoint inactive(MetricTracker(ValLoss(), false, 0), [&](int32_t epoch) {
    written.push_back(epoch);
    return absl::OkStatus();
  });
  written.clear();
  Feed(&inactive, {1.0, 0.5}, &result);
  EXPECT_TRUE(written.empty());
  // The writer's error (a failed snapshot) fails the epoch.
  BestCheckpoint failing(MetricTracker(ValLoss(), true, 0),
                         [](int32_t) { return absl::InternalError("copy failed"); });
  const EpochMetrics m = Epoch(1, 1.0);
  EXPECT_EQ(failing.OnEpochEnd({1, &m, &result}).message(), "copy failed");
}

class CountingObserver : public FitObserver {
 public:
  absl::Status OnEpochEnd(const EpochMetrics& m) override {
    epochs.push_back(m.epoch());
    return m.epoch() == fail_at ? absl::UnavailableError("report failed") : absl::OkStatus();
  }
  bool StopRequested() override { return false; }
  void OnResume(int32_t completed) override { resumed_after = completed; }
  std::vector<int32_t> epochs;
  int32_t fail_at = 0, resumed_after = -1;
};

TEST(FitReportingTest, SetsTheFinalEpochAndReportsIt) {
  CountingObserver observer;
  observer.fail_at = 3;
  Reporting reporting(&observer);
  FoldResult result;
  Feed(&reporting, {1.0, 0.5}, &result);
  EXPECT_EQ(result.epochs_run(), 2);
  EXPECT_EQ(result.final_train().at("loss"), 1.0);
  EXPECT_THAT(observer.epochs, ElementsAre(1, 2));
  const EpochMetrics m = Epoch(3, 1.0);
  EXPECT_EQ(reporting.OnEpochEnd({3, &m, &result}).message(), "report failed");
  ASSERT_TRUE(reporting.OnResume(7).ok());
  EXPECT_EQ(observer.resumed_after, 7);
  Reporting silent(nullptr);
  EXPECT_TRUE(silent.OnEpochEnd({4, &m, &result}).ok());
}

}  // namespace
}  // namespace traind::engine
