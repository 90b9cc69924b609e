// FakeLauncher: a Launcher for scheduler tests. Records launches and
// signals; the test plays the worker and ends processes with Exit().
#ifndef TRAIND_SERVER_TESTING_FAKE_LAUNCHER_H_
#define TRAIND_SERVER_TESTING_FAKE_LAUNCHER_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/launch/launcher.h"

namespace traind::server {

class FakeLauncher final : public Launcher {
 public:
  struct Launched {
    int pid;
    LaunchRequest request;
    std::string Secret() const {
      for (const std::string& e : request.env) {
        if (absl::StartsWith(e, "TRAIND_WORKER_SECRET=")) return e.substr(21);
      }
      return "";
    }
    std::string Arg(const std::string& name) const {
      for (const std::string& a : request.argv) {
        if (absl::StartsWith(a, "--" + name + "=")) return a.substr(name.size() + 3);
      }
      return "";
    }
  };

  void SetExitCallback(ExitCallback callback) override {
    absl::MutexLock lock(&mu_);
    callback_ = std::move(callback);
  }
  absl::StatusOr<int> Launch(const LaunchRequest& request) override {
    absl::MutexLock lock(&mu_);
    if (fail_launch_) return absl::FailedPreconditionError("exec failed");
    int pid = next_pid_++;
    launched_.push_back({pid, request});
    return pid;
  }
  void Signal(int pid, int sig) override {
    absl::MutexLock lock(&mu_);
    signals_.emplace_back(pid, sig);
  }

  // Waits until at least `n` processes were launched; false on timeout.
  bool WaitForLaunches(size_t n, absl::Duration timeout = absl::Seconds(5)) {
    absl::MutexLock lock(&mu_);
    auto enough = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return launched_.size() >= n; };
    return mu_.AwaitWithTimeout(absl::Condition(&enough), timeout);
  }
  std::vector<Launched> launched() {
    absl::MutexLock lock(&mu_);
    return launched_;
  }
  std::vector<std::pair<int, int>> signals() {
    absl::MutexLock lock(&mu_);
    return signals_;
  }
  void set_fail_launch(bool fail) {
    absl::MutexLock lock(&mu_);
    fail_launch_ = fail;
  }
  // The process `pid` ends.
  void Exit(int pid, int exit_code, int signal = 0) {
    ExitCallback cb;
    {
      absl::MutexLock lock(&mu_);
      cb = callback_;
    }
    cb(ProcessExit{pid, exit_code, signal});
  }

 private:
  absl::Mutex mu_;
  ExitCallback callback_ ABSL_GUARDED_BY(mu_);
  std::vector<Launched> launched_ ABSL_GUARDED_BY(mu_);
  std::vector<std::pair<int, int>> signals_ ABSL_GUARDED_BY(mu_);
  int next_pid_ ABSL_GUARDED_BY(mu_) = 1000;
  bool fail_launch_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace traind::server

#endif  // TRAIND_SERVER_TESTING_FAKE_LAUNCHER_H_
