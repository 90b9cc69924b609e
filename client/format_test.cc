#include "client/format.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <ctime>
#include <limits>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "client/render.h"

namespace traind::client {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// Times are formatted in the local zone: pin it.
class UtcEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    setenv("TZ", "UTC", 1);
    tzset();
  }
};
const auto* const kUtc = ::testing::AddGlobalTestEnvironment(new UtcEnvironment);

TEST(TableTest, AlignsColumnsWithTwoSpaces) {
  Table table({"ID", "NAME", "STATE"});
  table.AddRow({"1", "iris-cv", "RUNNING"});
  table.AddRow({"1234", "x", "QUEUED"});
  EXPECT_EQ(table.Render(),
            "ID    NAME     STATE\n"
            "1     iris-cv  RUNNING\n"
            "1234  x        QUEUED\n");
}

TEST(TableTest, RightAlignedColumnsAndNoTrailingSpaces) {
  Table table({"FOLD", "BEST_EPOCH", "NOTE"});
  table.SetAlign(0, Align::kRight);
  table.SetAlign(1, Align::kRight);
  table.AddRow({"0", "37", ""});
  table.AddRow({"10", "5", "long note"});
  EXPECT_EQ(table.Render(),
            "FOLD  BEST_EPOCH  NOTE\n"
            "   0          37\n"
            "  10           5  long note\n");
}

TEST(TableTest, ShortRowsArePaddedAndLongRowsCut) {
  Table table({"A", "B"});
  table.AddRow({"x"});
  table.AddRow({"1", "2", "3"});
  EXPECT_EQ(table.Render(), "A  B\nx\n1  2\n");
  EXPECT_EQ(table.rows(), 2u);
}

TEST(TableTest, WidthCountsCodePoints) {
  EXPECT_EQ(DisplayWidth("abc"), 3u);
  EXPECT_EQ(DisplayWidth("\xC2\xB1"), 1u);     // ±
  EXPECT_EQ(DisplayWidth("caf\xC3\xA9"), 4u);  // café
  Table table({"N", "X"});
  table.AddRow({"caf\xC3\xA9", "1"});
  table.AddRow({"tea", "2"});
  EXPECT_EQ(table.Render(), "N     X\ncaf\xC3\xA9  1\ntea   2\n");
}

TEST(FormatTest, MetricsHaveFourDecimals) {
  EXPECT_EQ(FormatMetric(0.41234), "0.4123");
  EXPECT_EQ(FormatMetric(1), "1.0000");
  EXPECT_EQ(FormatMetric(0.87506), "0.8751");
  EXPECT_EQ(FormatMetric(std::nan("")), "nan");
  EXPECT_EQ(FormatMetric(std::numeric_limits<double>::infinity()), "inf");
  EXPECT_EQ(FormatMetric(-std::numeric_limits<double>::infinity()), "-inf");
}

TEST(FormatTest, MeanStd) { EXPECT_EQ(FormatMeanStd(0.97333, 0.024944), "0.9733 \xC2\xB1 0.0249"); }

TEST(FormatTest, Seconds) {
  EXPECT_EQ(FormatSeconds(0.0123), "0.01s");
  EXPECT_EQ(FormatSeconds(12.5), "12.50s");
}

TEST(FormatTest, LocalTimeIsIso8601) {
  EXPECT_EQ(FormatLocalTime(0, 0), "-");
  EXPECT_EQ(FormatLocalTime(1714566896, 500), "2024-05-01T12:34:56+00:00");
}

TEST(FormatTest, Bytes) {
  EXPECT_EQ(FormatBytes(512), "512 B");
  EXPECT_EQ(FormatBytes(1536), "1.5 KiB");
  EXPECT_EQ(FormatBytes(80LL << 30), "80.0 GiB");
}

TEST(FormatTest, MetricOrder) {
  EXPECT_EQ(OrderMetricNames({"f1", "accuracy", "auc", "loss"}),
            (std::vector<std::string>{"loss", "accuracy", "auc", "f1"}));
}

