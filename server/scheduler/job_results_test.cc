#include "server/scheduler/job_results.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "gtest/gtest.h"
#include "tests/testing/temp_dir.h"

namespace traind::server {
namespace {

using traind::v1::Job;
using traind::v1::Task;

Task* AddTask(Job* job, Task::State state, double accuracy, const std::string& predictions = "") {
  Task* t = job->add_tasks();
  t->set_index(job->tasks_size() - 1);
  t->set_state(state);
  (*t->mutable_result()->mutable_val())["accuracy"] = accuracy;
  t->mutable_result()->set_fold(t->index());
  t->mutable_result()->set_predictions_path(predictions);
  return t;
}

TEST(JobResultsTest, MeanAndStdOverSucceededFoldsOnly) {
  Job job;
  job.mutable_spec()->mutable_cross_validation()->set_folds(3);
  job.mutable_result()->add_classes("a");
  AddTask(&job, Task::SUCCEEDED, 0.8);
  AddTask(&job, Task::SUCCEEDED, 0.6);
  AddTask(&job, Task::RUNNING, 0.0);
  AggregateFoldResults(&job);
  const auto& r = job.result();
  EXPECT_EQ(r.folds_size(), 2);
  EXPECT_DOUBLE_EQ(r.val().at("accuracy").mean(), 0.7);
  EXPECT_NEAR(r.val().at("accuracy").std(), 0.1, 1e-12);  // population std
  EXPECT_EQ(r.selection(), "val.loss (min)");
  EXPECT_EQ(r.classes_size(), 1) << "other fields are kept";
}

TEST(JobResultsTest, TheRefitIsNotAFold) {
  Job job;
  job.mutable_spec()->mutable_cross_validation()->set_folds(2);
  job.mutable_spec()->mutable_cross_validation()->set_refit(true);
  AddTask(&job, Task::SUCCEEDED, 0.9);
  AddTask(&job, Task::SUCCEEDED, 0.7);
  AddTask(&job, Task::SUCCEEDED, 0.1);  // the refit
  AggregateFoldResults(&job);
  EXPECT_EQ(job.result().folds_size(), 2);
  EXPECT_DOUBLE_EQ(job.result().val().at("accuracy").mean(), 0.8);
  EXPECT_EQ(job.result().refit().fold(), 2);
}

void AddImportance(Task* t, const std::string& feature, double mean) {
  traind::v1::FeatureImportance* f = t->mutable_result()->add_importance();
  f->set_feature(feature);
  f->set_mean(mean);
  t->mutable_result()->set_importance_metric("val.accuracy (max)");
}

// Per feature: the mean and population std of the folds' means, most
// important first; the refit (no validation rows) takes no part.
TEST(JobResultsTest, ImportanceOverFolds) {
  Job job;
  job.mutable_spec()->mutable_cross_validation()->set_folds(2);
  job.mutable_spec()->mutable_cross_validation()->set_refit(true);
  Task* a = AddTask(&job, Task::SUCCEEDED, 0.9);
  AddImportance(a, "x", 0.1);
  AddImportance(a, "color", 0.3);
  AddImportance(a, "z", 0.0);
  Task* b = AddTask(&job, Task::SUCCEEDED, 0.8);
  AddImportance(b, "x", 0.3);
  AddImportance(b, "color", 0.5);
  AddImportance(b, "z", 0.0);
  AddTask(&job, Task::SUCCEEDED, 0.1);  // the refit
  AggregateFoldResults(&job);
  const auto& r = job.result();
  EXPECT_EQ(r.importance_metric(), "val.accuracy (max)");
  ASSERT_EQ(r.importance_size(), 3);
  EXPECT_EQ(r.importance(0).feature(), "color");
  EXPECT_DOUBLE_EQ(r.importance(0).mean(), 0.4);
  EXPECT_NEAR(r.importance(0).std(), 0.1, 1e-12);
  EXPECT_EQ(r.importance(0).values_size(), 2);
  EXPECT_EQ(r.importance(1).feature(), "x");
  EXPECT_DOUBLE_EQ(r.importance(1).mean(), 0.2);
  EXPECT_EQ(r.importance(2).feature(), "z");
  EXPECT_EQ(r.importance(2).std(), 0.0);
  // Without importance in the folds: none.
  Job plain;
  plain.mutable_spec()->mutable_cross_validation()->set_folds(2);
  AddTask(&plain, Task::SUCCEEDED, 0.9);
  AggregateFoldResults(&plain);
  EXPECT_EQ(plain.result().importance_size(), 0);
  EXPECT_EQ(plain.result().importance_metric(), "");
}

TEST(JobResultsTest, PredictionsAreMergedInRowOrder) {
  const ::traind::testing::TempDir scratch("traind-results");
  const std::string dir = scratch.path();
  std::ofstream(dir + "/f0.csv") << "row,p\n3,0.3\n0,0.0\n";
  std::ofstream(dir + "/f1.csv") << "row,p\n2,0.2\n1,0.1\n";
  Job job;
  job.set_id("j");
  job.mutable_spec()->mutable_cross_validation()->set_folds(2);
  AddTask(&job, Task::SUCCEEDED, 0.5, dir + "/f0.csv");
  AddTask(&job, Task::SUCCEEDED, 0.5, dir + "/f1.csv");
  AggregateFoldResults(&job);
  std::filesystem::create_directories(dir + "/jobs/j");
  auto merge = PlanPredictionsMerge(job, dir);
  ASSERT_TRUE(merge.has_value());
  EXPECT_EQ(merge->output, dir + "/jobs/j/predictions.csv");
  auto path = MergePredictions(*merge);
  ASSERT_TRUE(path.has_value());
  std::stringstream text;
  text << std::ifstream(*path).rdbuf();
  EXPECT_EQ(text.str(), "row,p\n0,0.0\n1,0.1\n2,0.2\n3,0.3\n");
  // A fold file that cannot be read: no merged file.
  merge->inputs.push_back(dir + "/missing.csv");
  EXPECT_FALSE(MergePredictions(*merge).has_value());
}

TEST(JobResultsTest, NothingToMergeWithoutPredictions) {
  Job job;
  job.mutable_spec()->mutable_cross_validation()->set_folds(1);
  AddTask(&job, Task::SUCCEEDED, 0.5);
  AggregateFoldResults(&job);
  EXPECT_FALSE(PlanPredictionsMerge(job, "/tmp").has_value());
}

}  // namespace
}  // namespace traind::server
