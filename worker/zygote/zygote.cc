#include "worker/zygote/zygote.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace traind::zygote {
namespace {

bool ReadFull(int fd, void* data, size_t size) {
  char* p = static_cast<char*>(data);
  while (size > 0) {
    ssize_t n = read(fd, p, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

// In the forked worker: becomes the process the request describes and runs
// worker_main. Never returns.
[[noreturn]] void BecomeWorker(SpawnRequest& request, int control_fd, int gate,
                               int (*worker_main)(int, char**)) {
  close(control_fd);
  // Wait for traind's go: it comes once this process is traind's child (the
  // zygote has reaped the intermediate) and traind is tracking its pid. If
  // traind gave up on the request instead (no reply in time, the zygote
  // killed), the gate closes without a go and this process must not run:
  // traind may already have started the attempt another way.
  char c = 0;
  ssize_t n;
  do {
    n = read(gate, &c, 1);
  } while (n < 0 && errno == EINTR);
  if (n != 1 || c != 'g') _exit(0);
  close(gate);
  setpgid(0, 0);
  int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (devnull >= 0) dup2(devnull, 0);
  if (request.log_fd >= 0) {
    dup2(request.log_fd, 1);
    dup2(request.log_fd, 2);
  }
  // Nothing but stdin, stdout and stderr: not the zygote's descriptors,
  // not the passed log descriptor.
  close_range(3, ~0U, 0);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  for (int sig : {SIGPIPE, SIGTERM, SIGINT, SIGHUP, SIGCHLD}) signal(sig, SIG_DFL);
  clearenv();
  for (std::string& e : request.env) putenv(e.data());  // lives until exit
  std::vector<char*> argv;
  for (std::string& a : request.argv) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::exit(worker_main(static_cast<int>(request.argv.size()), argv.data()));
}

SpawnReply Spawn(SpawnRequest& request, int control_fd, int (*worker_main)(int, char**)) {
  SpawnReply reply;
  if (request.argv.empty()) {
    reply.error = EINVAL;
    reply.what = "empty argv";
    return reply;
  }
  int gate[2], report[2];
  if (pipe2(gate, O_CLOEXEC) != 0) {
    reply.error = errno;
    reply.what = "pipe";
    return reply;
  }
  if (pipe2(report, O_CLOEXEC) != 0) {
    reply.error = errno;
    reply.what = "pipe";
    close(gate[0]);
    close(gate[1]);
    return reply;
  }
  std::fflush(nullptr);
  pid_t mid = fork();
  if (mid == 0) {
    // The intermediate: forks the worker, tells the zygote its pid, exits.
    close(report[0]);
    close(gate[1]);
    pid_t worker = fork();
    if (worker == 0) {
      close(report[1]);
      BecomeWorker(request, control_fd, gate[0], worker_main);
    }
    int32_t msg[2] = {static_cast<int32_t>(worker), worker < 0 ? errno : 0};
    // Both sides set the group, so it is in place whichever runs first.
    if (worker > 0) setpgid(worker, worker);
    (void)!write(report[1], msg, sizeof(msg));
    _exit(0);
  }
  const int fork_errno = errno;
  close(gate[0]);
  close(report[1]);
  if (mid < 0) {
    close(gate[1]);
    close(report[0]);
    reply.error = fork_errno;
    reply.what = "fork";
    return reply;
  }
  int32_t msg[2] = {-1, EPIPE};
  const bool got = ReadFull(report[0], msg, sizeof(msg));
  close(report[0]);
  int status = 0;
  while (waitpid(mid, &status, 0) < 0 && errno == EINTR) {
  }
  // The intermediate is gone: the worker is traind's child now. traind
  // gets the gate's write end with the reply and lets the worker go.
  if (!got || msg[0] <= 0) {
    close(gate[1]);
    reply.error = got ? msg[1] : EPIPE;
    reply.what = "fork";
    return reply;
  }
  reply.pid = msg[0];
  reply.go_fd = gate[1];
  return reply;
}

}  // namespace

int RunZygote(int control_fd, int (*worker_main)(int, char**)) {
  for (;;) {
    absl::StatusOr<SpawnRequest> request = ReceiveSpawnRequest(control_fd);
    if (!request.ok()) {
      if (absl::IsNotFound(request.status())) return 0;
      std::fprintf(stderr, "traind-worker zygote: %s\n",
                   std::string(request.status().message()).c_str());
      if (!absl::IsInvalidArgument(request.status())) return 1;
      // A request it cannot read gets an answer, not silence.
      SpawnReply refused;
      refused.error = EINVAL;
      refused.what = std::string(request.status().message());
      if (!SendSpawnReply(control_fd, refused).ok()) return 1;
      continue;
    }
    SpawnReply reply = Spawn(*request, control_fd, worker_main);
    if (request->log_fd >= 0) close(request->log_fd);
    const bool sent = SendSpawnReply(control_fd, reply).ok();
    // traind holds the gate now (or, if the reply was lost, nobody: the
    // worker then sees it close and exits without running).
    if (reply.go_fd >= 0) close(reply.go_fd);
    if (!sent) return 1;
  }
}

}  // namespace traind::zygote
