#include "server/scheduler/dispatch_queue.h"

namespace traind::server {

using traind::v1::Task;

void DispatchQueue::Remove(const std::string& job_id, int task) {
  for (auto it = entries_.begin(); it != entries_.end(); ++it) {
    if (it->job_id == job_id && it->task == task) {
      entries_.erase(it);
      ++version_;
      return;
    }
  }
}

void DispatchQueue::DescribeWaiting(traind::v1::Job* view, const JobConditions& c,
                                    const std::vector<Entry>* order) const {
  // Over the fair-share order, or the queue itself (no copy: every GetJob
  // of a queued job comes here).
  auto describe = [&](const auto& entries) {
    int ahead = 0;
    const std::string& owner = view->owner();
    // Whether a task of another owner, of this priority, comes first (fair share).
    std::set<int32_t> others_at;  // priorities of other owners' tasks seen so far
    for (const Entry& e : entries) {
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
        } else if (c.at_owner_limit) {
          why = Task::OWNER_LIMIT;
        } else if (c.devices_draining) {
          why = Task::DEVICE_DRAINING;
        } else if (ahead > 0 && entries.begin()->priority > e.priority) {
          why = Task::PRIORITY;
        } else if (order != nullptr && others_at.count(e.priority) > 0) {
          why = Task::FAIR_SHARE;
        }
        t->set_wait_reason(why);
        t->set_tasks_ahead(ahead);
      }
      if (order != nullptr && e.job_id != view->id() && e.owner != owner) {
        others_at.insert(e.priority);
      }
      ++ahead;
    }
  };
  if (order != nullptr) {
    describe(*order);
  } else {
    describe(entries_);
  }
}

}  // namespace traind::server
