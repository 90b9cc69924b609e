// Predict against the real traind binary, through trainctl: which model
// scores (the refit model by default, --task N, --ensemble), an uploaded CSV
// or one named under a data root (--server-path), and bad input named with
// the user's own file name, line and column, with nothing stored for it.
// The numbers are checked against what traind wrote at training time (the
// out-of-fold predictions.csv of each task) and against traind-worker
// --predict run by hand on the model files.
#include <sys/stat.h>
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "gtest/gtest.h"
#include "tests/integration/testing/traind_process.h"
#include "tests/testing/temp_dir.h"

namespace traind::testing {
namespace {

namespace fs = std::filesystem;
using traind::v1::Job;

std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A predictions CSV: its header and, per `row` value, its other cells.
struct Table {
  std::vector<std::string> header;
  std::map<int, std::vector<std::string>> rows;
  int Column(const std::string& name) const {
    auto it = std::find(header.begin(), header.end(), name);
    return it == header.end() ? -1 : static_cast<int>(it - header.begin());
  }
};
Table ParseTable(const std::string& text) {
  Table t;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    absl::ConsumeSuffix(&line, "\r");
    std::vector<std::string> cells = absl::StrSplit(line, ',');
    if (t.header.empty()) {
      t.header = cells;
      continue;
    }
    int row = -1;
    EXPECT_TRUE(absl::SimpleAtoi(cells[0], &row)) << line;
    t.rows[row] = cells;
  }
  return t;
}
double Number(const std::string& cell) {
  double v = 0;
  EXPECT_TRUE(absl::SimpleAtod(cell, &v)) << cell;
  return v;
}

// The p_ columns of a table, in its order.
std::vector<std::string> ProbabilityColumns(const Table& t) {
  std::vector<std::string> out;
  for (const std::string& h : t.header) {
    if (absl::StartsWith(h, "p_")) out.push_back(h);
  }
  return out;
}

class PredictRpcTest : public ::testing::Test {
 protected:
  void StartDaemon(std::vector<std::string> extra = {}) {
    extra.push_back("--cpu-slots=2");
    extra.push_back("--data-root=" + SourceDir() + "/examples/data");
    daemon_ = std::make_unique<TraindProcess>(dir_.path() + "/state", extra);
    ASSERT_TRUE(daemon_->Start()) << daemon_->Log();
  }
  void TearDown() override {
    if (daemon_ == nullptr) return;
    if (HasFailure()) std::cerr << "--- traind log ---\n" << daemon_->Log();
    daemon_->Stop();
  }

  // A finished 2-fold CV job with refit (tasks 0, 1 and the refit task 2).
  Job RunRefitJob() {
    traind::v1::JobSpec spec = IrisExampleSpec(2, 6);
    spec.mutable_cross_validation()->set_refit(true);
    absl::StatusOr<Job> job = SubmitJob(daemon_->stub(), spec);
    EXPECT_TRUE(job.ok()) << job.status();
    if (!job.ok()) return Job();
    std::vector<traind::v1::JobEvent> events;
    EXPECT_TRUE(WatchAll(daemon_->stub(), job->id(), 0, &events).ok());
    Job done = GetJob(daemon_->stub(), job->id());
    EXPECT_EQ(done.state(), Job::SUCCEEDED) << done.DebugString();
    return done;
  }

  // `trainctl predict JOB ARGS` with stdout and stderr in `*out`.
  int Predict(const std::string& job, const std::string& args, std::string* out) {
    return RunCommand(absl::StrCat(BinDir(), "/trainctl --address ", daemon_->address(),
                                   " predict ", job, " ", args, " 2>&1"),
                      out);
  }

  std::string JobDir(const std::string& id) const { return dir_.path() + "/state/jobs/" + id; }

  // The files under the job's predict/ directory.
  std::vector<std::string> PredictFiles(const std::string& id) const {
    std::vector<std::string> out;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(JobDir(id) + "/predict", ec)) {
      out.push_back(e.path().filename().string());
    }
    std::sort(out.begin(), out.end());
    return out;
  }

  TempDir dir_;
  std::unique_ptr<TraindProcess> daemon_;
};

