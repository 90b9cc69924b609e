#include "server/launch/local_launcher.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

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
  // Everything the child touches is prepared before fork: after fork only
  // async-signal-safe calls are allowed.
  std::vector<char*> argv;
  for (const std::string& a : request.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::vector<char*> envp;
  for (const std::string& e : request.env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);

  int log_fd = open(request.log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0640);
  if (log_fd < 0) {
    return absl::InternalError(
        absl::StrCat(request.log_path, ": cannot open worker log: ", strerror(errno)));
  }
  int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
  // A pipe that tells the parent whether exec failed (CLOEXEC: closed by a
  // successful exec).
  int exec_pipe[2];
  if (pipe2(exec_pipe, O_CLOEXEC) != 0) {
    close(log_fd);
    close(devnull);
    return absl::InternalError(absl::StrCat("pipe: ", strerror(errno)));
  }
  const pid_t parent = getpid();

  absl::MutexLock lock(&mu_);
  pid_t pid = fork();
  if (pid < 0) {
    int err = errno;
    close(log_fd);
    close(devnull);
    close(exec_pipe[0]);
    close(exec_pipe[1]);
    return absl::ResourceExhaustedError(absl::StrCat("fork: ", strerror(err)));
  }
  if (pid == 0) {
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);  // the daemon died before prctl
    sigset_t all;
    sigemptyset(&all);
    sigprocmask(SIG_SETMASK, &all, nullptr);
    dup2(devnull, 0);
    dup2(log_fd, 1);
    dup2(log_fd, 2);
    execve(argv[0], argv.data(), envp.data());
    int err = errno;
    (void)!write(exec_pipe[1], &err, sizeof(err));
    _exit(127);
  }
  setpgid(pid, pid);  // also here, so the group exists before we signal it
  close(log_fd);
  close(devnull);
  close(exec_pipe[1]);
  int child_errno = 0;
  ssize_t n;
  do {
    n = read(exec_pipe[0], &child_errno, sizeof(child_errno));
  } while (n < 0 && errno == EINTR);
  close(exec_pipe[0]);
  ++live_;
  if (n == sizeof(child_errno)) {
    // exec failed; the reaper collects the child and reports its exit 127.
    return absl::FailedPreconditionError(
        absl::StrCat(request.argv[0], ": cannot execute: ", strerror(child_errno)));
  }
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

}  // namespace traind::server
