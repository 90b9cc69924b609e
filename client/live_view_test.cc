#include "client/live_view.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "client/format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace traind::client {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

traind::v1::JobEvent Epoch(int task, int epoch, double loss, double val_acc, double seconds) {
  traind::v1::JobEvent e;
  e.set_job_id("j1");
  auto* m = e.mutable_epoch();
  m->set_task(task);
  m->set_attempt(1);
  m->set_epoch(epoch);
  (*m->mutable_train())["loss"] = loss;
  (*m->mutable_val())["accuracy"] = val_acc;
  m->set_seconds(seconds);
  return e;
}

TEST(LiveViewTest, BarsEtaAndLatestMetrics) {
  traind::v1::Job job;
  job.set_id("j1");
  job.set_state(traind::v1::Job::RUNNING);
  job.mutable_spec()->set_name("iris-cv");
  job.mutable_spec()->mutable_cross_validation()->set_folds(2);
  job.mutable_spec()->mutable_training()->set_epochs(10);
  for (int i = 0; i < 2; ++i) job.add_tasks()->set_index(i);
  LiveView view(job);
  view.Update(Epoch(0, 1, 0.9, 0.5, 0.5));
  view.Update(Epoch(0, 5, 0.4, 0.75, 0.5));
  std::string frame = view.Render(80);
  EXPECT_THAT(frame, HasSubstr("job j1 (iris-cv)  RUNNING\n"));
  // Fold 0: 5 of 10 epochs, 1 s over 5 epochs -> 0.2 s each -> ETA 1.00s.
  EXPECT_THAT(frame,
              HasSubstr("fold 0  [###############---------------] 5/10  RUNNING  ETA 1.00s\n"));
  EXPECT_THAT(frame, HasSubstr("fold 1  [------------------------------] 0/10  QUEUED\n"));
  EXPECT_THAT(frame, HasSubstr("FOLD  EPOCH  TRAIN_LOSS  VAL_ACCURACY\n"));
  EXPECT_THAT(frame, HasSubstr("   0      5      0.4000        0.7500\n"));

  traind::v1::JobEvent done;
  done.mutable_task_state()->set_task(0);
  done.mutable_task_state()->set_attempt(1);
  done.mutable_task_state()->set_state(traind::v1::Task::SUCCEEDED);
  view.Update(done);
  EXPECT_THAT(view.Render(80), Not(HasSubstr("ETA")));
  EXPECT_THAT(view.Render(80), HasSubstr("SUCCEEDED"));
}

// The refit task is "refit", never "fold 2"; in a search each task is its
// trial and fold.
TEST(LiveViewTest, TheRefitTaskAndSearchTrialsAreNamed) {
  traind::v1::Job job;
  job.set_id("j1");
  job.set_state(traind::v1::Job::RUNNING);
  job.mutable_spec()->mutable_cross_validation()->set_folds(2);
  job.mutable_spec()->mutable_cross_validation()->set_refit(true);
  job.mutable_spec()->mutable_training()->set_epochs(10);
  for (int i = 0; i < 3; ++i) job.add_tasks()->set_index(i);
  LiveView view(job);
  for (int task = 0; task < 3; ++task) view.Update(Epoch(task, 1, 0.5, 0.75, 0.1));
  std::string frame = view.Render(80);
  EXPECT_THAT(frame, HasSubstr("fold 0  [###"));
  EXPECT_THAT(frame, HasSubstr("fold 1  [###"));
  EXPECT_THAT(frame, HasSubstr("refit   [###"));
  EXPECT_THAT(frame, Not(HasSubstr("fold 2")));
  EXPECT_THAT(frame, HasSubstr("refit      1      0.5000"));

  traind::v1::Job search = job;
  search.mutable_spec()->mutable_cross_validation()->set_refit(false);
  auto* space = search.mutable_spec()->mutable_search();
  space->mutable_sampler()->mutable_grid();
  auto* dim = space->add_space();
  dim->set_path("optimizer.adam.learning_rate");
  dim->mutable_values()->add_values()->set_number_value(0.1);
  dim->mutable_values()->add_values()->set_number_value(0.01);
  space->set_refit_best(true);
  search.mutable_spec()->mutable_optimizer()->mutable_adam()->set_learning_rate(0.1);
  search.clear_tasks();
  LiveView trials(search);
  for (int task = 0; task < 5; ++task) trials.Update(Epoch(task, 1, 0.5, 0.75, 0.1));
  frame = trials.Render(100);
  EXPECT_THAT(frame, HasSubstr("trial 0 fold 0           [#"));
  EXPECT_THAT(frame, HasSubstr("trial 1 fold 1           [#"));
  EXPECT_THAT(frame, HasSubstr("refit of the best trial  [#"));
  EXPECT_THAT(frame, HasSubstr("TASK  EPOCH"));
  EXPECT_THAT(frame, HasSubstr("t1 f1      1"));
}

