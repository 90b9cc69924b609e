// trainctl against the real traind, as a user runs it from the source tree:
// Ctrl-C while watching, shell completion, the live view in a real terminal,
// `submit --wait -o json`, and exit codes.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "tests/integration/testing/daemon_fixture.h"
#include "tests/integration/testing/traind_process.h"

namespace traind::testing {
namespace {

// Columns of a line of the pane (UTF-8 code points: "…" is one).
size_t DisplayColumns(const std::string& line) {
  size_t n = 0;
  for (unsigned char c : line) n += (c & 0xC0) != 0x80 ? 1 : 0;
  return n;
}

using traind::v1::Job;
using traind::v1::JobEvent;

// trainctl against the real daemon, as a user runs it from the source tree.
class TrainctlDaemonTest : public DaemonTest {
 protected:
  int Trainctl(const std::string& args, std::string* out) {
    return RunCommand("cd " + SourceDir() + " && " + BinDir() + "/trainctl --address " +
                          daemon_->address() + " " + args + " 2>" + dir_.path() + "/stderr",
                      out);
  }
  std::string Stderr() {
    std::ifstream in(dir_.path() + "/stderr");
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  // `trainctl ARGS --watch` from the source tree in a terminal of its own.
  std::string WatchCommand(const std::string& args) {
    return "cd " + SourceDir() + " && TERM=xterm-256color " + BinDir() + "/trainctl --address " +
           daemon_->address() + " " + args + " --watch; sleep 60";
  }
  void CancelEveryJob() {
    traind::v1::ListJobsRequest req;
    traind::v1::ListJobsResponse list;
    auto ctx = Ctx();
    ASSERT_TRUE(daemon_->stub()->ListJobs(ctx.get(), req, &list).ok());
    std::string out;
    for (const Job& j : list.jobs()) Trainctl("cancel --force " + j.id(), &out);
  }
};

// A command in a tmux server of its own (a real terminal of a given size),
// killed with the object.
class TmuxSession {
 public:
  TmuxSession(const std::string& name, const std::string& command, int width, int height)
      : tmux_("tmux -L " + name + " ") {
    started_ = RunCommand(absl::StrCat(tmux_, "new-session -d -s t -x ", width, " -y ", height,
                                       " '", command, "' 2>&1"),
                          &error_) == 0;
  }
  ~TmuxSession() {
    std::string ignored;
    RunCommand(tmux_ + "kill-server 2>/dev/null", &ignored);
  }
  bool started() const { return started_; }
  const std::string& error() const { return error_; }
  // The pane with its scrollback (stacked frames would show there).
  std::string Capture() const {
    std::string pane;
    RunCommand(tmux_ + "capture-pane -p -S -5000 -t t", &pane);
    return pane;
  }
  void Resize(int width, int height) {
    std::string ignored;
    RunCommand(absl::StrCat(tmux_, "resize-window -t t -x ", width, " -y ", height), &ignored);
  }

