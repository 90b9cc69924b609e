#include "server/metrics/server_metrics.h"

#include <sstream>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace traind::server {
namespace {

using traind::v1::Failure;
using traind::v1::Job;
using traind::v1::JobEvent;
using traind::v1::Task;

// The value of the sample line `name` (with its labels, as written), or -1.
double Sample(const std::string& text, const std::string& name) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(name + " ", 0) == 0) return std::stod(line.substr(name.size() + 1));
  }
  return -1;
}

class ServerMetricsTest : public ::testing::Test {
 protected:
  JobEvent At(double seconds) {
    JobEvent e;
    e.set_job_id("j-1");
    e.set_sequence(++seq_);
    e.mutable_time()->set_seconds(static_cast<int64_t>(seconds));
    e.mutable_time()->set_nanos(
        static_cast<int32_t>((seconds - static_cast<int64_t>(seconds)) * 1e9));
    return e;
  }
  void JobState(double t, Job::State s) {
    JobEvent e = At(t);
    e.mutable_job_state()->set_state(s);
    metrics_.OnEvent(Share(e));
  }
  void TaskState(double t, int task, Task::State s,
                 Failure::Reason reason = Failure::REASON_UNSPECIFIED) {
    JobEvent e = At(t);
    e.mutable_task_state()->set_task(task);
    e.mutable_task_state()->set_state(s);
    if (reason != Failure::REASON_UNSPECIFIED)
      e.mutable_task_state()->mutable_failure()->set_reason(reason);
    metrics_.OnEvent(Share(e));
  }
  void Epoch(double t, double seconds) {
    JobEvent e = At(t);
    e.mutable_epoch()->set_seconds(seconds);
    metrics_.OnEvent(Share(e));
  }

  int64_t seq_ = 0;
  ServerMetrics metrics_{"1.2.3", 4, absl::FromUnixSeconds(1000)};
};

TEST_F(ServerMetricsTest, CountsAJobsLifeFromItsEvents) {
  JobState(100.0, Job::QUEUED);
  TaskState(100.5, 0, Task::STARTING);  // queued 0.5 s
  TaskState(100.75, 0, Task::RUNNING);  // worker start 0.25 s
  Epoch(101.0, 0.125);
  Epoch(101.5, 0.375);
  TaskState(102.0, 0, Task::QUEUED, Failure::WORKER_CRASHED);  // retried
  TaskState(104.0, 0, Task::STARTING);                         // queued again 2 s
  TaskState(104.5, 0, Task::RUNNING);                          // 0.5 s
  TaskState(105.0, 0, Task::SUCCEEDED);
  TaskState(105.0, 1, Task::STARTING);  // queued since submit: 5 s
  TaskState(106.0, 1, Task::FAILED, Failure::DATA_ERROR);
  JobState(106.0, Job::FAILED);

  const std::string text = metrics_.Scrape();
  EXPECT_EQ(Sample(text, "traind_jobs_submitted_total"), 1) << text;
  EXPECT_EQ(Sample(text, "traind_jobs_finished_total{state=\"failed\"}"), 1) << text;
  EXPECT_EQ(Sample(text, "traind_jobs_finished_total{state=\"succeeded\"}"), 0) << text;
  EXPECT_EQ(Sample(text, "traind_attempts_started_total"), 3) << text;
  EXPECT_EQ(Sample(text, "traind_attempts_failed_total{reason=\"worker_crashed\"}"), 1) << text;
  EXPECT_EQ(Sample(text, "traind_attempts_failed_total{reason=\"data_error\"}"), 1) << text;
  EXPECT_EQ(Sample(text, "traind_task_retries_total"), 1) << text;
  EXPECT_EQ(Sample(text, "traind_queue_wait_seconds_count"), 3) << text;
  EXPECT_DOUBLE_EQ(Sample(text, "traind_queue_wait_seconds_sum"), 0.5 + 2 + 5) << text;
  EXPECT_EQ(Sample(text, "traind_worker_start_seconds_count"), 2) << text;
  EXPECT_DOUBLE_EQ(Sample(text, "traind_worker_start_seconds_sum"), 0.75) << text;
  EXPECT_EQ(Sample(text, "traind_epoch_seconds_count"), 2) << text;
  EXPECT_DOUBLE_EQ(Sample(text, "traind_epoch_seconds_sum"), 0.5) << text;
  // Buckets are cumulative: 0.125 and 0.375 are both under 1.024 (0.001·4^5).
  EXPECT_EQ(Sample(text, "traind_epoch_seconds_bucket{le=\"1.024\"}"), 2) << text;
  EXPECT_EQ(Sample(text, "traind_epoch_seconds_bucket{le=\"0.256\"}"), 1) << text;
  EXPECT_EQ(Sample(text, "traind_build_info{version=\"1.2.3\"}"), 1) << text;
  EXPECT_EQ(Sample(text, "traind_start_time_seconds"), 1000) << text;
}

