// End to end: the real traind and workers write one TensorBoard run per
// task under jobs/<job>/tensorboard/, holding every epoch's streamed
// metrics and the learning rate (read with the test kit's independent
// reader of the event file format, and with tests/integration/
// tfevents_check.py where python3 is installed); `--tensorboard=false`
// writes none.
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "gtest/gtest.h"
#include "spec/loader.h"
#include "tests/integration/testing/traind_process.h"
#include "tests/testing/tfevents_reader.h"

namespace traind::testing {
namespace {

using traind::v1::Job;
using traind::v1::JobEvent;

namespace fs = std::filesystem;

// The example iris CV spec (5 folds), with fewer epochs.
Job RunJob(TraindProcess* daemon, const traind::v1::JobSpec& spec, std::vector<JobEvent>* events) {
  auto job = SubmitJob(daemon->stub(), spec);
  EXPECT_TRUE(job.ok()) << job.status();
  if (!job.ok()) return Job();
  grpc::Status s = WatchAll(daemon->stub(), job->id(), 0, events);
  EXPECT_TRUE(s.ok()) << s.error_message();
  return GetJob(daemon->stub(), job->id());
}

std::set<std::string> Entries(const std::string& dir) {
  std::set<std::string> names;
  std::error_code error;
  for (const auto& e : fs::directory_iterator(dir, error)) names.insert(e.path().filename());
  return names;
}

TEST(TensorBoardEndToEndTest, EveryTaskWritesOneRunWithEveryEpochsMetrics) {
  TempDir dir;
  TraindProcess daemon(dir.path() + "/state", {"--cpu-slots=2"});
  ASSERT_TRUE(daemon.Start()) << daemon.Log();
  constexpr int kEpochs = 12;
  std::vector<JobEvent> events;
  const Job job = RunJob(&daemon, IrisExampleSpec(0, kEpochs), &events);
  ASSERT_EQ(job.state(), Job::SUCCEEDED) << job.DebugString() << daemon.Log();

  // task -> epoch -> the streamed metrics.
  std::map<int, std::map<int, traind::v1::EpochMetrics>> streamed;
  for (const JobEvent& e : events) {
    if (e.has_epoch()) streamed[e.epoch().task()][e.epoch().epoch()] = e.epoch();
  }
  ASSERT_EQ(streamed.size(), 5u);

  // One run directory per task, as the artifacts name tasks: `tensorboard
  // --logdir jobs/<job>/tensorboard` overlays the folds.
  const std::string logdir = daemon.state_dir() + "/jobs/" + job.id() + "/tensorboard";
  EXPECT_EQ(Entries(logdir),
            (std::set<std::string>{"task-0", "task-1", "task-2", "task-3", "task-4"}));
  for (int task = 0; task < 5; ++task) {
    SCOPED_TRACE("task " + std::to_string(task));
    const std::vector<std::string> files = EventFilesIn(logdir + "/task-" + std::to_string(task));
    ASSERT_EQ(files.size(), 1u);
    const TfEventFile file = ParseTfEvents(ReadBytes(files[0]));
    EXPECT_EQ(file.error, "");
    ASSERT_FALSE(file.events.empty());
    EXPECT_EQ(file.events[0].file_version, "brain.Event:2");
    // step -> tag -> value, each (step, tag) once.
    std::map<int64_t, std::map<std::string, float>> steps;
    for (size_t i = 1; i < file.events.size(); ++i) {
      const TfEvent& e = file.events[i];
      ASSERT_TRUE(e.has_step);
      ASSERT_EQ(e.values.size(), 1u);
      EXPECT_TRUE(steps[e.step].emplace(e.values[0].first, e.values[0].second).second)
          << "step " << e.step << " " << e.values[0].first << " twice";
    }
    ASSERT_EQ(steps.size(), static_cast<size_t>(kEpochs));
    for (const auto& [epoch, m] : streamed[task]) {
      SCOPED_TRACE("epoch " + std::to_string(epoch));
      ASSERT_TRUE(steps.count(epoch));
      const std::map<std::string, float>& got = steps[epoch];
      // One scalar per metric, and the learning rate.
      EXPECT_EQ(got.size(), static_cast<size_t>(m.train_size() + m.val_size() + 1));
      for (const char* k : {"loss", "accuracy"}) {
        ASSERT_TRUE(got.count(std::string("train/") + k)) << k;
        ASSERT_TRUE(got.count(std::string("val/") + k)) << k;
      }
      for (const auto& [k, v] : m.train()) EXPECT_EQ(got.at("train/" + k), static_cast<float>(v));
      for (const auto& [k, v] : m.val()) EXPECT_EQ(got.at("val/" + k), static_cast<float>(v));
      EXPECT_EQ(got.at("learning_rate"), 0.01f);  // the example's constant Adam rate
    }

    // A second reader of the format, in Python (where there is one): the
    // same scalars.
    std::string out;
    if (RunCommand("command -v python3 >/dev/null", &out) != 0) continue;
    ASSERT_EQ(RunCommand("python3 " + SourceDir() + "/tests/integration/tfevents_check.py " +
                             files[0] + " 2>&1",
                         &out),
              0)
        << out;
    const std::vector<std::string> lines = absl::StrSplit(out, '\n', absl::SkipEmpty());
    ASSERT_EQ(lines.size(), static_cast<size_t>(1 + kEpochs)) << out;
    EXPECT_NE(lines[0].find(absl::StrCat(" records=", file.events.size(), " steps=", kEpochs, " ")),
              std::string::npos)
        << lines[0];
    for (size_t i = 1; i < lines.size(); ++i) {
      std::vector<std::string> words = absl::StrSplit(lines[i], ' ');
      ASSERT_GE(words.size(), 2u) << lines[i];
      int64_t step = 0;
      ASSERT_TRUE(absl::SimpleAtoi(absl::StripPrefix(words[0], "step="), &step)) << lines[i];
      ASSERT_EQ(words.size() - 1, steps[step].size()) << lines[i];
      for (size_t w = 1; w < words.size(); ++w) {
        std::vector<std::string> kv = absl::StrSplit(words[w], absl::MaxSplits('=', 1));
        ASSERT_EQ(kv.size(), 2u) << words[w];
        ASSERT_TRUE(steps[step].count(kv[0])) << words[w];
        EXPECT_EQ(std::stod(kv[1]), static_cast<double>(steps[step][kv[0]])) << words[w];
      }
    }
  }
}

TEST(TensorBoardEndToEndTest, TurnedOffWritesNone) {
  TempDir dir;
  TraindProcess daemon(dir.path() + "/state", {"--cpu-slots=2", "--tensorboard=false"});
  ASSERT_TRUE(daemon.Start()) << daemon.Log();
  std::vector<JobEvent> events;
  const Job job = RunJob(&daemon, IrisExampleSpec(0, 3), &events);
  ASSERT_EQ(job.state(), Job::SUCCEEDED) << job.DebugString() << daemon.Log();
  const std::string job_dir = daemon.state_dir() + "/jobs/" + job.id();
  EXPECT_TRUE(fs::is_directory(job_dir + "/task-0")) << "the other artifacts are still written";
  EXPECT_FALSE(fs::exists(job_dir + "/tensorboard"));
  for (const auto& e : fs::recursive_directory_iterator(daemon.state_dir())) {
    EXPECT_NE(e.path().filename().string().rfind("events.out.tfevents.", 0), 0u) << e.path();
  }
}

}  // namespace
}  // namespace traind::testing
