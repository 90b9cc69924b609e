// TensorBoard event files: CRC-32C, the records as an independent reader
// of the published format sees them (tests/testing/tfevents_reader.h),
// resuming without repeating epochs, and errors that warn once.
#include "worker/engine/fit/tensorboard.h"

#include <sys/stat.h>

#include <cmath>
#include <cstdint>
#include <fstream>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "base/random.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "spec/task_rows.h"
#include "tests/testing/temp_dir.h"
#include "tests/testing/tfevents_reader.h"
#include "worker/engine/fit.h"
#include "worker/engine/testing/epoch_recorder.h"
#include "worker/engine/testing/iris.h"

namespace traind::engine {
namespace {

using traind::testing::EventFilesIn;
using traind::testing::ParseTfEvents;
using traind::testing::ReadBytes;
using traind::testing::TempDir;
using traind::testing::TfEvent;
using traind::testing::TfEventFile;
using traind::v1::EpochMetrics;

TEST(Crc32cTest, PublishedCheckValue) {
  EXPECT_EQ(Crc32c("123456789"), 0xe3069283u);
  EXPECT_EQ(Crc32c(""), 0u);
  // Continued over pieces, the CRC of the whole.
  EXPECT_EQ(Crc32c("56789", Crc32c("1234")), 0xe3069283u);
}

TEST(Crc32cTest, AgreesWithABitwiseCrcAndItsMask) {
  Rng rng(7);
  for (int n : {1, 3, 8, 64, 1000}) {
    std::string data(static_cast<size_t>(n), '\0');
    for (char& c : data) c = static_cast<char>(rng.Next() & 0xff);
    EXPECT_EQ(Crc32c(data), traind::testing::BitwiseCrc32c(data)) << n;
    EXPECT_EQ(MaskedCrc32c(data), traind::testing::MaskedBitwiseCrc32c(data)) << n;
  }
}

// Epoch `epoch`'s metrics, different for every epoch and `seed`.
EpochMetrics MetricsOf(int32_t epoch, double seed, bool validated = true) {
  EpochMetrics m;
  m.set_epoch(epoch);
  (*m.mutable_train())["loss"] = seed / epoch;
  (*m.mutable_train())["accuracy"] = 0.5 + 0.01 * epoch;
  if (validated) {
    (*m.mutable_val())["loss"] = 2 * seed / epoch;
    (*m.mutable_val())["accuracy"] = 0.4 + 0.01 * epoch;
    (*m.mutable_val())["f1_macro"] = 0.3 + 0.01 * epoch;
  }
  return m;
}

// The callback on `dir`, fed epochs [first, last] of MetricsOf(seed) at
// learning rate 0.1 / epoch; the warnings it gave.
std::vector<std::string> WriteEpochs(const std::string& dir, int32_t first, int32_t last,
                                     double seed) {
  std::vector<std::string> warnings;
  TensorBoardScalars tb(dir, [&](const absl::Status& s) { warnings.emplace_back(s.message()); });
  for (int32_t epoch = first; epoch <= last; ++epoch) {
    const EpochMetrics m = MetricsOf(epoch, seed, /*validated=*/epoch % 2 == 1);
    EpochEnd end;
    end.epoch = epoch;
    end.metrics = &m;
    end.learning_rate = 0.1 / epoch;
    EXPECT_TRUE(tb.OnEpochEnd(end).ok());
  }
  return warnings;
}

// The one event file in `dir`, read.
TfEventFile ReadRun(const std::string& dir) {
  const std::vector<std::string> files = EventFilesIn(dir);
  EXPECT_EQ(files.size(), 1u) << "one writer, one file per run directory";
  if (files.empty()) return {};
  return ParseTfEvents(ReadBytes(files.back()));
}

// Scalars by step: tag -> value.
using Steps = std::map<int64_t, std::map<std::string, float>>;

// Checks the file's shape (file_version first; then one scalar per event,
// no (step, tag) twice) and returns its scalars.
Steps ScalarsOf(const TfEventFile& file) {
  Steps steps;
  EXPECT_EQ(file.error, "");
  EXPECT_FALSE(file.events.empty());
  if (file.events.empty()) return steps;
  const TfEvent& first = file.events.front();
  EXPECT_TRUE(first.has_file_version);
  EXPECT_EQ(first.file_version, "brain.Event:2");
  EXPECT_FALSE(first.has_step);
  EXPECT_TRUE(first.values.empty());
  for (size_t i = 1; i < file.events.size(); ++i) {
    const TfEvent& e = file.events[i];
    EXPECT_FALSE(e.has_file_version);
    EXPECT_TRUE(e.has_step);
    EXPECT_EQ(e.values.size(), 1u);
    EXPECT_GT(e.wall_time, 1.5e9);  // seconds since 1970, not a duration
    EXPECT_GE(e.wall_time, first.wall_time);
    for (const auto& [tag, value] : e.values) {
      EXPECT_TRUE(steps[e.step].emplace(tag, value).second)
          << "step " << e.step << " " << tag << " twice";
    }
  }
  return steps;
}

// What epoch `epoch` of WriteEpochs(seed) should have left.
std::map<std::string, float> Expected(int32_t epoch, double seed) {
  const EpochMetrics m = MetricsOf(epoch, seed, epoch % 2 == 1);
  std::map<std::string, float> want;
  for (const auto& [k, v] : m.train()) want["train/" + k] = static_cast<float>(v);
  for (const auto& [k, v] : m.val()) want["val/" + k] = static_cast<float>(v);
  want["learning_rate"] = static_cast<float>(0.1 / epoch);
  return want;
}

TEST(TensorBoardTest, EveryEpochsMetricsAndLearningRateAtStepEpoch) {
  TempDir tmp;
  const std::string dir = tmp.Path("tensorboard/task-0");  // made with its parents
  EXPECT_TRUE(WriteEpochs(dir, 1, 4, 1.0).empty());
  const std::vector<std::string> files = EventFilesIn(dir);
  ASSERT_EQ(files.size(), 1u);
  EXPECT_THAT(files[0], ::testing::HasSubstr("/events.out.tfevents."));
  const TfEventFile file = ReadRun(dir);
  const Steps steps = ScalarsOf(file);
  ASSERT_EQ(steps.size(), 4u);
  for (int32_t epoch = 1; epoch <= 4; ++epoch) {
    ASSERT_TRUE(steps.count(epoch)) << epoch;
    EXPECT_EQ(steps.at(epoch), Expected(epoch, 1.0)) << "epoch " << epoch;
  }
  // Epochs without validation have no val/* scalars.
  EXPECT_EQ(steps.at(2).count("val/loss"), 0u);
  EXPECT_EQ(steps.at(1).size(), 6u);  // 2 train, 3 val, the learning rate
  // Written in order of steps.
  int64_t last = 0;
  for (size_t i = 1; i < file.events.size(); ++i) {
    EXPECT_GE(file.events[i].step, last);
    last = file.events[i].step;
  }
}

TEST(TensorBoardTest, ResumedAttemptKeepsEpochsUpToItsResumePointAndDropsATornTail) {
  TempDir tmp;
  const std::string dir = tmp.Path("task-1");
  ASSERT_TRUE(WriteEpochs(dir, 1, 5, 1.0).empty());
  const std::string path = EventFilesIn(dir).at(0);
  // A crash in the middle of a record: a torn tail.
  const std::string whole = ReadBytes(path);
  std::ofstream(path, std::ios::binary | std::ios::app) << whole.substr(whole.size() - 30, 20);
  ASSERT_NE(ParseTfEvents(ReadBytes(path)).error, "");

  // The next attempt resumes from the checkpoint of epoch 3: it trains
  // epochs 4.. again (with other values), continuing the same file.
  ASSERT_TRUE(WriteEpochs(dir, 4, 7, 2.0).empty());
  const Steps steps = ScalarsOf(ReadRun(dir));
  ASSERT_EQ(steps.size(), 7u);
  for (int32_t epoch = 1; epoch <= 3; ++epoch) EXPECT_EQ(steps.at(epoch), Expected(epoch, 1.0));
  for (int32_t epoch = 4; epoch <= 7; ++epoch) EXPECT_EQ(steps.at(epoch), Expected(epoch, 2.0));
}

TEST(TensorBoardTest, FreshAttemptStartsTheRunOver) {
  TempDir tmp;
  const std::string dir = tmp.Path("task-0");
  ASSERT_TRUE(WriteEpochs(dir, 1, 5, 1.0).empty());
  ASSERT_TRUE(WriteEpochs(dir, 1, 2, 3.0).empty());  // no checkpoint: from epoch 1
  const TfEventFile file = ReadRun(dir);
  const Steps steps = ScalarsOf(file);
  ASSERT_EQ(steps.size(), 2u);
  EXPECT_EQ(steps.at(1), Expected(1, 3.0));
  EXPECT_EQ(steps.at(2), Expected(2, 3.0));
}

TEST(TensorBoardTest, ACorruptRecordEndsWhatIsKept) {
  TempDir tmp;
  const std::string dir = tmp.Path("task-0");
  ASSERT_TRUE(WriteEpochs(dir, 1, 5, 1.0).empty());
  const std::string path = EventFilesIn(dir).at(0);
  // Flip a byte of the data of the first record of epoch 3.
  std::string bytes = ReadBytes(path);
  const TfEventFile before = ParseTfEvents(bytes);
  // Walk the framing to the record's offset.
  size_t offset = 0;
  for (const TfEvent& e : before.events) {
    if (e.has_step && e.step == 3) break;
    uint64_t n = 0;
    for (int i = 0; i < 8; ++i)
      n |= uint64_t{static_cast<unsigned char>(bytes[offset + i])} << (8 * i);
    offset += 12 + n + 4;
  }
  bytes[offset + 14] ^= 0x20;
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;

  ASSERT_TRUE(WriteEpochs(dir, 6, 6, 2.0).empty());  // resumes after epoch 5
  const Steps steps = ScalarsOf(ReadRun(dir));
  ASSERT_EQ(steps.size(), 3u);
  EXPECT_EQ(steps.at(1), Expected(1, 1.0));
  EXPECT_EQ(steps.at(2), Expected(2, 1.0));
  EXPECT_EQ(steps.at(6), Expected(6, 2.0));
}

TEST(TensorBoardTest, AFileWithoutItsFileVersionStartsOver) {
  TempDir tmp;
  const std::string dir = tmp.Path("task-0");
  ASSERT_EQ(mkdir(dir.c_str(), 0755), 0);
  tmp.Write("task-0/events.out.tfevents.1.host", "not a record at all");
  ASSERT_TRUE(WriteEpochs(dir, 3, 3, 1.0).empty());
  const Steps steps = ScalarsOf(ReadRun(dir));
  ASSERT_EQ(steps.size(), 1u);
  EXPECT_EQ(steps.at(3), Expected(3, 1.0));
}

TEST(TensorBoardTest, AFileThatCannotBeWrittenIsOneWarningAndTrainingGoesOn) {
  TempDir tmp;
  tmp.Write("file", "");
  const std::vector<std::string> warnings = WriteEpochs(tmp.Path("file/task-0"), 1, 3, 1.0);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_THAT(warnings[0], ::testing::HasSubstr("tensorboard: "));
  EXPECT_THAT(warnings[0], ::testing::HasSubstr("file/task-0"));
}

// Through Fit: every epoch's reported metrics and learning rate (reduced
// on plateau), and a run stopped and resumed from its checkpoint leaves
// one file with every epoch once.
TEST(TensorBoardTest, FitWritesEveryReportedEpochAndAResumedFitContinuesTheFile) {
  traind::v1::JobSpec spec;
  spec.set_seed(3);
  spec.mutable_data()->set_path(std::string(TRAIND_SOURCE_DIR) + "/examples/data/iris.csv");
  spec.mutable_data()->set_label("species");
  spec.mutable_data()->set_standardize(true);
  spec.mutable_cross_validation()->set_folds(5);
  auto* hidden = spec.mutable_model()->add_layers()->mutable_dense();
  hidden->set_units(8);
  hidden->set_activation(traind::v1::RELU);
  spec.mutable_model()->add_layers()->mutable_dense()->set_units(3);
  spec.mutable_optimizer()->mutable_adam()->set_learning_rate(0.05);
  auto* plateau = spec.mutable_optimizer()->mutable_schedule()->mutable_reduce_on_plateau();
  plateau->set_monitor("train.loss");
  plateau->set_patience(0);
  plateau->set_factor(0.5);
  spec.mutable_training()->set_epochs(10);
  spec.mutable_training()->set_batch_size(16);
  spec.mutable_training()->set_validate_every(2);
  spec.mutable_checkpoint()->set_every_epochs(1);
  const data::Dataset& iris = testing::Iris();
  const data::FoldRows rows = std::move(spec::RowsForTask(spec, iris, 1)).value();

  TempDir tmp;
  FitOptions options;
  options.checkpoint_dir = tmp.Path("checkpoints");
  options.tensorboard_dir = tmp.Path("tensorboard/task-1");
  testing::EpochRecorder first;
  first.stop_after_polls = 4 * 8 + 2;  // during epoch 5 (8 batches per epoch)
  ASSERT_FALSE(Fit(spec, iris, rows, 1, options, &first).ok());
  ASSERT_EQ(first.epochs.size(), 4u);
  testing::EpochRecorder second;
  ASSERT_TRUE(Fit(spec, iris, rows, 1, options, &second).ok());
  EXPECT_EQ(second.resumed_after, 4);
  EXPECT_TRUE(second.warnings.empty());

  std::vector<EpochMetrics> reported = first.epochs;
  reported.insert(reported.end(), second.epochs.begin(), second.epochs.end());
  ASSERT_EQ(reported.size(), 10u);
  const Steps steps = ScalarsOf(ReadRun(options.tensorboard_dir));
  ASSERT_EQ(steps.size(), 10u);
  float previous_lr = 0;
  for (const EpochMetrics& m : reported) {
    SCOPED_TRACE(::testing::Message() << "epoch " << m.epoch());
    ASSERT_TRUE(steps.count(m.epoch()));
    const std::map<std::string, float>& got = steps.at(m.epoch());
    EXPECT_EQ(got.size(), m.train_size() + m.val_size() + 1);
    for (const auto& [k, v] : m.train()) EXPECT_EQ(got.at("train/" + k), static_cast<float>(v));
    for (const auto& [k, v] : m.val()) EXPECT_EQ(got.at("val/" + k), static_cast<float>(v));
    ASSERT_TRUE(got.count("learning_rate"));
    const float lr = got.at("learning_rate");
    if (m.epoch() == 1) {
      EXPECT_EQ(lr, 0.05f);
    } else {
      EXPECT_LE(lr, previous_lr);
    }
    previous_lr = lr;
  }
  EXPECT_EQ(steps.at(1).count("val/loss"), 0u);  // validated every 2 epochs
  EXPECT_EQ(steps.at(2).count("val/loss"), 1u);
}

}  // namespace
}  // namespace traind::engine