v1::JobResult IrisResult() {
  v1::JobResult result;
  const double acc[] = {1.0, 0.9667, 0.9333};
  const double loss[] = {0.05, 0.1, 0.2};
  for (int i = 0; i < 3; ++i) {
    v1::FoldResult* fold = result.add_folds();
    fold->set_fold(i);
    fold->set_best_epoch(10 * (i + 1));
    (*fold->mutable_val())["accuracy"] = acc[i];
    (*fold->mutable_val())["loss"] = loss[i];
  }
  (*result.mutable_val())["accuracy"].set_mean(0.9667);
  (*result.mutable_val())["accuracy"].set_std(0.0272);
  (*result.mutable_val())["loss"].set_mean(0.1167);
  (*result.mutable_val())["loss"].set_std(0.0624);
  result.set_complete(true);
  return result;
}

TEST(RenderTest, MeanStdLine) {
  EXPECT_EQ(RenderMeanStdLine(IrisResult()),
            "val mean \xC2\xB1 std over 3 folds: loss 0.1167 \xC2\xB1 0.0624  "
            "accuracy 0.9667 \xC2\xB1 0.0272");
  EXPECT_EQ(RenderMeanStdLine(v1::JobResult()), "");
}

TEST(RenderTest, ResultTable) {
  EXPECT_EQ(RenderResult(IrisResult()),
            "FOLD  BEST_EPOCH  VAL_LOSS  VAL_ACCURACY\n"
            "   0          10    0.0500        1.0000\n"
            "   1          20    0.1000        0.9667\n"
            "   2          30    0.2000        0.9333\n"
            "val mean \xC2\xB1 std over 3 folds: loss 0.1167 \xC2\xB1 0.0624  "
            "accuracy 0.9667 \xC2\xB1 0.0272\n");
  v1::JobResult partial = IrisResult();
  partial.set_complete(false);
  EXPECT_THAT(RenderResult(partial), HasSubstr("incomplete"));
  EXPECT_EQ(RenderResult(v1::JobResult()), "");

  // Files are named as `trainctl download` takes them, not by server paths.
  v1::JobResult files = IrisResult();
  for (int f = 0; f < 3; ++f) {
    files.mutable_folds(f)->set_predictions_path(
        absl::StrCat("/var/lib/traind/jobs/0a1b2c/task-", f, "/predictions.csv"));
  }
  files.set_predictions_path("/var/lib/traind/jobs/0a1b2c/predictions.csv");
  files.mutable_refit()->set_refit(true);
  files.mutable_refit()->set_model_path("/var/lib/traind/jobs/0a1b2c/task-3/model.ckpt");
  EXPECT_THAT(RenderResult(files),
              HasSubstr("out-of-fold predictions (trainctl download JOB NAME):\n"
                        "  fold 0  task-0/predictions.csv\n"
                        "  fold 1  task-1/predictions.csv\n"
                        "  fold 2  task-2/predictions.csv\n"
                        "  all folds, by row  predictions.csv\n"
                        "refit model (all rows): task-3/model.ckpt\n"));
  EXPECT_EQ(ArtifactName("/s/jobs/j/task-0/model.onnx"), "task-0/model.onnx");
  EXPECT_EQ(ArtifactName("/home/jobs/x/state/jobs/j/model.ckpt"), "model.ckpt");
  EXPECT_EQ(ArtifactName("relative.csv"), "relative.csv");

  // Without validation rows: the training metrics and the model.
  v1::JobResult train_only;
  train_only.set_complete(true);
  v1::FoldResult* t = train_only.add_folds();
  t->set_epochs_run(20);
  t->set_train_rows(150);
  (*t->mutable_final_train())["loss"] = 0.125;
  (*t->mutable_final_train())["accuracy"] = 0.96;
  t->set_model_path("/s/jobs/j/task-0/model.ckpt");
  EXPECT_EQ(RenderResult(train_only),
            "TASK  EPOCHS  TRAIN_ROWS  TRAIN_LOSS  TRAIN_ACCURACY\n"
            "   0      20         150      0.1250          0.9600\n"
            "(no validation rows: training metrics of the last epoch)\n"
            "model (task 0): task-0/model.ckpt\n");
}

