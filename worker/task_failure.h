// How an engine status becomes the typed failure an attempt reports
// (Failure.reason decides whether traind retries it).
#ifndef TRAIND_WORKER_TASK_FAILURE_H_
#define TRAIND_WORKER_TASK_FAILURE_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "traind/v1/job.pb.h"

namespace traind::worker {

// The reason of `s` from its engine failure kind (base/status.h);
// WORKER_CRASHED when it has none.
traind::v1::Failure::Reason ReasonOf(const absl::Status& s);

// `s` with a failure kind: its own (OUT_OF_MEMORY, INVALID_SPEC, ...) or,
// when it has none, DEVICE_ERROR with `context` in front of its message.
absl::Status AsTaskFailure(const absl::Status& s, absl::string_view context);

// Like AsTaskFailure, for waiting on the other ranks: a peer that failed,
// went away or never came (Unavailable, Aborted, DeadlineExceeded with no
// failure kind: NCCL's remote errors, aborts and timeouts, a rendezvous that
// traind ended) is not this rank's device failing. Such a status keeps no
// kind, so it is reported as WORKER_CRASHED, which traind retries, and it
// does not pass for a DEVICE_ERROR (never retried) that could become the
// attempt's failure instead of the dead peer's crash.
absl::Status AsRankFailure(const absl::Status& s, absl::string_view context);

}  // namespace traind::worker

#endif  // TRAIND_WORKER_TASK_FAILURE_H_
