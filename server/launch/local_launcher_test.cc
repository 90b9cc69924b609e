#include "server/launch/local_launcher.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"
#include "server/launch/worker_environment.h"
#include "traind/zygote_protocol.h"

namespace traind::server {
namespace {

namespace fs = std::filesystem;

const char* const kChild = TRAIND_ZYGOTE_TEST_CHILD;

// Collects exits reported by a launcher.
class Exits {
 public:
  void Add(const ProcessExit& e) {
    absl::MutexLock lock(&mu_);
    ++count_[e.pid];
    last_[e.pid] = e;
  }
  // Waits for `pid`'s exit (at most 10 s).
  ProcessExit Wait(int pid) {
    absl::MutexLock lock(&mu_);
    auto seen = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return count_.count(pid) > 0; };
    EXPECT_TRUE(mu_.AwaitWithTimeout(absl::Condition(&seen), absl::Seconds(10)))
        << "no exit reported for pid " << pid;
    return last_[pid];
  }
  int Count(int pid) {
    absl::MutexLock lock(&mu_);
    return count_[pid];
  }
  std::map<int, int> All() {
    absl::MutexLock lock(&mu_);
    return count_;
  }

 private:
  absl::Mutex mu_;
  std::map<int, int> count_ ABSL_GUARDED_BY(mu_);
  std::map<int, ProcessExit> last_ ABSL_GUARDED_BY(mu_);
};

class LocalLauncherTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           absl::StrCat("traind-launcher-test-", getpid(), "-", GetParam() ? "zygote" : "spawn");
    fs::create_directories(dir_);
    LocalLauncherOptions o;
    if (GetParam()) {
      o.zygote_worker = kChild;
      o.zygote_env = {"PATH=/usr/bin:/bin"};
    }
    launcher_ = std::make_unique<LocalLauncher>(o);
    launcher_->SetExitCallback([this](const ProcessExit& e) { exits_.Add(e); });
    ASSERT_TRUE(launcher_->StartZygote().ok());
  }
  void TearDown() override {
    launcher_.reset();
    // Every exit was reported once, even counting late duplicates.
    for (const auto& [pid, count] : exits_.All()) EXPECT_LE(count, 1) << "pid " << pid;
    fs::remove_all(dir_);
  }
  LaunchRequest Request(std::vector<std::string> args, std::string log = "log") {
    LaunchRequest r;
    r.argv = {kChild};
    for (std::string& a : args) r.argv.push_back(std::move(a));
    r.env = {"ONLY=this", "PATH=/usr/bin:/bin"};
    r.log_path = (dir_ / log).string();
    return r;
  }
  std::string Read(const std::string& log) {
    std::ifstream in(dir_ / log);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }

  fs::path dir_;
  Exits exits_;
  std::unique_ptr<LocalLauncher> launcher_;
};

int64_t MonotonicNs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

