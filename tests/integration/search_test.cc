// Hyperparameter search through the real daemon and workers:
// examples/iris-search.yaml (a 2 × 2 grid × 3 folds, refit of the best).
#include <signal.h>
#include <unistd.h>

#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "spec/loader.h"
#include "tests/integration/testing/traind_process.h"
#include "tests/testing/temp_dir.h"

namespace traind::testing {
namespace {

using traind::v1::Job;
using traind::v1::JobEvent;
using traind::v1::Task;
using traind::v1::TrialResult;

traind::v1::JobSpec SearchSpec() {
  absl::StatusOr<traind::v1::JobSpec> spec =
      spec::LoadJobSpecFile(SourceDir() + "/examples/iris-search.yaml");
  EXPECT_TRUE(spec.ok()) << spec.status();
  spec->mutable_data()->set_path(SourceDir() + "/examples/data/iris.csv");
  return *spec;
}

Job RunToEnd(TraindProcess* d, const traind::v1::JobSpec& spec) {
  absl::StatusOr<Job> job = SubmitJob(d->stub(), spec);
  EXPECT_TRUE(job.ok()) << job.status();
  if (!job.ok()) return Job();
  std::vector<JobEvent> events;
  grpc::Status s = WatchAll(d->stub(), job->id(), 0, &events, 300);
  EXPECT_TRUE(s.ok()) << s.error_message();
  return GetJob(d->stub(), job->id());
}

// Per (task, attempt): every epoch once, in order, from the first or from
// the one after the attempt's resume. Returns each (task, attempt)'s last
// epoch; `resumed` (optional) gets the epochs each resumed attempt resumed
// after.
std::map<std::pair<int, int>, int> ExpectEpochsOncePerAttempt(
    const std::vector<JobEvent>& events, std::map<std::pair<int, int>, int>* resumed = nullptr) {
  std::map<std::pair<int, int>, int> last;
  for (const JobEvent& e : events) {
    if (e.has_task_state() && e.task_state().resumed_epochs() > 0) {
      const std::pair<int, int> key = {e.task_state().task(), e.task_state().attempt()};
      last[key] = e.task_state().resumed_epochs();
      if (resumed != nullptr) (*resumed)[key] = last[key];
    }
    if (!e.has_epoch()) continue;
    const std::pair<int, int> key = {e.epoch().task(), e.epoch().attempt()};
    const int expected = last.count(key) ? last[key] + 1 : 1;
    EXPECT_EQ(e.epoch().epoch(), expected) << "task " << key.first << " attempt " << key.second;
    last[key] = e.epoch().epoch();
  }
  return last;
}

// Without ASHA a search adds nothing but bookkeeping: each trial's folds are
// exactly those of a CV job of the trial's spec with the same seed. Trials
// are ranked on their fold-mean val.accuracy (ties share the lower rank), and
// the best trial's spec is trained once more on all rows.
TEST(SearchJobTest, AGridGivesEachTrialTheMetricsOfItsOwnCvJobAndRefitsTheBest) {
  TempDir dir;
  TraindProcess daemon(dir.path() + "/state", {"--cpu-slots=2"});
  ASSERT_TRUE(daemon.Start()) << daemon.Log();
  const traind::v1::JobSpec spec = SearchSpec();
  const Job job = RunToEnd(&daemon, spec);
  ASSERT_EQ(job.state(), Job::SUCCEEDED) << job.failure().DebugString() << daemon.Log();
  ASSERT_EQ(job.tasks_size(), 4 * 3 + 1);
  const traind::v1::JobResult& r = job.result();
  ASSERT_EQ(r.trials_size(), 4);
  EXPECT_TRUE(r.complete());

  // The grid, last dimension fastest.
  const std::vector<std::pair<std::string, std::string>> grid = {
      {"0.003", "4"}, {"0.003", "32"}, {"0.03", "4"}, {"0.03", "32"}};
  std::vector<double> scores;
  for (int i = 0; i < 4; ++i) {
    const TrialResult& t = r.trials(i);
    SCOPED_TRACE(absl::StrCat("trial ", i));
    EXPECT_EQ(t.trial(), i);
    EXPECT_EQ(t.state(), TrialResult::SUCCEEDED);
    EXPECT_EQ(t.params().at("optimizer.adam.learning_rate"), grid[i].first);
    EXPECT_EQ(t.params().at("model.layers[0].dense.units"), grid[i].second);
    EXPECT_EQ(t.first_task(), 3 * i);
    EXPECT_EQ(t.tasks(), 3);
    // The fold values, and their mean and population std, from the tasks.
    ASSERT_EQ(t.val_folds().at("accuracy").values_size(), 3);
    double mean = 0;
    for (int k = 0; k < 3; ++k) {
      const double v = job.tasks(3 * i + k).result().val().at("accuracy");
      EXPECT_EQ(t.val_folds().at("accuracy").values(k), v);
      mean += v / 3;
    }
    double var = 0;
    for (int k = 0; k < 3; ++k) {
      const double v = job.tasks(3 * i + k).result().val().at("accuracy");
      var += (v - mean) * (v - mean) / 3;
    }
    EXPECT_NEAR(t.val().at("accuracy").mean(), mean, 1e-12);
    EXPECT_NEAR(t.val().at("accuracy").std(), std::sqrt(var), 1e-12);
    EXPECT_EQ(t.score(), t.val().at("accuracy").mean());
    scores.push_back(t.score());
  }
  int best = -1;
  for (int i = 0; i < 4; ++i) {
    int better = 0;
    for (double s : scores) better += s > scores[i];
    EXPECT_EQ(r.trials(i).rank(), better + 1) << "trial " << i;
    if (better == 0 && best < 0) best = i;
  }
  EXPECT_EQ(r.best_trial(), best);
  // The job's folds are the best trial's; the refit trained on all rows.
  ASSERT_EQ(r.folds_size(), 3);
  EXPECT_EQ(r.folds(0).val().at("accuracy"), job.tasks(3 * best).result().val().at("accuracy"));
  EXPECT_TRUE(r.has_refit());
  EXPECT_TRUE(r.refit().refit());
  EXPECT_EQ(r.refit().train_rows(), 150);
  EXPECT_FALSE(r.refit().model_path().empty());

  // Each trial against a CV job of its own spec.
  for (int i = 0; i < 4; ++i) {
    SCOPED_TRACE(absl::StrCat("trial ", i));
    traind::v1::JobSpec own = spec;
    own.clear_search();
    ASSERT_TRUE(spec::SetJobSpecField(&own, "optimizer.adam.learning_rate", grid[i].first).ok());
    ASSERT_TRUE(spec::SetJobSpecField(&own, "model.layers[0].dense.units", grid[i].second).ok());
    const Job cv = RunToEnd(&daemon, own);
    ASSERT_EQ(cv.state(), Job::SUCCEEDED);
    ASSERT_EQ(cv.tasks_size(), 3);
    for (int k = 0; k < 3; ++k) {
      const traind::v1::FoldResult& a = job.tasks(3 * i + k).result();
      const traind::v1::FoldResult& b = cv.tasks(k).result();
      EXPECT_EQ(a.best_epoch(), b.best_epoch()) << "fold " << k;
      EXPECT_EQ(a.epochs_run(), b.epochs_run()) << "fold " << k;
      EXPECT_EQ(a.train_rows(), b.train_rows()) << "fold " << k;
      ASSERT_EQ(a.val().size(), b.val().size());
      for (const auto& [name, v] : b.val()) EXPECT_EQ(a.val().at(name), v) << name;
      for (const auto& [name, v] : b.final_train()) EXPECT_EQ(a.final_train().at(name), v) << name;
    }
  }
}

// kill -9 of traind in the middle of a search: the next start resumes it;
// the trials that had finished are not run again, the fold that was
// running resumes from its checkpoint, no epoch is reported twice, and the
// trials end as in an uninterrupted run.
TEST(SearchJobTest, ADaemonKilledMidSearchResumesWithoutRerunningOrRepeating) {
  TempDir dir;
  const std::string state = dir.path() + "/state";
  const std::vector<std::string> args = {"--cpu-slots=1"};
  auto daemon = std::make_unique<TraindProcess>(state, args);
  ASSERT_TRUE(daemon->Start()) << daemon->Log();
  traind::v1::JobSpec spec = SearchSpec();
  // Long enough folds that the kill lands well inside the fourth: from the
  // poll that sees epoch 250 to the kill, its other 5,750 epochs could run.
  constexpr int kEpochs = 6000;
  spec.mutable_training()->set_epochs(kEpochs);
  spec.mutable_checkpoint()->set_every_epochs(100);
  absl::StatusOr<Job> job = SubmitJob(daemon->stub(), spec);
  ASSERT_TRUE(job.ok()) << job.status();
  bool mid = false;
  for (int i = 0; i < 6000 && !mid; ++i) {
    const Job j = GetJob(daemon->stub(), job->id());
    mid = j.tasks(2).state() == traind::v1::Task::SUCCEEDED && j.tasks(3).epochs_done() >= 250;
    if (!mid) usleep(10000);
  }
  ASSERT_TRUE(mid) << "trial 1 never got to its second fold's epoch 250";
  ASSERT_EQ(daemon->Stop(SIGKILL) & 0x7f, SIGKILL);

  daemon = std::make_unique<TraindProcess>(state, args);
  ASSERT_TRUE(daemon->Start()) << daemon->Log();
  std::vector<JobEvent> events;
  ASSERT_TRUE(WatchAll(daemon->stub(), job->id(), 0, &events, 300).ok());
  const Job done = GetJob(daemon->stub(), job->id());
  ASSERT_EQ(done.state(), Job::SUCCEEDED) << done.failure().DebugString();
  for (int t = 0; t < 3; ++t) {
    EXPECT_EQ(done.tasks(t).attempts_size(), 1) << "task " << t << " ran again";
  }
  ASSERT_EQ(done.tasks(3).attempts_size(), 2);
  // Per (task, attempt) every epoch once, in order; attempt 2 of task 3
  // goes on after its checkpoint (epoch 200 or later).
  std::map<std::pair<int, int>, int> resumed;
  std::map<std::pair<int, int>, int> last = ExpectEpochsOncePerAttempt(events, &resumed);
  EXPECT_GE(resumed[std::make_pair(3, 2)], 200);
  for (int t = 0; t < done.tasks_size() - 1; ++t) {
    const int a = done.tasks(t).attempts_size();
    EXPECT_EQ(last[std::make_pair(t, a)], kEpochs) << "task " << t;
  }

  // As uninterrupted.
  const Job again = RunToEnd(daemon.get(), spec);
  ASSERT_EQ(again.state(), Job::SUCCEEDED);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(done.result().trials(i).score(), again.result().trials(i).score()) << "trial " << i;
    EXPECT_EQ(done.result().trials(i).rank(), again.result().trials(i).rank()) << "trial " << i;
  }
  EXPECT_EQ(done.result().best_trial(), again.result().best_trial());
}

// ASHA through the real workers: every fold of a one-trial search pauses at
// each rung (checkpoint, exit) and resumes from there when its trial is
// promoted; the result equals the uninterrupted run to the bit. With a grid
// of poor and good learning rates, the trials ASHA prunes end PRUNED after
// fewer epochs and the best trial is the one of the exhaustive search.
TEST(SearchJobTest, AshaPausesFoldsAtRungsAndResumesThemAsIfUninterrupted) {
  TempDir dir;
  TraindProcess daemon(dir.path() + "/state", {"--cpu-slots=2"});
  ASSERT_TRUE(daemon.Start()) << daemon.Log();
  traind::v1::JobSpec spec = SearchSpec();
  spec.mutable_search()->clear_space();
  auto* dim = spec.mutable_search()->add_space();
  dim->set_path("optimizer.adam.learning_rate");
  dim->mutable_values()->add_values()->set_number_value(0.03);
  spec.mutable_search()->set_refit_best(false);
  const Job plain = RunToEnd(&daemon, spec);
  ASSERT_EQ(plain.state(), Job::SUCCEEDED);
  spec.mutable_search()->mutable_asha()->set_grace_epochs(2);  // rungs 2, 6, 18
  const Job asha = RunToEnd(&daemon, spec);
  ASSERT_EQ(asha.state(), Job::SUCCEEDED) << asha.failure().DebugString();
  for (int k = 0; k < 3; ++k) {
    SCOPED_TRACE(absl::StrCat("fold ", k));
    EXPECT_EQ(asha.tasks(k).attempts_size(), 4);  // paused at 2, 6 and 18
    const traind::v1::FoldResult& a = asha.tasks(k).result();
    const traind::v1::FoldResult& b = plain.tasks(k).result();
    EXPECT_EQ(a.best_epoch(), b.best_epoch());
    EXPECT_EQ(a.epochs_run(), b.epochs_run());
    for (const auto& [name, v] : b.val()) EXPECT_EQ(a.val().at(name), v) << name;
    for (const auto& [name, v] : b.final_train()) EXPECT_EQ(a.final_train().at(name), v) << name;
  }
  EXPECT_EQ(asha.result().trials(0).score(), plain.result().trials(0).score());

  // Four trials, two of them with learning rates too small to learn in 30
  // epochs: pruned at the first rungs, fewer epochs in all.
  traind::v1::JobSpec grid = SearchSpec();
  grid.mutable_search()->clear_space();
  dim = grid.mutable_search()->add_space();
  dim->set_path("optimizer.adam.learning_rate");
  for (double lr : {0.03, 0.00001, 0.01, 0.000001}) {
    dim->mutable_values()->add_values()->set_number_value(lr);
  }
  grid.mutable_search()->set_refit_best(false);
  const Job exhaustive = RunToEnd(&daemon, grid);
  ASSERT_EQ(exhaustive.state(), Job::SUCCEEDED);
  grid.mutable_search()->mutable_asha()->set_grace_epochs(2);
  const Job pruned = RunToEnd(&daemon, grid);
  ASSERT_EQ(pruned.state(), Job::SUCCEEDED) << pruned.failure().DebugString();
  int epochs_all = 0, epochs_asha = 0, pruned_trials = 0;
  for (int i = 0; i < 4; ++i) {
    epochs_all += exhaustive.result().trials(i).epochs_run();
    epochs_asha += pruned.result().trials(i).epochs_run();
    const TrialResult& t = pruned.result().trials(i);
    if (t.state() == TrialResult::PRUNED) {
      ++pruned_trials;
      for (int k = 0; k < 3; ++k) {
        EXPECT_EQ(pruned.tasks(t.first_task() + k).state(), traind::v1::Task::PRUNED);
      }
    } else {
      // A trial that ran to the end has the exhaustive search's folds.
      EXPECT_EQ(t.state(), TrialResult::SUCCEEDED);
      EXPECT_EQ(t.score(), exhaustive.result().trials(i).score()) << "trial " << i;
    }
  }
  EXPECT_GE(pruned_trials, 1);
  EXPECT_LT(epochs_asha, epochs_all);
  EXPECT_EQ(pruned.result().best_trial(), exhaustive.result().best_trial());
}

// kill -9 of traind while an ASHA search has folds waiting at a rung: the
// next start rebuilds the rungs from the stored epochs, the waiting folds
// still wait for their trial, and the search ends as an uninterrupted one
// (same pruned trials, same scores, same best trial), no epoch of an attempt
// reported twice.
TEST(SearchJobTest, AshaSurvivesAKillWithFoldsWaitingAtARung) {
  TempDir dir;
  const std::string state = dir.path() + "/state";
  const std::vector<std::string> args = {"--cpu-slots=1"};
  auto daemon = std::make_unique<TraindProcess>(state, args);
  ASSERT_TRUE(daemon->Start()) << daemon->Log();
  traind::v1::JobSpec spec = SearchSpec();
  spec.mutable_search()->clear_space();
  auto* dim = spec.mutable_search()->add_space();
  dim->set_path("optimizer.adam.learning_rate");
  for (double lr : {0.03, 0.00001, 0.01}) dim->mutable_values()->add_values()->set_number_value(lr);
  spec.mutable_search()->set_refit_best(false);
  spec.mutable_search()->mutable_asha()->set_grace_epochs(2);  // rungs 2, 6, 18
  const Job uninterrupted = RunToEnd(daemon.get(), spec);
  ASSERT_EQ(uninterrupted.state(), Job::SUCCEEDED);

  absl::StatusOr<Job> job = SubmitJob(daemon->stub(), spec);
  ASSERT_TRUE(job.ok()) << job.status();
  bool waiting = false;
  for (int i = 0; i < 20000 && !waiting; ++i) {
    const Job j = GetJob(daemon->stub(), job->id());
    for (int t = 3; t < 6; ++t) waiting = waiting || j.tasks(t).wait_reason() == Task::RUNG;
    if (!waiting) usleep(1000);
  }
  ASSERT_TRUE(waiting) << "no fold of trial 1 was seen waiting at a rung";
  ASSERT_EQ(daemon->Stop(SIGKILL) & 0x7f, SIGKILL);
  daemon = std::make_unique<TraindProcess>(state, args);
  ASSERT_TRUE(daemon->Start()) << daemon->Log();
  std::vector<JobEvent> events;
  ASSERT_TRUE(WatchAll(daemon->stub(), job->id(), 0, &events, 300).ok());
  const Job done = GetJob(daemon->stub(), job->id());
  ASSERT_EQ(done.state(), Job::SUCCEEDED) << done.failure().DebugString();
  for (int i = 0; i < 3; ++i) {
    SCOPED_TRACE(absl::StrCat("trial ", i));
    EXPECT_EQ(done.result().trials(i).state(), uninterrupted.result().trials(i).state());
    EXPECT_EQ(done.result().trials(i).score(), uninterrupted.result().trials(i).score());
    EXPECT_EQ(done.result().trials(i).epochs_run(), uninterrupted.result().trials(i).epochs_run());
  }
  EXPECT_EQ(done.result().best_trial(), uninterrupted.result().best_trial());
  ExpectEpochsOncePerAttempt(events);
}

}  // namespace
}  // namespace traind::testing
