// FakeLauncher: a Launcher for scheduler tests. Records launches and
// signals; the test plays the worker and ends processes with Exit().
#ifndef TRAIND_SERVER_TESTING_FAKE_LAUNCHER_H_
#define TRAIND_SERVER_TESTING_FAKE_LAUNCHER_H_

#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
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
    ExitCallback exit_now;
    int pid = 0;
    {
      absl::MutexLock lock(&mu_);
      ++launches_entered_;
      // A held launch waits (like a slow zygote) until Release().
      auto released = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !hold_; };
      mu_.Await(absl::Condition(&released));
      if (fail_launch_) return absl::FailedPreconditionError("exec failed");
      pid = next_pid_++;
      launched_.push_back({pid, request});
      if (exit_at_once_) exit_now = callback_;
    }
    if (exit_now) {
      // The process ends before Launch returns, reported from another
      // thread as a real launcher's reaper would.
      {
        absl::MutexLock lock(&mu_);
        exit_threads_.emplace_back([exit_now, pid] {
          exit_now(ProcessExit{pid, 1, 0, std::nullopt});
        });
      }
      absl::SleepFor(absl::Milliseconds(20));
    }
    return pid;
  }
  // While held, Launch blocks (the scheduler must not hold its mutex then).
  void Hold() {
    absl::MutexLock lock(&mu_);
    hold_ = true;
  }
  void Release() {
    absl::MutexLock lock(&mu_);
    hold_ = false;
  }
  // Waits until `n` Launch calls have begun (held ones included).
  bool WaitForLaunchCalls(int n, absl::Duration timeout = absl::Seconds(5)) {
    absl::MutexLock lock(&mu_);
    auto enough = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return launches_entered_ >= n; };
    return mu_.AwaitWithTimeout(absl::Condition(&enough), timeout);
  }
  // Waits for the exits reported by set_exit_at_once's threads.
  void JoinExitThreads() {
    std::vector<std::thread> threads;
    {
      absl::MutexLock lock(&mu_);
      threads.swap(exit_threads_);
    }
    for (std::thread& t : threads) t.join();
  }
  ~FakeLauncher() override { JoinExitThreads(); }
  // Each launched process exits with code 1 at once, before Launch returns.
  void set_exit_at_once(bool exit_at_once) {
    absl::MutexLock lock(&mu_);
    exit_at_once_ = exit_at_once;
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
    cb(ProcessExit{pid, exit_code, signal, std::nullopt});
  }

 private:
  absl::Mutex mu_;
  ExitCallback callback_ ABSL_GUARDED_BY(mu_);
  std::vector<Launched> launched_ ABSL_GUARDED_BY(mu_);
  std::vector<std::pair<int, int>> signals_ ABSL_GUARDED_BY(mu_);
  int next_pid_ ABSL_GUARDED_BY(mu_) = 1000;
  bool fail_launch_ ABSL_GUARDED_BY(mu_) = false;
  bool hold_ ABSL_GUARDED_BY(mu_) = false;
  bool exit_at_once_ ABSL_GUARDED_BY(mu_) = false;
  int launches_entered_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<std::thread> exit_threads_ ABSL_GUARDED_BY(mu_);
};

}  // namespace traind::server

#endif  // TRAIND_SERVER_TESTING_FAKE_LAUNCHER_H_