v1::JobSpec CvSpec() {
  v1::JobSpec spec;
  spec.set_name("iris-cv");
  spec.mutable_cross_validation()->set_folds(5);
  spec.mutable_training()->set_epochs(60);
  return spec;
}

TEST(RenderTest, EpochEvent) {
  v1::JobEvent event;
  event.set_sequence(7);
  auto* e = event.mutable_epoch();
  e->set_task(2);
  e->set_attempt(1);
  e->set_epoch(5);
  (*e->mutable_train())["loss"] = 0.41234;
  (*e->mutable_train())["accuracy"] = 0.875;
  (*e->mutable_val())["accuracy"] = 0.9;
  (*e->mutable_val())["loss"] = 0.39111;
  e->set_seconds(0.0123);
  EXPECT_EQ(RenderEvent(event, CvSpec()),
            "fold 2  epoch 5/60  train loss 0.4123 accuracy 0.8750 | val loss "
            "0.3911 accuracy 0.9000  (0.01s)");
  e->set_attempt(2);
  e->clear_val();
  EXPECT_EQ(RenderEvent(event, v1::JobSpec()),
            "task 2 attempt 2  epoch 5  train loss 0.4123 accuracy 0.8750  "
            "(0.01s)");
}

TEST(RenderTest, TaskStateEvents) {
  v1::JobEvent event;
  auto* t = event.mutable_task_state();
  t->set_task(2);
  t->set_attempt(1);
  t->set_state(v1::Task::RUNNING);
  t->set_pid(1234);
  EXPECT_EQ(RenderEvent(event, CvSpec()), "fold 2 RUNNING (attempt 1, pid 1234)");

  t->set_state(v1::Task::FAILED);
  t->mutable_failure()->set_reason(v1::Failure::OUT_OF_MEMORY);
  t->mutable_failure()->set_message("needs 3 GiB");
  t->mutable_failure()->set_exit_code(3);
  EXPECT_EQ(RenderEvent(event, CvSpec()),
            "fold 2 FAILED (attempt 1, pid 1234): OUT_OF_MEMORY: needs 3 GiB "
            "(exit code 3)");

  t->clear_failure();
  t->set_state(v1::Task::SUCCEEDED);
  t->mutable_result()->set_best_epoch(37);
  (*t->mutable_result()->mutable_val())["loss"] = 0.0612;
  EXPECT_EQ(RenderEvent(event, CvSpec()),
            "fold 2 SUCCEEDED (attempt 1, pid 1234)  best epoch 37: val loss "
            "0.0612");
}

TEST(RenderTest, JobStateEvents) {
  v1::JobEvent event;
  event.set_job_id("j1");
  event.mutable_job_state()->set_state(v1::Job::RUNNING);
  EXPECT_EQ(RenderEvent(event, CvSpec()), "job j1 RUNNING");
  event.mutable_job_state()->set_state(v1::Job::FAILED);
  event.mutable_job_state()->mutable_failure()->set_reason(v1::Failure::DATA_ERROR);
  event.mutable_job_state()->mutable_failure()->set_message("no such column");
  EXPECT_EQ(RenderEvent(event, CvSpec()), "job j1 FAILED: DATA_ERROR: no such column");
}

TEST(RenderTest, DeviceEvents) {
  v1::JobEvent event;
  event.set_job_id("j1");
  event.set_sequence(17);
  event.mutable_device()->set_device_id("gpu1");
  event.mutable_device()->set_state("UNHEALTHY");
  EXPECT_EQ(RenderEvent(event, CvSpec()), "device gpu1 UNHEALTHY");
  event.mutable_device()->set_message("memory not released within 60s (2.1 GiB above idle)");
  EXPECT_EQ(RenderEvent(event, CvSpec()),
            "device gpu1 UNHEALTHY: memory not released within 60s (2.1 GiB above idle)");
}

