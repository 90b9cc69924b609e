#include "server/scheduler/event_hub.h"

namespace traind::server {

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

void EventHub::Publish(const traind::v1::JobEvent& event) {
  absl::MutexLock lock(&mu_);
  for (EventSubscriber* s : all_) s->OnEvent(event);
  auto it = subscribers_.find(event.job_id());
  if (it == subscribers_.end()) return;
  for (EventSubscriber* s : it->second) s->OnEvent(event);
}

void EventHub::Removed(const std::string& job_id) {
  absl::MutexLock lock(&mu_);
  auto it = subscribers_.find(job_id);
  if (it == subscribers_.end()) return;
  for (EventSubscriber* s : it->second) s->OnJobRemoved();
}

int EventHub::SubscriberCount() {
  absl::MutexLock lock(&mu_);
  int n = 0;
  for (const auto& [job, subs] : subscribers_) n += static_cast<int>(subs.size());
  return n;
}

}  // namespace traind::server