TEST_F(PredictRpcTest, RefitTaskAndEnsembleModelsScoreAsTrainingDid) {
  StartDaemon();
  const Job job = RunRefitJob();
  ASSERT_EQ(job.tasks_size(), 3);
  const std::string iris = SourceDir() + "/examples/data/iris.csv";
  const std::string dir = dir_.path();
  std::string out;

  // Each fold's model on the training file reproduces that fold's
  // out-of-fold rows as training wrote them.
  std::vector<Table> by_task;
  for (int t = 0; t < 2; ++t) {
    const std::string saved = absl::StrCat(dir, "/task-", t, ".csv");
    ASSERT_EQ(Predict(job.id(), absl::StrCat(iris, " --task ", t, " -O ", saved), &out), 0) << out;
    EXPECT_TRUE(absl::StrContains(
        out, absl::StrCat("scored 150 rows of ", iris, " with task-", t, "/model.ckpt on cpu")))
        << out;
    by_task.push_back(ParseTable(ReadBytes(saved)));
    const Table oof =
        ParseTable(ReadBytes(absl::StrCat(JobDir(job.id()), "/task-", t, "/predictions.csv")));
    // The same columns but the fold (the file's species comes along as the
    // true class).
    std::vector<std::string> header = oof.header;
    ASSERT_EQ(header.at(1), "fold");
    header.erase(header.begin() + 1);
    ASSERT_EQ(by_task[t].header, header);
    ASSERT_EQ(by_task[t].rows.size(), 150u);
    ASSERT_GT(oof.rows.size(), 50u);
    for (const auto& [row, cells] : oof.rows) {
      const std::vector<std::string>& mine = by_task[t].rows.at(row);
      EXPECT_EQ(cells[1], absl::StrCat(t)) << "row " << row;
      for (size_t c = 1; c < mine.size(); ++c) {
        const std::string& name = header[c];
        if (name == "label" || name == "true_species") {
          EXPECT_EQ(mine[c], cells[c + 1]) << "task " << t << " row " << row;
        } else {
          EXPECT_NEAR(Number(mine[c]), Number(cells[c + 1]), 1e-5)
              << "task " << t << " row " << row;
        }
      }
    }
  }

  // --ensemble: the mean of the fold models, the label its argmax.
  const std::string ensemble = dir + "/ensemble.csv";
  ASSERT_EQ(Predict(job.id(), iris + " --ensemble -O " + ensemble, &out), 0) << out;
  EXPECT_TRUE(absl::StrContains(out, "with task-0/model.ckpt + task-1/model.ckpt")) << out;
  const Table mean = ParseTable(ReadBytes(ensemble));
  ASSERT_EQ(mean.header, by_task[0].header);
  const std::vector<std::string> p = ProbabilityColumns(mean);
  ASSERT_EQ(p.size(), 3u);
  for (const auto& [row, cells] : mean.rows) {
    double best = -1;
    std::string argmax;
    for (const std::string& name : p) {
      const int c = mean.Column(name);
      const double want =
          (Number(by_task[0].rows.at(row)[c]) + Number(by_task[1].rows.at(row)[c])) / 2;
      EXPECT_NEAR(Number(cells[c]), want, 1e-6) << "row " << row << " " << name;
      if (Number(cells[c]) > best) {
        best = Number(cells[c]);
        argmax = name.substr(2);
      }
    }
    EXPECT_EQ(cells[mean.Column("label")], argmax) << "row " << row;
  }

  // By default the refit model: what traind-worker --predict prints for
  // task-2's model file, byte for byte; --server-path names the same file
  // on the server (under its data root) and gives the same bytes.
  ASSERT_EQ(Predict(job.id(), iris + " -O " + dir + "/refit.csv", &out), 0) << out;
  EXPECT_TRUE(absl::StrContains(out, "with task-2/model.ckpt")) << out;
  ASSERT_EQ(RunCommand(absl::StrCat("OMP_NUM_THREADS=1 ", BinDir(), "/traind-worker --predict ",
                                    JobDir(job.id()), "/task-2/model.ckpt ", iris, " 2>/dev/null"),
                       &out),
            0);
  EXPECT_EQ(ReadBytes(dir + "/refit.csv"), out);
  ASSERT_EQ(Predict(job.id(), iris + " --server-path -O " + dir + "/named.csv", &out), 0) << out;
  EXPECT_EQ(ReadBytes(dir + "/named.csv"), ReadBytes(dir + "/refit.csv"));

  // Each call's output stays with the job, as an artifact.
  EXPECT_EQ(PredictFiles(job.id()).size(), 5u);
  ASSERT_EQ(RunCommand(absl::StrCat(BinDir(), "/trainctl --address ", daemon_->address(),
                                    " artifacts ", job.id()),
                       &out),
            0);
  EXPECT_TRUE(absl::StrContains(out, "predict/")) << out;
  EXPECT_NE(daemon_->Log().find("predict done job=" + job.id() + " rows=150"), std::string::npos);
}

