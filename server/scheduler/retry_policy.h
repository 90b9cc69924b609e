// RetryPolicy: what happens to a task whose attempt failed — it runs again
// or the task ends (FAILED, or CANCELLED when it was stopped).
//
// Crashes and hangs (WORKER_CRASHED, TIMEOUT) may not happen again: retried
// up to max_restarts times per task. Out of memory on GPUs is retried only
// where the placement would differ (enough usable GPUs this task has not run
// out of memory on). A preempted attempt (PREEMPTED: Slurm's SIGUSR2 before
// a time limit or a preemption; the worker checkpointed) goes on in a new
// attempt whenever it trained an epoch, without using up a retry; one that
// made no progress counts as a transient failure. What a retry cannot fix (INVALID_SPEC,
// DATA_ERROR, DIVERGED, DEVICE_ERROR, ...) is not retried, and nothing is retried once the job is
// stopping (cancelled, or failed by another task).
//
// Thread-safety: pure functions.
#ifndef TRAIND_SERVER_SCHEDULER_RETRY_POLICY_H_
#define TRAIND_SERVER_SCHEDULER_RETRY_POLICY_H_

#include "traind/v1/job.pb.h"

namespace traind::server {

enum class RetryDecision { kRetry, kCancel, kFail };

struct FailedAttempt {
  traind::v1::Failure::Reason reason = traind::v1::Failure::REASON_UNSPECIFIED;
  // Attempts of the task so far, this one included, that failed with a
  // transient reason (IsTransient).
  int transient_failures = 0;
  // The job still runs (RUNNING, and no task has failed it).
  bool job_running = true;
  // GPU tasks: usable GPUs this task has not run out of memory on, and the
  // GPUs one attempt needs. `on_gpus` false for CPU tasks.
  bool on_gpus = false;
  int gpus_elsewhere = 0;
  int gpus_needed = 0;
  // PREEMPTED: the attempt reported at least one epoch.
  bool made_progress = false;
};

// Reasons a retry may fix.
bool IsTransient(traind::v1::Failure::Reason reason);

// REQUIRES: max_restarts >= 0.
RetryDecision DecideRetry(const FailedAttempt& attempt, int max_restarts);

}  // namespace traind::server

#endif  // TRAIND_SERVER_SCHEDULER_RETRY_POLICY_H_
