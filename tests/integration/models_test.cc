// Models leave traind, as a remote team uses it: over TCP with a bearer
// token, a CV job with refit per example kind (multi-class with batch norm,
// binary with pos_weight, multi-label, regression with a categorical column
// and imputed cells) trained on part of its data; trainctl lists and
// downloads its artifacts, predicts the held-out rows (uploaded), and ONNX
// Runtime (tests/onnx/run_onnx.mjs) running the downloaded model.onnx gives
// the same labels and numbers within 1e-5; then trainctl deletes the job.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "server/core/auth.h"
#include "spec/loader.h"
#include "tests/integration/testing/traind_process.h"
#include "tests/testing/temp_dir.h"

namespace traind::testing {
namespace {

namespace fs = std::filesystem;
using traind::v1::Job;

constexpr char kToken[] = "model-user-token-0123456789abcdef";

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// CSV lines (LF or CRLF) split on commas (the example data and the outputs compared here
// quote nothing).
std::vector<std::vector<std::string>> Lines(const std::string& text) {
  std::vector<std::vector<std::string>> rows;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    absl::ConsumeSuffix(&line, "\r");  // digits.csv ends its lines with CRLF
    rows.push_back(absl::StrSplit(line, ','));
  }
  return rows;
}

// A CSV's columns by header name.
std::map<std::string, std::vector<std::string>> Columns(const std::string& text) {
  const std::vector<std::vector<std::string>> rows = Lines(text);
  std::map<std::string, std::vector<std::string>> columns;
  if (rows.empty()) return columns;
  for (size_t r = 1; r < rows.size(); ++r) {
    for (size_t c = 0; c < rows[0].size() && c < rows[r].size(); ++c) {
      columns[rows[0][c]].push_back(rows[r][c]);
    }
  }
  return columns;
}

bool RequireOnnxRuntime() {
  const char* v = std::getenv("TRAIND_REQUIRE_ONNXRUNTIME");
  return v != nullptr && v[0] != '\0' && std::string(v) != "0";
}

struct Kind {
  const char* example;                // examples/<example>.yaml
  std::vector<std::string> drop;      // label columns, left out of the held-out file
  std::vector<std::string> expected;  // columns trainctl predict prints
};

class ModelsTest : public ::testing::TestWithParam<Kind> {
 protected:
  void SetUp() override {
    const std::string tokens = dir_.Write(
        "tokens.yaml", absl::StrCat("tokens:\n  - {name: remote, role: submitter, sha256: ",
                                    traind::server::Sha256Hex(kToken), "}\n"));
    daemon_ = std::make_unique<TraindProcess>(
        dir_.path() + "/state",
        std::vector<std::string>{"--cpu-slots=2", "--listen=127.0.0.1:0", "--tokens-file=" + tokens,
                                 "--data-root=" + dir_.path()});
    ASSERT_TRUE(daemon_->Start()) << daemon_->Log();
    traind::v1::ServerInfo info;
    auto ctx = Ctx();
    ASSERT_TRUE(
        daemon_->stub()->GetServerInfo(ctx.get(), traind::v1::GetServerInfoRequest(), &info).ok());
    for (const std::string& a : info.listen_addresses()) {
      if (!absl::StartsWith(a, "unix:")) tcp_ = a;
    }
    ASSERT_FALSE(tcp_.empty()) << info.DebugString();
  }
  void TearDown() override {
    if (HasFailure()) std::cerr << "--- traind log ---\n" << daemon_->Log();
    daemon_->Stop();
  }

  // trainctl over TCP with the token (from a file, as a user keeps it).
  int Trainctl(const std::string& args, std::string* out) {
    const std::string token_file = dir_.Write("token", std::string(kToken) + "\n");
    return RunCommand(absl::StrCat(BinDir(), "/trainctl --address ", tcp_, " --token-file ",
                                   token_file, " ", args),
                      out);
  }

