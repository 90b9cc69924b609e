// The protocol between traind's launcher and the worker zygote
// (worker/zygote/zygote.h), used by both sides.
//
// Protocol, on a SOCK_SEQPACKET socketpair (fd kZygoteControlFd in the
// zygote): one request message per worker = a SpawnRequest (argv, the
// complete environment, and the log file descriptor as SCM_RIGHTS); one
// reply message = a SpawnReply (the worker's pid and its go gate, or errno
// and what failed). traind tracks the pid, then lets the worker go: a
// worker cannot exit before traind knows it, and one whose request traind
// gave up on (a late reply) never runs. The zygote exits when traind closes
// its end (or dies: PR_SET_PDEATHSIG).
#ifndef TRAIND_PROTO_TRAIND_ZYGOTE_PROTOCOL_H_
#define TRAIND_PROTO_TRAIND_ZYGOTE_PROTOCOL_H_

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
// The environment variable in which traind's launcher gives every worker
// (forked by the zygote or exec'd) the CLOCK_MONOTONIC time, in
// nanoseconds, at which it asked for the process: the worker times its
// start from it (worker/attempt_timeline.h).
inline constexpr char kLaunchStampEnv[] = "TRAIND_LAUNCH_NS";

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

}  // namespace traind::zygote

#endif  // TRAIND_PROTO_TRAIND_ZYGOTE_PROTOCOL_H_
