// The Slurm launcher's parts that need no Slurm: the sbatch command line, the
// batch script (run by bash here, with the environment Slurm would give it),
// squeue's output, Slurm's states and reasons in traind's terms, the exit
// record and the polling spacing. tests/integration/slurm_test.cc runs the
// launcher against a real Slurm.
#include "server/launch/slurm.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "server/launch/command.h"
#include "tests/testing/temp_dir.h"

namespace traind::server {
namespace {

using traind::v1::Failure;
using traind::v1::Task;

bool Has(const std::vector<std::string>& argv, const std::string& arg) {
  return std::find(argv.begin(), argv.end(), arg) != argv.end();
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(SbatchArgvTest, AsksForTheTasksResourcesAndTheSignalBeforeTheLimit) {
  SlurmOptions o;
  o.shared_dir = "/shared/traind";
  o.partition = "gpu";
  o.account = "ml";
  o.qos = "high";
  o.extra_sbatch_args = {"--time=04:00:00", "--constraint=a100"};
  o.signal_before_limit = absl::Seconds(120);
  LaunchRequest r;
  r.name = "0123456789ab";
  r.log_path = "/shared/traind/jobs/0123456789ab/task-2/attempt-1.log";
  r.cpus = 4;
  r.memory_bytes = (int64_t{3} << 30) + 1;  // rounds up to whole MiB
  r.gpus = 1;
  r.nice = 5;
  const std::vector<std::string> argv = SbatchArgv(o, r, "/shared/traind/slurm/scripts/x.sh");
  EXPECT_EQ(argv.front(), "sbatch");
  EXPECT_EQ(argv.back(), "/shared/traind/slurm/scripts/x.sh");
  for (const char* want :
       {"--parsable", "--job-name=0123456789ab",
        "--output=/shared/traind/jobs/0123456789ab/task-2/attempt-1.log", "--open-mode=append",
        "--chdir=/shared/traind", "--export=NONE", "--no-requeue", "--cpus-per-task=4",
        "--mem=3073M", "--gres=gpu:1", "--nice=5", "--signal=B:USR2@120", "--partition=gpu",
        "--account=ml", "--qos=high", "--time=04:00:00", "--constraint=a100"}) {
    EXPECT_TRUE(Has(argv, want)) << want;
  }
}

TEST(SbatchArgvTest, AMultiGpuAttemptIsOneJobOfOneTaskPerRankOnOneNode) {
  SlurmOptions o;
  o.shared_dir = "/s";
  LaunchRequest r;
  r.name = "j";
  r.log_path = "/s/l";
  r.cpus = 2;
  r.gpus = 4;
  r.memory_bytes = int64_t{1} << 30;
  const std::vector<std::string> argv = SbatchArgv(o, r, "/s/x.sh", 4);
  for (const char* want :
       {"--nodes=1", "--ntasks=4", "--cpus-per-task=2", "--gres=gpu:4", "--mem=4096M"}) {
    EXPECT_TRUE(Has(argv, want)) << want;
  }
  EXPECT_TRUE(Has(SbatchArgv(o, r, "/s/x.sh"), "--ntasks=1"));
}

TEST(SbatchArgvTest, ACpuTaskAsksForNoGpuAndDefaultsStayTheClusters) {
  SlurmOptions o;
  o.shared_dir = "/s";
  LaunchRequest r;
  r.name = "j";
  r.log_path = "/s/l";
  const std::vector<std::string> argv = SbatchArgv(o, r, "/s/x.sh");
  for (const std::string& a : argv) {
    EXPECT_FALSE(a.rfind("--gres", 0) == 0 || a.rfind("--partition", 0) == 0 ||
                 a.rfind("--account", 0) == 0 || a.rfind("--qos", 0) == 0 ||
                 a.rfind("--nice", 0) == 0 || a.rfind("--mem", 0) == 0)
        << a;
  }
  EXPECT_TRUE(Has(argv, "--cpus-per-task=1"));
}

TEST(ParseSbatchJobIdTest, ReadsTheIdWithOrWithoutACluster) {
  EXPECT_EQ(*ParseSbatchJobId("42\n"), 42);
  EXPECT_EQ(*ParseSbatchJobId("43;ci\n"), 43);
  EXPECT_EQ(*ParseSbatchJobId("sbatch: warning: something\n44\n"), 44);
  EXPECT_FALSE(ParseSbatchJobId("sbatch: error: Batch job submission failed").ok());
  EXPECT_FALSE(ParseSbatchJobId("").ok());
}

TEST(ParseSbatchJobIdTest, OnlyAControllerNeverReachedIsTriedAgain) {
  EXPECT_TRUE(SbatchNeverReachedSlurm(
      "sbatch: error: Batch job submission failed: Unable to contact slurm controller (connect "
      "failure)"));
  EXPECT_FALSE(SbatchNeverReachedSlurm(
      "sbatch: error: Batch job submission failed: Socket timed out on send/recv operation"));
  EXPECT_FALSE(SbatchNeverReachedSlurm(
      "sbatch: error: Batch job submission failed: Invalid partition name specified"));
}

TEST(SqueueTest, OneBatchedQueryAndItsOutput) {
  SlurmOptions o;
  const std::vector<std::string> argv = SqueueArgv(o, {"aaa", "bbb"});
  EXPECT_TRUE(Has(argv, "--name=aaa,bbb"));
  EXPECT_TRUE(Has(argv, "--states=all"));
  EXPECT_TRUE(Has(argv, "--noheader"));
  EXPECT_TRUE(Has(argv, "--format=%i|%T|%r"));
  int bad = 0;
  const std::vector<SlurmJobState> jobs =
      ParseSqueue("17|PENDING|Priority\n  18|RUNNING|None\ngarbage\n19|COMPLETED|None\n", &bad);
  ASSERT_EQ(jobs.size(), 3u);
  EXPECT_EQ(bad, 1);
  EXPECT_EQ(jobs[0].job_id, 17);
  EXPECT_EQ(jobs[0].state, "PENDING");
  EXPECT_EQ(jobs[0].reason, "Priority");
  EXPECT_EQ(jobs[1].state, "RUNNING");
  EXPECT_EQ(jobs[2].job_id, 19);
}

TEST(SlurmStatesTest, PendingAndFinalStates) {
  EXPECT_TRUE(SlurmStateIsPending("PENDING"));
  EXPECT_FALSE(SlurmStateIsPending("RUNNING"));
  for (const char* s : {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY",
                        "BOOT_FAIL", "DEADLINE", "PREEMPTED"}) {
    EXPECT_TRUE(SlurmStateIsFinal(s)) << s;
  }
  for (const char* s : {"PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "SUSPENDED"}) {
    EXPECT_FALSE(SlurmStateIsFinal(s)) << s;
  }
}

TEST(SlurmStatesTest, PendingReasonsAreWaitReasons) {
  EXPECT_EQ(SlurmWaitReason("Priority"), Task::PRIORITY);
  EXPECT_EQ(SlurmWaitReason("Resources"), Task::RESOURCES);
  EXPECT_EQ(SlurmWaitReason("None"), Task::RESOURCES);
  EXPECT_EQ(SlurmWaitReason("Dependency"), Task::DEPENDENCY);
  EXPECT_EQ(SlurmWaitReason("JobHeldUser"), Task::HELD);
  EXPECT_EQ(SlurmWaitReason("JobHeldAdmin"), Task::HELD);
  EXPECT_EQ(SlurmWaitReason("JobArrayTaskLimit"), Task::JOB_LIMIT);
  EXPECT_EQ(SlurmWaitReason("QOSMaxJobsPerUserLimit"), Task::LIMIT);
  EXPECT_EQ(SlurmWaitReason("AssocGrpGRES"), Task::LIMIT);
  EXPECT_EQ(SlurmWaitReason("PartitionTimeLimit"), Task::LIMIT);
}

TEST(SlurmStatesTest, EveryFinalStateWithoutAnExitRecordIsATypedFailure) {
  struct Case {
    const char* state;
    Failure::Reason reason;
  };
  for (const Case& c :
       {Case{"NODE_FAIL", Failure::WORKER_CRASHED}, Case{"BOOT_FAIL", Failure::WORKER_CRASHED},
        Case{"CANCELLED", Failure::WORKER_CRASHED}, Case{"TIMEOUT", Failure::TIMEOUT},
        Case{"DEADLINE", Failure::TIMEOUT}, Case{"OUT_OF_MEMORY", Failure::OUT_OF_MEMORY},
        Case{"PREEMPTED", Failure::PREEMPTED}, Case{"FAILED", Failure::WORKER_CRASHED},
        Case{"COMPLETED", Failure::WORKER_CRASHED}}) {
    std::optional<Failure> f = SlurmStateFailure(7, c.state, "None", false);
    ASSERT_TRUE(f.has_value()) << c.state;
    EXPECT_EQ(f->reason(), c.reason) << c.state;
    EXPECT_NE(f->message().find("Slurm job 7"), std::string::npos) << f->message();
  }
  // Cancelled by traind itself: a cancel, not a failure to retry.
  EXPECT_EQ(SlurmStateFailure(7, "CANCELLED", "None", true)->reason(), Failure::CANCELLED);
  EXPECT_NE(SlurmStateFailure(8, "NODE_FAIL", "NodeDown", false)->message().find("NodeDown"),
            std::string::npos);
}

// An exit record with a SIGTERM traind did not send: what squeue says of
// the job (the measured states: "COMPLETING|TimeLimit" then
// "TIMEOUT|TimeLimit" at a time limit, "COMPLETING|None" after a scancel).
TEST(SlurmStatesTest, ASigtermAtATimeLimitIsAPreemptionAndOtherwiseACrash) {
  const absl::Duration before = absl::Seconds(120);
  const SlurmJobState at_limit{7, "COMPLETING", "TimeLimit"};
  const SlurmJobState timed_out{7, "TIMEOUT", "TimeLimit"};
  const SlurmJobState preempted{7, "PREEMPTED", "None"};
  const SlurmJobState cancelled{7, "COMPLETING", "None"};
  const SlurmJobState other_job{8, "TIMEOUT", "TimeLimit"};
  Failure f = SlurmTermFailure(7, &at_limit, before);
  EXPECT_EQ(f.reason(), Failure::PREEMPTED);
  EXPECT_NE(f.message().find("Slurm job 7 reached its time limit"), std::string::npos)
      << f.message();
  EXPECT_NE(f.message().find("--signal=B:USR2@120"), std::string::npos) << f.message();
  EXPECT_EQ(SlurmTermFailure(7, &timed_out, before).reason(), Failure::PREEMPTED);
  EXPECT_EQ(SlurmTermFailure(7, &preempted, before).reason(), Failure::PREEMPTED);
  EXPECT_EQ(SlurmTermFailure(7, &cancelled, before).reason(), Failure::WORKER_CRASHED);
  EXPECT_EQ(SlurmTermFailure(7, &other_job, before).reason(), Failure::WORKER_CRASHED);
  f = SlurmTermFailure(7, nullptr, before);  // Slurm has forgotten it
  EXPECT_EQ(f.reason(), Failure::WORKER_CRASHED);
  EXPECT_NE(f.message().find("SIGTERM from outside traind"), std::string::npos) << f.message();
}

TEST(SqueueTest, OneJobById) {
  SlurmOptions o;
  o.squeue = "squeue";
  EXPECT_EQ(SqueueJobArgv(o, 42), (std::vector<std::string>{"squeue", "--noheader", "--states=all",
                                                            "--jobs=42", "--format=%i|%T|%r"}));
}

TEST(ExitRecordTest, Parses) {
  absl::StatusOr<SlurmExitRecord> r = ParseExitRecord("exit=3 signals=TERM,USR2\n");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->exit_code, 3);
  EXPECT_EQ(r->signal, 0);
  EXPECT_TRUE(r->got_term);
  EXPECT_TRUE(r->got_usr2);
  r = ParseExitRecord("exit=137 signals=-\n");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->signal, 9);
  EXPECT_FALSE(r->got_term);
  EXPECT_FALSE(ParseExitRecord("").ok());
  EXPECT_FALSE(ParseExitRecord("exit=abc").ok());
}

TEST(SlurmPollTest, SpacedAtFiveTimesTheLastQueryAndNeverBelowTheMinimum) {
  EXPECT_EQ(NextSlurmPoll(absl::Seconds(5), absl::Milliseconds(20)), absl::Seconds(5));
  EXPECT_EQ(NextSlurmPoll(absl::Seconds(5), absl::Seconds(3)), absl::Seconds(15));
}

// The batch script, run as Slurm would run it (SLURM_JOB_ID and
// CUDA_VISIBLE_DEVICES in its environment), with a stand-in worker.
class BatchScriptTest : public ::testing::Test {
 protected:
  void SetUp() override {
    exits_ = dir_.path() + "/exits";
    ASSERT_EQ(mkdir(exits_.c_str(), 0700), 0);
  }
  // Starts the script for a request whose worker runs `shell` (sh -c);
  // returns the script's pid.
  pid_t Start(const std::string& shell, std::vector<std::string> env) {
    return StartArgv({"/bin/sh", "-c", shell}, std::move(env));
  }
  pid_t StartArgv(std::vector<std::string> argv, std::vector<std::string> env) {
    LaunchRequest r;
    r.argv = std::move(argv);
    r.env = std::move(env);
    const std::string path = dir_.path() + "/job.sh";
    {
      std::ofstream out(path);
      out << SlurmBatchScript(r, exits_);
    }
    const pid_t pid = fork();
    if (pid == 0) {
      setenv("SLURM_JOB_ID", "4242", 1);
      setenv("SLURM_RESTART_COUNT", "0", 1);
      setenv("CUDA_VISIBLE_DEVICES", "0", 1);
      setenv("NOT_FOR_THE_WORKER", "x", 1);
      execl("/bin/bash", "bash", path.c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
    return pid;
  }
  static bool WaitForFile(const std::string& path) {
    for (int i = 0; i < 400 && access(path.c_str(), F_OK) != 0; ++i) {
      absl::SleepFor(absl::Milliseconds(25));
    }
    return access(path.c_str(), F_OK) == 0;
  }
  int Wait(pid_t pid) {
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
  testing::TempDir dir_;
  std::string exits_;
};

TEST_F(BatchScriptTest, TheWorkerGetsExactlyItsEnvironmentAndItsStatusIsRecorded) {
  const std::string env_out = dir_.path() + "/env.txt";
  const pid_t pid =
      Start(absl::StrCat("env > ", env_out, "; exit 3"),
            {"TRAIND_WORKER_SECRET=it's secret", "OMP_NUM_THREADS=2", "PATH=/usr/bin:/bin"});
  EXPECT_EQ(Wait(pid), 3);
  const std::string env = ReadAll(env_out);
  EXPECT_NE(env.find("TRAIND_WORKER_SECRET=it's secret\n"), std::string::npos) << env;
  EXPECT_NE(env.find("OMP_NUM_THREADS=2\n"), std::string::npos) << env;
  EXPECT_NE(env.find("SLURM_JOB_ID=4242\n"), std::string::npos) << env;
  EXPECT_NE(env.find("CUDA_VISIBLE_DEVICES=0\n"), std::string::npos) << env;
  EXPECT_EQ(env.find("NOT_FOR_THE_WORKER"), std::string::npos) << env;
  EXPECT_NE(env.find("TRAIND_STOP_SIGNALS_FILE=" + exits_ + "/4242.signals\n"), std::string::npos)
      << env;
  absl::StatusOr<SlurmExitRecord> r = ParseExitRecord(ReadAll(exits_ + "/4242"));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->exit_code, 3);
  EXPECT_FALSE(r->got_term);
  EXPECT_FALSE(r->got_usr2);
}

TEST_F(BatchScriptTest, ARequestThatSetsNoVisibleDevicesHidesTheJobsGpus) {
  const std::string env_out = dir_.path() + "/env.txt";
  const pid_t pid =
      Start(absl::StrCat("env > ", env_out), {"CUDA_VISIBLE_DEVICES=", "PATH=/usr/bin:/bin"});
  EXPECT_EQ(Wait(pid), 0);
  const std::string env = ReadAll(env_out);
  EXPECT_NE(env.find("CUDA_VISIBLE_DEVICES=\n"), std::string::npos) << env;
  EXPECT_EQ(env.find("CUDA_VISIBLE_DEVICES=0"), std::string::npos) << env;
}

// A stand-in worker (perl: a shell cannot handle a signal it was started
// with ignored, a program can) that does what traind-worker does: after
// `before_handlers` (perl), it handles SIGUSR2 by exiting 3 and takes a USR2
// written in $TRAIND_STOP_SIGNALS_FILE as received. It creates `ready` once
// it runs, `ready`.armed once its handler is in, and gives up (exit 0) after
// 10 s.
std::vector<std::string> StandInWorker(const std::string& ready,
                                       const std::string& before_handlers) {
  return {"/usr/bin/perl", "-e",
          absl::StrCat("open(my $r, '>', '", ready, "'); close($r); ", before_handlers,
                       "; $SIG{USR2} = sub { exit 3 }; open(my $a, '>', '", ready,
                       ".armed'); close($a); "
                       "if (open(my $f, '<', $ENV{TRAIND_STOP_SIGNALS_FILE})) "
                       "{ exit 3 if grep { $_ eq \"USR2\\n\" } <$f>; } "
                       "for (1 .. 200) { select(undef, undef, undef, 0.05); } exit 0;")};
}

TEST_F(BatchScriptTest, Usr2ReachesTheWorkerThroughTheScriptAndIsRecorded) {
  const std::string ready = dir_.path() + "/ready";
  const pid_t pid = StartArgv(StandInWorker(ready, ""), {"PATH=/usr/bin:/bin"});
  ASSERT_TRUE(WaitForFile(ready + ".armed"));  // its handler is in
  kill(pid, SIGUSR2);  // what sbatch --signal=B:USR2@... does: the batch shell only
  EXPECT_EQ(Wait(pid), 3);
  absl::StatusOr<SlurmExitRecord> r = ParseExitRecord(ReadAll(exits_ + "/4242"));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->exit_code, 3);
  EXPECT_TRUE(r->got_usr2);
  EXPECT_FALSE(r->got_term);
  EXPECT_NE(access((exits_ + "/4242.signals").c_str(), F_OK), 0) << "the signals file stays";
}

// Slurm sends its warning when it checks the time limits, which can be the
// moment the job starts: a worker that has not installed its handlers yet
// is neither killed by it nor misses it.
TEST_F(BatchScriptTest, AUsr2BeforeTheWorkersHandlersAreInIsNotLost) {
  const std::string ready = dir_.path() + "/ready";
  const pid_t pid = StartArgv(StandInWorker(ready, "sleep(1)"), {"PATH=/usr/bin:/bin"});
  ASSERT_TRUE(WaitForFile(ready));
  kill(pid, SIGUSR2);
  EXPECT_EQ(Wait(pid), 3);
  absl::StatusOr<SlurmExitRecord> r = ParseExitRecord(ReadAll(exits_ + "/4242"));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->exit_code, 3);
  EXPECT_TRUE(r->got_usr2);
}

TEST_F(BatchScriptTest, AWorkerKilledByASignalIsRecordedAsSuch) {
  const pid_t pid = Start("kill -KILL $$", {"PATH=/usr/bin:/bin"});
  EXPECT_EQ(Wait(pid), 137);
  absl::StatusOr<SlurmExitRecord> r = ParseExitRecord(ReadAll(exits_ + "/4242"));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->signal, SIGKILL);
}

TEST(RunCommandTest, CollectsOutputAndStatus) {
  absl::StatusOr<CommandResult> r =
      RunCommand({"/bin/sh", "-c", "echo out; echo err >&2; exit 5"}, absl::Seconds(10));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->exit_code, 5);
  EXPECT_EQ(r->out, "out\n");
  EXPECT_EQ(r->err, "err\n");
  EXPECT_EQ(CommandError({"sh"}, *r), "err");
  r = RunCommand({"/bin/sh", "-c", "sleep 10"}, absl::Milliseconds(200));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->exit_code, -1);
  EXPECT_FALSE(RunCommand({"/nonexistent/command"}, absl::Seconds(1)).ok());
}

}  // namespace
}  // namespace traind::server
