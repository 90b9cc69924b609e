// The task's files: periodic checkpoints listed and pruned, atomic text
// files, predictions.csv, and errors as statuses.
#include "worker/engine/fit/artifacts.h"

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace traind::engine {
namespace {

namespace fs = std::filesystem;

class ScratchDir {
 public:
  ScratchDir() {
    std::string pattern = (fs::temp_directory_path() / "traind_artifacts_XXXXXX").string();
    if (mkdtemp(pattern.data()) != nullptr) path_ = pattern;
  }
  ~ScratchDir() {
    std::error_code ignored;
    if (!path_.empty()) fs::remove_all(path_, ignored);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(FitArtifactsTest, PeriodicCheckpointsNewestFirstAndPruned) {
  ScratchDir dir;
  ASSERT_FALSE(dir.path().empty());
  const std::string ckpts = dir.path() + "/a/checkpoints";
  ASSERT_TRUE(MakeDirs(ckpts).ok());
  ASSERT_TRUE(MakeDirs(ckpts).ok());  // exists: fine
  for (int epoch : {3, 1, 12, 2}) {
    ASSERT_TRUE(WriteTextFile(PeriodicCheckpointPath(ckpts, epoch), "x").ok());
  }
  for (const char* other : {"best.ckpt", "epoch-1.ckpt", "epoch-000004.ckpt.tmp.9", "notes"}) {
    ASSERT_TRUE(WriteTextFile(ckpts + "/" + other, "y").ok());
  }
  EXPECT_EQ(PeriodicCheckpointPath(ckpts, 12), ckpts + "/epoch-000012.ckpt");
  const auto files = PeriodicCheckpoints(ckpts);
  std::vector<int32_t> epochs;
  for (const auto& [epoch, path] : files) epochs.push_back(epoch);
  EXPECT_THAT(epochs, ::testing::ElementsAre(12, 3, 2, 1));
  EXPECT_EQ(files[0].second, ckpts + "/epoch-000012.ckpt");
  ASSERT_TRUE(PrunePeriodicCheckpoints(ckpts, 2).ok());
  epochs.clear();
  for (const auto& [epoch, path] : PeriodicCheckpoints(ckpts)) epochs.push_back(epoch);
  EXPECT_THAT(epochs, ::testing::ElementsAre(12, 3));
  EXPECT_TRUE(fs::exists(BestCheckpointPath(ckpts)));
  EXPECT_TRUE(PeriodicCheckpoints(dir.path() + "/missing").empty());
}

TEST(FitArtifactsTest, ErrorsAreStatusesNamingThePath) {
  ScratchDir dir;
  ASSERT_FALSE(dir.path().empty());
  const std::string file = dir.path() + "/file";
  ASSERT_TRUE(WriteTextFile(file, "text").ok());
  EXPECT_EQ(ReadAll(file), "text");
  absl::Status s = MakeDirs(file + "/sub");
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(std::string(s.message()), ::testing::HasSubstr(file + "/sub: cannot create"));
  s = WriteTextFile(dir.path() + "/none/x.csv", "text");
  EXPECT_THAT(std::string(s.message()), ::testing::HasSubstr("/none/x.csv: cannot write"));
}

TEST(FitArtifactsTest, PredictionsCsvColumnsByTarget) {
  data::Dataset classes;
  classes.target = data::TargetKind::kClasses;
  classes.classes = {"a", "b,c"};
  const float pred[4] = {0.25f, 0.75f, 1.0f, 0.0f};
  EXPECT_EQ(PredictionsCsv(classes, 2, {4, 9}, pred),
            "row,label,p_a,\"p_b,c\"\n4,\"b,c\",0.25,0.75\n9,a,1,0\n");
  // Ties: the first class.
  const float tie[3] = {0.4f, 0.4f, 0.2f};
  classes.classes = {"x", "y", "z"};
  EXPECT_EQ(PredictionsCsv(classes, 3, {0}, tie),
            "row,label,p_x,p_y,p_z\n0,x,0.400000006,0.400000006,0.200000003\n");
  data::Dataset regression;
  regression.target = data::TargetKind::kRegression;
  EXPECT_EQ(PredictionsCsv(regression, 1, {0}, pred), "row,prediction\n0,0.25\n");
  regression.target_names = {"a", "b"};
  EXPECT_EQ(PredictionsCsv(regression, 2, {3}, pred), "row,a,b\n3,0.25,0.75\n");
  data::Dataset binary;
  binary.target = data::TargetKind::kBinary;
  binary.classes = {"no", "yes"};
  EXPECT_EQ(PredictionsCsv(binary, 1, {}, pred), "row,label,p_yes\n");
  // p >= 0.5: the positive class.
  const float p[3] = {0.5f, 0.49f, 0.9f};
  EXPECT_EQ(PredictionsCsv(binary, 1, {0, 1, 2}, p),
            "row,label,p_yes\n0,no,0.5\n1,no,0.49000001\n2,yes,0.899999976\n");
  data::Dataset multi;
  multi.target = data::TargetKind::kMultiLabel;
  multi.target_names = {"l1", "l2"};
  EXPECT_EQ(PredictionsCsv(multi, 2, {7}, pred), "row,p_l1,p_l2\n7,0.25,0.75\n");
}

}  // namespace
}  // namespace traind::engine