TEST(RenderTest, FailureText) {
  v1::Failure failure;
  EXPECT_EQ(FailureText(failure), "");
  failure.set_signal(9);
  EXPECT_EQ(FailureText(failure), "(signal 9)");
  failure.set_reason(v1::Failure::WORKER_CRASHED);
  EXPECT_EQ(FailureText(failure), "WORKER_CRASHED (signal 9)");
}

TEST(RenderTest, Job) {
  v1::Job job;
  job.set_id("j1");
  *job.mutable_spec() = CvSpec();
  job.set_state(v1::Job::RUNNING);
  job.mutable_create_time()->set_seconds(1714566896);
  job.mutable_start_time()->set_seconds(1714566897);
  auto* running = job.add_tasks();
  running->set_index(0);
  running->set_state(v1::Task::RUNNING);
  running->set_epochs_done(12);
  running->set_epochs_total(60);
  running->add_attempts()->set_pid(4321);
  auto* queued = job.add_tasks();
  queued->set_index(1);
  queued->set_state(v1::Task::QUEUED);
  queued->set_wait_reason(v1::Task::RESOURCES);
  queued->set_tasks_ahead(2);
  auto* failed = job.add_tasks();
  failed->set_index(2);
  failed->set_state(v1::Task::FAILED);
  failed->add_attempts()->set_pid(99);
  failed->mutable_failure()->set_reason(v1::Failure::DIVERGED);
  EXPECT_EQ(RenderJob(job),
            "id:       j1\n"
            "name:     iris-cv\n"
            "state:    RUNNING\n"
            "created:  2024-05-01T12:34:56+00:00\n"
            "started:  2024-05-01T12:34:57+00:00\n"
            "ended:    -\n"
            "\n"
            "TASK  STATE    ATTEMPTS  EPOCHS  PID   WAIT\n"
            "   0  RUNNING  1         12/60   4321  -\n"
            "   1  QUEUED   0         0       -     RESOURCES (2 ahead)\n"
            "   2  FAILED   1         0       99    -\n"
            "task 2: DIVERGED\n");
  *job.mutable_result() = IrisResult();
  job.mutable_failure()->set_reason(v1::Failure::DIVERGED);
  std::string text = RenderJob(job);
  EXPECT_THAT(text, HasSubstr("failure:  DIVERGED\n"));
  EXPECT_THAT(text, HasSubstr("\n\nFOLD  BEST_EPOCH"));
}

// launcher: slurm: the attempt's Slurm job in place of a pid, and a task
// waiting in Slurm's queue says so in Slurm's words.
TEST(RenderTest, SlurmJobsAndTheirPendingReasons) {
  v1::Job job;
  job.set_id("j1");
  *job.mutable_spec() = CvSpec();
  job.set_state(v1::Job::RUNNING);
  auto* held = job.add_tasks();
  held->set_index(0);
  held->set_state(v1::Task::STARTING);
  held->add_attempts()->set_slurm_job_id(42);
  held->set_wait_reason(v1::Task::HELD);
  held->set_wait_detail("Slurm job 42 pending: JobHeldUser");
  EXPECT_THAT(RenderJob(job),
              HasSubstr("   0  STARTING  1         0       slurm:42  HELD (Slurm job 42 pending: "
                        "JobHeldUser)\n"));
  v1::JobEvent e;
  e.mutable_task_state()->set_task(0);
  e.mutable_task_state()->set_attempt(1);
  e.mutable_task_state()->set_state(v1::Task::STARTING);
  e.mutable_task_state()->set_slurm_job_id(42);
  EXPECT_THAT(RenderEvent(e, job.spec()), HasSubstr("fold 0 STARTING (attempt 1, slurm job 42)"));
  v1::ServerInfo info;
  info.set_launcher("slurm (shared_dir /shared, workers call back on head:7072)");
  EXPECT_THAT(RenderServerInfo(info),
              HasSubstr("launcher:        slurm (shared_dir /shared, workers call back on "
                        "head:7072)\n"));
}