TEST_F(PredictRpcTest, BadInputIsNamedAndNothingIsStored) {
  StartDaemon();
  const Job job = RunRefitJob();
  const std::string dir = dir_.path();
  std::string out;
  // Line 3 (the second data row) has a word where sepal_width belongs.
  std::ofstream(dir + "/bad.csv") << "sepal_length,sepal_width,petal_length,petal_width\n"
                                  << "5.1,3.5,1.4,0.2\n"
                                  << "4.9,wide,1.4,0.2\n";
  std::ofstream(dir + "/short.csv") << "sepal_length,sepal_width,petal_length\n5.1,3.5,1.4\n";
  std::ofstream(dir + "/good.csv") << "petal_width,extra,sepal_length,sepal_width,petal_length\n"
                                   << "0.2,x,5.1,3.5,1.4\n";
  const std::string kept = dir + "/kept.csv";
  std::ofstream(kept) << "left as it was\n";

  const std::vector<std::string> before = PredictFiles(job.id());
  EXPECT_NE(Predict(job.id(), dir + "/bad.csv -O " + kept, &out), 0) << out;
  EXPECT_TRUE(absl::StrContains(out, dir + "/bad.csv:3")) << out;
  EXPECT_TRUE(absl::StrContains(out, "sepal_width")) << out;
  EXPECT_TRUE(absl::StrContains(out, "\"wide\" is not a number")) << out;
  EXPECT_FALSE(absl::StrContains(out, "/state/")) << "the server's copy is not named: " << out;
  EXPECT_EQ(ReadBytes(kept), "left as it was\n");

  EXPECT_NE(Predict(job.id(), dir + "/short.csv", &out), 0) << out;
  EXPECT_TRUE(absl::StrContains(out, "petal_width")) << out;
  EXPECT_TRUE(absl::StrContains(out, "short.csv")) << out;

  EXPECT_NE(Predict(job.id(), dir + "/good.csv --task 7", &out), 0) << out;
  EXPECT_TRUE(absl::StrContains(out, "has tasks 0 to 2, not 7")) << out;

  // A path outside the data root is refused and named.
  EXPECT_NE(Predict(job.id(), dir + "/good.csv --server-path", &out), 0) << out;
  EXPECT_TRUE(absl::StrContains(out, "header.data_path")) << out;

  // None of it left a file behind; a good upload (columns in another order,
  // an extra column) then scores.
  EXPECT_EQ(PredictFiles(job.id()), before);
  ASSERT_EQ(Predict(job.id(), dir + "/good.csv", &out), 0) << out;
  EXPECT_TRUE(absl::StrContains(out, "row,label,p_")) << out;
  EXPECT_EQ(PredictFiles(job.id()).size(), before.size() + 1);
}

