// The model file: every field round-trips, the container's checks (checksum,
// truncation) name the file, and a training checkpoint is not a model.
#include "worker/engine/model_file.h"

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "base/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/temp_dir.h"
#include "worker/engine/checkpoint.h"

namespace traind::engine {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

void WriteAll(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

// A model with every field set, names that a newline-joined list would
// break (a quoted CSV header may hold any of these).
TrainedModel SampleModel() {
  TrainedModel m;
  m.spec.set_name("sample");
  m.spec.mutable_data()->set_path("/data/x.csv");
  m.spec.mutable_data()->set_label("kind");
  m.spec.mutable_data()->add_categorical("color\nname");
  m.spec.mutable_model()->add_layers()->mutable_dense()->set_units(3);
  m.spec.mutable_loss()->mutable_softmax_cross_entropy();
  m.task = 4;
  m.epoch = 17;
  m.feature_names = {"a", "b,c", "line\nbreak", ""};
  m.impute = {1.5, -2, 0, 3};
  m.offset = {0.25, 1, 2, 3};
  m.scale = {2, 0.5, 1, 4};
  m.categorical = {{"color\nname", {"blue", "", "red\r\n"}}, {"empty", {}}};
  m.target = data::TargetKind::kClasses;
  m.classes = {"x\ny", "z", "\"q\""};
  m.target_names = {"kind"};
  m.state = {{"layers[0].weight", {7, 3}, std::vector<float>(21, 0.5f)},
             {"layers[0].bias", {3}, {1.0f, -2.0f, 3.5f}}};
  m.state[0].values[20] = -7.25f;
  return m;
}

TEST(ModelFileTest, EveryFieldRoundTrips) {
  const traind::testing::TempDir dir("traind-model");
  const std::string path = dir.Path("model.ckpt");
  const TrainedModel m = SampleModel();
  ASSERT_TRUE(WriteModelFile(m, path).ok());
  absl::StatusOr<TrainedModel> back = ReadModelFile(path);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->spec.SerializeAsString(), m.spec.SerializeAsString());
  EXPECT_EQ(back->task, 4);
  EXPECT_EQ(back->epoch, 17);
  EXPECT_EQ(back->feature_names, m.feature_names);
  EXPECT_EQ(back->impute, m.impute);
  EXPECT_EQ(back->offset, m.offset);
  EXPECT_EQ(back->scale, m.scale);
  ASSERT_EQ(back->categorical.size(), 2u);
  EXPECT_EQ(back->categorical[0].name, "color\nname");
  EXPECT_THAT(back->categorical[0].categories, ElementsAre("blue", "", "red\r\n"));
  EXPECT_EQ(back->categorical[1].name, "empty");
  EXPECT_TRUE(back->categorical[1].categories.empty());
  EXPECT_EQ(back->target, data::TargetKind::kClasses);
  EXPECT_EQ(back->classes, m.classes);
  EXPECT_EQ(back->target_names, m.target_names);
  ASSERT_EQ(back->state.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(back->state[i].name, m.state[i].name);
    EXPECT_EQ(back->state[i].shape, m.state[i].shape);
    EXPECT_EQ(back->state[i].values, m.state[i].values);
  }
  // Only "model.*" records, and the version first among them.
  absl::StatusOr<CheckpointReader> raw = CheckpointReader::ReadFile(path);
  ASSERT_TRUE(raw.ok());
  EXPECT_EQ(*raw->GetInt64s("model.format_version"), std::vector<int64_t>{kModelFormatVersion});
  EXPECT_EQ(*raw->GetString("model.target"), "classes");
  EXPECT_TRUE(raw->Has("model.state.layers[0].weight.values"));
  EXPECT_FALSE(raw->Has("meta.spec"));
}

TEST(ModelFileTest, InputWidthAndOutputs) {
  TrainedModel m = SampleModel();
  EXPECT_EQ(m.InputWidth(), 4 + 3 + 0);
  EXPECT_EQ(m.Outputs(), 3);
  m.target = data::TargetKind::kBinary;
  EXPECT_EQ(m.Outputs(), 1);
  m.target = data::TargetKind::kRegression;
  m.target_names = {"y1", "y2"};
  EXPECT_EQ(m.Outputs(), 2);
  TrainedModel empty;
  EXPECT_EQ(empty.InputWidth(), 0);
}

TEST(ModelFileTest, ACorruptByteIsAChecksumErrorNamingTheFile) {
  const traind::testing::TempDir dir("traind-model");
  const std::string path = dir.Path("model.ckpt");
  ASSERT_TRUE(WriteModelFile(SampleModel(), path).ok());
  std::string bytes = ReadAll(path);
  bytes[bytes.size() / 2] ^= 0x10;
  WriteAll(path, bytes);
  absl::StatusOr<TrainedModel> m = ReadModelFile(path);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(FailureKindOf(m.status()), FailureKind::kDataError);
  EXPECT_EQ(m.status().message(), path + ": checksum mismatch (file corrupt)");
}

TEST(ModelFileTest, ATruncatedFileIsRefused) {
  const traind::testing::TempDir dir("traind-model");
  const std::string path = dir.Path("model.ckpt");
  ASSERT_TRUE(WriteModelFile(SampleModel(), path).ok());
  const std::string bytes = ReadAll(path);
  WriteAll(path, bytes.substr(0, bytes.size() - 5));
  absl::StatusOr<TrainedModel> m = ReadModelFile(path);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(FailureKindOf(m.status()), FailureKind::kDataError);
  EXPECT_THAT(m.status().message(), HasSubstr(path + ": truncated"));
  WriteAll(path, "");
  m = ReadModelFile(path);
  EXPECT_THAT(m.status().message(), HasSubstr(path + ": not a traind checkpoint"));
  m = ReadModelFile(dir.Path("missing.ckpt"));
  EXPECT_THAT(m.status().message(), HasSubstr(dir.Path("missing.ckpt") + ": cannot open"));
}

TEST(ModelFileTest, ATrainingCheckpointIsNotAModel) {
  const traind::testing::TempDir dir("traind-model");
  const std::string path = dir.Path("epoch-000003.ckpt");
  CheckpointWriter w;
  StateWriter meta(&w, "meta");
  meta.PutString("spec", SampleModel().spec.SerializeAsString());
  StateWriter loop(&w, "loop");
  loop.PutInt("epoch", 3);
  ASSERT_TRUE(w.WriteFile(path).ok());
  absl::StatusOr<TrainedModel> m = ReadModelFile(path);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(FailureKindOf(m.status()), FailureKind::kDataError);
  EXPECT_THAT(m.status().message(), HasSubstr(path + ": a training checkpoint"));
  EXPECT_THAT(m.status().message(), HasSubstr("not a model"));
  // Another traind file without model records.
  CheckpointWriter other;
  other.PutString("x", "y");
  ASSERT_TRUE(other.WriteFile(path).ok());
  EXPECT_THAT(ReadModelFile(path).status().message(),
              HasSubstr(path + ": not a traind model (no model.format_version record)"));
}

// A record missing, mis-sized or from a newer format: DataError naming the
// file and the record, never a half-read model.
TEST(ModelFileTest, BadRecordsAreNamed) {
  const traind::testing::TempDir dir("traind-model");
  const std::string path = dir.Path("model.ckpt");
  auto write = [&](const TrainedModel& m, auto edit) {
    ASSERT_TRUE(WriteModelFile(m, path).ok());
    absl::StatusOr<CheckpointReader> r = CheckpointReader::ReadFile(path);
    ASSERT_TRUE(r.ok());
    // Rewrite every record but the edited ones.
    CheckpointWriter w;
    edit(&w);
    for (const char* key :
         {"model.spec", "model.task", "model.epoch", "model.features", "model.impute",
          "model.offset", "model.scale", "model.target", "model.classes", "model.target_names",
          "model.categorical.count", "model.state.names", "model.format_version"}) {
      if (w.Serialize().find(key) != std::string::npos) continue;
      if (absl::StatusOr<std::string> s = r->GetString(key); s.ok()) {
        w.PutString(key, *s);
      } else if (absl::StatusOr<std::vector<int64_t>> i = r->GetInt64s(key); i.ok()) {
        w.PutInt64s(key, *i);
      } else if (absl::StatusOr<std::vector<double>> d = r->GetDoubles(key); d.ok()) {
        w.PutDoubles(key, *d);
      }
    }
    ASSERT_TRUE(w.WriteFile(path).ok());
  };
  TrainedModel m = SampleModel();
  m.categorical.clear();
  m.state.clear();
  write(m, [](CheckpointWriter* w) { w->PutInt64s("model.format_version", {2}); });
  EXPECT_THAT(ReadModelFile(path).status().message(),
              HasSubstr(path + ": model format version 2 (this traind reads version 1)"));
  write(m, [](CheckpointWriter* w) { w->PutDoubles("model.scale", {1.0}); });
  EXPECT_THAT(ReadModelFile(path).status().message(),
              HasSubstr(path + ": record \"model.scale\" holds 1 values, expected 4"));
  write(m, [](CheckpointWriter* w) { w->PutString("model.features", "\x05"); });
  EXPECT_THAT(ReadModelFile(path).status().message(),
              HasSubstr(path + ": record \"model.features\" is not a list of strings"));
  write(m, [](CheckpointWriter* w) { w->PutString("model.target", "regression"); });
  EXPECT_THAT(ReadModelFile(path).status().message(),
              HasSubstr("disagrees with the loss of its spec"));
  // The state's values without their shape's count.
  write(m, [](CheckpointWriter* w) {
    w->PutString("model.state.names", std::string("\x01\x00\x00\x00w", 5));
    w->PutInt64s("model.state.w.shape", {2, 2});
    const float v[3] = {1, 2, 3};
    w->PutFloats("model.state.w.values", v, 3);
  });
  absl::StatusOr<TrainedModel> bad = ReadModelFile(path);
  EXPECT_THAT(bad.status().message(),
              HasSubstr(path + ": record \"model.state.w.values\" holds 3 values, expected 4"));
  EXPECT_EQ(FailureKindOf(bad.status()), FailureKind::kDataError);
  // A missing record.
  ASSERT_TRUE(WriteModelFile(m, path).ok());
  CheckpointWriter w;
  w.PutInt64s("model.format_version", {1});
  ASSERT_TRUE(w.WriteFile(path).ok());
  bad = ReadModelFile(path);
  EXPECT_EQ(FailureKindOf(bad.status()), FailureKind::kDataError);
  EXPECT_THAT(bad.status().message(), HasSubstr(path + ": no record \"model.spec\""));
}

TEST(ModelFileTest, WriteRefusesInconsistentSizes) {
  const traind::testing::TempDir dir("traind-model");
  TrainedModel m = SampleModel();
  m.scale.pop_back();
  EXPECT_EQ(WriteModelFile(m, dir.Path("m.ckpt")).code(), absl::StatusCode::kInvalidArgument);
  m = SampleModel();
  m.state[1].shape = {4};
  EXPECT_EQ(WriteModelFile(m, dir.Path("m.ckpt")).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace traind::engine
