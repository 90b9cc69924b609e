// LocalLauncher: fork + exec on this machine.
//
// posix_spawn (vfork-style: fast even for a large, threaded daemon). Each
// child gets its own process group (so a signal reaches the worker and
// anything it started), no blocked signals, default dispositions, and
// TRAIND_PARENT_PID in its environment: the worker arms PR_SET_PDEATHSIG
// itself (ArmParentDeathSignal) so it dies with the daemon. The parent-death
// signal fires when the *thread* that spawned it exits: call Launch from a
// thread that lives as long as the daemon.
//
// Thread-safety: all methods are thread-safe.
#ifndef TRAIND_SERVER_LAUNCH_LOCAL_LAUNCHER_H_
#define TRAIND_SERVER_LAUNCH_LOCAL_LAUNCHER_H_

#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "server/launch/launcher.h"

namespace traind::server {

class LocalLauncher final : public Launcher {
 public:
  LocalLauncher();
  ~LocalLauncher() override;  // stops the reaper; does not kill children

  void SetExitCallback(ExitCallback callback) override;
  absl::StatusOr<int> Launch(const LaunchRequest& request) override;
  void Signal(int pid, int sig) override;

 private:
  void ReapLoop();

  absl::Mutex mu_;
  ExitCallback callback_ ABSL_GUARDED_BY(mu_);
  int live_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread reaper_;
};

// Runs `worker_path --capabilities` and returns the training backends it
// prints ("cpu", "cuda"): what tasks this daemon can run.
absl::StatusOr<std::vector<std::string>> ProbeWorkerBackends(const std::string& worker_path);

}  // namespace traind::server

#endif  // TRAIND_SERVER_LAUNCH_LOCAL_LAUNCHER_H_