TEST_F(ServerMetricsTest, StreamsAndStoreCommits) {
  metrics_.StreamOpened(ServerMetrics::Stream::kSse);
  metrics_.StreamOpened(ServerMetrics::Stream::kSse);
  metrics_.StreamOpened(ServerMetrics::Stream::kGrpc);
  metrics_.StreamClosed(ServerMetrics::Stream::kSse);
  metrics_.ObserveStoreCommit(absl::Milliseconds(3));
  const std::string text = metrics_.Scrape();
  EXPECT_EQ(Sample(text, "traind_watch_streams{transport=\"sse\"}"), 1) << text;
  EXPECT_EQ(Sample(text, "traind_watch_streams{transport=\"grpc\"}"), 1) << text;
  EXPECT_EQ(Sample(text, "traind_store_commit_seconds_count"), 1) << text;
  EXPECT_DOUBLE_EQ(Sample(text, "traind_store_commit_seconds_sum"), 0.003) << text;
}

// launcher: slurm: the commands it ran, by outcome, in every scrape.
TEST_F(ServerMetricsTest, SlurmCommandsByOutcome) {
  SlurmLauncher::CommandCounts c;
  c.sbatch = 5;
  c.sbatch_failed = 1;
  c.squeue = 12;
  c.scancel = 2;
  c.scancel_failed = 2;
  metrics_.AddCollector([c](std::vector<prometheus::MetricFamily>* families) {
    families->push_back(SlurmCommandsFamily(c));
  });
  const std::string text = metrics_.Scrape();
  EXPECT_EQ(Sample(text, "traind_slurm_commands_total{command=\"sbatch\",outcome=\"ok\"}"), 4)
      << text;
  EXPECT_EQ(Sample(text, "traind_slurm_commands_total{command=\"sbatch\",outcome=\"error\"}"), 1);
  EXPECT_EQ(Sample(text, "traind_slurm_commands_total{command=\"squeue\",outcome=\"ok\"}"), 12);
  EXPECT_EQ(Sample(text, "traind_slurm_commands_total{command=\"scancel\",outcome=\"ok\"}"), 0);
  EXPECT_NE(text.find("# TYPE traind_slurm_commands_total counter"), std::string::npos) << text;
}

TEST_F(ServerMetricsTest, EveryFamilyHasHelpAndType) {
  const std::string text = metrics_.Scrape();
  std::istringstream in(text);
  std::string line;
  std::set<std::string> help, type, samples;
  while (std::getline(in, line)) {
    if (line.rfind("# HELP ", 0) == 0) {
      help.insert(line.substr(7, line.find(' ', 7) - 7));
    } else if (line.rfind("# TYPE ", 0) == 0) {
      type.insert(line.substr(7, line.find(' ', 7) - 7));
    } else if (!line.empty()) {
      EXPECT_EQ(line.rfind("traind_", 0), 0u) << "one prefix: " << line;
    }
  }
  EXPECT_EQ(help, type);
  EXPECT_TRUE(help.count("traind_jobs_submitted_total")) << text;
}

}  // namespace
}  // namespace traind::server
