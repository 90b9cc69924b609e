#include "server/scheduler/attempt_outcome.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "server/store/job_states.h"
#include "spec/task_plan.h"

namespace traind::server {

using traind::v1::Failure;
using traind::v1::Task;
using Kind = AttemptOutcome::Kind;
using Fails = AttemptOutcome::Fails;

bool CountsAgainstRestarts(Failure::Reason reason, int trained_epochs) {
  switch (reason) {
    case Failure::WORKER_CRASHED:
    case Failure::TIMEOUT:
      return true;  // may not happen again
    case Failure::PREEMPTED:
      return trained_epochs == 0;  // checkpointed progress is free to go on
    default:
      return false;  // not retried at all
  }
}

namespace {

AttemptOutcome Outcome(Kind kind, Task::State state, Fails fails, const char* why) {
  AttemptOutcome o;
  o.kind = kind;
  o.task_state = state;
  o.fails = fails;
  o.why = why;
  return o;
}

// Whether a retry may fix the failure (the rows of the header's list).
const char* RetryRow(const EndedAttempt& a, int max_restarts) {
  if (!a.job_running) return nullptr;
  const bool restarts_left = a.earlier_restarts + 1 <= max_restarts;
  switch (a.reason) {
    case Failure::WORKER_CRASHED:
    case Failure::TIMEOUT:
      return restarts_left ? "a crash or hang, with restarts left" : nullptr;
    case Failure::PREEMPTED:
      if (a.trained_epochs > 0) return "preempted after training: goes on from its checkpoint";
      return restarts_left ? "preempted before its first epoch, with restarts left" : nullptr;
    case Failure::OUT_OF_MEMORY:
      if (a.on_gpus && a.gpus_elsewhere >= a.gpus_needed) {
        return "out of GPU memory, with other GPUs to run on";
      }
      return nullptr;
    default:
      return nullptr;
  }
}

}  // namespace

AttemptOutcome DecideAttemptOutcome(const EndedAttempt& a, int max_restarts) {
  if (a.succeeded) {
    return Outcome(Kind::kSucceeded, Task::SUCCEEDED, Fails::kNothing, "the attempt succeeded");
  }
  // A fold the worker stopped itself at its ASHA rung ends as CANCELLED
  // with its epochs checkpointed: it waits there for its trial's promotion.
  if (a.reason == Failure::CANCELLED && !a.stop_requested && a.pause_after > 0 &&
      a.last_epoch >= a.pause_after && a.job_running) {
    return Outcome(Kind::kPaused, Task::QUEUED, Fails::kNothing, "stopped at its ASHA rung");
  }
  if (const char* why = RetryRow(a, max_restarts); why != nullptr) {
    return Outcome(Kind::kRetried, Task::QUEUED, Fails::kNothing, why);
  }
  if (a.reason == Failure::CANCELLED) {
    return a.trial_pruned
               ? Outcome(Kind::kStopped, Task::PRUNED, Fails::kNothing, "its trial was pruned")
               : Outcome(Kind::kStopped, Task::CANCELLED, Fails::kNothing, "stopped by traind");
  }
  return a.search_fold
             ? Outcome(Kind::kFailed, Task::FAILED, Fails::kTrial,
                       "a search's fold failed: its trial fails")
             : Outcome(Kind::kFailed, Task::FAILED, Fails::kJob, "a task failed: its job fails");
}

std::optional<Failure> SearchFailure(const traind::v1::Job& job) {
  using traind::v1::Job;
  if (!job.spec().has_search() || job.result().best_trial() >= 0 || job.has_failure() ||
      job.state() == Job::CANCELLING) {
    return std::nullopt;
  }
  const Failure* first = nullptr;
  for (const Task& t : job.tasks()) {
    if (spec::IsRefitTask(job.spec(), t.index())) continue;
    if (!IsTerminal(t.state())) return std::nullopt;  // a trial goes on
    if (first == nullptr && t.has_failure()) first = &t.failure();
  }
  Failure f = first != nullptr ? *first : Failure();
  if (first == nullptr) f.set_reason(Failure::CANCELLED);
  f.set_message(absl::StrCat("no trial succeeded",
                             first != nullptr ? ": " + first->message() : std::string()));
  return f;
}

std::optional<traind::v1::Job::State> FinalJobState(const traind::v1::Job& job) {
  using traind::v1::Job;
  for (const Task& t : job.tasks()) {
    if (!IsTerminal(t.state())) return std::nullopt;
  }
  if (job.has_failure()) return Job::FAILED;
  bool all_ok = true;
  for (const Task& t : job.tasks()) all_ok = all_ok && t.state() == Task::SUCCEEDED;
  // A search succeeds with its failed and pruned trials, given a best one.
  if (job.spec().has_search()) all_ok = job.state() != Job::CANCELLING;
  return all_ok ? Job::SUCCEEDED : Job::CANCELLED;
}

}  // namespace traind::server