 private:
  std::string tmux_;
  std::string error_;
  bool started_ = false;
};

// Ctrl-C while following a job leaves the job running and says how to come
// back to it or stop it; `submit --wait` names the job at once.
TEST_F(TrainctlDaemonTest, CtrlCWhileWatchingSaysTheJobKeepsRunning) {
  const std::string err = dir_.path() + "/interrupt.err";
  const std::string out = dir_.path() + "/interrupt.out";
  const pid_t pid = fork();
  if (pid == 0) {
    if (chdir(SourceDir().c_str()) != 0) _exit(126);
    FILE* o = freopen(out.c_str(), "w", stdout);
    FILE* e = freopen(err.c_str(), "w", stderr);
    (void)o;
    (void)e;
    execl((BinDir() + "/trainctl").c_str(), "trainctl", "--address", daemon_->address().c_str(),
          "submit", "examples/iris-cv.yaml", "--set", "training.epochs=100000", "--wait",
          static_cast<char*>(nullptr));
    _exit(127);
  }
  // Wait for the job id on stderr, then for the job to run.
  std::string id;
  for (int i = 0; i < 500 && id.empty(); ++i) {
    std::ifstream in(err);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const size_t at = text.find("trainctl: submitted job ");
    if (at != std::string::npos && text.find(" (", at) != std::string::npos) {
      id = text.substr(at + 24, text.find(" (", at) - at - 24);
    }
    usleep(10000);
  }
  ASSERT_FALSE(id.empty()) << "submit --wait names the job on stderr at once";
  for (int i = 0; i < 500 && GetJob(daemon_->stub(), id).state() != Job::RUNNING; ++i) {
    usleep(10000);
  }
  kill(pid, SIGINT);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 130) << status;
  std::ifstream in(err);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("stopped watching; job " + id + " keeps running on traind"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("trainctl watch " + id), std::string::npos) << text;
  EXPECT_NE(text.find("trainctl cancel " + id), std::string::npos) << text;
  EXPECT_EQ(GetJob(daemon_->stub(), id).state(), Job::RUNNING) << "the job goes on";
  std::string ignored;
  EXPECT_EQ(Trainctl("cancel " + id, &ignored), 0) << Stderr();
}

// `trainctl completion bash`, sourced in a real bash: every subcommand of
// --help, each one's flags, output formats and the server's job ids.
TEST_F(TrainctlDaemonTest, ShellCompletion) {
  std::string out;
  ASSERT_EQ(Trainctl("submit examples/iris-cv.yaml --wait -o json", &out), 0) << Stderr();
  Job job;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(out, &job).ok()) << out;
  const std::string script = dir_.path() + "/trainctl.bash";
  ASSERT_EQ(RunCommand(BinDir() + "/trainctl completion bash > " + script, &out), 0);
  auto complete = [&](const std::string& words, int cword) {
    std::string reply;
    RunCommand("TRAIND_ADDRESS=" + daemon_->address() + " PATH=" + BinDir() +
                   ":$PATH bash -c 'source " + script + "; COMP_WORDS=(" + words +
                   "); COMP_CWORD=" + std::to_string(cword) +
                   "; _trainctl; printf \"%s\\n\" \"${COMPREPLY[@]}\"'",
               &reply);
    std::vector<std::string> lines = absl::StrSplit(reply, '\n', absl::SkipEmpty());
    return std::set<std::string>(lines.begin(), lines.end());
  };
  // Every subcommand that --help lists.
  ASSERT_EQ(RunCommand(BinDir() + "/trainctl --help", &out), 0);
  const std::set<std::string> top = complete("trainctl \"\"", 1);
  const size_t subs = out.find("Subcommands:");
  ASSERT_NE(subs, std::string::npos);
  std::istringstream help(out.substr(subs));
  std::string line;
  std::getline(help, line);
  int listed = 0;
  while (std::getline(help, line) && !line.empty()) {
    const std::string name = line.substr(2, line.find(' ', 2) - 2);
    EXPECT_TRUE(top.count(name)) << name;
    ++listed;
  }
  EXPECT_GE(listed, 10);
  EXPECT_EQ(complete("trainctl submit --w", 2), (std::set<std::string>{"--watch", "--wait"}));
  EXPECT_EQ(complete("trainctl -o \"\"", 2), (std::set<std::string>{"table", "json", "yaml"}));
  EXPECT_TRUE(complete("trainctl get \"\"", 2).count(job.id())) << job.id();
  EXPECT_EQ(complete("trainctl cancel " + job.id().substr(0, 6), 2),
            (std::set<std::string>{job.id()}));
  // zsh gets the same through bashcompinit.
  ASSERT_EQ(RunCommand(BinDir() + "/trainctl completion zsh", &out), 0);
  EXPECT_EQ(out.rfind("autoload -U +X bashcompinit && bashcompinit\n", 0), 0u) << out;
}

// The live view of `submit --watch` in a real terminal (tmux): at 80 x 24
// and after a resize to 160 x 45, the pane holds one view (no copies of the
// fold bars stacked up by a miscounted redraw) and no line wider than the
// terminal.
TEST_F(TrainctlDaemonTest, LiveViewFitsTheTerminalAndRedrawsOnResize) {
  std::string out;
  ASSERT_EQ(RunCommand("command -v tmux", &out), 0)
      << "tmux is not installed (./deploy/install-deps.sh --tests installs it)";
  TmuxSession tmux(
      "traind-test-" + std::to_string(getpid()),
      WatchCommand("submit examples/iris-cv.yaml --name live-view --set training.epochs=100000"),
      80, 24);
  ASSERT_TRUE(tmux.started()) << tmux.error();
  auto capture = [&] { return tmux.Capture(); };
  auto check = [&](size_t width) {
    const std::string pane = capture();
    std::istringstream in(pane);
    std::string line;
    int bars = 0, headers = 0;
    while (std::getline(in, line)) {
      EXPECT_LE(line.size(), width) << "wider than the terminal: " << line;
      if (line.rfind("fold 0  [", 0) == 0) ++bars;
      if (line.rfind("FOLD  EPOCH", 0) == 0) ++headers;
    }
    EXPECT_EQ(bars, 1) << pane;
    EXPECT_EQ(headers, 1) << pane;
    return pane;
  };
  // Wait until the view shows fold 0 training.
  std::string pane;
  for (int i = 0; i < 200 && pane.find("RUNNING  ETA") == std::string::npos; ++i) {
    usleep(50000);
    pane = capture();
  }
  ASSERT_NE(pane.find("RUNNING  ETA"), std::string::npos) << pane;
  usleep(500000);  // several redraws
  check(80);
  tmux.Resize(160, 45);
  // The bars use the width they have: longer at 160 columns than at 80, once
  // the view has redrawn (polled: a loaded machine redraws late).
  auto bar_width = [](const std::string& text) {
    const size_t at = text.find("fold 0  [");
    if (at == std::string::npos) return size_t{0};
    return text.find(']', at) - at - 9;
  };
  for (int i = 0; i < 200 && bar_width(capture()) <= bar_width(pane); ++i) usleep(50000);
  usleep(200000);  // a redraw or two more at the new size
  const std::string wide = check(160);
  EXPECT_GT(bar_width(wide), bar_width(pane)) << pane << wide;
  CancelEveryJob();
}

// The widest example (five validation metrics, two train ones) at 60, 80 and
// 200 columns: one frame redrawn in place (never a stack of frames in the
// scrollback), every line narrower than the terminal.
TEST_F(TrainctlDaemonTest, LiveViewFitsNarrowAndWideTerminals) {
  std::string out;
  ASSERT_EQ(RunCommand("command -v tmux", &out), 0) << "tmux is not installed";
  for (int width : {60, 80, 200}) {
    SCOPED_TRACE(width);
    TmuxSession tmux(absl::StrCat("traind-fit-", getpid(), "-", width),
                     WatchCommand("submit examples/digits-multiclass.yaml --name fit --set "
                                  "training.epochs=100000 --set early_stopping= --set checkpoint="),
                     width, 24);
    ASSERT_TRUE(tmux.started()) << tmux.error();
    auto capture = [&] { return tmux.Capture(); };
    std::string pane;
    for (int i = 0; i < 300 && pane.find("VAL_LOSS") == std::string::npos; ++i) {
      usleep(50000);
      pane = capture();
    }
    ASSERT_NE(pane.find("VAL_LOSS"), std::string::npos) << pane;
    usleep(800000);  // several redraws
    pane = capture();
    std::istringstream in(pane);
    std::string line;
    int frames = 0, headers = 0;
    while (std::getline(in, line)) {
      EXPECT_LT(DisplayColumns(line), static_cast<size_t>(width)) << line;
      if (line.rfind("job ", 0) == 0) ++frames;
      if (line.rfind("FOLD  EPOCH", 0) == 0) ++headers;
    }
    EXPECT_EQ(frames, 1) << pane;
    EXPECT_EQ(headers, 1) << pane;
    if (width == 200) {
      EXPECT_NE(pane.find("VAL_TOP_K_ACCURACY"), std::string::npos) << pane;
      EXPECT_NE(pane.find("TRAIN_ACCURACY"), std::string::npos) << pane;
    } else {
      // Columns left out are counted after the header: "(+N more)" or "+N".
      EXPECT_NE(pane.find("VAL_LOSS"), std::string::npos) << pane;
      EXPECT_TRUE(pane.find(" more)") != std::string::npos || pane.find("  +") != std::string::npos)
          << pane;
    }
    CancelEveryJob();
  }
}

TEST_F(TrainctlDaemonTest, SubmitWaitJsonPrintsTheSucceededJobWithItsResult) {
  std::string out;
  ASSERT_EQ(Trainctl("submit examples/iris-cv.yaml --wait -o json", &out), 0) << Stderr();
  Job job;
  google::protobuf::util::JsonParseOptions o;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(out, &job, o).ok()) << out;
  EXPECT_EQ(job.state(), Job::SUCCEEDED);
  ASSERT_EQ(job.result().folds_size(), 5);
  // The example spec's promise: iris 5-fold mean validation accuracy >= 0.93.
  EXPECT_GE(job.result().val().at("accuracy").mean(), 0.93);
  EXPECT_EQ(job.spec().data().path(), IrisPath());  // made absolute by trainctl

