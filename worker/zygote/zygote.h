// The worker zygote: a traind-worker process, started once by traind, that
// has done its dynamic linking and static initialization and then forks a
// fresh worker for every task attempt.
//
// A worker started this way is still a new process: the zygote never
// starts a thread, never opens a gRPC channel, never loads the CUDA plugin
// and never trains, so each forked worker begins from the same clean image
// and its exit still releases everything it acquired (CUDA contexts
// included). What it saves is exec + dynamic linking + static initializers
// of ~60 shared libraries, paid once instead of once per fold.
//
// Process tree: traind (a child subreaper) -> zygote -> intermediate ->
// worker. The intermediate exits as soon as the worker is forked, so the
// worker is re-parented to traind before traind hears its pid: traind
// waits for it, signals its process group and sees it exit exactly as if
// it had spawned it. The worker then arms PR_SET_PDEATHSIG against traind.
//
// Protocol, on a SOCK_SEQPACKET socketpair (fd kZygoteControlFd in the
// zygote): one request message per worker = a SpawnRequest (argv, the
// complete environment, and the log file descriptor as SCM_RIGHTS); one
// reply message = a SpawnReply (the worker's pid and its go gate, or errno
// and what failed). traind tracks the pid, then lets the worker go: a
// worker cannot exit before traind knows it, and one whose request traind
// gave up on (a late reply) never runs. The zygote exits when traind closes
// its end (or dies: PR_SET_PDEATHSIG).
#ifndef TRAIND_WORKER_ZYGOTE_ZYGOTE_H_
#define TRAIND_WORKER_ZYGOTE_ZYGOTE_H_

#include <sys/types.h>

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace traind::zygote {

// The zygote's end of the control socket, as traind passes it.
inline constexpr int kZygoteControlFd = 3;
// The argument that makes traind-worker a zygote.
inline constexpr char kZygoteFlag[] = "--zygote";

struct SpawnRequest {
  std::vector<std::string> argv;  // argv[0]: the program's name
  std::vector<std::string> env;   // the complete environment ("NAME=value")
  int log_fd = -1;                // becomes the worker's stdout and stderr
};

struct SpawnReply {
  pid_t pid = -1;  // > 0: the worker, already re-parented to traind
  int error = 0;   // errno when pid <= 0
  std::string what;
  // With a pid: the write end of the worker's gate (passed as SCM_RIGHTS).
  // The worker runs only after traind writes 'g' to it; if it is closed
  // without, the worker exits without running. The receiver owns it.
  int go_fd = -1;
};

// traind's side. Sends a request (log_fd is passed, not closed).
absl::Status SendSpawnRequest(int fd, const SpawnRequest& request);
// Waits up to `timeout` for the reply.
absl::StatusOr<SpawnReply> ReceiveSpawnReply(int fd, absl::Duration timeout);

// The zygote's side (exposed for tests). NotFoundError on a clean EOF.
absl::StatusOr<SpawnRequest> ReceiveSpawnRequest(int fd);
absl::Status SendSpawnReply(int fd, const SpawnReply& reply);

// Runs the zygote loop on `control_fd` until traind closes it; returns the
// zygote's exit status. In each forked worker, `worker_main(argc, argv)`
// runs with the request's argv and environment, stdin on /dev/null,
// stdout/stderr on the log, its own process group, no blocked signals and
// default dispositions, and only once its parent is traind (the zygote's
// parent, which must be a child subreaper); the worker process exits with
// worker_main's return value.
int RunZygote(int control_fd, int (*worker_main)(int, char**));

}  // namespace traind::zygote

#endif  // TRAIND_WORKER_ZYGOTE_ZYGOTE_H_