TEST_F(PredictRpcTest, AnUploadPastTheLimitIsRefused) {
  const std::string config = dir_.path() + "/traind.yaml";
  std::ofstream(config) << "limits:\n  max_predict_upload_bytes: 2048\n";
  StartDaemon({"--config=" + config});
  const Job job = RunRefitJob();
  std::string out;
  // iris.csv is about 4 KB.
  EXPECT_NE(Predict(job.id(), SourceDir() + "/examples/data/iris.csv", &out), 0) << out;
  EXPECT_TRUE(absl::StrContains(out, "larger than 2048 bytes (limits.max_predict_upload_bytes)"))
      << out;
  // The same file named on the server is not an upload.
  EXPECT_EQ(Predict(job.id(), SourceDir() + "/examples/data/iris.csv --server-path -O -", &out), 0)
      << out;
  EXPECT_TRUE(PredictFiles(job.id()).size() == 1u);
}

// A predict the client gives up on midway is not scored: a part of a file
// never becomes predictions.
TEST_F(PredictRpcTest, ACancelledUploadIsNotScored) {
  StartDaemon();
  const Job job = RunRefitJob();
  {
    grpc::ClientContext ctx;
    traind::v1::PredictResponse resp;
    auto writer = daemon_->stub()->Predict(&ctx, &resp);
    traind::v1::PredictRequest header;
    header.mutable_header()->set_job_id(job.id());
    header.mutable_header()->set_file_name("cut.csv");
    ASSERT_TRUE(writer->Write(header));
    traind::v1::PredictRequest part;
    part.set_csv("sepal_length,sepal_width,petal_length,petal_width\n5.1,3.5,1.4,0.2\n");
    ASSERT_TRUE(writer->Write(part));
    // traind has the header and the rows (a cut on a row boundary) when the
    // client goes away.
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    ctx.TryCancel();
    EXPECT_EQ(writer->Finish().error_code(), grpc::StatusCode::CANCELLED);
  }
  // Given time to act on what it received, traind scored nothing.
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  EXPECT_EQ(daemon_->Log().find("predict started job=" + job.id()), std::string::npos)
      << daemon_->Log();
  EXPECT_TRUE(PredictFiles(job.id()).empty());
  // The next call scores as always.
  std::string out;
  ASSERT_EQ(
      Predict(job.id(), SourceDir() + "/examples/data/iris.csv -O " + dir_.path() + "/scored.csv",
              &out),
      0)
      << out;
  EXPECT_EQ(PredictFiles(job.id()).size(), 1u);
}

// SIGTERM while a predict runs: the predict worker is ended at once, the
// caller gets UNAVAILABLE, nothing of it is left in the job's directory,
// and traind exits cleanly well within its stop grace.
TEST_F(PredictRpcTest, AStopDuringAPredictEndsItAndLeavesNothing) {
  // traind-worker, except that a predict hangs.
  const std::string worker = dir_.Write(
      "worker.sh", absl::StrCat("#!/bin/sh\nfor a in \"$@\"; do\n  [ \"$a\" = --predict ] && "
                                "exec sleep 300\ndone\nexec ",
                                BinDir(), "/traind-worker \"$@\"\n"));
  ASSERT_EQ(chmod(worker.c_str(), 0755), 0);
  StartDaemon({"--worker=" + worker, "--worker-zygote=false", "--stop-grace=20s"});
  const Job job = RunRefitJob();
  std::string out;
  int rc = -1;
  std::thread call([&] {
    rc = Predict(job.id(),
                 SourceDir() + "/examples/data/iris.csv -O " + dir_.path() + "/scored.csv", &out);
  });
  bool started = false;
  for (int i = 0; i < 200 && !started; ++i) {
    started = daemon_->Log().find("predict started job=" + job.id()) != std::string::npos;
    if (!started) std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  ASSERT_TRUE(started) << daemon_->Log();
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // the worker runs
  const auto t0 = std::chrono::steady_clock::now();
  const int status = daemon_->Stop();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  call.join();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  EXPECT_LT(seconds, 8.0) << "traind took " << seconds << " s to stop";
  EXPECT_NE(rc, 0) << out;
  EXPECT_TRUE(absl::StrContains(out, "traind is stopping")) << out;
  EXPECT_TRUE(PredictFiles(job.id()).empty()) << absl::StrJoin(PredictFiles(job.id()), ", ");
  EXPECT_NE(daemon_->Log().find("traind stopped"), std::string::npos) << daemon_->Log();
}

}  // namespace
}  // namespace traind::testing
