// FakeClock: a Clock that moves only when a test advances it.
#ifndef TRAIND_SERVER_TESTING_FAKE_CLOCK_H_
#define TRAIND_SERVER_TESTING_FAKE_CLOCK_H_

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/scheduler/clock.h"

namespace traind::server {

class FakeClock final : public Clock {
 public:
  explicit FakeClock(absl::Time start = absl::FromUnixSeconds(1'800'000'000)) : now_(start) {}
  absl::Time Now() override {
    absl::MutexLock lock(&mu_);
    return now_;
  }
  void Advance(absl::Duration d) {
    absl::MutexLock lock(&mu_);
    now_ += d;
  }

 private:
  absl::Mutex mu_;
  absl::Time now_ ABSL_GUARDED_BY(mu_);
};

}  // namespace traind::server

#endif  // TRAIND_SERVER_TESTING_FAKE_CLOCK_H_
