// EventHub: fans a job's new events out to its live watchers.
//
// Events are stored before they are published, so a subscriber that misses
// one (its buffer is full, or it subscribed in between) can always read it
// back from the store.
//
// Publish only queues: the store writer (which every later store write
// waits on) never waits for the watchers. The hub's own delivery thread
// hands each event, shared and immutable (core/published_event.h: one copy
// and one serialization for every watcher), to the job's subscribers and to
// the all-jobs ones, in the order published; a deletion (Removed) is
// delivered after the job's events queued before it.
//
// Thread-safety: thread-safe. Subscribers are called on the delivery thread
// with the hub's subscriber lock held (so that after Unsubscribe returns, a
// subscriber is never called again): they only enqueue or start a write —
// no store reads, nothing that blocks — and must not call back into the hub
// or the scheduler. (api/services.cc's WatchReactor reads the store on a
// work pool.)
#ifndef TRAIND_SERVER_SCHEDULER_EVENT_HUB_H_
#define TRAIND_SERVER_SCHEDULER_EVENT_HUB_H_

#include <cstdint>
#include <deque>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "server/core/published_event.h"
#include "traind/v1/job.pb.h"

namespace traind::server {

class EventSubscriber {
 public:
  virtual ~EventSubscriber() = default;
  virtual void OnEvent(const SharedEvent& event) = 0;
  // The job was deleted (DeleteJob, retention): no event of it will come
  // again, and the store holds none. On the delivery thread, as OnEvent.
  virtual void OnJobRemoved() {}
};

class EventHub final {
 public:
  EventHub();
  // Delivers what was published before, then stops its thread.
  ~EventHub();
  EventHub(const EventHub&) = delete;
  EventHub& operator=(const EventHub&) = delete;

  void Subscribe(const std::string& job_id, EventSubscriber* s);
  // After it returns, `s` is never called again.
  void Unsubscribe(const std::string& job_id, EventSubscriber* s);
  // Events of every job (metrics): the same rules as for one job's.
  void SubscribeAll(EventSubscriber* s);
  void UnsubscribeAll(EventSubscriber* s);
  // Queues stored events for delivery, in order; returns at once.
  void Publish(std::vector<traind::v1::JobEvent> events);
  void Publish(const traind::v1::JobEvent& event);
  // Tells the job's subscribers that it is gone (after the store forgot it),
  // once the job's events published before are delivered.
  void Removed(const std::string& job_id);
  // Returns once everything published before the call was delivered.
  void Flush();
  int SubscriberCount();

 private:
  struct Item {
    SharedEvent event;    // an event, or
    std::string removed;  // the job that was deleted
  };
  void DeliveryLoop();
  void Deliver(const Item& item);

  absl::Mutex queue_mu_;
  std::deque<Item> queue_ ABSL_GUARDED_BY(queue_mu_);
  uint64_t queued_ ABSL_GUARDED_BY(queue_mu_) = 0;     // items ever queued
  uint64_t delivered_ ABSL_GUARDED_BY(queue_mu_) = 0;  // items ever delivered
  bool exit_ ABSL_GUARDED_BY(queue_mu_) = false;

  absl::Mutex mu_ ABSL_ACQUIRED_AFTER(queue_mu_);
  std::map<std::string, std::set<EventSubscriber*>> subscribers_ ABSL_GUARDED_BY(mu_);
  std::set<EventSubscriber*> all_ ABSL_GUARDED_BY(mu_);

  std::thread thread_;  // last: started once the rest is built
};

}  // namespace traind::server

#endif  // TRAIND_SERVER_SCHEDULER_EVENT_HUB_H_
