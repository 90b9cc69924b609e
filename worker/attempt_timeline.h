// Where an attempt's time goes, measured by the worker itself: named marks
// on CLOCK_MONOTONIC, one clock for every process of the machine, so the
// first interval starts at the launcher's stamp (zygote::kLaunchStampEnv,
// set by traind's local launcher when it asks for the process: the
// zygote's fork or the exec included). The worker logs the intervals in one line when
// the attempt ends ("task phases ..."); bench/peers/driver.py reads them.
//
// Thread safety: Mark may be called from any thread (a mutex).
#ifndef TRAIND_WORKER_ATTEMPT_TIMELINE_H_
#define TRAIND_WORKER_ATTEMPT_TIMELINE_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace traind::worker {

// CLOCK_MONOTONIC now, in nanoseconds.
int64_t MonotonicNanos();

class AttemptTimeline {
 public:
  // Starts at `start_ns` (CLOCK_MONOTONIC); 0: now.
  explicit AttemptTimeline(int64_t start_ns = 0);

  // Starts at the stamp in zygote::kLaunchStampEnv when it holds one, else
  // now.
  static AttemptTimeline FromEnvironment();

  // Records `phase` as ending now (the interval since the previous mark).
  void Mark(absl::string_view phase);

  // "launch→main 3.10 ms · get_task 0.42 ms · ... (total 21.5 ms)": each
  // phase's interval, in order; "launch→main" names the first when it
  // starts at the launcher's stamp, else "start→main".
  std::string Summary() const;

  // The intervals, in milliseconds, in order.
  std::vector<std::pair<std::string, double>> Phases() const;

 private:
  const int64_t start_ns_;
  const bool from_launch_;
  mutable absl::Mutex mu_;
  std::vector<std::pair<std::string, int64_t>> marks_ ABSL_GUARDED_BY(mu_);
};

}  // namespace traind::worker

#endif  // TRAIND_WORKER_ATTEMPT_TIMELINE_H_