TEST_P(LocalLauncherTest, WorkerIsOurChildWithItsOwnGroupEnvironmentAndLog) {
  const int64_t before_launch = MonotonicNs();
  if (GetParam()) {
    ASSERT_GT(launcher_->zygote_pid(), 0);
  } else {
    EXPECT_EQ(launcher_->zygote_pid(), 0);
  }
  absl::StatusOr<int> pid = launcher_->Launch(Request({"report"}));
  ASSERT_TRUE(pid.ok()) << pid.status();
  EXPECT_NE(*pid, launcher_->zygote_pid());
  ProcessExit e = exits_.Wait(*pid);
  EXPECT_EQ(e.exit_code, 0);  // 99: its parent was not the launcher's process
  EXPECT_EQ(e.signal, 0);
  const std::string log = Read("log");
  EXPECT_NE(log.find(absl::StrCat("ppid=", getpid(), "\n")), std::string::npos) << log;
  EXPECT_NE(log.find(absl::StrCat("pgid=", *pid, "\n")), std::string::npos) << log;
  EXPECT_NE(log.find("stdin=/dev/null\n"), std::string::npos) << log;
  EXPECT_NE(log.find("argv1=report\n"), std::string::npos) << log;
  EXPECT_NE(log.find("to stderr\n"), std::string::npos) << log;
  // Nothing of the launcher's (or the zygote's) leaks into the worker.
  std::vector<std::string> fds;
  std::istringstream fd_lines(log);
  for (std::string line; std::getline(fd_lines, line);) {
    if (line.rfind("fd ", 0) == 0) fds.push_back(line.substr(3));
  }
  std::sort(fds.begin(), fds.end());
  EXPECT_EQ(fds, (std::vector<std::string>{"0", "1", "2"}));
  // Exactly the request's environment, plus the parent's pid and the
  // launch's CLOCK_MONOTONIC stamp (taken while the test waited for it).
  std::vector<std::string> env;
  std::istringstream lines(log);
  const std::string stamp = absl::StrCat(zygote::kLaunchStampEnv, "=");
  int64_t launched = 0;
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("env " + stamp, 0) == 0) {
      EXPECT_TRUE(absl::SimpleAtoi(line.substr(4 + stamp.size()), &launched)) << line;
    } else if (line.rfind("env ", 0) == 0) {
      env.push_back(line.substr(4));
    }
  }
  EXPECT_GE(launched, before_launch);
  EXPECT_LE(launched, MonotonicNs());
  std::sort(env.begin(), env.end());
  EXPECT_EQ(env, (std::vector<std::string>{"ONLY=this", "PATH=/usr/bin:/bin",
                                           absl::StrCat("TRAIND_PARENT_PID=", getpid())}));
  EXPECT_EQ(exits_.Count(*pid), 1);
}

TEST_P(LocalLauncherTest, ExitStatusAndSignals) {
  absl::StatusOr<int> seven = launcher_->Launch(Request({"exit", "7"}));
  ASSERT_TRUE(seven.ok()) << seven.status();
  absl::StatusOr<int> sleeper = launcher_->Launch(Request({"sleep"}));
  ASSERT_TRUE(sleeper.ok()) << sleeper.status();
  EXPECT_EQ(exits_.Wait(*seven).exit_code, 7);
  launcher_->Signal(*sleeper, SIGTERM);
  ProcessExit e = exits_.Wait(*sleeper);
  EXPECT_EQ(e.signal, SIGTERM);
}

TEST_P(LocalLauncherTest, ManyLaunchesFromManyThreadsEachReportedOnce) {
  // Each thread waits for its own workers: a directly spawned worker dies
  // with the thread that spawned it (PR_SET_PDEATHSIG), as documented.
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      std::vector<std::pair<int, int>> started;  // pid, expected code
      for (int i = 0; i < 8; ++i) {
        const int code = t * 8 + i;
        absl::StatusOr<int> pid = launcher_->Launch(Request({"exit", std::to_string(code)}));
        ASSERT_TRUE(pid.ok()) << pid.status();
        started.emplace_back(*pid, code);
      }
      for (const auto& [pid, code] : started) {
        ProcessExit e = exits_.Wait(pid);
        EXPECT_EQ(e.signal, 0) << "pid " << pid;
        EXPECT_EQ(e.exit_code, code) << "pid " << pid;
        EXPECT_EQ(exits_.Count(pid), 1);
      }
    });
  }
  for (std::thread& t : threads) t.join();
}

// A launch right after the last child was reaped (the reaper then finds no
// child at all) must still be waited for.
TEST_P(LocalLauncherTest, BackToBackLaunchesNeverLoseAnExit) {
  for (int i = 0; i < 150; ++i) {
    absl::StatusOr<int> pid = launcher_->Launch(Request({"exit", std::to_string(i % 100)}));
    ASSERT_TRUE(pid.ok()) << pid.status();
    ASSERT_EQ(exits_.Wait(*pid).exit_code, i % 100) << "launch " << i;
  }
}