// Ten folds with seven metrics: at any size every line is narrower than the
// terminal and the frame shorter than it; what does not fit is counted.
TEST(LiveViewTest, TheFrameFitsAnyTerminal) {
  traind::v1::Job job;
  job.set_id("0123456789ab");
  job.set_state(traind::v1::Job::RUNNING);
  job.mutable_spec()->set_name("digits-multiclass-with-a-long-name");
  job.mutable_spec()->mutable_cross_validation()->set_folds(10);
  job.mutable_spec()->mutable_training()->set_epochs(100);
  LiveView view(job);
  for (int task = 0; task < 10; ++task) {
    traind::v1::JobEvent e = Epoch(task, 1 + task, 0.5, 0.75, 0.1);
    auto* m = e.mutable_epoch();
    (*m->mutable_train())["accuracy"] = 0.8;
    for (const char* name : {"loss", "top5_accuracy", "f1_macro", "roc_auc"}) {
      (*m->mutable_val())[name] = 0.25;
    }
    view.Update(e);
    if (task >= 6) {  // these have ended
      traind::v1::JobEvent done;
      done.mutable_task_state()->set_task(task);
      done.mutable_task_state()->set_attempt(1);
      done.mutable_task_state()->set_state(traind::v1::Task::SUCCEEDED);
      view.Update(done);
    }
  }
  for (int width : {20, 40, 60, 80, 120, 200}) {
    for (int height : {2, 6, 12, 24, 50}) {
      const std::string frame = view.Render(width, height);
      const std::vector<std::string> lines = absl::StrSplit(frame, '\n', absl::SkipEmpty());
      EXPECT_LE(lines.size(), static_cast<size_t>(height - 1)) << width << "x" << height << "\n"
                                                               << frame;
      for (const std::string& line : lines) {
        EXPECT_LT(DisplayWidth(line), static_cast<size_t>(width))
            << width << "x" << height << ": " << line;
      }
      EXPECT_THAT(frame, StartsWith("job 0123456789ab")) << width << "x" << height;
    }
  }
  // Room for everything: every fold and every metric.
  std::string frame = view.Render(200, 50);
  for (int task = 0; task < 10; ++task) EXPECT_THAT(frame, HasSubstr(absl::StrCat("fold ", task)));
  EXPECT_THAT(frame, HasSubstr("TRAIN_ACCURACY"));
  EXPECT_THAT(frame, HasSubstr("VAL_ROC_AUC"));
  EXPECT_THAT(frame, Not(HasSubstr("more (")));
  // 80 x 12: the running folds first, the rest counted; train metrics give
  // way to validation ones.
  frame = view.Render(80, 12);
  EXPECT_THAT(frame, HasSubstr("fold 0  ["));
  EXPECT_THAT(frame, Not(HasSubstr("fold 9  [")));
  EXPECT_THAT(frame, HasSubstr(" more ("));
  EXPECT_THAT(frame, HasSubstr("SUCCEEDED)"));
  EXPECT_THAT(view.Render(80, 50), Not(HasSubstr("TRAIN_ACCURACY")));
  EXPECT_THAT(view.Render(80, 50), HasSubstr("VAL_LOSS"));
  EXPECT_THAT(view.Render(80, 50), HasSubstr("  (+3 more)"));
}

TEST(LiveViewTest, RowsAfterResizeCountsRewrappedLines) {
  EXPECT_EQ(LiveView::RowsAfterResize("", 80), 0);
  EXPECT_EQ(LiveView::RowsAfterResize("abc\n\n" + std::string(100, 'x') + "\n", 80), 4);
  EXPECT_EQ(LiveView::RowsAfterResize("abc\n\n" + std::string(100, 'x') + "\n", 40), 5);
  EXPECT_EQ(LiveView::RowsAfterResize(std::string(79, 'x') + "\n", 79), 1);
}

TEST(LiveViewTest, Rewind) {
  EXPECT_EQ(LiveView::Rewind(0), "");
  EXPECT_EQ(LiveView::Rewind(3), "\x1b[3A\r\x1b[J");
}

}  // namespace
}  // namespace traind::client
