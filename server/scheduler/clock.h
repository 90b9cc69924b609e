// Clock: where the scheduler reads the time. Injected (SchedulerOptions::clock)
// so that heartbeat, grace and deadline tests advance a fake clock instead of
// sleeping.
//
// Thread-safety: implementations are safe to call from any thread.
#ifndef TRAIND_SERVER_SCHEDULER_CLOCK_H_
#define TRAIND_SERVER_SCHEDULER_CLOCK_H_

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace traind::server {

class Clock {
 public:
  virtual ~Clock() = default;
  virtual absl::Time Now() = 0;
};

// The system's wall clock.
class SystemClock final : public Clock {
 public:
  absl::Time Now() override { return absl::Now(); }
  // One shared instance (stateless).
  static SystemClock* Get() {
    static SystemClock clock;
    return &clock;
  }
};

}  // namespace traind::server

#endif  // TRAIND_SERVER_SCHEDULER_CLOCK_H_
