// SubmitJob with the spec as text (spec_text), overrides and base_dir: the
// unmodified example files are accepted, and bad text is refused with the
// request field, the spec field path and the line.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"
#include "spec/loader.h"
#include "tests/integration/testing/daemon_fixture.h"
#include "tests/integration/testing/traind_process.h"

namespace traind::testing {
namespace {

using traind::v1::Job;
using traind::v1::JobEvent;

std::string ReadText(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<std::string> ExampleSpecs() {
  std::vector<std::string> paths;
  for (const auto& entry : std::filesystem::directory_iterator(SourceDir() + "/examples")) {
    if (entry.path().extension() == ".yaml") paths.push_back(entry.path().string());
  }
  std::sort(paths.begin(), paths.end());
  return paths;
}

// DaemonTest's traind (2 CPU slots), given specs as text.
class SpecTextTest : public DaemonTest {
 protected:
  // The examples' data: the source tree, and Debian's dataset packages
  // (examples/fashion-mnist-cnn.yaml; tests/run.sh installs them).
  void SetUp() override {
    daemon_ = std::make_unique<TraindProcess>(
        dir_.path() + "/state",
        std::vector<std::string>{"--cpu-slots=2", "--data-root=" + SourceDir(), "--data-root=/tmp",
                                 "--data-root=/usr/share/datasets"});
    ASSERT_TRUE(daemon_->Start()) << daemon_->Log();
  }

  grpc::Status Submit(const std::string& text, const std::vector<std::string>& overrides,
                      const std::string& base_dir, Job* job) {
    traind::v1::SubmitJobRequest req;
    req.set_spec_text(text);
    for (const std::string& o : overrides) req.add_overrides(o);
    req.set_base_dir(base_dir);
    auto ctx = Ctx();
    return daemon_->stub()->SubmitJob(ctx.get(), req, job);
  }

  void Cancel(const std::string& id) {
    traind::v1::CancelJobRequest req;
    req.set_job_id(id);
    req.set_force(true);
    Job job;
    auto ctx = Ctx();
    EXPECT_TRUE(daemon_->stub()->CancelJob(ctx.get(), req, &job).ok());
  }
};

// Every example file, sent as it is with the source tree as base_dir, is
// accepted and stored as the file loader reads it with absolute paths.
TEST_F(SpecTextTest, UnmodifiedExamplesAreAccepted) {
  const std::vector<std::string> examples = ExampleSpecs();
  ASSERT_GE(examples.size(), 5u);
  for (const std::string& path : examples) {
    absl::StatusOr<traind::v1::JobSpec> expected = spec::LoadJobSpecFile(path);
    ASSERT_TRUE(expected.ok()) << expected.status();
    auto absolute = [](const std::string& p) { return p[0] == '/' ? p : SourceDir() + "/" + p; };
    expected->mutable_data()->set_path(absolute(expected->data().path()));
    if (!expected->data().labels_path().empty()) {
      expected->mutable_data()->set_labels_path(absolute(expected->data().labels_path()));
    }
    // Images store the shape their files state (Fashion-MNIST: 1×28×28).
    if (absl::EndsWith(path, "/fashion-mnist-cnn.yaml")) {
      for (int d : {1, 28, 28}) expected->mutable_data()->add_shape(d);
    }
    Job job;
    grpc::Status s = Submit(ReadText(path), {}, SourceDir(), &job);
    ASSERT_TRUE(s.ok()) << path << ": " << s.error_message();
    Cancel(job.id());
    EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(job.spec(), *expected))
        << path << "\n"
        << job.spec().DebugString();
    // Tasks: folds x repeats, plus the refit task; a search has them per
    // trial (a grid: the product of its lists), plus the refit of the best.
    const auto& cv = expected->cross_validation();
    int tasks = cv.folds() * std::max(cv.repeats(), 1) + (cv.refit() ? 1 : 0);
    if (expected->has_search()) {
      const traind::v1::SearchSpec& s = expected->search();
      int trials = s.sampler().random().trials();
      if (s.sampler().has_grid()) {
        trials = 1;
        for (const auto& d : s.space()) trials *= d.values().values_size();
      }
      tasks = trials * cv.folds() * std::max(cv.repeats(), 1) + (s.refit_best() ? 1 : 0);
    }
    EXPECT_EQ(job.tasks_size(), tasks) << path;
  }
  EXPECT_EQ(JobCount(), static_cast<int>(examples.size()));
}

// A text submission with overrides runs to the end like the structured one.
TEST_F(SpecTextTest, TextWithOverridesRunsToTheEnd) {
  Job job;
  grpc::Status s = Submit(ReadText(SourceDir() + "/examples/iris-cv.yaml"),
                          {"training.epochs=3", "cross_validation.folds=3", "name=\"iris-text\""},
                          SourceDir() + "/examples/..", &job);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(job.spec().name(), "iris-text");
  EXPECT_EQ(job.spec().training().epochs(), 3);
  // Stored resolved: the worker opens exactly what was checked.
  EXPECT_EQ(job.spec().data().path(), SourceDir() + "/examples/data/iris.csv");
  std::vector<JobEvent> events;
  ASSERT_TRUE(WatchAll(daemon_->stub(), job.id(), 0, &events).ok());
  Job done = GetJob(daemon_->stub(), job.id());
  ASSERT_EQ(done.state(), Job::SUCCEEDED) << done.DebugString();
  ASSERT_EQ(done.result().folds_size(), 3);
  int epochs = 0;
  for (const JobEvent& e : events) epochs += e.has_epoch() ? 1 : 0;
  EXPECT_EQ(epochs, 3 * 3);
}

// Text on which yaml-cpp 0.7's LoadAll never ends (it allocates until the
// process dies): refused at once, and traind goes on answering.
TEST_F(SpecTextTest, TextThatHangsTheYamlLibraryIsRefusedAtOnce) {
  for (const std::string text : {",", "# a comment\r\n,\nname: x\n"}) {
    Job job;
    grpc::Status s = Submit(text, {}, "", &job);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
    EXPECT_NE(s.error_message().find("spec_text: YAML syntax error"), std::string::npos)
        << s.error_message();
  }
  EXPECT_EQ(JobCount(), 0);
}

TEST_F(SpecTextTest, BadTextIsRefusedNamingTheFieldAndNothingIsStored) {
  const std::string iris = ReadText(SourceDir() + "/examples/iris-cv.yaml");
  auto with = [&](const std::string& from, const std::string& to) {
    std::string text = iris;
    size_t at = text.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    if (at != std::string::npos) text.replace(at, from.size(), to);
    return text;
  };
  // Where "units: 16" sits in the example: the line and column of the
  // unknown key are reported.
  size_t at = iris.find("units: 16");
  ASSERT_NE(at, std::string::npos);
  const int line = 1 + static_cast<int>(std::count(iris.begin(), iris.begin() + at, '\n'));
  const int column = static_cast<int>(at - iris.rfind('\n', at));

  struct Case {
    std::string name;
    std::string text;
    std::vector<std::string> overrides;
    std::string base_dir;
    grpc::StatusCode code;
    std::string message;  // exact, or a prefix when it ends with "..."
  };
  const std::string src = SourceDir();
  const std::vector<Case> cases = {
      {"unknown field",
       with("units: 16", "unit: 16"),
       {},
       src,
       grpc::INVALID_ARGUMENT,
       absl::StrCat("spec_text: model.layers[0].dense: unknown field \"unit\" (line ", line,
                    ", column ", column, ")")},
      {"bad enum",
       with("relu", "rellu"),
       {},
       src,
       grpc::INVALID_ARGUMENT,
       "spec_text: model.layers[0].dense.activation: invalid value \"rellu\" (expected one "
       "of: linear, relu, ..."},
      {"yaml syntax",
       "name: [a\n",
       {},
       src,
       grpc::INVALID_ARGUMENT,
       "spec_text: YAML syntax error: ..."},
      {"empty", "", {}, src, grpc::INVALID_ARGUMENT, "spec_text: empty spec"},
      {"bad override",
       iris,
       {"training.epochs=3", "training.epoch=3"},
       src,
       grpc::INVALID_ARGUMENT,
       "overrides[1]: training.epoch: unknown field \"epoch\"..."},
      {"override without =",
       iris,
       {"training.epochs"},
       src,
       grpc::INVALID_ARGUMENT,
       "overrides[0]: expected PATH=VALUE, got \"training.epochs\""},
      {"relative path, no base_dir",
       iris,
       {},
       "",
       grpc::INVALID_ARGUMENT,
       "spec.data.path: examples/data/iris.csv is a relative path: give base_dir (the "
       "directory it is relative to, e.g. the client's working directory) or an absolute "
       "path"},
      {"relative base_dir",
       iris,
       {},
       "clients",
       grpc::INVALID_ARGUMENT,
       "base_dir: clients is not an absolute path"},
      {"no such file under base_dir",
       iris,
       {},
       src + "/tests",
       grpc::INVALID_ARGUMENT,
       "spec.data.path: " + src +
           "/tests/examples/data/iris.csv: no such file on the traind server (to train on a file "
           "of your machine, upload it: trainctl datasets upload FILE; trainctl submit over TCP "
           "uploads it itself)"},
      {"outside the data roots",
       iris,
       {"data.path=passwd"},
       "/etc",
       grpc::PERMISSION_DENIED,
       "spec.data.path: /etc/passwd is outside the data roots of this traind (..."},
      {"validation after parsing",
       iris,
       {"model.layers[1].dense.units=4"},
       src,
       grpc::INVALID_ARGUMENT,
       "spec.model.layers[1].dense.units: ..."},
  };
  const int before = JobCount();
  for (const Case& c : cases) {
    Job job;
    grpc::Status s = Submit(c.text, c.overrides, c.base_dir, &job);
    EXPECT_EQ(s.error_code(), c.code) << c.name << ": " << s.error_message();
    if (c.message.size() > 3 && c.message.ends_with("...")) {
      const std::string prefix = c.message.substr(0, c.message.size() - 3);
      EXPECT_EQ(s.error_message().substr(0, prefix.size()), prefix) << c.name;
    } else {
      EXPECT_EQ(s.error_message(), c.message) << c.name;
    }
  }

  // Neither spec nor spec_text.
  traind::v1::SubmitJobRequest none;
  Job job;
  auto ctx = Ctx();
  grpc::Status s = daemon_->stub()->SubmitJob(ctx.get(), none, &job);
  EXPECT_EQ(s.error_code(), grpc::INVALID_ARGUMENT);
  EXPECT_EQ(s.error_message().rfind("spec or spec_text: required", 0), 0u) << s.error_message();

  // A structured spec with a relative path is refused the same way.
  absl::StatusOr<traind::v1::JobSpec> spec = spec::LoadJobSpecFile(src + "/examples/iris-cv.yaml");
  ASSERT_TRUE(spec.ok());
  traind::v1::SubmitJobRequest structured;
  *structured.mutable_spec() = *spec;
  ctx = Ctx();
  s = daemon_->stub()->SubmitJob(ctx.get(), structured, &job);
  EXPECT_EQ(s.error_code(), grpc::INVALID_ARGUMENT);
  EXPECT_EQ(s.error_message().rfind("spec.data.path: examples/data/iris.csv is a relative", 0), 0u)
      << s.error_message();

  EXPECT_EQ(JobCount(), before);
}

}  // namespace
}  // namespace traind::testing
