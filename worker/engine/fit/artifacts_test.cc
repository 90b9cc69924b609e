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

// PredictionsCsv with the columns of `data`'s target, no lead columns.
std::string Csv(const data::Dataset& data, int64_t outputs, absl::Span<const int64_t> rows,
                const float* pred) {
  PredictionColumns columns;
  columns.target = data.target;
  columns.classes = data.classes;
  columns.target_names = data.target_names;
  return PredictionsCsv(columns, outputs, rows, pred);
}

TEST(FitArtifactsTest, PredictionsCsvColumnsByTarget) {
  data::Dataset classes;
  classes.target = data::TargetKind::kClasses;
  classes.classes = {"a", "b,c"};
  const float pred[4] = {0.25f, 0.75f, 1.0f, 0.0f};
  EXPECT_EQ(Csv(classes, 2, {4, 9}, pred),
            "row,label,p_a,\"p_b,c\"\n4,\"b,c\",0.25,0.75\n9,a,1,0\n");
  // Ties: the first class.
  const float tie[3] = {0.4f, 0.4f, 0.2f};
  classes.classes = {"x", "y", "z"};
  EXPECT_EQ(Csv(classes, 3, {0}, tie),
            "row,label,p_x,p_y,p_z\n0,x,0.400000006,0.400000006,0.200000003\n");
  data::Dataset regression;
  regression.target = data::TargetKind::kRegression;
  EXPECT_EQ(Csv(regression, 1, {0}, pred), "row,prediction\n0,0.25\n");
  regression.target_names = {"a", "b"};
  EXPECT_EQ(Csv(regression, 2, {3}, pred), "row,a,b\n3,0.25,0.75\n");
  data::Dataset binary;
  binary.target = data::TargetKind::kBinary;
  binary.classes = {"no", "yes"};
  EXPECT_EQ(Csv(binary, 1, {}, pred), "row,label,p_yes\n");
  // p >= 0.5: the positive class.
  const float p[3] = {0.5f, 0.49f, 0.9f};
  EXPECT_EQ(Csv(binary, 1, {0, 1, 2}, p),
            "row,label,p_yes\n0,no,0.5\n1,no,0.49000001\n2,yes,0.899999976\n");
  data::Dataset multi;
  multi.target = data::TargetKind::kMultiLabel;
  multi.target_names = {"l1", "l2"};
  EXPECT_EQ(Csv(multi, 2, {7}, pred), "row,p_l1,p_l2\n7,0.25,0.75\n");
}

// Lead columns go between row and the predictions, each cell quoted as
// RFC 4180 says.
TEST(FitArtifactsTest, PredictionsCsvLeadColumns) {
  const std::vector<std::string> classes = {"a", "b"};
  PredictionColumns columns;
  columns.classes = classes;
  LeadColumns lead;
  lead.names = {"id", "note\"s"};
  lead.cells = {"x-1", "say \"hi\", then go", "x-2", ""};
  const float pred[4] = {0.25f, 0.75f, 1.0f, 0.0f};
  EXPECT_EQ(PredictionsCsv(columns, 2, {3, 8}, pred, lead),
            "row,id,\"note\"\"s\",label,p_a,p_b\n"
            "3,x-1,\"say \"\"hi\"\", then go\",b,0.25,0.75\n"
            "8,x-2,,a,1,0\n");
}

// A task's validation rows carry the ids, the fold (and the repeat of
// repeated folds: task 4 of 3 folds × 2 repeats is fold 1 of repeat 1), and
// the true target by name.
TEST(FitArtifactsTest, ValidationLeadColumnsOfATask) {
  traind::v1::JobSpec spec;
  spec.mutable_cross_validation()->set_folds(3);
  spec.mutable_cross_validation()->set_repeats(2);
  data::Dataset d;
  d.rows = 4;
  d.target = data::TargetKind::kClasses;
  d.classes = {"cat", "dog"};
  d.target_names = {"animal"};
  d.y = {1, 0, 0, 1};
  d.id_names = {"id", "city"};
  d.ids = {"r0", "Oslo", "r1", "Rome", "r2", "", "r3", "Lima"};
  const float pred[4] = {0.9f, 0.1f, 0.2f, 0.8f};
  EXPECT_EQ(ValidationPredictionsCsv(spec, d, 4, 2, {1, 3}, pred),
            "row,id,city,fold,repeat,true_animal,label,p_cat,p_dog\n"
            "1,r1,Rome,1,1,cat,cat,0.899999976,0.100000001\n"
            "3,r3,Lima,1,1,dog,dog,0.200000003,0.800000012\n");
  // One repeat: no repeat column.
  spec.mutable_cross_validation()->set_repeats(1);
  const LeadColumns lead = ValidationLeadColumns(spec, d, 2, {0});
  EXPECT_THAT(lead.names, ::testing::ElementsAre("id", "city", "fold", "true_animal"));
  EXPECT_THAT(lead.cells, ::testing::ElementsAre("r0", "Oslo", "2", "dog"));

  // Targets of several columns: one true_ column each; an image folder's
  // rows carry their file.
  data::Dataset r;
  r.rows = 2;
  r.target = data::TargetKind::kRegression;
  r.outputs = 2;
  r.target_names = {"a", "b"};
  r.targets = {1.5f, -2.0f, 0.1f, 3.0f};
  r.row_names = {"x/1.png", "y/2.png"};
  const LeadColumns regression = ValidationLeadColumns(spec, r, 0, {1});
  EXPECT_THAT(regression.names, ::testing::ElementsAre("file", "fold", "true_a", "true_b"));
  EXPECT_THAT(regression.cells, ::testing::ElementsAre("y/2.png", "0", "0.100000001", "3"));
  // Images' class labels have no column name.
  data::Dataset images;
  images.rows = 1;
  images.classes = {"0", "1"};
  images.y = {1};
  EXPECT_THAT(ValidationLeadColumns(traind::v1::JobSpec(), images, 0, {0}).names,
              ::testing::ElementsAre("fold", "true_label"));
}

}  // namespace
}  // namespace traind::engine
