// Job and task states: which state may follow which, and the one way the
// scheduler changes a state (the state, the event that announces it and the
// store write that records it, together).
//
//   job:  QUEUED -> RUNNING -> SUCCEEDED | FAILED | CANCELLED
//         QUEUED | RUNNING -> CANCELLING -> SUCCEEDED | FAILED | CANCELLED
//         QUEUED -> FAILED | CANCELLED (no task ever started)
//   task: QUEUED -> STARTING -> RUNNING -> SUCCEEDED | FAILED | CANCELLED
//         STARTING | RUNNING -> QUEUED (retried, or LOST at recovery)
//         QUEUED -> FAILED (the launch failed) | CANCELLED
//         QUEUED | STARTING | RUNNING -> PRUNED (ASHA stopped the trial)
//
// The tables are in state_transitions.cc; which states are final is
// store/job_states.h's (the store needs it too).
// Thread-safety: the functions are pure; a JobChange belongs to one thread.
#ifndef TRAIND_SERVER_SCHEDULER_STATE_TRANSITIONS_H_
#define TRAIND_SERVER_SCHEDULER_STATE_TRANSITIONS_H_

#include <functional>

#include "server/store/job_states.h"
#include "server/store/job_store.h"
#include "traind/v1/job.pb.h"

namespace traind::server {

// Whether `to` may follow `from` (a state never follows itself).
bool IsAllowedTransition(traind::v1::Job::State from, traind::v1::Job::State to);
bool IsAllowedTransition(traind::v1::Task::State from, traind::v1::Task::State to);

// One atomic change of a job: state changes of the job and its tasks, the
// events that announce them, and the rows to write, collected for one
// Scheduler commit. A transition the tables do not allow is logged as an
// error (a scheduler bug) and applied all the same.
class JobChange {
 public:
  // `new_event` returns a new event of the job (sequence and time set);
  // it must stay valid until the commit.
  using NewEvent = std::function<traind::v1::JobEvent*()>;
  // `slurm_jobs`: the launcher's handles (the pids passed below) are Slurm
  // job ids: events carry them as slurm_job_id.
  JobChange(traind::v1::Job* job, NewEvent new_event, bool slurm_jobs = false);
  JobChange(const JobChange&) = delete;
  JobChange& operator=(const JobChange&) = delete;

  // Sets the job's state; its job_state event (returned, to add a failure).
  traind::v1::JobStateChange* SetJobState(traind::v1::Job::State to);
  // Sets task `task`'s state; returns its task_state event (task, attempt,
  // state and pid set) for the caller to add a failure or a result.
  traind::v1::TaskStateChange* SetTaskState(int task, traind::v1::Task::State to, int attempt,
                                            int pid = 0);
  // A task_state event that changes no state (resumed, warning).
  traind::v1::TaskStateChange* TaskEvent(int task, int attempt, int pid);
  // A new event of the job (for kinds without a state: epochs, devices).
  traind::v1::JobEvent* Event() { return new_event_(); }

  // Writes the job's row with the change.
  void WriteJob() { mutation_.job = job_; }
  // Writes task `task`'s row (with its attempts) with the change.
  void WriteTask(int task);
  StoreMutation& mutation() { return mutation_; }

 private:
  traind::v1::Job* const job_;
  const NewEvent new_event_;
  const bool slurm_jobs_;
  StoreMutation mutation_;
};

}  // namespace traind::server

#endif  // TRAIND_SERVER_SCHEDULER_STATE_TRANSITIONS_H_