// A zygote that answers too late is replaced, and the attempt is started
// directly instead; the worker it forked meanwhile must never run (the
// attempt would run twice).
TEST(LocalLauncherZygoteTest, AWorkerWhoseRequestTimedOutNeverRuns) {
  const fs::path dir = fs::temp_directory_path() / absl::StrCat("traind-launcher-late-", getpid());
  fs::create_directories(dir);
  LocalLauncherOptions o;
  o.zygote_worker = kChild;
  o.zygote_env = {"PATH=/usr/bin:/bin"};
  o.zygote_timeout = absl::Milliseconds(2);  // many replies are late
  Exits exits;
  {
    LocalLauncher launcher(o);
    launcher.SetExitCallback([&](const ProcessExit& e) { exits.Add(e); });
    const std::string marks = (dir / "marks").string();
    for (int i = 0; i < 30; ++i) {
      LaunchRequest r;
      r.argv = {kChild, "mark", marks};
      r.env = {"PATH=/usr/bin:/bin"};
      r.log_path = (dir / "log").string();
      absl::StatusOr<int> pid = launcher.Launch(r);
      ASSERT_TRUE(pid.ok()) << pid.status();
      EXPECT_EQ(exits.Wait(*pid).exit_code, 0);
    }
    usleep(200 * 1000);  // a stray worker would have marked by now
    std::ifstream in(marks);
    int lines = 0;
    for (std::string line; std::getline(in, line);) ++lines;
    EXPECT_EQ(lines, 30);
  }
  fs::remove_all(dir);
}

// The zygote's protocol, driven by hand: a forked worker runs only when
// told to, and one whose gate closes without a go exits without running.
TEST(BaseWorkerEnvironmentTest, PassesOnlyOneDnnsIsaSettingsAndTheGemmPolicy) {
  const char* environ[] = {"HOME=/root",
                           "ONEDNN_MAX_CPU_ISA=AVX2",
                           "DNNL_CPU_ISA_HINTS=PREFER_YMM",
                           "ONEDNN_VERBOSE=1",
                           "ONEDNN_MAX_CPU_ISA_X=1",
                           "TRAIND_CPU_GEMM=onednn",
                           "TRAIND_CPU_GEMMX=1",
                           "LD_PRELOAD=/tmp/x.so",
                           "PATH=/home/me/bin",
                           nullptr};
  EXPECT_EQ(BaseWorkerEnvironment(environ),
            (std::vector<std::string>{"PATH=/usr/local/bin:/usr/bin:/bin", "LANG=C.UTF-8",
                                      "ONEDNN_MAX_CPU_ISA=AVX2", "DNNL_CPU_ISA_HINTS=PREFER_YMM",
                                      "TRAIND_CPU_GEMM=onednn"}));
  EXPECT_EQ(BaseWorkerEnvironment(nullptr),
            (std::vector<std::string>{"PATH=/usr/local/bin:/usr/bin:/bin", "LANG=C.UTF-8"}));
}