  TempDir dir_;
  std::unique_ptr<TraindProcess> daemon_;
  std::string tcp_;
};

TEST_P(ModelsTest, TrainListDownloadPredictRunInOnnxRuntimeAndDelete) {
  const Kind& kind = GetParam();
  const std::string ort_dir = SourceDir() + "/tests/onnx";
  const bool have_ort = fs::exists(ort_dir + "/node_modules/onnxruntime-node/package.json") &&
                        std::system("command -v node >/dev/null 2>&1") == 0;
  if (!have_ort && RequireOnnxRuntime()) FAIL() << "onnxruntime-node is not installed";

  // The example's data: its first 40 rows held out (without the labels),
  // the rest to train on; regression gets missing cells in both.
  absl::StatusOr<traind::v1::JobSpec> loaded =
      spec::LoadJobSpecFile(SourceDir() + "/examples/" + kind.example + ".yaml");
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  traind::v1::JobSpec spec = *loaded;
  std::vector<std::vector<std::string>> rows =
      Lines(ReadAll(SourceDir() + "/" + spec.data().path()));
  ASSERT_GT(rows.size(), 100u);
  const std::vector<std::string> header = rows[0];
  if (std::string(kind.example) == "diabetes-regression") {
    for (size_t r = 1; r < rows.size(); r += 6) rows[r][r % 4 == 1 ? 2 : 0] = "";  // bmi, age
    for (size_t r = 3; r < rows.size(); r += 11) rows[r][1] = "NA";                // sex
  }
  std::vector<size_t> kept;
  for (size_t c = 0; c < header.size(); ++c) {
    if (std::find(kind.drop.begin(), kind.drop.end(), header[c]) == kind.drop.end()) {
      kept.push_back(c);
    }
  }
  std::string train = absl::StrJoin(header, ",") + "\n", heldout;
  for (size_t c : kept) absl::StrAppend(&heldout, heldout.empty() ? "" : ",", header[c]);
  heldout += "\n";
  for (size_t r = 1; r < rows.size(); ++r) {
    if (r <= 40) {
      std::vector<std::string> cells;
      for (size_t c : kept) cells.push_back(rows[r][c]);
      absl::StrAppend(&heldout, absl::StrJoin(cells, ","), "\n");
    } else {
      absl::StrAppend(&train, absl::StrJoin(rows[r], ","), "\n");
    }
  }
  spec.mutable_data()->set_path(dir_.Write("train.csv", train));
  const std::string heldout_path = dir_.Write("heldout.csv", heldout);
  spec.mutable_cross_validation()->set_folds(2);
  spec.mutable_cross_validation()->set_repeats(1);
  spec.mutable_cross_validation()->set_refit(true);
  spec.mutable_training()->set_epochs(4);
  std::string json;
  ASSERT_TRUE(google::protobuf::util::MessageToJsonString(spec, &json).ok());
  const std::string spec_path = dir_.Write("spec.json", json);

  // Train: submit and watch until it ends.
  std::string out;
  ASSERT_EQ(Trainctl("submit " + spec_path + " --watch 2>&1", &out), 0) << out;
  traind::v1::ListJobsResponse jobs;
  {
    auto ctx = Ctx();
    ASSERT_TRUE(daemon_->stub()->ListJobs(ctx.get(), traind::v1::ListJobsRequest(), &jobs).ok());
  }
  ASSERT_EQ(jobs.jobs_size(), 1);
  const std::string job = jobs.jobs(0).id();
  ASSERT_EQ(GetJob(daemon_->stub(), job).state(), Job::SUCCEEDED);

  // List: the refit model in both forms, the merged predictions.
  ASSERT_EQ(Trainctl("artifacts " + job + " 2>&1", &out), 0) << out;
  for (const char* name : {"model.onnx", "model.ckpt", "predictions.csv", "task-2/model.onnx",
                           "task-0/model.ckpt", "task-1/predictions.csv"}) {
    EXPECT_TRUE(absl::StrContains(out, name)) << name << " not in\n" << out;
  }

  // Download the ONNX model; predict the held-out rows with traind.
  const std::string onnx = dir_.Path("downloaded.onnx"), predicted = dir_.Path("predicted.csv");
  ASSERT_EQ(Trainctl(absl::StrCat("download ", job, " model.onnx -O ", onnx, " 2>&1"), &out), 0)
      << out;
  ASSERT_EQ(
      Trainctl(absl::StrCat("predict ", job, " ", heldout_path, " -O ", predicted, " 2>&1"), &out),
      0)
      << out;
  const std::map<std::string, std::vector<std::string>> traind_columns =
      Columns(ReadAll(predicted));
  std::vector<std::string> names;
  for (const auto& [name, values] : traind_columns) {
    names.push_back(name);
    EXPECT_EQ(values.size(), 40u) << name;
  }
  std::vector<std::string> expected = kind.expected;
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(names, expected);
  if (traind_columns.count("label")) {
    // The original class names.
    const size_t label_column =
        std::find(header.begin(), header.end(), kind.drop[0]) - header.begin();
    ASSERT_LT(label_column, header.size()) << kind.drop[0];
    std::set<std::string> classes;
    for (size_t r = 41; r < rows.size(); ++r) classes.insert(rows[r][label_column]);
    for (const std::string& label : traind_columns.at("label")) {
      EXPECT_TRUE(classes.count(label)) << label;
    }
  }

  // The downloaded model in ONNX Runtime: the same labels and numbers.
  if (!have_ort) {
    GTEST_SKIP() << "onnxruntime-node is not installed in " << ort_dir;
  }
  const std::string ort_out = dir_.Path("ort.csv");
  ASSERT_EQ(RunCommand(absl::StrCat("node ", ort_dir, "/run_onnx.mjs ", onnx, " ", heldout_path,
                                    " ", ort_out, " 2>&1"),
                       &out),
            0)
      << out;
  const std::map<std::string, std::vector<std::string>> ort_columns = Columns(ReadAll(ort_out));
  double largest = 0;
  for (const auto& [name, values] : traind_columns) {
    ASSERT_TRUE(ort_columns.count(name)) << name << " not in ONNX Runtime's output";
    const std::vector<std::string>& theirs = ort_columns.at(name);
    ASSERT_EQ(theirs.size(), values.size()) << name;
    for (size_t r = 0; r < values.size(); ++r) {
      if (name == "label" || name == "row") {
        EXPECT_EQ(theirs[r], values[r]) << name << " row " << r;
        continue;
      }
      const double a = std::stod(values[r]), b = std::stod(theirs[r]);
      largest = std::max(largest, std::fabs(a - b));
      EXPECT_NEAR(a, b, 1e-5 * std::max(1.0, std::fabs(a))) << name << " row " << r;
    }
  }
  std::printf("[models] %s: max |ONNX Runtime - traind predict| = %.3g\n", kind.example, largest);

  // Delete: the job and its files are gone.
  ASSERT_EQ(Trainctl("delete " + job + " 2>&1", &out), 0) << out;
  EXPECT_NE(Trainctl("get " + job + " 2>&1", &out), 0) << out;
  EXPECT_FALSE(fs::exists(dir_.path() + "/state/jobs/" + job));
}

INSTANTIATE_TEST_SUITE_P(
    Examples, ModelsTest,
    ::testing::Values(Kind{"digits-multiclass",
                           {"digit"},
                           {"row", "label", "p_0", "p_1", "p_2", "p_3", "p_4", "p_5", "p_6", "p_7",
                            "p_8", "p_9"}},
                      Kind{"breast-cancer-binary", {"diagnosis"}, {"row", "label", "p_malignant"}},
                      Kind{"digits-multilabel",
                           {"even", "large", "prime"},
                           {"row", "p_even", "p_large", "p_prime"}},
                      Kind{"diabetes-regression", {"progression"}, {"row", "prediction"}}),
    [](const ::testing::TestParamInfo<Kind>& info) {
      std::string name = info.param.example;
      std::replace(name.begin(), name.end(), '-', '_');
      return name;
    });

}  // namespace
}  // namespace traind::testing