TEST(RenderTest, SearchEventsNameTheTrialAndTheFoldAndARungPause) {
  v1::JobSpec spec;
  spec.mutable_cross_validation()->set_folds(2);
  auto* dim = spec.mutable_search()->add_space();
  dim->set_path("training.batch_size");
  dim->mutable_values()->add_values()->set_number_value(16);
  dim->mutable_values()->add_values()->set_number_value(32);
  spec.mutable_search()->mutable_sampler()->mutable_grid();
  spec.mutable_search()->set_refit_best(true);
  v1::JobEvent e;
  v1::TaskStateChange* t = e.mutable_task_state();
  t->set_task(3);
  t->set_state(v1::Task::QUEUED);
  t->set_attempt(1);
  t->set_pid(42);
  t->set_rung_epoch(3);
  EXPECT_EQ(RenderEvent(e, spec),
            "trial 1 fold 1 QUEUED (attempt 1, pid 42): paused at the rung of epoch 3 until its "
            "trial's other folds get there");
  t->set_task(4);
  t->set_state(v1::Task::RUNNING);
  t->set_rung_epoch(0);
  EXPECT_EQ(RenderEvent(e, spec), "refit of the best trial RUNNING (attempt 1, pid 42)");
  v1::JobEvent epoch;
  epoch.mutable_epoch()->set_task(2);
  epoch.mutable_epoch()->set_epoch(5);
  EXPECT_THAT(RenderEvent(epoch, spec), ::testing::StartsWith("trial 1 fold 0  epoch 5"));
}

TEST(RenderTest, SearchTrialsBestFirstThenTheBestTrialsFolds) {
  v1::JobResult r;
  auto trial = [&](int i, const char* lr, v1::TrialResult::State state, double mean, int rank) {
    v1::TrialResult* t = r.add_trials();
    t->set_trial(i);
    (*t->mutable_params())["optimizer.adam.learning_rate"] = lr;
    t->set_state(state);
    t->set_epochs_run(60);
    if (state == v1::TrialResult::SUCCEEDED) {
      (*t->mutable_val())["accuracy"].set_mean(mean);
      (*t->mutable_val())["accuracy"].set_std(0.01);
      t->set_score(mean);
    }
    t->set_rank(rank);
  };
  trial(0, "0.1", v1::TrialResult::FAILED, 0, 0);
  trial(1, "0.01", v1::TrialResult::SUCCEEDED, 0.9, 2);
  trial(2, "0.001", v1::TrialResult::SUCCEEDED, 0.95, 1);
  r.set_best_trial(2);
  const std::string text = RenderResult(r);
  EXPECT_THAT(text, HasSubstr("RANK  TRIAL  STATE      EPOCHS/FOLD  learning_rate  "
                              "VAL_ACCURACY\n"));
  EXPECT_THAT(text, HasSubstr("learning_rate = optimizer.adam.learning_rate\n"));
  // Best first; a trial without a score last.
  const size_t best = text.find("   1      2  SUCCEEDED");
  const size_t second = text.find("   2      1  SUCCEEDED");
  const size_t failed = text.find("   -      0  FAILED");
  ASSERT_NE(best, std::string::npos) << text;
  ASSERT_NE(second, std::string::npos) << text;
  ASSERT_NE(failed, std::string::npos) << text;
  EXPECT_LT(best, second);
  EXPECT_LT(second, failed);
  EXPECT_THAT(text, HasSubstr("0.9500 ± 0.0100"));
  EXPECT_THAT(text, HasSubstr("best trial: 2 (its score is optimistic"));
}

