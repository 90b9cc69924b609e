// When the worker calls the daemon again after a failed call, and how long
// it waits first. Header-only and free of gRPC, so that the schedule is
// unit-tested without a daemon (call_retry_test.cc).
#ifndef TRAIND_WORKER_CALL_RETRY_H_
#define TRAIND_WORKER_CALL_RETRY_H_

#include <algorithm>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace traind::worker {

// Only the daemon being briefly unreachable is retried: UNAVAILABLE and,
// where `retry_deadline_exceeded`, DEADLINE_EXCEEDED; where
// `retry_cancelled`, CANCELLED too (a daemon shutting down cancels the calls
// it has not answered; the worker never cancels its own). The wait after failed
// try t (0-based) is first_delay · 2^min(t, max_doublings).
struct RetryPolicy {
  int max_tries = 1;  // 0: no limit (the caller's deadline ends the tries)
  absl::Duration first_delay = absl::Milliseconds(100);
  int max_doublings = 4;
  bool retry_deadline_exceeded = false;
  bool retry_cancelled = false;

  bool Retries(absl::StatusCode code) const {
    return code == absl::StatusCode::kUnavailable ||
           (retry_deadline_exceeded && code == absl::StatusCode::kDeadlineExceeded) ||
           (retry_cancelled && code == absl::StatusCode::kCancelled);
  }
  absl::Duration DelayAfter(int failed_try) const {
    return first_delay * (int64_t{1} << std::min(failed_try, max_doublings));
  }
};

// Reports (ReportEpoch, ReportEvent): 5 tries, waiting 100, 200, 400, 800
// and 1600 ms after each failed one. Reports are idempotent (keyed by job,
// task, attempt, epoch): a retry after a lost answer never duplicates one.
// A report cancelled by a daemon that stopped is retried too: a worker that
// outlives traind (launcher: slurm) reports to the next one.
inline constexpr RetryPolicy kReportRetry{/*max_tries=*/5, absl::Milliseconds(100),
                                          /*max_doublings=*/4,
                                          /*retry_deadline_exceeded=*/true,
                                          /*retry_cancelled=*/true};

// Rendezvous: until its deadline, waiting 100, 200, 400, 800, then 1600 ms
// between tries; a rendezvous that times out is not retried.
inline constexpr RetryPolicy kRendezvousRetry{/*max_tries=*/0, absl::Milliseconds(100),
                                              /*max_doublings=*/4,
                                              /*retry_deadline_exceeded=*/false};

// Calls call() until it succeeds, fails with an error `policy` does not
// retry, expired() is true after a failure, or the tries run out; sleep(d)
// waits between tries. Returns the last call's status.
//   call: () -> absl::Status; sleep: (absl::Duration) -> void; expired: () -> bool
template <typename Call, typename Sleep, typename Expired>
absl::Status CallWithRetry(const RetryPolicy& policy, Call call, Sleep sleep, Expired expired) {
  absl::Status s;
  for (int t = 0; policy.max_tries == 0 || t < policy.max_tries; ++t) {
    s = call();
    if (s.ok() || !policy.Retries(s.code()) || expired()) return s;
    sleep(policy.DelayAfter(t));
  }
  return s;
}

}  // namespace traind::worker

#endif  // TRAIND_WORKER_CALL_RETRY_H_
