// traind in front of a real Slurm (launcher: slurm): every fold a Slurm
// job. ./tests/run.sh starts a single-node Slurm (tests/slurm/start.sh) and
// sets TRAIND_REQUIRE_SLURM=1; without it these tests skip, saying why.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "gtest/gtest.h"
#include "spec/loader.h"
#include "tests/integration/testing/traind_process.h"
#include "tests/testing/temp_dir.h"

namespace traind::testing {
namespace {

using traind::v1::Failure;
using traind::v1::Job;
using traind::v1::JobEvent;
using traind::v1::Task;

// Why Slurm cannot be used here, or "" when it can.
std::string SlurmUnavailable() {
  std::string out;
  if (RunCommand("sinfo --noheader --format=%T 2>&1", &out) != 0) {
    return absl::StrCat("sinfo failed: ", out);
  }
  for (absl::string_view state : absl::StrSplit(out, '\n', absl::SkipWhitespace())) {
    state = absl::StripAsciiWhitespace(state);
    // sinfo may add a flag (mixed+, idle-, ...; but "*", not responding, is
    // not up); "completing": a job that another test ran is still ending
    // there, and the node takes new ones.
    while (!state.empty() &&
           absl::string_view("+-").find(state.back()) != absl::string_view::npos) {
      state.remove_suffix(1);
    }
    if (state == "idle" || state == "mixed" || state == "allocated" || state == "completing") {
      return "";
    }
  }
  return absl::StrCat("no Slurm node is up (sinfo: ", out, ")");
}

#define REQUIRE_SLURM()                                                           \
  do {                                                                            \
    const std::string why = SlurmUnavailable();                                   \
    if (!why.empty()) {                                                           \
      const char* required = std::getenv("TRAIND_REQUIRE_SLURM");                 \
      if (required != nullptr && std::string(required) == "1") {                  \
        FAIL() << "TRAIND_REQUIRE_SLURM=1 but " << why;                           \
      }                                                                           \
      GTEST_SKIP() << "no Slurm here (tests/slurm/start.sh starts one): " << why; \
    }                                                                             \
  } while (0)

int FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  socklen_t len = sizeof(a);
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  close(fd);
  return ntohs(a.sin_port);
}

std::vector<std::string> SlurmArgs(const std::string& root, std::vector<std::string> more = {}) {
  std::vector<std::string> args = {"--launcher=slurm", "--slurm-shared-dir=" + root + "/shared",
                                   absl::StrCat("--slurm-worker-address=127.0.0.1:", FreePort()),
                                   "--slurm-poll-interval=1s"};
  args.insert(args.end(), more.begin(), more.end());
  return args;
}

// A fold that runs for seconds (digits, no early stopping: about 6 ms an
// epoch on one thread).
traind::v1::JobSpec LongDigits(int folds, int epochs) {
  absl::StatusOr<traind::v1::JobSpec> spec =
      spec::LoadJobSpecFile(SourceDir() + "/examples/digits-multiclass.yaml");
  EXPECT_TRUE(spec.ok()) << spec.status();
  spec->mutable_data()->set_path(SourceDir() + "/examples/data/digits.csv");
  spec->mutable_cross_validation()->set_folds(folds);
  spec->mutable_training()->set_epochs(epochs);
  spec->clear_early_stopping();
  return *spec;
}

Job WaitForEnd(TraindProcess* d, const std::string& id, int seconds = 240) {
  Job job;
  for (int i = 0; i < seconds * 10; ++i) {
    job = GetJob(d->stub(), id);
    if (job.state() == Job::SUCCEEDED || job.state() == Job::FAILED ||
        job.state() == Job::CANCELLED) {
      return job;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ADD_FAILURE() << "job " << id << " did not end: " << job.DebugString();
  return job;
}

// Polls until `task` has run `epochs` epochs in its current attempt.
bool WaitForEpochs(TraindProcess* d, const std::string& id, int task, int epochs,
                   int seconds = 120) {
  for (int i = 0; i < seconds * 20; ++i) {
    const Job job = GetJob(d->stub(), id);
    if (job.tasks_size() > task && job.tasks(task).state() == Task::RUNNING &&
        job.tasks(task).epochs_done() >= epochs) {
      return true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

std::string Sh(const std::string& cmd) {
  std::string out;
  RunCommand(cmd + " 2>&1", &out);
  return out;
}

// Every epoch once per attempt, in order, continuing after a resume.
void ExpectEpochsOncePerAttempt(const std::vector<JobEvent>& events, int tasks, int epochs) {
  std::map<std::pair<int, int>, int> last;
  std::map<int, int> task_last;  // the last epoch stored for each task
  for (const JobEvent& e : events) {
    if (e.has_task_state() && e.task_state().resumed_epochs() > 0) {
      last[{e.task_state().task(), e.task_state().attempt()}] = e.task_state().resumed_epochs();
    }
    if (!e.has_epoch()) continue;
    const std::pair<int, int> key = {e.epoch().task(), e.epoch().attempt()};
    const int expected = last.count(key) ? last[key] + 1 : 1;
    EXPECT_EQ(e.epoch().epoch(), expected) << "task " << key.first << " attempt " << key.second;
    last[key] = e.epoch().epoch();
    task_last[key.first] = e.epoch().epoch();
  }
  for (int t = 0; t < tasks; ++t) EXPECT_EQ(task_last[t], epochs) << "task " << t;
}

// Whether attempt `attempt` of `task` resumed from a checkpoint.
bool Resumed(const std::vector<JobEvent>& events, int task, int attempt) {
  for (const JobEvent& e : events) {
    if (e.has_task_state() && e.task_state().task() == task &&
        e.task_state().attempt() == attempt && e.task_state().resumed_epochs() > 0) {
      return true;
    }
  }
  return false;
}

std::vector<JobEvent> Events(TraindProcess* d, const std::string& id) {
  std::vector<JobEvent> events;
  grpc::Status s = WatchAll(d->stub(), id, 0, &events, 60);
  EXPECT_TRUE(s.ok()) << s.error_message();
  return events;
}

// The folds of the same spec trained by the local launcher (bit for bit
// what Slurm's workers must report: the same binary, data and seed).
std::vector<traind::v1::FoldResult> LocalFolds(const traind::v1::JobSpec& spec) {
  TempDir dir;
  TraindProcess local(dir.path() + "/state", {"--cpu-slots=2"});
  EXPECT_TRUE(local.Start()) << local.Log();
  absl::StatusOr<Job> job = SubmitJob(local.stub(), spec);
  EXPECT_TRUE(job.ok()) << job.status();
  const Job done = WaitForEnd(&local, job->id());
  EXPECT_EQ(done.state(), Job::SUCCEEDED) << local.Log();
  std::vector<traind::v1::FoldResult> folds;
  for (const Task& t : done.tasks()) folds.push_back(t.result());
  return folds;
}

void ExpectSameFolds(const Job& job, const std::vector<traind::v1::FoldResult>& local) {
  ASSERT_EQ(job.tasks_size(), static_cast<int>(local.size()));
  for (int i = 0; i < job.tasks_size(); ++i) {
    const traind::v1::FoldResult& got = job.tasks(i).result();
    EXPECT_EQ(got.best_epoch(), local[i].best_epoch()) << "fold " << i;
    EXPECT_EQ(got.epochs_run(), local[i].epochs_run()) << "fold " << i;
    for (const auto& [name, value] : local[i].val()) {
      EXPECT_EQ(got.val().at(name), value) << "fold " << i << " val " << name;
    }
  }
}

TEST(SlurmTest, EveryFoldIsASlurmJobNamedAfterItsTraindJobAndTrainsAsLocally) {
  REQUIRE_SLURM();
  TempDir dir;
  TraindProcess daemon(dir.path() + "/state", SlurmArgs(dir.path()));
  ASSERT_TRUE(daemon.Start()) << daemon.Log();
  const traind::v1::JobSpec spec = IrisExampleSpec(5);
  absl::StatusOr<Job> submitted = SubmitJob(daemon.stub(), spec);
  ASSERT_TRUE(submitted.ok()) << submitted.status();
  const Job job = WaitForEnd(&daemon, submitted->id());
  ASSERT_EQ(job.state(), Job::SUCCEEDED) << job.failure().DebugString() << daemon.Log();
  std::set<int64_t> ids;
  for (const Task& t : job.tasks()) {
    ASSERT_EQ(t.attempts_size(), 1) << t.DebugString();
    const traind::v1::Attempt& a = t.attempts(0);
    EXPECT_GT(a.slurm_job_id(), 0) << a.DebugString();
    EXPECT_EQ(a.pid(), 0);
    ids.insert(a.slurm_job_id());
    // Slurm knows the job by the traind job's id, and ran it to completion.
    const std::string seen = Sh(absl::StrCat(
        "squeue --noheader --states=all --jobs=", a.slurm_job_id(), " --format='%j|%T'"));
    EXPECT_EQ(absl::StripAsciiWhitespace(seen), absl::StrCat(job.id(), "|COMPLETED")) << seen;
    // The worker's log (Slurm's --output) is where the attempt says.
    std::ifstream log(a.log_path());
    std::string text((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
    EXPECT_TRUE(absl::StrContains(text, "task succeeded")) << a.log_path() << ": " << text;
  }
  EXPECT_EQ(ids.size(), 5u);
  ExpectSameFolds(job, LocalFolds(spec));
  // Workers' files are in the shared directory, which the state directory
  // links to.
  EXPECT_TRUE(std::filesystem::exists(dir.path() + "/shared/jobs/" + job.id() + "/task-0"));
  EXPECT_TRUE(std::filesystem::is_symlink(dir.path() + "/state/jobs"));
}

TEST(SlurmTest, AFoldCancelledWithScancelIsRetriedAndTheJobSucceeds) {
  REQUIRE_SLURM();
  TempDir dir;
  TraindProcess daemon(dir.path() + "/state", SlurmArgs(dir.path()));
  ASSERT_TRUE(daemon.Start()) << daemon.Log();
  const int epochs = 1000;
  const traind::v1::JobSpec spec = LongDigits(2, epochs);
  absl::StatusOr<Job> submitted = SubmitJob(daemon.stub(), spec);
  ASSERT_TRUE(submitted.ok()) << submitted.status();
  ASSERT_TRUE(WaitForEpochs(&daemon, submitted->id(), 0, 20)) << daemon.Log();
  const int64_t first = GetJob(daemon.stub(), submitted->id()).tasks(0).attempts(0).slurm_job_id();
  ASSERT_GT(first, 0);
  EXPECT_EQ(Sh(absl::StrCat("scancel ", first)), "");
  const Job job = WaitForEnd(&daemon, submitted->id());
  ASSERT_EQ(job.state(), Job::SUCCEEDED) << job.failure().DebugString() << daemon.Log();
  const Task& t = job.tasks(0);
  ASSERT_EQ(t.attempts_size(), 2) << t.DebugString();
  EXPECT_EQ(t.attempts(0).failure().reason(), Failure::WORKER_CRASHED) << t.DebugString();
  EXPECT_TRUE(absl::StrContains(t.attempts(0).failure().message(), "outside traind"))
      << t.attempts(0).failure().message();
  EXPECT_NE(t.attempts(1).slurm_job_id(), first);
  ExpectEpochsOncePerAttempt(Events(&daemon, job.id()), 2, epochs);
}

// What Slurm does before a time limit (sbatch --signal=B:USR2@...): SIGUSR2
// to the batch script. The worker checkpoints, the attempt ends PREEMPTED
// and the fold goes on in a new attempt, ending as if never interrupted.
TEST(SlurmTest, Usr2BeforeATimeLimitCheckpointsAndTheFoldResumesInANewAttempt) {
  REQUIRE_SLURM();
  TempDir dir;
  TraindProcess daemon(dir.path() + "/state", SlurmArgs(dir.path()));
  ASSERT_TRUE(daemon.Start()) << daemon.Log();
  const int epochs = 800;
  const traind::v1::JobSpec spec = LongDigits(2, epochs);
  absl::StatusOr<Job> submitted = SubmitJob(daemon.stub(), spec);
  ASSERT_TRUE(submitted.ok()) << submitted.status();
  ASSERT_TRUE(WaitForEpochs(&daemon, submitted->id(), 1, 20)) << daemon.Log();
  const int64_t first = GetJob(daemon.stub(), submitted->id()).tasks(1).attempts(0).slurm_job_id();
  EXPECT_EQ(Sh(absl::StrCat("scancel --batch --signal=USR2 ", first)), "");
  const Job job = WaitForEnd(&daemon, submitted->id());
  ASSERT_EQ(job.state(), Job::SUCCEEDED) << job.failure().DebugString() << daemon.Log();
  const Task& t = job.tasks(1);
  ASSERT_EQ(t.attempts_size(), 2) << t.DebugString();
  EXPECT_EQ(t.attempts(0).failure().reason(), Failure::PREEMPTED) << t.DebugString();
  const std::vector<JobEvent> events = Events(&daemon, job.id());
  ExpectEpochsOncePerAttempt(events, 2, epochs);
  EXPECT_TRUE(Resumed(events, 1, 2)) << "the second attempt did not resume from a checkpoint";
  ExpectSameFolds(job, LocalFolds(spec));
}

// How many epochs of a LongDigits fold one Slurm job trains in a second
// here, now: a short job through `d`, timed by its epoch counts.
double EpochsPerSecond(TraindProcess* d) {
  absl::StatusOr<Job> probe = SubmitJob(d->stub(), LongDigits(2, 1500));
  EXPECT_TRUE(probe.ok()) << probe.status();
  if (!probe.ok()) return 0;
  using Clock = std::chrono::steady_clock;
  std::optional<std::pair<Clock::time_point, int>> first, last;
  for (int i = 0; i < 120 * 20; ++i) {
    const Job job = GetJob(d->stub(), probe->id());
    if (job.state() == Job::SUCCEEDED || job.state() == Job::FAILED) break;
    const Task& t = job.tasks(0);
    if (t.state() == Task::RUNNING && t.attempts_size() == 1 && t.epochs_done() >= 50) {
      (first.has_value() ? last : first) = std::make_pair(Clock::now(), t.epochs_done());
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(WaitForEnd(d, probe->id()).state(), Job::SUCCEEDED);
  if (!first.has_value() || !last.has_value() || last->second <= first->second) {
    ADD_FAILURE() << "the probe job's fold 0 was not seen training";
    return 0;
  }
  const double seconds = std::chrono::duration<double>(last->first - first->first).count();
  return (last->second - first->second) / seconds;
}

// A fold that takes `seconds` of training at the rate measured now.
int EpochsFor(TraindProcess* d, double seconds) {
  const double rate = EpochsPerSecond(d);
  const int epochs = std::clamp(static_cast<int>(rate * seconds), 3000, 200000);
  std::cerr << "[ calibrated ] " << rate << " epochs/s: " << epochs << " epochs for " << seconds
            << " s\n";
  return epochs;
}

// A job of two LongDigits folds of about `seconds` each (at the rate
// measured first), run through `d` until one of its folds needed more than
// one attempt: a machine that gets faster after the measurement can finish
// both inside their first attempts, and then it runs once more with twice
// the epochs. Every run must succeed with every epoch once.
struct StoppedRun {
  Job job;
  std::vector<JobEvent> events;
};
StoppedRun RunUntilAFoldIsStopped(TraindProcess* d, double seconds) {
  int epochs = EpochsFor(d, seconds);
  StoppedRun run;
  for (int round = 0; round < 2; ++round, epochs *= 2) {
    absl::StatusOr<Job> submitted = SubmitJob(d->stub(), LongDigits(2, epochs));
    EXPECT_TRUE(submitted.ok()) << submitted.status();
    if (!submitted.ok()) break;
    run.job = WaitForEnd(d, submitted->id(), 500);
    EXPECT_EQ(run.job.state(), Job::SUCCEEDED) << run.job.failure().DebugString() << d->Log();
    run.events = Events(d, run.job.id());
    ExpectEpochsOncePerAttempt(run.events, 2, epochs);
    for (const Task& t : run.job.tasks()) {
      if (t.attempts_size() >= 2) return run;
    }
    std::cerr << "[ too short ] both folds of " << epochs
              << " epochs ended inside one attempt; again with twice as many\n";
  }
  ADD_FAILURE() << "the time limit never stopped a fold: " << run.job.DebugString();
  return run;
}

// A real time limit shorter than the fold (--time=1: one minute). Slurm
// sends SIGUSR2 signal_before_limit ahead, at its first time-limit check
// (every 30 s) from a minute before that on: here 10 to 40 s after the job
// starts. The worker checkpoints, and each new attempt goes on from there
// until the fold is done: every epoch once.
TEST(SlurmTest, AFoldLongerThanItsTimeLimitGoesOnAcrossAttemptsWithoutLosingAnEpoch) {
  REQUIRE_SLURM();
  TempDir dir;
  TraindProcess daemon(
      dir.path() + "/state",
      SlurmArgs(dir.path(), {"--slurm-sbatch-arg=--time=1", "--slurm-signal-before-limit=20s",
                             "--max-restarts=0"}));
  ASSERT_TRUE(daemon.Start()) << daemon.Log();
  const StoppedRun run = RunUntilAFoldIsStopped(&daemon, 60);
  ASSERT_EQ(run.job.state(), Job::SUCCEEDED);
  for (const Task& t : run.job.tasks()) {
    for (int a = 0; a + 1 < t.attempts_size(); ++a) {
      EXPECT_EQ(t.attempts(a).failure().reason(), Failure::PREEMPTED) << t.DebugString();
      EXPECT_TRUE(Resumed(run.events, t.index(), a + 2)) << t.DebugString();
    }
  }
}

// A time limit whose warning never reaches the worker (here it is sent as
// SIGURG, which the batch shell ignores; on a cluster, a warning Slurm sent
// before the batch step ran): the SIGTERM at the limit still makes the
// worker checkpoint, squeue says TimeLimit, and the fold goes on from there.
// (Slurm checks time limits every 30 s: a one-minute job ends 60 to 90 s
// after it started, so the fold is made longer than that with room for a
// machine that speeds up once other tests end.)
TEST(SlurmTest, ATimeLimitWithoutItsWarningStillResumesFromTheCheckpoint) {
  REQUIRE_SLURM();
  TempDir dir;
  TraindProcess daemon(
      dir.path() + "/state",
      SlurmArgs(dir.path(), {"--slurm-sbatch-arg=--time=1", "--slurm-sbatch-arg=--signal=B:URG@50",
                             "--max-restarts=0"}));
  ASSERT_TRUE(daemon.Start()) << daemon.Log();
  const StoppedRun run = RunUntilAFoldIsStopped(&daemon, 150);
  ASSERT_EQ(run.job.state(), Job::SUCCEEDED);
  for (const Task& t : run.job.tasks()) {
    for (int a = 0; a + 1 < t.attempts_size(); ++a) {
      const Failure& f = t.attempts(a).failure();
      EXPECT_EQ(f.reason(), Failure::PREEMPTED) << t.DebugString();
      EXPECT_TRUE(absl::StrContains(f.message(), "reached its time limit before")) << f.message();
      EXPECT_TRUE(Resumed(run.events, t.index(), a + 2)) << t.DebugString();
    }
  }
}

// traind stopped (SIGTERM: its Slurm jobs are left running) or killed
// (SIGKILL) while folds run in Slurm, then started again.
class SlurmRestartTest : public ::testing::TestWithParam<int> {};

TEST_P(SlurmRestartTest, TraindAdoptsTheRunningSlurmJobsAndResubmitsNothing) {
  REQUIRE_SLURM();
  const int sig = GetParam();
  TempDir dir;
  const std::vector<std::string> args = SlurmArgs(dir.path());
  auto daemon = std::make_unique<TraindProcess>(dir.path() + "/state", args);
  ASSERT_TRUE(daemon->Start()) << daemon->Log();
  const int epochs = 1000;
  const traind::v1::JobSpec spec = LongDigits(2, epochs);
  absl::StatusOr<Job> submitted = SubmitJob(daemon->stub(), spec);
  ASSERT_TRUE(submitted.ok()) << submitted.status();
  // Fold 0 trains (fold 1 may still wait in Slurm's queue on a busy node):
  // every task traind has in Slurm at the kill is adopted.
  ASSERT_TRUE(WaitForEpochs(daemon.get(), submitted->id(), 0, 20)) << daemon->Log();
  const Job before = GetJob(daemon->stub(), submitted->id());
  const int status = daemon->Stop(sig);
  if (sig == SIGKILL) {
    ASSERT_EQ(status & 0x7f, SIGKILL);
  } else {
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status << daemon->Log();
  }
  int in_slurm = 0;
  for (const Task& t : before.tasks()) {
    in_slurm += t.state() == Task::STARTING || t.state() == Task::RUNNING;
  }
  ASSERT_GE(in_slurm, 1);
  daemon.reset();
  auto again = std::make_unique<TraindProcess>(dir.path() + "/state", args);
  ASSERT_TRUE(again->Start()) << again->Log();
  const Job job = WaitForEnd(again.get(), submitted->id());
  ASSERT_EQ(job.state(), Job::SUCCEEDED) << job.failure().DebugString() << again->Log();
  for (int i = 0; i < 2; ++i) {
    const Task& t = job.tasks(i);
    ASSERT_EQ(t.attempts_size(), 1) << "task " << i << " was run again: " << t.DebugString();
    if (before.tasks(i).attempts_size() > 0) {
      EXPECT_EQ(t.attempts(0).slurm_job_id(), before.tasks(i).attempts(0).slurm_job_id());
    }
  }
  EXPECT_TRUE(absl::StrContains(again->Log(), absl::StrCat("tasks_adopted=", in_slurm)))
      << again->Log();
  ExpectEpochsOncePerAttempt(Events(again.get(), job.id()), 2, epochs);
}

INSTANTIATE_TEST_SUITE_P(StopAndKill, SlurmRestartTest, ::testing::Values(SIGTERM, SIGKILL),
                         [](const ::testing::TestParamInfo<int>& p) {
                           return p.param == SIGKILL ? std::string("KillNine")
                                                     : std::string("Sigterm");
                         });

// With tls set, workers call back over TLS on the worker address: they trust
// the CA given as slurm.worker_ca (a CA-signed certificate), or the
// certificate itself (a self-signed one). A worker without that trust cannot
// get its task.
TEST(SlurmTest, WorkersCallBackOverTls) {
  REQUIRE_SLURM();
  TempDir dir;
  const std::string d = dir.path();
  const std::string ec = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2";
  for (const std::string& c : {
           "openssl req -x509 " + ec + " -subj /CN=test-ca -keyout " + d + "/ca.key -out " + d +
               "/ca.pem",
           "printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\\n' > " + d + "/san.ext",
           "openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj "
           "/CN=localhost -keyout " +
               d + "/server.key -out " + d + "/server.csr",
           "openssl x509 -req -days 2 -in " + d + "/server.csr -CA " + d + "/ca.pem -CAkey " + d +
               "/ca.key -CAcreateserial -extfile " + d + "/san.ext -out " + d + "/server.pem",
           "openssl req -x509 " + ec + " -subj /CN=localhost -addext " +
               "subjectAltName=IP:127.0.0.1 -keyout " + d + "/self.key -out " + d + "/self.pem",
       }) {
    std::string out;
    ASSERT_EQ(RunCommand(c + " 2>&1", &out), 0) << c << ": " << out;
  }
  struct Case {
    std::string name;
    std::vector<std::string> flags;
  };
  for (const Case& c : {
           Case{"ca",
                {"--tls-cert=" + d + "/server.pem", "--tls-key=" + d + "/server.key",
                 "--slurm-worker-ca=" + d + "/ca.pem"}},
           Case{"self-signed", {"--tls-cert=" + d + "/self.pem", "--tls-key=" + d + "/self.key"}},
       }) {
    SCOPED_TRACE(c.name);
    TraindProcess daemon(d + "/state-" + c.name, SlurmArgs(d + "/" + c.name, c.flags));
    ASSERT_TRUE(daemon.Start()) << daemon.Log();
    absl::StatusOr<Job> submitted = SubmitJob(daemon.stub(), IrisExampleSpec(2, 5));
    ASSERT_TRUE(submitted.ok()) << submitted.status();
    const Job job = WaitForEnd(&daemon, submitted->id());
    EXPECT_EQ(job.state(), Job::SUCCEEDED) << job.failure().DebugString() << daemon.Log();
  }
  // A worker that does not trust the certificate (the CA-signed one, with
  // only itself as the trust root) gets no task: it fails, not trains.
  TraindProcess daemon(
      d + "/state-distrust",
      SlurmArgs(d + "/distrust",
                {"--tls-cert=" + d + "/server.pem", "--tls-key=" + d + "/server.key",
                 "--slurm-worker-ca=" + d + "/self.pem", "--max-restarts=0"}));
  ASSERT_TRUE(daemon.Start()) << daemon.Log();
  absl::StatusOr<Job> submitted = SubmitJob(daemon.stub(), IrisExampleSpec(2, 5));
  ASSERT_TRUE(submitted.ok()) << submitted.status();
  const Job job = WaitForEnd(&daemon, submitted->id());
  EXPECT_EQ(job.state(), Job::FAILED) << daemon.Log();
  std::ifstream log(job.tasks(0).attempts(0).log_path());
  std::string text((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
  EXPECT_TRUE(absl::StrContains(text, "cannot fetch the task")) << text;
}

// sbatch --hold is scontrol hold from the start: the task waits in Slurm's
// queue with Slurm's reason (and no heartbeat is due meanwhile), then runs
// once released.
TEST(SlurmTest, AHeldSlurmJobIsTheTasksWaitReasonUntilReleased) {
  REQUIRE_SLURM();
  TempDir dir;
  TraindProcess daemon(dir.path() + "/state", SlurmArgs(dir.path(), {"--slurm-sbatch-arg=--hold",
                                                                     "--heartbeat-timeout=5s"}));
  ASSERT_TRUE(daemon.Start()) << daemon.Log();
  absl::StatusOr<Job> submitted = SubmitJob(daemon.stub(), IrisExampleSpec(2));
  ASSERT_TRUE(submitted.ok()) << submitted.status();
  Job job;
  bool held = false;
  for (int i = 0; i < 200 && !held; ++i) {
    job = GetJob(daemon.stub(), submitted->id());
    held = job.tasks(0).wait_reason() == Task::HELD;
    if (!held) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_TRUE(held) << job.DebugString();
  EXPECT_EQ(job.tasks(0).state(), Task::STARTING);
  EXPECT_TRUE(absl::StrContains(job.tasks(0).wait_detail(), "JobHeldUser"))
      << job.tasks(0).wait_detail();
  // Longer than the heartbeat timeout: a job waiting in Slurm is not hung.
  // (A timeout short enough for this wait, but not so short that a worker
  // starting on a loaded machine misses it once released.)
  std::this_thread::sleep_for(std::chrono::seconds(6));
  job = GetJob(daemon.stub(), submitted->id());
  EXPECT_EQ(job.tasks(0).attempts_size(), 1) << job.DebugString();
  for (const Task& t : job.tasks()) {
    EXPECT_EQ(Sh(absl::StrCat("scontrol release ", t.attempts(0).slurm_job_id())), "");
  }
  job = WaitForEnd(&daemon, submitted->id());
  ASSERT_EQ(job.state(), Job::SUCCEEDED) << job.failure().DebugString() << daemon.Log();
  EXPECT_EQ(job.tasks(0).wait_reason(), Task::WAIT_REASON_UNSPECIFIED);
  EXPECT_EQ(job.tasks(0).attempts_size(), 1);
}

// GPU tasks through Slurm without a GPU: a copy of traind-worker beside the
// CPU-backed stand-in for the CUDA plugin (as in gpu_path_test.cc), which
// counts the GPUs in CUDA_VISIBLE_DEVICES (Slurm's gres: two fake GPUs here)
// and joins the ranks of a multi-GPU task over unix sockets in place of NCCL.
class SlurmGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string bin = dir_.path() + "/bin";
    std::filesystem::create_directories(bin);
    const std::string worker = bin + "/traind-worker";
    std::filesystem::copy_file(TRAIND_WORKER_PATH, worker);
    std::filesystem::copy_file(TRAIND_CPU_BACKED_CUDA_PLUGIN_PATH, bin + "/libtraind_cuda.so");
    std::filesystem::permissions(worker, std::filesystem::perms::owner_all);
    // Through a wrapper that says which GPUs it was given.
    wrapper_ = bin + "/worker.sh";
    std::ofstream out(wrapper_);
    out << "#!/bin/sh\necho \"visible devices: [$CUDA_VISIBLE_DEVICES]\" >&2\nexec " << worker
        << " \"$@\"\n";
    out.close();
    chmod(wrapper_.c_str(), 0755);
  }
  Job Run(TraindProcess* d, int gpus) {
    traind::v1::JobSpec spec = IrisExampleSpec(2, 20);
    spec.mutable_resources()->set_device(traind::v1::GPU);
    spec.mutable_resources()->set_count(gpus);
    absl::StatusOr<Job> submitted = SubmitJob(d->stub(), spec);
    EXPECT_TRUE(submitted.ok()) << submitted.status();
    if (!submitted.ok()) return Job();
    return WaitForEnd(d, submitted->id());
  }
  // What the rank's worker said it was given: the devices between the brackets.
  static std::string Visible(const std::string& log_path) {
    std::ifstream log(log_path);
    std::string text((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
    const size_t at = text.find("visible devices: [");
    if (at == std::string::npos) return "(none said) " + text;
    return text.substr(at + 18, text.find(']', at) - at - 18);
  }
  TempDir dir_;
  std::string wrapper_;
};

// A GPU task asks Slurm for its GPU (--gres=gpu:1) and its worker trains on
// the one Slurm gave it; a two-GPU task is one Slurm job whose two ranks (one
// srun step) train data-parallel, as the one-rank fit up to float rounding.
TEST_F(SlurmGpuTest, GpuTasksAskSlurmForTheirGpusAndRanksShareOneSlurmJob) {
  REQUIRE_SLURM();
  TraindProcess daemon(dir_.path() + "/state",
                       SlurmArgs(dir_.path(), {"--slurm-gpus-per-node=2", "--worker=" + wrapper_,
                                               "--max-restarts=0"}));
  ASSERT_TRUE(daemon.Start()) << daemon.Log();
  const Job one = Run(&daemon, 1);
  ASSERT_EQ(one.state(), Job::SUCCEEDED) << one.failure().DebugString() << daemon.Log();
  for (const Task& t : one.tasks()) {
    ASSERT_EQ(t.attempts_size(), 1);
    const traind::v1::Attempt& a = t.attempts(0);
    const std::string shown = Sh(absl::StrCat("scontrol show job ", a.slurm_job_id()));
    EXPECT_TRUE(absl::StrContains(shown, "gpu:1")) << shown;
    const std::string visible = Visible(a.log_path());
    EXPECT_FALSE(visible.empty());
    EXPECT_EQ(visible.find(','), std::string::npos) << "not one GPU: " << visible;
  }
  const Job two = Run(&daemon, 2);
  ASSERT_EQ(two.state(), Job::SUCCEEDED) << two.failure().DebugString() << daemon.Log();
  for (int i = 0; i < two.tasks_size(); ++i) {
    const Task& t = two.tasks(i);
    ASSERT_EQ(t.attempts_size(), 1);
    const traind::v1::Attempt& a = t.attempts(0);
    const std::string shown = Sh(absl::StrCat("scontrol show job ", a.slurm_job_id()));
    EXPECT_TRUE(absl::StrContains(shown, "gpu:2")) << shown;
    EXPECT_TRUE(absl::StrContains(shown, "NumTasks=2")) << shown;
    for (int rank = 0; rank < 2; ++rank) {
      const std::string log =
          rank == 0 ? a.log_path()
                    : absl::StrCat(a.log_path().substr(0, a.log_path().size() - 4), ".rank-1.log");
      std::ifstream in(log);
      std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      EXPECT_TRUE(absl::StrContains(text, absl::StrCat("nccl ready: rank ", rank, " of 2")))
          << log << ":\n"
          << text;
      const std::string visible = Visible(log);
      EXPECT_EQ(std::count(visible.begin(), visible.end(), ','), 1)
          << "rank " << rank << " does not see the task's two GPUs: " << visible;
    }
    // Data-parallel over two ranks: the one-rank fit up to float rounding.
    for (const auto& [name, value] : one.tasks(i).result().val()) {
      EXPECT_NEAR(t.result().val().at(name), value, 1e-6 * std::max(1.0, std::abs(value)))
          << "fold " << i << " val " << name;
    }
  }
}

// SIGUSR2 to a multi-GPU task's batch script (what Slurm sends before a
// time limit) reaches both ranks through srun; they checkpoint and stop, and
// the fold goes on in a new attempt from that checkpoint.
TEST_F(SlurmGpuTest, Usr2ReachesEveryRankAndTheFoldResumes) {
  REQUIRE_SLURM();
  TraindProcess daemon(dir_.path() + "/state",
                       SlurmArgs(dir_.path(), {"--slurm-gpus-per-node=2", "--worker=" + wrapper_,
                                               "--max-restarts=0"}));
  ASSERT_TRUE(daemon.Start()) << daemon.Log();
  const int epochs = 400;
  traind::v1::JobSpec spec = LongDigits(2, epochs);
  spec.mutable_resources()->set_device(traind::v1::GPU);
  spec.mutable_resources()->set_count(2);
  absl::StatusOr<Job> submitted = SubmitJob(daemon.stub(), spec);
  ASSERT_TRUE(submitted.ok()) << submitted.status();
  ASSERT_TRUE(WaitForEpochs(&daemon, submitted->id(), 0, 20)) << daemon.Log();
  const int64_t first = GetJob(daemon.stub(), submitted->id()).tasks(0).attempts(0).slurm_job_id();
  EXPECT_EQ(Sh(absl::StrCat("scancel --batch --signal=USR2 ", first)), "");
  const Job job = WaitForEnd(&daemon, submitted->id());
  ASSERT_EQ(job.state(), Job::SUCCEEDED) << job.failure().DebugString() << daemon.Log();
  const Task& t = job.tasks(0);
  ASSERT_EQ(t.attempts_size(), 2) << t.DebugString();
  EXPECT_EQ(t.attempts(0).failure().reason(), Failure::PREEMPTED) << t.DebugString();
  const std::vector<JobEvent> events = Events(&daemon, job.id());
  ExpectEpochsOncePerAttempt(events, 2, epochs);
  EXPECT_TRUE(Resumed(events, 0, 2)) << "the second attempt did not resume from a checkpoint";
}

}  // namespace
}  // namespace traind::testing
