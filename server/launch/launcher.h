// Launcher: starts worker processes and reports their exits.
//
// The scheduler depends only on this interface, so tests can inject a fake
// and the Slurm launcher (slurm_launcher.h) stands beside the local one.
// A launch's handle is an int: the process id for the local launcher, the
// Slurm job id for Slurm's.
#ifndef TRAIND_SERVER_LAUNCH_LAUNCHER_H_
#define TRAIND_SERVER_LAUNCH_LAUNCHER_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "traind/v1/job.pb.h"

namespace traind::server {

struct LaunchRequest {
  // argv[0] is the executable's path; no shell is involved.
  std::vector<std::string> argv;
  // The complete environment ("NAME=value"); nothing is inherited.
  std::vector<std::string> env;
  // stdout and stderr of the process are appended here.
  std::string log_path;

  // What a cluster launcher asks for (the local launcher ignores these).
  std::string name;          // the traind job id (Slurm job name)
  int cpus = 1;              // CPUs of the task
  int64_t memory_bytes = 0;  // memory the task needs (0: the launcher's default)
  int gpus = 0;              // GPUs of the task
  int nice = 0;              // scheduling niceness (higher: later); from the job's priority
};

struct ProcessExit {
  int pid = 0;
  int exit_code = 0;  // valid when signal == 0
  int signal = 0;     // signal that ended the process, 0 if it exited
  // A launcher that knows why the process ended when it did not end by
  // itself (Slurm: cancelled outside traind, node failure, time limit, out
  // of memory, a job that vanished) says so here; it is the attempt's
  // failure unless traind itself stopped the attempt.
  std::optional<traind::v1::Failure> failure;
};

// What a cluster launcher knows of a launch before its worker runs.
struct LaunchStatus {
  int pid = 0;  // the launch's handle
  // Waiting in the cluster's queue (why: `reason`, `detail`), or started.
  bool pending = false;
  traind::v1::Task::WaitReason reason = traind::v1::Task::WAIT_REASON_UNSPECIFIED;
  std::string detail;
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
  // Sends `sig` to the process group of `pid`. Does not block.
  virtual void Signal(int pid, int sig) = 0;
  // Whether LaunchRanks starts a multi-process attempt as one unit.
  virtual bool launches_ranks_together() const { return false; }
  // The ranks of one multi-process attempt (rank r: ranks[r]) as one unit
  // (Slurm: one job, its ranks the tasks of one srun step). A handle per
  // rank, in rank order; each exits through the exit callback.
  virtual absl::StatusOr<std::vector<int>> LaunchRanks(const std::vector<LaunchRequest>& ranks) {
    (void)ranks;
    return absl::UnimplementedError("this launcher starts ranks one by one");
  }

  // --- cluster launchers (Slurm) ---
  // Whether workers run elsewhere and outlive traind: the cluster owns CPUs
  // and GPUs (no local slots or GPU pool), a daemon stop leaves them running
  // and a restart adopts them (Adopt).
  virtual bool remote() const { return false; }
  // Called when a launch's status changes (pending in the cluster's queue and
  // why, started), from a launcher thread. Set before the first Launch.
  using StatusCallback = std::function<void(const LaunchStatus&)>;
  virtual void SetStatusCallback(StatusCallback callback) { (void)callback; }
  // After a restart: tracks a launch made by an earlier traind (`name` as
  // in its LaunchRequest); its exit comes through the exit callback as usual
  // (at once if it ended meanwhile).
  virtual absl::Status Adopt(int pid, const std::string& name) {
    (void)pid;
    (void)name;
    return absl::UnimplementedError("this launcher cannot adopt workers");
  }
};

}  // namespace traind::server

#endif  // TRAIND_SERVER_LAUNCH_LAUNCHER_H_