// A search's result at 80 columns: epochs per fold, the search metric first
// and the metrics that do not fit counted, parameters by short names with a
// legend, the best trial's folds numbered within it.
TEST(RenderTest, SearchResultFitsEightyColumns) {
  v1::JobResult r;
  for (int i = 0; i < 4; ++i) {
    v1::TrialResult* t = r.add_trials();
    t->set_trial(i);
    (*t->mutable_params())["optimizer.adam.learning_rate"] = i % 2 ? "0.03" : "0.003";
    (*t->mutable_params())["model.layers[0].dense.units"] = i / 2 ? "32" : "4";
    (*t->mutable_params())["model.layers[1].dense.units"] = "3";
    t->set_state(v1::TrialResult::SUCCEEDED);
    for (const char* m : {"loss", "accuracy", "f1_macro"}) {
      (*t->mutable_val())[m].set_mean(0.5 + 0.1 * i);
      (*t->mutable_val())[m].set_std(0.01);
    }
    t->set_score(0.5 + 0.1 * i);
    t->set_rank(4 - i);
    t->set_epochs_run(i == 0 ? 25 : 30);  // trial 0's folds stopped early
    t->set_first_task(3 * i);
    t->set_tasks(3);
  }
  r.set_best_trial(3);
  for (int f = 0; f < 3; ++f) {
    v1::FoldResult* fold = r.add_folds();
    fold->set_fold(9 + f);
    fold->set_best_epoch(10);
    (*fold->mutable_val())["accuracy"] = 0.8;
    fold->set_predictions_path(absl::StrCat("/s/jobs/j/task-", 9 + f, "/predictions.csv"));
  }
  v1::JobSpec spec;
  spec.mutable_search()->set_metric("val.f1_macro");
  const std::string text = RenderResult(r, &spec, 80);
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    EXPECT_LT(DisplayWidth(std::string(line)), 80u) << line;
  }
  // Three parameters whose shortest distinct names are too long: p1, p2, p3.
  EXPECT_THAT(text,
              HasSubstr("RANK  TRIAL  STATE      EPOCHS/FOLD  p1  p2  p3     VAL_F1_MACRO\n"));
  EXPECT_THAT(text,
              HasSubstr("   1      3  SUCCEEDED           10  32  3   0.03   0.8000 ± 0.0100"));
  EXPECT_THAT(text,
              HasSubstr("   4      0  SUCCEEDED          8.3  4   3   0.003  0.5000 ± 0.0100"));
  EXPECT_THAT(text, HasSubstr("(2 more metrics: trainctl result -o json)\n"));
  EXPECT_THAT(text, HasSubstr("p1 = model.layers[0].dense.units\n"
                              "p2 = model.layers[1].dense.units\n"
                              "p3 = optimizer.adam.learning_rate\n"));
  EXPECT_THAT(text, HasSubstr("FOLD  BEST_EPOCH  VAL_ACCURACY\n"
                              "   0          10        0.8000\n"
                              "   1          10        0.8000\n"
                              "   2          10        0.8000\n"));
  EXPECT_THAT(text, HasSubstr("  fold 0  task-9/predictions.csv\n"));
  // Wide enough: short names, every metric, the search's first.
  const std::string wide = RenderResult(r, &spec, 200);
  EXPECT_THAT(wide, HasSubstr("EPOCHS/FOLD  layers[0].dense.units  layers[1].dense.units  "
                              "learning_rate  VAL_F1_MACRO     VAL_LOSS         VAL_ACCURACY\n"));
  EXPECT_THAT(wide, HasSubstr("learning_rate = optimizer.adam.learning_rate\n"));
}

TEST(RenderTest, JobListAndState) {
  v1::ListJobsResponse response;
  v1::Job* job = response.add_jobs();
  job->set_id("j1");
  job->mutable_spec()->set_name("iris-cv");
  job->set_state(v1::Job::SUCCEEDED);
  job->add_tasks()->set_state(v1::Task::SUCCEEDED);
  job->add_tasks()->set_state(v1::Task::RUNNING);
  job->mutable_create_time()->set_seconds(1714566896);
  EXPECT_EQ(RenderJobList(response),
            "ID  NAME     STATE      TASKS  CREATED\n"
            "j1  iris-cv  SUCCEEDED  1/2    2024-05-01T12:34:56+00:00\n");
  response.set_next_page_token("abc");
  EXPECT_THAT(RenderJobList(response), HasSubstr("\nnext page: --page-token abc\n"));
  EXPECT_EQ(RenderJobState(*job), "job j1 SUCCEEDED\n");
  EXPECT_EQ(RenderSubmitted(*job), "submitted job j1 (iris-cv)\n");
}

