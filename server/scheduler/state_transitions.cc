#include "server/scheduler/state_transitions.h"

#include <utility>

#include "base/log.h"

namespace traind::server {
namespace {

using traind::v1::Job;
using traind::v1::Task;

template <typename State>
struct Transition {
  State from;
  State to;
};

// Every state change the scheduler makes. New jobs and tasks start QUEUED
// (from STATE_UNSPECIFIED).
constexpr Transition<Job::State> kJobTransitions[] = {
    {Job::STATE_UNSPECIFIED, Job::QUEUED},
    {Job::QUEUED, Job::RUNNING},        // its first task starts
    {Job::QUEUED, Job::CANCELLING},     // CancelJob
    {Job::RUNNING, Job::CANCELLING},    // CancelJob
    {Job::QUEUED, Job::FAILED},         // no task could start
    {Job::QUEUED, Job::CANCELLED},      // cancelled before any task started
    {Job::RUNNING, Job::SUCCEEDED},     // every task succeeded
    {Job::RUNNING, Job::FAILED},        // a task failed
    {Job::RUNNING, Job::CANCELLED},     // a task was cancelled
    {Job::CANCELLING, Job::SUCCEEDED},  // the last tasks finished anyway
    {Job::CANCELLING, Job::FAILED},
    {Job::CANCELLING, Job::CANCELLED},
};

constexpr Transition<Task::State> kTaskTransitions[] = {
    {Task::STATE_UNSPECIFIED, Task::QUEUED},
    {Task::QUEUED, Task::STARTING},     // an attempt is launched
    {Task::QUEUED, Task::FAILED},       // the launch failed (not retried)
    {Task::QUEUED, Task::CANCELLED},    // the job stops before it ran
    {Task::STARTING, Task::RUNNING},    // the worker reported it started
    {Task::STARTING, Task::QUEUED},     // retried, or LOST at recovery
    {Task::RUNNING, Task::QUEUED},      // retried, or LOST at recovery
    {Task::STARTING, Task::SUCCEEDED},  // the attempt ended
    {Task::STARTING, Task::FAILED},
    {Task::STARTING, Task::CANCELLED},
    {Task::RUNNING, Task::SUCCEEDED},
    {Task::RUNNING, Task::FAILED},
    {Task::RUNNING, Task::CANCELLED},
    {Task::QUEUED, Task::PRUNED},  // ASHA stopped its trial (a fold paused at a rung)
    {Task::STARTING, Task::PRUNED},
    {Task::RUNNING, Task::PRUNED},
};

template <typename State, size_t N>
bool Allowed(const Transition<State> (&table)[N], State from, State to) {
  for (const Transition<State>& t : table) {
    if (t.from == from && t.to == to) return true;
  }
  return false;
}

}  // namespace

bool IsAllowedTransition(Job::State from, Job::State to) {
  return Allowed(kJobTransitions, from, to);
}

bool IsAllowedTransition(Task::State from, Task::State to) {
  return Allowed(kTaskTransitions, from, to);
}

JobChange::JobChange(Job* job, NewEvent new_event, bool slurm_jobs)
    : job_(job), new_event_(std::move(new_event)), slurm_jobs_(slurm_jobs) {}

traind::v1::JobStateChange* JobChange::SetJobState(Job::State to) {
  if (!IsAllowedTransition(job_->state(), to)) {
    LogError("job state change not in the table job=%s: %s -> %s", job_->id(),
             Job::State_Name(job_->state()), Job::State_Name(to));
  }
  job_->set_state(to);
  mutation_.job = job_;
  traind::v1::JobStateChange* e = new_event_()->mutable_job_state();
  e->set_state(to);
  return e;
}

traind::v1::TaskStateChange* JobChange::SetTaskState(int task, Task::State to, int attempt,
                                                     int pid) {
  Task* t = job_->mutable_tasks(task);
  if (!IsAllowedTransition(t->state(), to)) {
    LogError("task state change not in the table job=%s task=%d: %s -> %s", job_->id(), task,
             Task::State_Name(t->state()), Task::State_Name(to));
  }
  t->set_state(to);
  WriteTask(task);
  return TaskEvent(task, attempt, pid);
}

traind::v1::TaskStateChange* JobChange::TaskEvent(int task, int attempt, int pid) {
  traind::v1::TaskStateChange* e = new_event_()->mutable_task_state();
  e->set_task(task);
  e->set_attempt(attempt);
  e->set_state(job_->tasks(task).state());
  if (pid != 0 && slurm_jobs_) {
    e->set_slurm_job_id(pid);
  } else if (pid != 0) {
    e->set_pid(pid);
  }
  return e;
}

void JobChange::WriteTask(int task) {
  const Task* t = &job_->tasks(task);
  for (const Task* w : mutation_.tasks) {
    if (w == t) return;
  }
  mutation_.tasks.push_back(t);
}

}  // namespace traind::server