  // `watch` of the finished job replays its events and prints the summary.
  ASSERT_EQ(Trainctl("watch " + job.id(), &out), 0) << Stderr();
  EXPECT_NE(out.find("fold 4  epoch 60/60"), std::string::npos) << out;
  EXPECT_NE(out.find("mean ± std"), std::string::npos) << out;
  ASSERT_EQ(Trainctl("get " + job.id(), &out), 0) << Stderr();
  EXPECT_NE(out.find("SUCCEEDED"), std::string::npos) << out;
  ASSERT_EQ(Trainctl("list -o json", &out), 0) << Stderr();
  EXPECT_NE(out.find(job.id()), std::string::npos) << out;
}

// `result --importance`: the job's permutation importance, most important
// first as the API has it, in 80 columns with a bar per feature; a job that
// did not ask for it is told how.
TEST_F(TrainctlDaemonTest, ResultShowsTheImportanceOverTheFolds) {
  std::string out;
  ASSERT_EQ(Trainctl("submit examples/iris-cv.yaml --set importance.repeats=2 --set "
                     "cross_validation.folds=3 --set training.epochs=10 --wait -o json",
                     &out),
            0)
      << Stderr();
  Job job;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(out, &job).ok()) << out;
  ASSERT_EQ(job.state(), Job::SUCCEEDED);
  const auto& importance = job.result().importance();
  ASSERT_EQ(importance.size(), 4);
  ASSERT_EQ(Trainctl("result " + job.id() + " --importance", &out), 0) << Stderr();
  const std::vector<std::string> lines = absl::StrSplit(out, '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), 7u) << out;
  EXPECT_EQ(lines[0], "permutation importance, mean \xC2\xB1 std over 3 folds");
  EXPECT_EQ(lines[1], "(how much " + job.result().importance_metric() +
                          " worsens when the feature is shuffled)");
  EXPECT_TRUE(absl::StartsWith(lines[2], "FEATURE")) << out;
  size_t widest_bar = 0;
  for (int i = 0; i < 4; ++i) {
    const std::string& line = lines[3 + static_cast<size_t>(i)];
    EXPECT_TRUE(absl::StartsWith(line, importance[i].feature())) << out;
    // Display columns: every byte but UTF-8 continuation bytes.
    size_t columns = 0, bar = 0;
    for (unsigned char c : line) columns += (c & 0xC0) != 0x80;
    for (size_t at = line.find("\xE2\x96\x88"); at != std::string::npos;
         at = line.find("\xE2\x96\x88", at + 3)) {
      ++bar;
    }
    EXPECT_LE(columns, 80u) << line;
    if (i == 0) widest_bar = bar;
    EXPECT_LE(bar, widest_bar) << out;
  }
  EXPECT_GT(widest_bar, 10u) << out;

  ASSERT_EQ(Trainctl("submit examples/iris-cv.yaml --set cross_validation.folds=2 --set "
                     "training.epochs=2 --wait -o json",
                     &out),
            0)
      << Stderr();
  Job plain;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(out, &plain).ok()) << out;
  EXPECT_EQ(Trainctl("result " + plain.id() + " --importance", &out), 1);
  EXPECT_NE(Stderr().find("computes no importance"), std::string::npos) << Stderr();
}