TEST(RenderTest, JsonUsesProtoFieldNamesAndPrintsDefaults) {
  v1::Job job;
  job.set_id("j1");
  job.mutable_spec()->mutable_cross_validation()->set_folds(5);
  job.mutable_result()->add_folds()->set_best_epoch(7);  // fold 0
  std::string pretty = ToJson(job, /*pretty=*/true);
  EXPECT_THAT(pretty, HasSubstr("\"cross_validation\""));
  EXPECT_THAT(pretty, Not(HasSubstr("crossValidation")));
  EXPECT_THAT(pretty, HasSubstr("\"state\": \"STATE_UNSPECIFIED\""));
  EXPECT_THAT(pretty, HasSubstr("\"fold\": 0,"));
  EXPECT_THAT(pretty, HasSubstr("\"tasks\": []"));
  // Unset messages and unset optional fields stay out.
  EXPECT_THAT(pretty, Not(HasSubstr("\"failure\"")));
  EXPECT_THAT(pretty, Not(HasSubstr("\"stratified\"")));
  EXPECT_EQ(pretty.back(), '\n');
  v1::ListDevicesResponse devices;
  devices.add_devices()->set_id("cpu");
  EXPECT_THAT(ToJson(devices, false), HasSubstr("\"kind\":\"CPU\""));
  EXPECT_THAT(ToYaml(devices), HasSubstr("kind: CPU"));
  v1::JobEvent event;
  event.set_job_id("j1");
  event.set_sequence(3);
  event.set_last(true);
  EXPECT_EQ(ToJson(event, /*pretty=*/false), "{\"job_id\":\"j1\",\"sequence\":3,\"last\":true}\n");
}

TEST(RenderTest, DevicesAndInfo) {
  v1::ListDevicesResponse devices;
  auto* cpu = devices.add_devices();
  cpu->set_id("cpu");
  cpu->set_kind(v1::CPU);
  cpu->set_name("AMD EPYC");
  cpu->set_state(v1::Device::IDLE);
  cpu->set_slots(2);
  cpu->set_cores(2);
  cpu->set_memory_total_bytes(8LL << 30);
  cpu->set_memory_available_bytes(6LL << 30);
  devices.set_gpu_note("no NVIDIA driver");
  EXPECT_EQ(RenderDevices(devices),
            "ID   KIND  NAME      STATE  SLOTS  CORES  MEM_FREE  MEM_TOTAL\n"
            "cpu  CPU   AMD EPYC  IDLE     0/2      2   6.0 GiB    8.0 GiB\n"
            "note: no NVIDIA driver\n");
  v1::ServerInfo info;
  info.set_version("0.1.0");
  info.add_listen_addresses("unix:/tmp/t.sock");
  info.set_cpu_slots(2);
  std::string text = RenderServerInfo(info);
  EXPECT_THAT(text, HasSubstr("version:         0.1.0\n"));
  EXPECT_THAT(text, HasSubstr("listen:          unix:/tmp/t.sock\n"));
  EXPECT_THAT(text, HasSubstr("started:         -\n"));
  EXPECT_THAT(text, HasSubstr("store:           writable\n"));
  EXPECT_THAT(text, Not(HasSubstr("data_roots:")));
  EXPECT_THAT(text, HasSubstr("dataset_quota:   none\n"));
  info.add_data_roots("/srv/data");
  info.add_data_roots("/home/shared");
  info.set_dataset_quota_bytes(int64_t{10} << 30);
  text = RenderServerInfo(info);
  EXPECT_THAT(text, HasSubstr("data_roots:      /srv/data, /home/shared\n"));
  EXPECT_THAT(text, HasSubstr("dataset_quota:   10.0 GiB\n"));
  info.set_store_error("traind.db: database or disk is full");
  EXPECT_THAT(RenderServerInfo(info),
              HasSubstr("store:           NOT WRITABLE (new jobs are refused): traind.db: "
                        "database or disk is full\n"));
}

}  // namespace
}  // namespace traind::client
