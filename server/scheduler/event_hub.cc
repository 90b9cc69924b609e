#include "server/scheduler/event_hub.h"

#include <pthread.h>

#include <utility>

namespace traind::server {

EventHub::EventHub() : thread_([this] { DeliveryLoop(); }) {}

EventHub::~EventHub() {
  {
    absl::MutexLock lock(&queue_mu_);
    exit_ = true;
  }
  thread_.join();
}

void EventHub::Subscribe(const std::string& job_id, EventSubscriber* s) {
  absl::MutexLock lock(&mu_);
  subscribers_[job_id].insert(s);
}

void EventHub::Unsubscribe(const std::string& job_id, EventSubscriber* s) {
  absl::MutexLock lock(&mu_);
  auto it = subscribers_.find(job_id);
  if (it == subscribers_.end()) return;
  it->second.erase(s);
  if (it->second.empty()) subscribers_.erase(it);
}

void EventHub::SubscribeAll(EventSubscriber* s) {
  absl::MutexLock lock(&mu_);
  all_.insert(s);
}

void EventHub::UnsubscribeAll(EventSubscriber* s) {
  absl::MutexLock lock(&mu_);
  all_.erase(s);
}

void EventHub::Publish(std::vector<traind::v1::JobEvent> events) {
  if (events.empty()) return;
  absl::MutexLock lock(&queue_mu_);
  for (traind::v1::JobEvent& e : events) queue_.push_back(Item{Share(std::move(e)), {}});
  queued_ += events.size();
}

void EventHub::Publish(const traind::v1::JobEvent& event) { Publish(std::vector{event}); }

void EventHub::Removed(const std::string& job_id) {
  absl::MutexLock lock(&queue_mu_);
  queue_.push_back(Item{nullptr, job_id});
  ++queued_;
}

void EventHub::Flush() {
  absl::MutexLock lock(&queue_mu_);
  const uint64_t target = queued_;
  auto done = [this, target]()
                  ABSL_EXCLUSIVE_LOCKS_REQUIRED(queue_mu_) { return delivered_ >= target; };
  queue_mu_.Await(absl::Condition(&done));
}

int EventHub::SubscriberCount() {
  absl::MutexLock lock(&mu_);
  int n = 0;
  for (const auto& [job, subs] : subscribers_) n += static_cast<int>(subs.size());
  return n;
}

void EventHub::DeliveryLoop() {
  pthread_setname_np(pthread_self(), "event-hub");  // for ps, top and perf
  std::deque<Item> batch;
  for (;;) {
    {
      absl::MutexLock lock(&queue_mu_);
      delivered_ += batch.size();
      batch.clear();
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(queue_mu_) {
        return exit_ || !queue_.empty();
      };
      queue_mu_.Await(absl::Condition(&ready));
      if (queue_.empty()) return;  // exit_, with everything delivered
      // Everything queued meanwhile, at once: a lagging hub catches up in
      // one pass of its subscribers per event, without a wake-up each.
      batch.swap(queue_);
    }
    for (const Item& item : batch) Deliver(item);
  }
}

void EventHub::Deliver(const Item& item) {
  absl::MutexLock lock(&mu_);
  if (item.event == nullptr) {
    auto it = subscribers_.find(item.removed);
    if (it == subscribers_.end()) return;
    for (EventSubscriber* s : it->second) s->OnJobRemoved();
    return;
  }
  for (EventSubscriber* s : all_) s->OnEvent(item.event);
  auto it = subscribers_.find(item.event->event().job_id());
  if (it == subscribers_.end()) return;
  for (EventSubscriber* s : it->second) s->OnEvent(item.event);
}

}  // namespace traind::server
