#include "server/scheduler/retry_policy.h"

namespace traind::server {

using traind::v1::Failure;

bool IsTransient(Failure::Reason reason) {
  return reason == Failure::WORKER_CRASHED || reason == Failure::TIMEOUT;
}

RetryDecision DecideRetry(const FailedAttempt& a, int max_restarts) {
  bool retry = IsTransient(a.reason) && a.transient_failures <= max_restarts && a.job_running;
  if (a.reason == Failure::PREEMPTED && a.job_running) {
    retry = a.made_progress || a.transient_failures < max_restarts + 1;
  }
  if (a.reason == Failure::OUT_OF_MEMORY && a.on_gpus && a.job_running) {
    retry = a.gpus_elsewhere >= a.gpus_needed;
  }
  if (retry) return RetryDecision::kRetry;
  if (a.reason == Failure::CANCELLED) return RetryDecision::kCancel;
  return RetryDecision::kFail;
}

}  // namespace traind::server
