#include "server/launch/local_launcher.h"

#include <fcntl.h>
#include <spawn.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace traind::server {

LocalLauncher::LocalLauncher() : reaper_([this] { ReapLoop(); }) {}

LocalLauncher::~LocalLauncher() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  reaper_.join();
}

void LocalLauncher::SetExitCallback(ExitCallback callback) {
  absl::MutexLock lock(&mu_);
  callback_ = std::move(callback);
}

absl::StatusOr<int> LocalLauncher::Launch(const LaunchRequest& request) {
  if (request.argv.empty()) return absl::InvalidArgumentError("launch: empty argv");
  std::vector<char*> argv;
  for (const std::string& a : request.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  // The child arms its own parent-death signal (PR_SET_PDEATHSIG) first
  // thing and exits if its parent is no longer this process: posix_spawn
  // cannot set it, and vfork-style spawning is several times faster than
  // fork for a daemon with threads and a large address space.
  std::vector<std::string> env = request.env;
  env.push_back(absl::StrCat("TRAIND_PARENT_PID=", getpid()));
  std::vector<char*> envp;
  for (const std::string& e : env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);

  int log_fd = open(request.log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0640);
  if (log_fd < 0) {
    return absl::InternalError(
        absl::StrCat(request.log_path, ": cannot open worker log: ", strerror(errno)));
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, log_fd, 1);
  posix_spawn_file_actions_adddup2(&actions, log_fd, 2);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  // Its own process group, no blocked signals, and the signals traind
  // ignores or handles back at their defaults.
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK |
                                      POSIX_SPAWN_SETSIGDEF);
  posix_spawnattr_setpgroup(&attr, 0);
  sigset_t none, defaults;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&attr, &none);
  sigemptyset(&defaults);
  for (int sig : {SIGPIPE, SIGTERM, SIGINT, SIGHUP, SIGCHLD}) sigaddset(&defaults, sig);
  posix_spawnattr_setsigdefault(&attr, &defaults);

  absl::MutexLock lock(&mu_);
  pid_t pid = 0;
  int rc = posix_spawn(&pid, argv[0], &actions, &attr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  close(log_fd);
  if (rc != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(request.argv[0], ": cannot execute: ", strerror(rc)));
  }
  ++live_;
  return pid;
}

void LocalLauncher::Signal(int pid, int sig) {
  if (pid > 0) kill(-pid, sig);
}

void LocalLauncher::ReapLoop() {
  for (;;) {
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return live_ > 0 || stopping_; };
      mu_.AwaitWithTimeout(absl::Condition(&ready), absl::Seconds(1));
      if (stopping_) return;
      if (live_ == 0) continue;
    }
    int status = 0;
    // Poll rather than block, so the destructor never waits on a child.
    pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid == 0) {
      usleep(2000);
      continue;
    }
    if (pid < 0) {
      if (errno == ECHILD) {
        absl::MutexLock lock(&mu_);
        live_ = 0;
      }
      continue;
    }
    ProcessExit exit;
    exit.pid = pid;
    if (WIFEXITED(status)) exit.exit_code = WEXITSTATUS(status);
    if (WIFSIGNALED(status)) exit.signal = WTERMSIG(status);
    ExitCallback callback;
    {
      absl::MutexLock lock(&mu_);
      --live_;
      callback = callback_;
    }
    if (callback) callback(exit);
  }
}

absl::StatusOr<std::vector<std::string>> ProbeWorkerBackends(const std::string& worker_path) {
  int out[2];
  if (pipe2(out, O_CLOEXEC) != 0) return absl::InternalError(absl::StrCat("pipe: ", strerror(errno)));
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, out[1], 1);
  std::string flag = "--capabilities";
  char* argv[] = {const_cast<char*>(worker_path.c_str()), flag.data(), nullptr};
  char* envp[] = {const_cast<char*>("PATH=/usr/local/bin:/usr/bin:/bin"), nullptr};
  pid_t pid = 0;
  int rc = posix_spawn(&pid, worker_path.c_str(), &actions, nullptr, argv, envp);
  posix_spawn_file_actions_destroy(&actions);
  close(out[1]);
  if (rc != 0) {
    close(out[0]);
    return absl::FailedPreconditionError(
        absl::StrCat(worker_path, ": cannot execute: ", strerror(rc)));
  }
  std::string text;
  char buf[256];
  ssize_t n;
  while ((n = read(out[0], buf, sizeof(buf))) > 0 || (n < 0 && errno == EINTR)) {
    if (n > 0) text.append(buf, n);
  }
  close(out[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(worker_path, " --capabilities failed (status ", status, ")"));
  }
  std::vector<std::string> backends = absl::StrSplit(text, absl::ByAnyChar(" \n"), absl::SkipEmpty());
  return backends;
}

}  // namespace traind::server
