// traind-worker --predict, the command line traind's Predict RPC runs: a
// fold trained by `traind-worker --spec` and scored by another process
// reproduces its out-of-fold predictions; the output file is written whole;
// a failure is one stderr line and exit 1, a usage error exit 2.
#include <sys/wait.h>

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/temp_dir.h"

namespace traind {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// Runs `command` under sh in the source directory (the example specs' data
// paths are relative to it); its exit status, stdout and stderr.
int RunShell(const std::string& command, std::string* out, std::string* err) {
  const testing::TempDir dir("traind-predict-run");
  const std::string o = dir.Path("out"), e = dir.Path("err");
  const int status = std::system(
      absl::StrCat("cd '", TRAIND_SOURCE_DIR, "' && ", command, " >", o, " 2>", e).c_str());
  *out = ReadAll(o);
  *err = ReadAll(e);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

std::map<int64_t, std::vector<std::string>> RowsOf(const std::string& csv, std::string* header) {
  std::map<int64_t, std::vector<std::string>> rows;
  std::istringstream in(csv);
  std::string line;
  std::getline(in, line);
  *header = line;
  while (std::getline(in, line)) {
    std::vector<std::string> f = absl::StrSplit(line, ',');
    rows[std::stoll(f[0])] = f;
  }
  return rows;
}

class PredictCommandTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new testing::TempDir("traind-predict-cmd");
    std::string out, err;
    // Fold 1 of the iris example, in this process tree without a daemon.
    ASSERT_EQ(RunShell(absl::StrCat(TRAIND_WORKER_PATH, " --spec examples/iris-cv.yaml --fold 1",
                                    " --artifacts ", dir_->path()),
                       &out, &err),
              0)
        << err;
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  static std::string Model() { return dir_->Path("task-1/model.ckpt"); }

  static testing::TempDir* dir_;
};

testing::TempDir* PredictCommandTest::dir_ = nullptr;

TEST_F(PredictCommandTest, ReproducesTheFoldsOutOfFoldPredictions) {
  std::string out, err;
  ASSERT_EQ(
      RunShell(absl::StrCat(TRAIND_WORKER_PATH, " --predict ", Model(), " examples/data/iris.csv"),
               &out, &err),
      0)
      << err;
  EXPECT_EQ(err, "");
  std::string header, want_header;
  const auto got = RowsOf(out, &header);
  const auto want = RowsOf(ReadAll(dir_->Path("task-1/predictions.csv")), &want_header);
  // The scored file holds the label column: its value comes along as the
  // true target; the task's file also says which fold scored the row.
  EXPECT_EQ(header, "row,true_species,label,p_setosa,p_versicolor,p_virginica");
  EXPECT_EQ(want_header, "row,fold,true_species,label,p_setosa,p_versicolor,p_virginica");
  EXPECT_EQ(got.size(), 150u);
  EXPECT_EQ(want.size(), 30u);
  for (const auto& [row, fields] : want) {
    ASSERT_TRUE(got.count(row)) << row;
    const std::vector<std::string>& g = got.at(row);
    ASSERT_EQ(g.size(), 6u);
    ASSERT_EQ(fields.size(), 7u);
    EXPECT_EQ(fields[1], "1") << "row " << row;
    for (size_t c = 1; c < 6; ++c) {
      if (c < 3) {
        EXPECT_EQ(g[c], fields[c + 1]) << "row " << row;  // true_species, label
      } else {
        EXPECT_NEAR(std::stod(g[c]), std::stod(fields[c + 1]), 1e-5) << "row " << row;
      }
    }
  }

  // --data and --out: the same predictions, in a file.
  const std::string file = dir_->Path("out.csv");
  ASSERT_EQ(RunShell(absl::StrCat(TRAIND_WORKER_PATH, " --predict ", Model(),
                                  " --data examples/data/iris.csv --out ", file),
                     &out, &err),
            0)
      << err;
  EXPECT_EQ(out, "");
  std::string file_header;
  EXPECT_EQ(RowsOf(ReadAll(file), &file_header), got);

  // The ensemble of a model with itself is that model.
  ASSERT_EQ(RunShell(absl::StrCat(TRAIND_WORKER_PATH, " --predict ", Model(), " --predict ",
                                  Model(), " examples/data/iris.csv"),
                     &out, &err),
            0)
      << err;
  EXPECT_EQ(RowsOf(out, &header), got);
}

TEST_F(PredictCommandTest, AFailureIsOneLineOnStderrAndLeavesTheOutputAlone) {
  const std::string data = dir_->Write("bad.csv",
                                       "sepal_length,sepal_width,petal_length,petal_width\n"
                                       "5.1,3.5,1.4,0.2\n4.9,three,1.4,0.2\n");
  const std::string file = dir_->Write("kept.csv", "earlier output\n");
  std::string out, err;
  EXPECT_EQ(RunShell(absl::StrCat(TRAIND_WORKER_PATH, " --predict ", Model(), " --data ", data,
                                  " --out ", file),
                     &out, &err),
            1);
  EXPECT_EQ(err,
            absl::StrCat("traind-worker: error: ", data,
                         ":3: column \"sepal_width\" (column 2): \"three\" is not a number\n"));
  EXPECT_EQ(ReadAll(file), "earlier output\n");

  const std::string no_column = dir_->Write("cols.csv", "sepal_length,petal_length\n1,2\n");
  EXPECT_EQ(RunShell(absl::StrCat(TRAIND_WORKER_PATH, " --predict ", Model(), " ", no_column), &out,
                     &err),
            1);
  EXPECT_THAT(err, StartsWith("traind-worker: error: " + no_column + ": column \""));
  EXPECT_THAT(err, HasSubstr("not found; columns: sepal_length, petal_length"));
  EXPECT_EQ(err.find('\n'), err.size() - 1) << err;

  // A training checkpoint is not a model.
  const std::string not_model = dir_->Write("epoch.ckpt", "not a checkpoint at all");
  EXPECT_EQ(RunShell(absl::StrCat(TRAIND_WORKER_PATH, " --predict ", not_model,
                                  " examples/data/iris.csv"),
                     &out, &err),
            1);
  EXPECT_THAT(err, StartsWith("traind-worker: error: " + not_model + ": "));
  EXPECT_EQ(out, "");
}

TEST_F(PredictCommandTest, UsageErrorsExitTwo) {
  std::string out, err;
  EXPECT_EQ(RunShell(absl::StrCat(TRAIND_WORKER_PATH, " --predict ", Model()), &out, &err), 2);
  EXPECT_THAT(err, HasSubstr("--predict MODEL.ckpt and --data FILE.csv go together"));
  EXPECT_EQ(
      RunShell(absl::StrCat(TRAIND_WORKER_PATH, " --data examples/data/iris.csv"), &out, &err), 2);
  EXPECT_EQ(RunShell(absl::StrCat(TRAIND_WORKER_PATH, " --predict ", Model(),
                                  " --spec examples/iris-cv.yaml examples/data/iris.csv"),
                     &out, &err),
            2);
  EXPECT_EQ(RunShell(absl::StrCat(TRAIND_WORKER_PATH, " --predict ", Model(),
                                  " --data examples/data/iris.csv examples/data/iris.csv"),
                     &out, &err),
            2);
  EXPECT_THAT(err, HasSubstr("two CSV files to score"));
  EXPECT_EQ(
      RunShell(absl::StrCat(TRAIND_WORKER_PATH, " --predict ", Model(), " --no-such-flag x.csv"),
               &out, &err),
      2);
}

}  // namespace
}  // namespace traind
