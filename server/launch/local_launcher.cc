#include "server/launch/local_launcher.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "server/launch/command.h"
#include "traind/zygote_protocol.h"

namespace traind::server {

namespace {

int PidfdOpen(int pid) { return static_cast<int>(syscall(SYS_pidfd_open, pid, 0)); }

// "TRAIND_LAUNCH_NS=<CLOCK_MONOTONIC now>" (zygote::kLaunchStampEnv).
std::string LaunchStamp() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return absl::StrCat(zygote::kLaunchStampEnv, "=",
                      static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec);
}

// posix_spawn attributes of every child: no blocked signals, and the
// signals traind ignores or handles back at their defaults; with
// `own_group`, its own process group.
class SpawnAttributes {
 public:
  explicit SpawnAttributes(bool own_group) {
    posix_spawnattr_init(&attr_);
    posix_spawnattr_setflags(&attr_, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF |
                                         (own_group ? POSIX_SPAWN_SETPGROUP : 0));
    if (own_group) posix_spawnattr_setpgroup(&attr_, 0);
    sigset_t none, defaults;
    sigemptyset(&none);
    posix_spawnattr_setsigmask(&attr_, &none);
    sigemptyset(&defaults);
    for (int sig : {SIGPIPE, SIGTERM, SIGINT, SIGHUP, SIGCHLD}) sigaddset(&defaults, sig);
    posix_spawnattr_setsigdefault(&attr_, &defaults);
  }
  ~SpawnAttributes() { posix_spawnattr_destroy(&attr_); }
  SpawnAttributes(const SpawnAttributes&) = delete;
  SpawnAttributes& operator=(const SpawnAttributes&) = delete;
  const posix_spawnattr_t* get() const { return &attr_; }

 private:
  posix_spawnattr_t attr_;
};

}  // namespace

LocalLauncher::LocalLauncher(LocalLauncherOptions options) : options_(std::move(options)) {
  epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  wake_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (epoll_fd_ >= 0 && wake_fd_ >= 0) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = wake_fd_;
    epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, wake_fd_, &ev);
  }
  // Workers forked by the zygote are re-parented to this process only if it
  // is a child subreaper.
  zygote_enabled_ =
      !options_.zygote_worker.empty() && prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0;
  reaper_ = std::thread([this] { ReapLoop(); });
}

LocalLauncher::~LocalLauncher() {
  {
    absl::MutexLock zlock(&zygote_mu_);
    StopZygoteLocked();
  }
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (wake_fd_ >= 0) {
    uint64_t one = 1;
    (void)!write(wake_fd_, &one, sizeof(one));
  }
  reaper_.join();
  absl::MutexLock lock(&mu_);
  for (auto& [pid, fd] : children_) {
    if (fd >= 0) close(fd);
  }
  if (epoll_fd_ >= 0) close(epoll_fd_);
  if (wake_fd_ >= 0) close(wake_fd_);
}

void LocalLauncher::SetExitCallback(ExitCallback callback) {
  absl::MutexLock lock(&mu_);
  callback_ = std::move(callback);
  // The previous callback may be running on the reaper: wait until it has
  // returned, so that whatever it refers to may be destroyed after this.
  auto idle = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return callbacks_running_ == 0; };
  mu_.Await(absl::Condition(&idle));
}

void LocalLauncher::Track(int pid, bool may_have_exited) {
  // A worker forked by the zygote is this process's child before its pid
  // arrives here: if something killed it before it was let go, the reaper
  // has collected it already (during this request: older entries are gone).
  if (auto it = unclaimed_.find(pid); may_have_exited && it != unclaimed_.end()) {
    ready_.push_back(it->second);
    unclaimed_.erase(it);
    if (wake_fd_ >= 0) {
      uint64_t one = 1;
      (void)!write(wake_fd_, &one, sizeof(one));
    }
    return;
  }
  int fd = epoll_fd_ >= 0 ? PidfdOpen(pid) : -1;
  if (fd >= 0) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = fd;
    if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev) != 0) {
      close(fd);
      fd = -1;
    }
  }
  children_[pid] = fd;
}

