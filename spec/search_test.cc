#include "spec/search.h"

#include <cmath>
#include <set>
#include <string>

#include "absl/strings/match.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "spec/loader.h"
#include "spec/task_plan.h"

namespace traind::spec {
namespace {

using ::testing::HasSubstr;
using traind::v1::JobSpec;

constexpr char kBase[] = R"(
name: s
data: {path: iris.csv, label: species}
cross_validation: {folds: 3}
seed: 7
model:
  layers:
    - dense: {units: 16, activation: relu}
    - dropout: {rate: 0.1}
    - dense: {units: 3}
loss: {softmax_cross_entropy: {}}
optimizer: {adam: {learning_rate: 0.01}}
training: {epochs: 20}
)";

JobSpec Spec(const std::string& search) {
  absl::StatusOr<JobSpec> spec = ParseJobSpec(std::string(kBase) + search, "test.yaml");
  EXPECT_TRUE(spec.ok()) << spec.status();
  return spec.ok() ? *spec : JobSpec();
}

TEST(SearchTest, AGridIsEveryCombinationWithTheLastDimensionFastest) {
  const JobSpec spec = Spec(R"(
search:
  space:
    - {path: "model.layers[0].dense.units", values: [8, 64]}
    - {path: "model.layers[0].dense.activation", values: [relu, gelu]}
  sampler: {grid: {}}
  metric: val.accuracy
)");
  ASSERT_TRUE(CheckSearchSpec(spec).ok()) << CheckSearchSpec(spec);
  ASSERT_EQ(SearchTrials(spec), 4);
  const std::vector<std::pair<int, traind::v1::Activation>> want = {
      {8, traind::v1::RELU}, {8, traind::v1::GELU}, {64, traind::v1::RELU}, {64, traind::v1::GELU}};
  for (int i = 0; i < 4; ++i) {
    absl::StatusOr<Trial> t = MakeTrial(spec, i);
    ASSERT_TRUE(t.ok()) << t.status();
    EXPECT_EQ(t->index, i);
    EXPECT_FALSE(t->spec.has_search());
    EXPECT_EQ(t->spec.model().layers(0).dense().units(), want[i].first);
    EXPECT_EQ(t->spec.model().layers(0).dense().activation(), want[i].second);
    // The rest is the base spec.
    EXPECT_EQ(t->spec.model().layers(1).dropout().rate(), 0.1);
    EXPECT_EQ(t->spec.cross_validation().folds(), 3);
    ASSERT_EQ(t->params.size(), 2u);
    EXPECT_EQ(t->params[0].first, "model.layers[0].dense.units");
    EXPECT_EQ(t->params[0].second, want[i].first == 8 ? "8" : "64");
    EXPECT_EQ(t->params[1].second, want[i].second == traind::v1::RELU ? "\"relu\"" : "\"gelu\"");
  }
}

TEST(SearchTest, RandomTrialsAreTheSameEveryTimeInRangeAndDependOnTheSeed) {
  JobSpec spec = Spec(R"(
search:
  space:
    - {path: "optimizer.adam.learning_rate", log_uniform: {low: 1.0e-4, high: 1.0e-1}}
    - {path: "model.layers[1].dropout.rate", uniform: {low: 0.0, high: 0.5}}
    - {path: "model.layers[0].dense.units", int_uniform: {low: 1, high: 3}}
    - {path: "training.batch_size", values: [16, 32]}
  sampler: {random: {trials: 300}}
)");
  ASSERT_TRUE(CheckSearchSpec(spec).ok()) << CheckSearchSpec(spec);
  ASSERT_EQ(SearchTrials(spec), 300);
  std::set<int> units, batches;
  double log_lr_sum = 0, rate_sum = 0;
  for (int i = 0; i < 300; ++i) {
    absl::StatusOr<Trial> t = MakeTrial(spec, i);
    ASSERT_TRUE(t.ok()) << t.status();
    absl::StatusOr<Trial> again = MakeTrial(spec, i);
    ASSERT_TRUE(again.ok());
    EXPECT_EQ(t->params, again->params);
    const double lr = t->spec.optimizer().adam().learning_rate();
    EXPECT_GE(lr, 1e-4);
    EXPECT_LT(lr, 1e-1);
    // The text given is the value set (shortest round-trip form).
    EXPECT_EQ(std::stod(t->params[0].second), lr);
    log_lr_sum += std::log10(lr);
    const double rate = t->spec.model().layers(1).dropout().rate();
    EXPECT_GE(rate, 0.0);
    EXPECT_LT(rate, 0.5);
    rate_sum += rate;
    units.insert(t->spec.model().layers(0).dense().units());
    batches.insert(t->spec.training().batch_size());
  }
  // Uniform on the log scale: the mean of log10(lr) near -2.5 (the middle
  // of [-4, -1]; its standard error over 300 draws is 0.05).
  EXPECT_NEAR(log_lr_sum / 300, -2.5, 0.2);
  EXPECT_NEAR(rate_sum / 300, 0.25, 0.04);
  EXPECT_EQ(units, (std::set<int>{1, 2, 3}));  // both ends included
  EXPECT_EQ(batches, (std::set<int>{16, 32}));

  spec.set_seed(8);
  absl::StatusOr<Trial> other = MakeTrial(spec, 0);
  spec.set_seed(7);
  absl::StatusOr<Trial> first = MakeTrial(spec, 0);
  ASSERT_TRUE(other.ok() && first.ok());
  EXPECT_NE(other->params[0].second, first->params[0].second);
}

TEST(SearchTest, BadSearchesAreRefusedNamingTheField) {
  struct Case {
    std::string search;
    std::string error;
  } cases[] = {
      {"search: {space: [{path: data.label, values: [a]}], sampler: {grid: {}}}",
       "search.space[0].path: data.label cannot vary between trials"},
      {"search: {space: [{path: crossValidation.folds, values: [2]}], sampler: {grid: {}}}",
       "search.space[0].path: crossValidation.folds cannot vary"},
      {"search: {space: [{path: training.epochs, uniform: {low: 1, high: 2}}], "
       "sampler: {grid: {}}}",
       "search.space[0]: grid takes `values` lists only"},
      {"search: {space: [{path: optimizer.adam.learning_rate, log_uniform: {low: 0, high: 1}}], "
       "sampler: {random: {trials: 2}}}",
       "search.space[0].log_uniform.low: must be > 0, got 0"},
      {"search: {space: [{path: training.epochs, values: [1]}]}", "search.sampler: required"},
      {"search: {space: [], sampler: {grid: {}}}", "search.space: required"},
      {"search: {space: [{path: training.epochs, values: []}], sampler: {grid: {}}}",
       "search.space[0].values: must hold at least one value"},
      {"search: {space: [{path: training.epochs, values: [1]}, {path: training.epochs, values: "
       "[2]}], sampler: {grid: {}}}",
       "search.space[1].path: training.epochs is also search.space[0]"},
      {"search: {space: [{path: training.epochs, values: [1]}], sampler: {random: {trials: 0}}}",
       "search.sampler.random.trials: must be at least 1, got 0"},
  };
  for (const Case& c : cases) {
    absl::Status s = CheckSearchSpec(Spec(c.search));
    EXPECT_THAT(s.message(), HasSubstr(c.error)) << c.search;
  }
  JobSpec refit = Spec(
      "search: {space: [{path: training.epochs, values: [1]}], "
      "sampler: {grid: {}}}");
  refit.mutable_cross_validation()->set_refit(true);
  EXPECT_THAT(CheckSearchSpec(refit).message(),
              HasSubstr("cross_validation.refit: not with search: use search.refit_best"));
  JobSpec plain = Spec(
      "search: {space: [{path: training.epochs, values: [1]}], "
      "sampler: {grid: {}}}");
  plain.clear_cross_validation();
  EXPECT_THAT(CheckSearchSpec(plain).message(), HasSubstr("search: needs validation"));

  // A value the field cannot take names the dimension, the value and the trial.
  const JobSpec bad = Spec(
      "search: {space: [{path: \"model.layers[0].dense.unitz\", values: [4]}], "
      "sampler: {grid: {}}}");
  ASSERT_TRUE(CheckSearchSpec(bad).ok());
  absl::StatusOr<Trial> t = MakeTrial(bad, 0);
  EXPECT_THAT(t.status().message(),
              HasSubstr("search.space[0] (model.layers[0].dense.unitz = 4, trial 0): "));
}

TEST(SearchTest, TasksAreTrialByTrialThenTheRefitOfTheBest) {
  const JobSpec spec = Spec(R"(
search:
  space: [{path: "optimizer.adam.learning_rate", values: [0.1, 0.01, 0.001, 0.0001]}]
  sampler: {grid: {}}
  refit_best: true
)");
  const TaskPlan plan = PlanTasks(spec);
  EXPECT_EQ(plan.trials, 4);
  EXPECT_EQ(plan.tasks_per_trial, 3);
  EXPECT_EQ(plan.fold_tasks, 12);
  EXPECT_TRUE(plan.refit);
  EXPECT_EQ(plan.total, 13);
  EXPECT_EQ(TaskCount(spec), 13);
  EXPECT_TRUE(IsRefitTask(spec, 12));
  EXPECT_FALSE(IsRefitTask(spec, 11));
  EXPECT_EQ(LocateSearchTask(spec, 7).trial, 2);
  EXPECT_EQ(LocateSearchTask(spec, 7).spec_task, 1);
  EXPECT_EQ(LocateSearchTask(spec, 12).trial, -1);
  absl::StatusOr<std::pair<JobSpec, int>> refit = RefitBestSpec(spec, 2);
  ASSERT_TRUE(refit.ok()) << refit.status();
  EXPECT_EQ(refit->first.optimizer().adam().learning_rate(), 0.001);
  EXPECT_TRUE(refit->first.cross_validation().refit());
  EXPECT_FALSE(refit->first.has_search());
  EXPECT_EQ(refit->second, 3);  // the trial spec's refit task
  EXPECT_TRUE(IsRefitTask(refit->first, refit->second));
}

}  // namespace
}  // namespace traind::spec
