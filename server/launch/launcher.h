// Launcher: starts worker processes and reports their exits.
//
// The scheduler depends only on this interface, so tests can inject a fake
// and a later Slurm launcher can stand beside the local one.
#ifndef TRAIND_SERVER_LAUNCH_LAUNCHER_H_
#define TRAIND_SERVER_LAUNCH_LAUNCHER_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace traind::server {

struct LaunchRequest {
  // argv[0] is the executable's path; no shell is involved.
  std::vector<std::string> argv;
  // The complete environment ("NAME=value"); nothing is inherited.
  std::vector<std::string> env;
  // stdout and stderr of the process are appended here.
  std::string log_path;
};

struct ProcessExit {
  int pid = 0;
  int exit_code = 0;  // valid when signal == 0
  int signal = 0;     // signal that ended the process, 0 if it exited
};

class Launcher {
 public:
  using ExitCallback = std::function<void(const ProcessExit&)>;
  virtual ~Launcher() = default;

  // Called once per process exit, from a launcher thread. Set before the
  // first Launch.
  virtual void SetExitCallback(ExitCallback callback) = 0;
  // Starts the process in its own process group; returns its pid.
  virtual absl::StatusOr<int> Launch(const LaunchRequest& request) = 0;
  // Sends `sig` to the process group of `pid`.
  virtual void Signal(int pid, int sig) = 0;
};

}  // namespace traind::server

#endif  // TRAIND_SERVER_LAUNCH_LAUNCHER_H_