absl::Status LocalLauncher::StartZygote() {
  if (!zygote_enabled_) return absl::OkStatus();
  absl::MutexLock zlock(&zygote_mu_);
  if (zygote_fd_ >= 0) return absl::OkStatus();
  return StartZygoteLocked();
}

int LocalLauncher::zygote_pid() {
  absl::MutexLock lock(&mu_);
  return zygote_pid_;
}

absl::Status LocalLauncher::StartZygoteLocked() {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) {
    return absl::InternalError(absl::StrCat("zygote: socketpair: ", strerror(errno)));
  }
  // dup2 onto the zygote's control fd clears close-on-exec, unless the end
  // already has that number: keep it clear of the low descriptors.
  if (sv[1] <= zygote::kZygoteControlFd) {
    int moved = fcntl(sv[1], F_DUPFD_CLOEXEC, 10);
    close(sv[1]);
    sv[1] = moved;
  }
  std::vector<std::string> argv_s = {options_.zygote_worker, zygote::kZygoteFlag};
  std::vector<char*> argv;
  for (std::string& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> env = options_.zygote_env;
  env.push_back(absl::StrCat("TRAIND_PARENT_PID=", getpid()));
  std::vector<char*> envp;
  for (std::string& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, sv[1], zygote::kZygoteControlFd);
  // Nothing else of traind's: descriptors it inherited without
  // close-on-exec (from its own parent) stop here.
  posix_spawn_file_actions_addclosefrom_np(&actions, zygote::kZygoteControlFd + 1);
  const SpawnAttributes attr(/*own_group=*/false);
  absl::MutexLock lock(&mu_);
  pid_t pid = 0;
  int rc = posix_spawn(&pid, argv[0], &actions, attr.get(), argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  close(sv[1]);
  if (rc != 0) {
    close(sv[0]);
    return absl::FailedPreconditionError(
        absl::StrCat(options_.zygote_worker, " --zygote: cannot execute: ", strerror(rc)));
  }
  zygote_fd_ = sv[0];
  zygote_pid_ = pid;
  zygote_pids_.insert(pid);
  Track(pid, /*may_have_exited=*/false);
  return absl::OkStatus();
}

void LocalLauncher::StopZygoteLocked() {
  if (zygote_fd_ < 0) return;
  // Closing the socket ends the zygote; the reaper collects it.
  close(zygote_fd_);
  zygote_fd_ = -1;
}

absl::StatusOr<int> LocalLauncher::LaunchThroughZygote(const LaunchRequest& request, int log_fd) {
  absl::MutexLock zlock(&zygote_mu_);
  {
    absl::MutexLock lock(&mu_);
    if (zygote_fd_ >= 0 && zygote_pid_ == 0) StopZygoteLocked();  // it exited
  }
  if (zygote_fd_ < 0) {
    if (absl::Status s = StartZygoteLocked(); !s.ok()) return s;
  }
  {
    // Exits collected before this request cannot be this request's worker.
    absl::MutexLock lock(&mu_);
    unclaimed_.clear();
  }
  zygote::SpawnRequest z;
  z.argv = request.argv;
  z.env = request.env;
  z.env.push_back(absl::StrCat("TRAIND_PARENT_PID=", getpid()));
  z.env.push_back(LaunchStamp());
  z.log_fd = log_fd;
  absl::Status sent = zygote::SendSpawnRequest(zygote_fd_, z);
  absl::StatusOr<zygote::SpawnReply> reply =
      sent.ok() ? zygote::ReceiveSpawnReply(zygote_fd_, options_.zygote_timeout)
                : absl::StatusOr<zygote::SpawnReply>(sent);
  if (!reply.ok()) {
    // A zygote that does not answer is replaced on the next launch. A worker
    // it may still fork never runs: its gate closes with the socket.
    {
      absl::MutexLock lock(&mu_);
      // Only while it is still this process's unreaped child (its pidfd
      // then still refers to it): never a recycled pid.
      if (auto it = children_.find(zygote_pid_); zygote_pid_ > 0 && it != children_.end()) {
        if (it->second >= 0) {
          syscall(SYS_pidfd_send_signal, it->second, SIGKILL, nullptr, 0);
        } else {
          kill(zygote_pid_, SIGKILL);
        }
      }
    }
    StopZygoteLocked();
    return reply.status();
  }
  if (reply->pid <= 0) {
    return absl::UnavailableError(
        absl::StrCat("zygote: ", reply->what, ": ", strerror(reply->error)));
  }
  {
    absl::MutexLock lock(&mu_);
    Track(reply->pid, /*may_have_exited=*/true);
  }
  // Tracked: let it run.
  const char go = 'g';
  if (reply->go_fd >= 0) {
    (void)!write(reply->go_fd, &go, 1);
    close(reply->go_fd);
  }
  return static_cast<int>(reply->pid);
}

absl::StatusOr<int> LocalLauncher::Launch(const LaunchRequest& request) {
  if (request.argv.empty()) return absl::InvalidArgumentError("launch: empty argv");
  int log_fd = open(request.log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0640);
  if (log_fd < 0) {
    return absl::InternalError(
        absl::StrCat(request.log_path, ": cannot open worker log: ", strerror(errno)));
  }
  if (zygote_enabled_ && request.argv[0] == options_.zygote_worker) {
    absl::StatusOr<int> pid = LaunchThroughZygote(request, log_fd);
    if (pid.ok()) {
      close(log_fd);
      return pid;
    }
    // Spawned directly instead; the zygote is restarted next time.
    std::fprintf(stderr, "%s WARN worker zygote failed, spawning directly: %s\n",
                 absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", absl::Now(), absl::UTCTimeZone()).c_str(),
                 std::string(pid.status().message()).c_str());
  }
  std::vector<char*> argv;
  for (const std::string& a : request.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  // The child arms its own parent-death signal (PR_SET_PDEATHSIG) first
  // thing and exits if its parent is no longer this process: posix_spawn
  // cannot set it, and vfork-style spawning is several times faster than
  // fork for a daemon with threads and a large address space.
  std::vector<std::string> env = request.env;
  env.push_back(absl::StrCat("TRAIND_PARENT_PID=", getpid()));
  env.push_back(LaunchStamp());
  std::vector<char*> envp;
  for (const std::string& e : env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, log_fd, 1);
  posix_spawn_file_actions_adddup2(&actions, log_fd, 2);
  posix_spawn_file_actions_addclosefrom_np(&actions, 3);  // nothing else of traind's
  // Its own process group, so that a signal reaches everything it started.
  const SpawnAttributes attr(/*own_group=*/true);

  absl::MutexLock lock(&mu_);
  pid_t pid = 0;
  int rc = posix_spawn(&pid, argv[0], &actions, attr.get(), argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  close(log_fd);
  if (rc != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(request.argv[0], ": cannot execute: ", strerror(rc)));
  }
  Track(pid, /*may_have_exited=*/false);
  return pid;
}

void LocalLauncher::Signal(int pid, int sig) {
  if (pid > 0) kill(-pid, sig);
}

void LocalLauncher::ReapLoop() {
  epoll_event events[16];
  for (;;) {
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return !children_.empty() || !ready_.empty() || stopping_;
      };
      mu_.AwaitWithTimeout(absl::Condition(&ready), absl::Seconds(1));
      if (stopping_) return;
      if (children_.empty() && ready_.empty()) continue;
    }
    if (wake_fd_ >= 0) {
      uint64_t count;
      (void)!read(wake_fd_, &count, sizeof(count));
    }
    // Collect every child that has ended (re-parented strays included, so
    // none is left a zombie), then sleep until a pidfd reports the next.
    // Without a zygote only the launcher's own children are collected
    // (others in this process, e.g. a RunCommand's, are waited for by
    // their owners).
    std::vector<int> own;
    if (!zygote_enabled_) {
      absl::MutexLock lock(&mu_);
      for (const auto& [pid, fd] : children_) own.push_back(pid);
    }
    for (size_t next = 0;;) {
      int status = 0;
      pid_t pid = 0;
      if (zygote_enabled_) {
        pid = waitpid(-1, &status, WNOHANG);
      } else {
        while (next < own.size() && (pid = waitpid(own[next], &status, WNOHANG)) == 0) ++next;
        if (next >= own.size()) break;
        ++next;
      }
      if (pid == 0) break;
      if (pid < 0) {
        if (errno == EINTR) continue;
        if (!zygote_enabled_) continue;  // not ours any more
        break;  // ECHILD: none has ended (a child started since is tracked)
      }
      ProcessExit exit;
      exit.pid = pid;
      if (WIFEXITED(status)) exit.exit_code = WEXITSTATUS(status);
      if (WIFSIGNALED(status)) exit.signal = WTERMSIG(status);
      ExitCallback callback;
      {
        absl::MutexLock lock(&mu_);
        auto it = children_.find(pid);
        if (it == children_.end()) {
          // Not tracked (yet): a zygote's worker whose pid is on its way to
          // Track, or a stray re-parented here. Kept for Track, bounded.
          if (unclaimed_.size() >= 4096) unclaimed_.erase(unclaimed_.begin());
          unclaimed_[pid] = exit;
          continue;
        }
        if (it->second >= 0) {
          epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, it->second, nullptr);
          close(it->second);
        }
        children_.erase(it);
        if (zygote_pids_.erase(pid) > 0) {
          if (pid == zygote_pid_) zygote_pid_ = 0;  // restarted at the next launch
          continue;
        }
        callback = callback_;
        if (callback) ++callbacks_running_;
      }
      if (callback) {
        callback(exit);
        absl::MutexLock lock(&mu_);
        --callbacks_running_;
      }
    }
    std::vector<ProcessExit> claimed;
    ExitCallback callback;
    {
      absl::MutexLock lock(&mu_);
      claimed.swap(ready_);
      callback = callback_;
      if (callback && !claimed.empty()) ++callbacks_running_;
    }
    if (callback && !claimed.empty()) {
      for (const ProcessExit& exit : claimed) callback(exit);
      absl::MutexLock lock(&mu_);
      --callbacks_running_;
    }
    bool pidfds = true;
    {
      absl::MutexLock lock(&mu_);
      for (const auto& [pid, fd] : children_) pidfds = pidfds && fd >= 0;
    }
    // Without pidfds (old kernels), poll.
    int n = epoll_fd_ >= 0 ? epoll_wait(epoll_fd_, events, 16, pidfds ? 200 : 2) : -1;
    if (n < 0 && epoll_fd_ < 0) usleep(2000);
  }
}

absl::StatusOr<std::vector<std::string>> ProbeWorkerBackends(const std::string& worker_path,
                                                             const std::vector<std::string>& env,
                                                             std::string* notes) {
  // Loading the CUDA plugin and asking the driver takes well under this.
  absl::StatusOr<CommandResult> r =
      RunCommand({worker_path, "--capabilities"}, absl::Seconds(60), &env);
  if (!r.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat(worker_path, ": cannot execute: ", r.status().message()));
  }
  std::string stripped(absl::StripAsciiWhitespace(r->err));
  if (r->exit_code != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(worker_path, " --capabilities failed (status ", r->exit_code, ")",
                     stripped.empty() ? "" : ": ", stripped));
  }
  if (notes != nullptr) *notes = std::move(stripped);
  std::vector<std::string> backends =
      absl::StrSplit(r->out, absl::ByAnyChar(" \n"), absl::SkipEmpty());
  return backends;
}

}  // namespace traind::server
