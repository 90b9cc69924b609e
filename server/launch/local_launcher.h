// LocalLauncher: starts workers on this machine.
//
// With a zygote (LocalLauncherOptions::zygote_worker), a worker whose argv[0]
// is that traind-worker is forked by `traind-worker --zygote`, a process
// started once that has already done its dynamic linking and static
// initialization (worker/zygote/zygote.h): a fresh process per task without
// paying exec + linking each time. The launcher makes this process a child
// subreaper, so such workers are re-parented to it and waited for, signalled
// and reaped like any child. If the zygote cannot be started or stops
// answering, it is restarted, and meanwhile workers are spawned directly.
//
// Otherwise posix_spawn (vfork-style: fast even for a large, threaded
// daemon). Each child gets its own process group (so a signal reaches the
// worker and anything it started), no blocked signals, default
// dispositions, and TRAIND_PARENT_PID in its environment: the worker arms
// PR_SET_PDEATHSIG itself so it dies with the daemon. The parent-death
// signal fires when the *thread* that spawned it exits: call Launch from a
// thread that lives as long as the daemon.
//
// Exits are noticed at once (a pidfd per child, in an epoll set) and
// reported through the exit callback.
//
// Thread-safety: all methods are thread-safe.
#ifndef TRAIND_SERVER_LAUNCH_LOCAL_LAUNCHER_H_
#define TRAIND_SERVER_LAUNCH_LOCAL_LAUNCHER_H_

#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/launch/launcher.h"

namespace traind::server {

struct LocalLauncherOptions {
  // traind-worker's path: workers started with this argv[0] are forked by a
  // zygote run from it. Empty: every worker is spawned directly.
  std::string zygote_worker;
  // The zygote's environment ("NAME=value"; nothing is inherited). Each
  // worker still gets exactly its LaunchRequest::env.
  std::vector<std::string> zygote_env;
  // How long a zygote gets to answer a request before it is replaced (it
  // answers in about a millisecond; the scheduler waits meanwhile).
  absl::Duration zygote_timeout = absl::Seconds(3);
};

class LocalLauncher final : public Launcher {
 public:
  explicit LocalLauncher(LocalLauncherOptions options = {});
  // Stops the reaper and the zygote; does not kill workers.
  ~LocalLauncher() override;

  // Returns once no earlier callback is running.
  void SetExitCallback(ExitCallback callback) override;
  absl::StatusOr<int> Launch(const LaunchRequest& request) override;
  void Signal(int pid, int sig) override;

  // Starts the zygote now rather than at the first Launch (so that the
  // first task does not wait for it). No-op without one.
  absl::Status StartZygote();
  // The zygote's pid, or 0 when none runs (tests).
  int zygote_pid();

 private:
  absl::StatusOr<int> LaunchThroughZygote(const LaunchRequest& request, int log_fd);
  absl::Status StartZygoteLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(zygote_mu_);
  void StopZygoteLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(zygote_mu_);
  // Tracks a started child (its pidfd in the epoll set). may_have_exited:
  // a zygote's worker, which the reaper may have collected already.
  void Track(int pid, bool may_have_exited) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ReapLoop();

  const LocalLauncherOptions options_;
  bool zygote_enabled_ = false;

  // Serializes zygote requests (one in flight) and guards its handle.
  absl::Mutex zygote_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  int zygote_fd_ ABSL_GUARDED_BY(zygote_mu_) = -1;

  absl::Mutex mu_;
  ExitCallback callback_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  // Started children -> their pidfd (-1 where pidfds are unavailable).
  absl::flat_hash_map<int, int> children_ ABSL_GUARDED_BY(mu_);
  // Exits reaped before their pid was tracked, and those now claimed.
  std::map<int, ProcessExit> unclaimed_ ABSL_GUARDED_BY(mu_);
  std::vector<ProcessExit> ready_ ABSL_GUARDED_BY(mu_);
  int zygote_pid_ ABSL_GUARDED_BY(mu_) = 0;         // the current zygote
  std::set<int> zygote_pids_ ABSL_GUARDED_BY(mu_);  // every zygote not yet reaped
  int callbacks_running_ ABSL_GUARDED_BY(mu_) = 0;
  int epoll_fd_ = -1;
  int wake_fd_ = -1;  // eventfd: wakes the reaper (stop)
  std::thread reaper_;
};

// Runs `worker_path --capabilities` in `env` (worker_environment.h) and
// returns the tokens it prints ("cpu", "cpu-bf16", "cuda"): what tasks this
// daemon can run. What the worker says on stderr (why a backend is missing)
// goes to `*notes` (if given), for traind's own log, never straight to
// traind's stderr.
absl::StatusOr<std::vector<std::string>> ProbeWorkerBackends(const std::string& worker_path,
                                                             const std::vector<std::string>& env,
                                                             std::string* notes = nullptr);

}  // namespace traind::server

#endif  // TRAIND_SERVER_LAUNCH_LOCAL_LAUNCHER_H_
