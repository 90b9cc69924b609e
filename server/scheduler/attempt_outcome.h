// What an ended task attempt means for its task, its trial and its job: one
// table (attempt_outcome.cc, a reason on every row), used by the scheduler
// when an attempt's last rank has exited; then whether the job has ended,
// and how (SearchFailure, FinalJobState).
//
//   succeeded                                   -> task SUCCEEDED
//   stopped at its ASHA rung (not by traind)    -> task QUEUED, paused until promoted
//   a failure a retry may fix, and retries left -> task QUEUED, a new attempt
//   stopped by traind                           -> task CANCELLED (PRUNED: its trial was)
//   any other failure                           -> task FAILED, and with it its trial
//                                                  (a search's fold) or its job
//
// Which failures a retry may fix:
//   - crashes and hangs (WORKER_CRASHED, TIMEOUT) may not happen again:
//     retried up to max_restarts times per task;
//   - a preempted attempt (PREEMPTED: Slurm's SIGUSR2 before a time limit
//     or a preemption; the worker checkpointed) goes on in a new attempt
//     without using up a retry whenever it trained an epoch; one that
//     trained nothing counts as a crash (an attempt that keeps being
//     preempted before its first epoch cannot go on for ever);
//   - out of memory on GPUs, where the placement would differ: enough
//     usable GPUs this task has not run out of memory on;
//   - nothing else (INVALID_SPEC, DATA_ERROR, DIVERGED, DEVICE_ERROR, ...),
//     and nothing once the job is stopping (cancelled, or failed by
//     another task).
//
// Thread-safety: pure functions.
#ifndef TRAIND_SERVER_SCHEDULER_ATTEMPT_OUTCOME_H_
#define TRAIND_SERVER_SCHEDULER_ATTEMPT_OUTCOME_H_

#include <optional>

#include "traind/v1/job.pb.h"

namespace traind::server {

// How an attempt ended, and what the decision depends on.
struct EndedAttempt {
  bool succeeded = false;
  // When it failed.
  traind::v1::Failure::Reason reason = traind::v1::Failure::REASON_UNSPECIFIED;
  // Epochs this attempt trained, and the last epoch it reported.
  int trained_epochs = 0;
  int last_epoch = 0;
  // The task's earlier attempts that count against max_restarts
  // (CountsAgainstRestarts).
  int earlier_restarts = 0;
  // The job still runs (RUNNING, and no task has failed it).
  bool job_running = true;
  // traind asked the attempt to stop (a cancel, its trial or job failed).
  bool stop_requested = false;
  // A fold of a search's trial (not the refit task): its failure ends the
  // trial, not the job.
  bool search_fold = false;
  // ASHA: the epoch the fold was told to pause after (0: none), and
  // whether its trial has been pruned.
  int pause_after = 0;
  bool trial_pruned = false;
  // GPU tasks: usable GPUs this task has not run out of memory on (this
  // attempt's GPUs counted as ones it has), and the GPUs one attempt needs.
  bool on_gpus = false;
  int gpus_elsewhere = 0;
  int gpus_needed = 0;
};

struct AttemptOutcome {
  enum class Kind {
    kSucceeded,  // task SUCCEEDED
    kPaused,     // task QUEUED at its rung, until its trial is promoted
    kRetried,    // task QUEUED for a new attempt
    kStopped,    // task CANCELLED, or PRUNED
    kFailed,     // task FAILED
  };
  Kind kind = Kind::kSucceeded;
  traind::v1::Task::State task_state = traind::v1::Task::SUCCEEDED;
  // kFailed: what fails with the task.
  enum class Fails { kNothing, kTrial, kJob };
  Fails fails = Fails::kNothing;
  // The row that decided, for logs and tests.
  const char* why = "";
};

// Whether an attempt that failed with `reason` after training
// `trained_epochs` epochs uses up one of the task's max_restarts.
bool CountsAgainstRestarts(traind::v1::Failure::Reason reason, int trained_epochs);

// REQUIRES: max_restarts >= 0.
AttemptOutcome DecideAttemptOutcome(const EndedAttempt& attempt, int max_restarts);

// And for the job, once its tasks' states are updated:
//
// A search whose every trial ended without a score (failed or pruned, none
// ranked) has failed, unless it is being cancelled or failed already: the
// failure (the first failed task's reason, "no trial succeeded: <its
// message>"; CANCELLED when no task failed). nullopt otherwise.
std::optional<traind::v1::Failure> SearchFailure(const traind::v1::Job& job);

// The state a job ends in once every task has ended: FAILED with a failure;
// a search SUCCEEDED (its failed and pruned trials do not count, it has a
// best one) unless cancelled; any other job SUCCEEDED when every task did,
// else CANCELLED. nullopt while a task has not ended.
std::optional<traind::v1::Job::State> FinalJobState(const traind::v1::Job& job);

}  // namespace traind::server

#endif  // TRAIND_SERVER_SCHEDULER_ATTEMPT_OUTCOME_H_
