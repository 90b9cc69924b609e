// DispatchQueue: the queued tasks of every job in dispatch order (higher
// priority first, then submit order, then task index), and why a queued
// task waits (Task::WaitReason) and how many tasks are ahead of it.
//
// Thread-safety: not thread-safe; the Scheduler guards it with its mutex.
#ifndef TRAIND_SERVER_SCHEDULER_DISPATCH_QUEUE_H_
#define TRAIND_SERVER_SCHEDULER_DISPATCH_QUEUE_H_

#include <cstdint>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "traind/v1/job.pb.h"

namespace traind::server {

class DispatchQueue final {
 public:
  struct Entry {
    int32_t priority;
    uint64_t order;  // the job's submit order
    int task;
    std::string job_id;
    std::string owner;  // the job's (not part of the order)
    bool operator<(const Entry& o) const {
      if (priority != o.priority) return priority > o.priority;
      if (order != o.order) return order < o.order;
      return task < o.task;
    }
  };
  using const_iterator = std::set<Entry>::const_iterator;

  // Not an error if the task is queued already.
  void Add(int32_t priority, uint64_t order, int task, const std::string& job_id,
           const std::string& owner = "") {
    if (entries_.insert(Entry{priority, order, task, job_id, owner}).second) ++version_;
  }
  // Not an error if the task is not queued.
  void Remove(const std::string& job_id, int task);
  const_iterator Erase(const_iterator it) {
    ++version_;
    return entries_.erase(it);
  }
  // Not an error if it is not queued.
  void Erase(const Entry& entry) { version_ += entries_.erase(entry); }
  // Changes with every task added or removed.
  uint64_t version() const { return version_; }
  const_iterator begin() const { return entries_.begin(); }
  const_iterator end() const { return entries_.end(); }
  size_t size() const { return entries_.size(); }

  // What the job's own state says about a queued task of it.
  struct JobConditions {
    // Whether the task's dependencies (the folds, for the refit) are done.
    std::function<bool(int task)> dependencies_done;
    // The job already runs resources.max_parallel_tasks tasks.
    bool at_job_limit = false;
    // Its owner holds what scheduling.max_*_per_owner allow. OWNER_LIMIT.
    bool at_owner_limit = false;
    // A search: the task's trial may not start (search.max_concurrent_trials
    // other trials run). Absent: no limit. Also JOB_LIMIT.
    std::function<bool(int task)> at_trial_limit;
    // ASHA: the task waits at a rung for its trial's decision. Absent: never.
    std::function<bool(int task)> at_rung;
    // GPU jobs: some GPU is draining.
    bool devices_draining = false;
  };
  // Sets wait_reason and tasks_ahead of every QUEUED task of `view` (a copy
  // of a live job) that is in the queue. `order`: the order dispatch tries
  // (fair share: FAIR_SHARE when another owner's task of the same priority
  // comes first; null: the queue's own).
  void DescribeWaiting(traind::v1::Job* view, const JobConditions& conditions,
                       const std::vector<Entry>* order = nullptr) const;

 private:
  std::set<Entry> entries_;
  uint64_t version_ = 0;
};

}  // namespace traind::server

#endif  // TRAIND_SERVER_SCHEDULER_DISPATCH_QUEUE_H_
