#include "server/launch/command.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

extern char** environ;

namespace traind::server {

absl::StatusOr<CommandResult> RunCommand(const std::vector<std::string>& argv,
                                         absl::Duration timeout,
                                         const std::vector<std::string>* env) {
  if (argv.empty()) return absl::InvalidArgumentError("no command");
  int out[2], err[2];
  if (pipe2(out, O_CLOEXEC) != 0)
    return absl::InternalError(absl::StrCat("pipe: ", strerror(errno)));
  if (pipe2(err, O_CLOEXEC) != 0) {
    close(out[0]);
    close(out[1]);
    return absl::InternalError(absl::StrCat("pipe: ", strerror(errno)));
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, out[1], 1);
  posix_spawn_file_actions_adddup2(&actions, err[1], 2);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  // Its own process group: a timeout kills whatever it started too.
  posix_spawnattr_setflags(&attr,
                           POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETPGROUP);
  posix_spawnattr_setpgroup(&attr, 0);
  sigset_t none, defaults;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&attr, &none);
  sigemptyset(&defaults);
  for (int sig : {SIGPIPE, SIGTERM, SIGINT, SIGHUP, SIGCHLD}) sigaddset(&defaults, sig);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  std::vector<char*> envp;
  if (env != nullptr) {
    for (const std::string& e : *env) envp.push_back(const_cast<char*>(e.c_str()));
    envp.push_back(nullptr);
  }
  const int rc = posix_spawnp(&pid, argv[0].c_str(), &actions, &attr, args.data(),
                              env != nullptr ? envp.data() : environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  close(out[1]);
  close(err[1]);
  if (rc != 0) {
    close(out[0]);
    close(err[0]);
    return absl::FailedPreconditionError(absl::StrCat(argv[0], ": cannot run: ", strerror(rc)));
  }
  CommandResult r;
  pollfd fds[2] = {{out[0], POLLIN, 0}, {err[0], POLLIN, 0}};
  std::string* into[2] = {&r.out, &r.err};
  const size_t keep[2] = {4u << 20, 64u << 10};
  const absl::Time deadline = absl::Now() + timeout;
  bool killed = false;
  int open_fds = 2;
  while (open_fds > 0) {
    const int64_t left = absl::ToInt64Milliseconds(deadline - absl::Now());
    if (left <= 0 && !killed) {
      kill(-pid, SIGKILL);
      killed = true;
    }
    if (poll(fds, 2, killed ? 1000 : static_cast<int>(std::min<int64_t>(left, 1000))) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      char buf[4096];
      const ssize_t n = read(fds[i].fd, buf, sizeof(buf));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        close(fds[i].fd);
        fds[i].fd = -1;
        --open_fds;
      } else if (into[i]->size() < keep[i]) {
        into[i]->append(buf, n);
      }
    }
    if (killed && absl::Now() > deadline + absl::Seconds(5)) break;  // a grandchild holds a pipe
  }
  for (const pollfd& f : fds) {
    if (f.fd >= 0) close(f.fd);
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  if (killed) {
    absl::StrAppend(&r.err, "\n(killed after ", absl::FormatDuration(timeout), ")");
    r.exit_code = -1;
  }
  return r;
}

std::string CommandError(const std::vector<std::string>& argv, const CommandResult& r) {
  absl::string_view said = absl::StripAsciiWhitespace(r.err);
  if (said.empty()) said = absl::StripAsciiWhitespace(r.out);
  const std::string name = argv.empty() ? "command" : argv[0];
  if (said.empty()) {
    return r.exit_code < 0 ? absl::StrCat(name, " was killed")
                           : absl::StrCat(name, " exited with status ", r.exit_code);
  }
  return std::string(said);
}

}  // namespace traind::server
