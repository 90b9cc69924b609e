#include "server/scheduler/dispatch_queue.h"

namespace traind::server {

using traind::v1::Task;

void DispatchQueue::Remove(const std::string& job_id, int task) {
  for (auto it = entries_.begin(); it != entries_.end(); ++it) {
    if (it->job_id == job_id && it->task == task) {
      entries_.erase(it);
      return;
    }
  }
}

void DispatchQueue::DescribeWaiting(traind::v1::Job* view, const JobConditions& c) const {
  int ahead = 0;
  for (const Entry& e : entries_) {
    if (e.job_id == view->id() && e.task < view->tasks_size() &&
        view->tasks(e.task).state() == Task::QUEUED) {
      Task* t = view->mutable_tasks(e.task);
      Task::WaitReason why = Task::RESOURCES;
      if (c.at_rung && c.at_rung(e.task)) {
        why = Task::RUNG;
      } else if (!c.dependencies_done(e.task)) {
        why = Task::DEPENDENCY;
      } else if (c.at_job_limit || (c.at_trial_limit && c.at_trial_limit(e.task))) {
        why = Task::JOB_LIMIT;
      } else if (c.devices_draining) {
        why = Task::DEVICE_DRAINING;
      } else if (ahead > 0 && entries_.begin()->priority > e.priority) {
        why = Task::PRIORITY;
      }
      t->set_wait_reason(why);
      t->set_tasks_ahead(ahead);
    }
    ++ahead;
  }
}

}  // namespace traind::server