TEST(ZygoteProtocolTest, AWorkerRunsOnlyAfterItsGo) {
  ASSERT_EQ(prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0), 0);
  const fs::path dir = fs::temp_directory_path() / absl::StrCat("traind-zygote-gate-", getpid());
  fs::create_directories(dir);
  int sv[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv), 0);
  const pid_t zygote = fork();
  if (zygote == 0) {
    dup2(sv[1], zygote::kZygoteControlFd);
    execl(kChild, kChild, zygote::kZygoteFlag, static_cast<char*>(nullptr));
    _exit(127);
  }
  close(sv[1]);
  const std::string marks = (dir / "marks").string();
  auto spawn = [&]() -> zygote::SpawnReply {
    zygote::SpawnRequest request;
    request.argv = {kChild, "mark", marks};
    request.env = {"PATH=/usr/bin:/bin"};
    request.log_fd = open((dir / "log").c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0640);
    EXPECT_TRUE(zygote::SendSpawnRequest(sv[0], request).ok());
    close(request.log_fd);
    absl::StatusOr<zygote::SpawnReply> reply = zygote::ReceiveSpawnReply(sv[0], absl::Seconds(10));
    EXPECT_TRUE(reply.ok()) << reply.status();
    return reply.ok() ? *reply : zygote::SpawnReply();
  };
  auto lines = [&] {
    std::ifstream in(marks);
    int n = 0;
    for (std::string line; std::getline(in, line);) ++n;
    return n;
  };
  // Closed without a go: exits 0 without running, as this process's child.
  zygote::SpawnReply held = spawn();
  ASSERT_GT(held.pid, 0);
  ASSERT_GE(held.go_fd, 0);
  close(held.go_fd);
  int status = -1;
  ASSERT_EQ(waitpid(held.pid, &status, 0), held.pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  EXPECT_EQ(lines(), 0);
  // Let go: runs.
  zygote::SpawnReply go = spawn();
  ASSERT_GT(go.pid, 0);
  ASSERT_EQ(write(go.go_fd, "g", 1), 1);
  close(go.go_fd);
  ASSERT_EQ(waitpid(go.pid, &status, 0), go.pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  EXPECT_EQ(lines(), 1);
  // A request it cannot parse is answered, and the zygote carries on.
  ASSERT_EQ(send(sv[0], "xx", 2, MSG_NOSIGNAL), 2);
  absl::StatusOr<zygote::SpawnReply> refused = zygote::ReceiveSpawnReply(sv[0], absl::Seconds(10));
  ASSERT_TRUE(refused.ok()) << refused.status();
  EXPECT_LE(refused->pid, 0);
  EXPECT_EQ(refused->error, EINVAL);
  zygote::SpawnReply again = spawn();
  ASSERT_GT(again.pid, 0);
  close(again.go_fd);
  ASSERT_EQ(waitpid(again.pid, &status, 0), again.pid);
  close(sv[0]);  // the zygote exits
  ASSERT_EQ(waitpid(zygote, &status, 0), zygote);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  fs::remove_all(dir);
}

TEST_P(LocalLauncherTest, ADeadZygoteIsReplaced) {
  if (!GetParam()) GTEST_SKIP() << "no zygote in this mode";
  const int first = launcher_->zygote_pid();
  ASSERT_GT(first, 0);
  kill(first, SIGKILL);
  for (int i = 0; i < 2000 && launcher_->zygote_pid() == first; ++i) usleep(1000);
  ASSERT_EQ(launcher_->zygote_pid(), 0) << "the launcher did not notice its zygote die";
  absl::StatusOr<int> pid = launcher_->Launch(Request({"exit", "3"}));
  ASSERT_TRUE(pid.ok()) << pid.status();
  EXPECT_EQ(exits_.Wait(*pid).exit_code, 3);
  EXPECT_GT(launcher_->zygote_pid(), 0);
  EXPECT_NE(launcher_->zygote_pid(), first);
  // The zygote's own exit is not a worker's.
  EXPECT_EQ(exits_.Count(first), 0);
}

TEST_P(LocalLauncherTest, UnexecutableWorkerIsAnError) {
  LaunchRequest r = Request({"exit", "0"});
  r.argv[0] = (dir_ / "no-such-worker").string();
  absl::StatusOr<int> pid = launcher_->Launch(r);
  ASSERT_FALSE(pid.ok());
  EXPECT_NE(pid.status().message().find("no-such-worker"), std::string::npos) << pid.status();
}

INSTANTIATE_TEST_SUITE_P(Modes, LocalLauncherTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& p) {
                           return p.param ? "Zygote" : "Spawn";
                         });

}  // namespace
}  // namespace traind::server
