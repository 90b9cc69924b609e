// EventHub: fans a job's new events out to its live watchers.
//
// Events are stored before they are published, so a subscriber that misses
// one (its buffer is full, or it subscribed in between) can always read it
// back from the store.
//
// Thread-safety: thread-safe. Subscribers are called with the hub's lock
// held (from the scheduler, on its store writer's thread, which every later
// store write waits on): they only enqueue — no store reads, nothing that
// blocks — and must not call back into the hub or the scheduler. (api/services.cc's WatchReactor
// reads the store on a work pool.)
#ifndef TRAIND_SERVER_SCHEDULER_EVENT_HUB_H_
#define TRAIND_SERVER_SCHEDULER_EVENT_HUB_H_

#include <map>
#include <set>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "traind/v1/job.pb.h"

namespace traind::server {

class EventSubscriber {
 public:
  virtual ~EventSubscriber() = default;
  virtual void OnEvent(const traind::v1::JobEvent& event) = 0;
  // The job was deleted (DeleteJob, retention): no event of it will come
  // again, and the store holds none. With the hub's lock held, as OnEvent.
  virtual void OnJobRemoved() {}
};

class EventHub final {
 public:
  void Subscribe(const std::string& job_id, EventSubscriber* s);
  // After it returns, `s` is never called again.
  void Unsubscribe(const std::string& job_id, EventSubscriber* s);
  // Events of every job (metrics): the same rules as for one job's.
  void SubscribeAll(EventSubscriber* s);
  void UnsubscribeAll(EventSubscriber* s);
  void Publish(const traind::v1::JobEvent& event);
  // Tells the job's subscribers that it is gone (after the store forgot it).
  void Removed(const std::string& job_id);
  int SubscriberCount();

 private:
  absl::Mutex mu_;
  std::map<std::string, std::set<EventSubscriber*>> subscribers_ ABSL_GUARDED_BY(mu_);
  std::set<EventSubscriber*> all_ ABSL_GUARDED_BY(mu_);
};

}  // namespace traind::server

#endif  // TRAIND_SERVER_SCHEDULER_EVENT_HUB_H_