TEST_F(TrainctlDaemonTest, ExitCodesForFailedJobsAndInvalidSpecs) {
  std::string ragged = dir_.Write("ragged.csv", "a,b,label\n1,2,x\n3,4,y\n5,6\n7,8,x\n");
  std::string spec = dir_.Write("bad-data.yaml", "data: {path: " + ragged +
                                                     ", label: label}\n"
                                                     "cross_validation: {folds: 2}\n"
                                                     "model: {layers: [{dense: {units: 2}}]}\n"
                                                     "loss: {softmax_cross_entropy: {}}\n"
                                                     "optimizer: {sgd: {learning_rate: 0.1}}\n"
                                                     "training: {epochs: 2, batch_size: 4}\n");
  std::string out;
  EXPECT_EQ(Trainctl("submit " + spec + " --wait", &out), 1) << out;
  EXPECT_NE(out.find("DATA_ERROR"), std::string::npos) << out;
  // `result` of the failed job: no fold finished, the failure, exit 1.
  const size_t id_at = out.find("id:");
  ASSERT_NE(id_at, std::string::npos) << out;
  const std::string failed_id = std::string(
      absl::StripAsciiWhitespace(out.substr(id_at + 3, out.find('\n', id_at) - id_at - 3)));
  EXPECT_EQ(Trainctl("result " + failed_id, &out), 1) << out;
  EXPECT_EQ(out, "no fold finished\n");
  EXPECT_NE(Stderr().find("trainctl: job " + failed_id + " FAILED: DATA_ERROR: "),
            std::string::npos)
      << Stderr();

  std::string invalid =
      dir_.Write("invalid.yaml", "data: {path: " + ragged +
                                     ", label: label}\n"
                                     "model: {layers: [{dense: {units: 2}}]}\n"
                                     "loss: {softmax_cross_entropy: {}}\n"
                                     "optimizer: {sgd: {learning_rate: 0.1}}\n"
                                     "training: {epochs: 2, batches: 5, batch_size: 4}\n");
  EXPECT_EQ(Trainctl("submit " + invalid, &out), 2);
  EXPECT_NE(Stderr().find("spec.training: "), std::string::npos) << Stderr();

  std::string unknown_field = dir_.Write("typo.yaml", "data: {path: x.csv, lable: y}\n");
  EXPECT_EQ(Trainctl("submit " + unknown_field, &out), 2);
  EXPECT_NE(Stderr().find("lable"), std::string::npos) << Stderr();

  EXPECT_EQ(Trainctl("get 000000000000", &out), 6);
  EXPECT_NE(Stderr().find("not found"), std::string::npos) << Stderr();
}

}  // namespace
}  // namespace traind::testing
