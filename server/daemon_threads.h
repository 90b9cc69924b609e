// The daemon's background threads beside the scheduler: the systemd
// watchdog's pings and the retention sweeper.
#ifndef TRAIND_SERVER_DAEMON_THREADS_H_
#define TRAIND_SERVER_DAEMON_THREADS_H_

#include <systemd/sd-daemon.h>

#include <algorithm>
#include <thread>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/log.h"
#include "server/datasets/dataset_catalog.h"
#include "server/scheduler/scheduler.h"

namespace traind::server {

// Pings the systemd watchdog at half its interval while the scheduler's loop
// keeps running; a stuck loop stops the pings and systemd restarts traind.
class Watchdog final {
 public:
  explicit Watchdog(Scheduler* scheduler) : scheduler_(scheduler) {
    uint64_t usec = 0;
    if (sd_watchdog_enabled(0, &usec) <= 0 || usec == 0) return;
    const absl::Duration interval = absl::Microseconds(usec) / 2;
    const absl::Duration stale = std::max(interval, absl::Seconds(1));
    LogInfo("systemd watchdog enabled interval=%s", absl::FormatDuration(interval));
    thread_ = std::thread([this, interval, stale] {
      bool warned = false;
      while (!stop_.WaitForNotificationWithTimeout(interval)) {
        const absl::Duration age = absl::Now() - scheduler_->LastLoopTime();
        if (age <= stale) {
          sd_notify(0, "WATCHDOG=1");
          warned = false;
        } else if (!warned) {
          LogError("scheduler loop silent for %s: not pinging the systemd watchdog",
                   absl::FormatDuration(age));
          warned = true;
        }
      }
    });
  }
  ~Watchdog() {
    stop_.Notify();
    if (thread_.joinable()) thread_.join();
  }

 private:
  Scheduler* const scheduler_;
  absl::Notification stop_;
  std::thread thread_;
};

// Applies the retention policy at start and every `interval`, on its own
// thread (a pass reads the store and removes files).
class RetentionSweeper final {
 public:
  RetentionSweeper(Scheduler* scheduler, RetentionPolicy policy, absl::Duration interval) {
    if (!policy.enabled()) return;
    LogInfo("retention max_age=%s max_finished_jobs=%d interval=%s",
            absl::FormatDuration(policy.max_age), policy.max_finished_jobs,
            absl::FormatDuration(interval));
    thread_ = std::thread([this, scheduler, policy, interval] {
      do {
        scheduler->ApplyRetention(policy);
      } while (!stop_.WaitForNotificationWithTimeout(interval));
    });
  }
  ~RetentionSweeper() {
    stop_.Notify();
    if (thread_.joinable()) thread_.join();
  }

 private:
  absl::Notification stop_;
  std::thread thread_;
};

// Sweeps the datasets (abandoned uploads, retention) at start and every
// `interval`, on its own thread.
class DatasetSweeper final {
 public:
  DatasetSweeper(DatasetCatalog* catalog, absl::Duration interval) {
    thread_ = std::thread([this, catalog, interval] {
      do {
        catalog->Sweep(absl::Now());
      } while (!stop_.WaitForNotificationWithTimeout(interval));
    });
  }
  ~DatasetSweeper() {
    stop_.Notify();
    if (thread_.joinable()) thread_.join();
  }

 private:
  absl::Notification stop_;
  std::thread thread_;
};

}  // namespace traind::server

#endif  // TRAIND_SERVER_DAEMON_THREADS_H_
