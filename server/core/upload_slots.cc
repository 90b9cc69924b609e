#include "server/core/upload_slots.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/log.h"

namespace traind::server {

UploadSlots::UploadSlots(UploadLimits limits) : limits_(limits) {
  sweeper_ = std::thread([this] { Sweep(); });
}

UploadSlots::~UploadSlots() {
  {
    std::lock_guard<std::recursive_mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  sweeper_.join();
}

absl::StatusOr<std::unique_ptr<UploadSlots::Slot>> UploadSlots::Acquire(
    const std::string& caller, const char* what, std::function<void()> on_idle) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  int& mine = per_caller_[caller];
  if (mine >= limits_.max_per_caller) {
    return absl::ResourceExhaustedError(absl::StrCat(
        what, ": ", caller, " has ", mine,
        " uploads in flight, the most one caller may (limits.max_uploads_per_user): wait for "
        "one to end"));
  }
  if (static_cast<int>(entries_.size()) >= limits_.max_total) {
    if (mine == 0) per_caller_.erase(caller);
    return absl::ResourceExhaustedError(
        absl::StrCat(what, ": ", entries_.size(),
                     " uploads are in flight, the most traind takes at once (limits.max_uploads): "
                     "retry later"));
  }
  ++mine;
  const uint64_t id = next_id_++;
  Entry& e = entries_[id];
  e.caller = caller;
  e.on_idle = std::move(on_idle);
  e.since = std::chrono::steady_clock::now();
  return std::unique_ptr<Slot>(new Slot(this, id));
}

int UploadSlots::InFlight() {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  return static_cast<int>(entries_.size());
}

UploadSlots::Slot::~Slot() {
  std::lock_guard<std::recursive_mutex> lock(owner_->mu_);
  auto it = owner_->entries_.find(id_);
  if (it == owner_->entries_.end()) return;
  auto c = owner_->per_caller_.find(it->second.caller);
  if (c != owner_->per_caller_.end() && --c->second <= 0) owner_->per_caller_.erase(c);
  owner_->entries_.erase(it);
}

void UploadSlots::Slot::WaitingForMessage() {
  std::lock_guard<std::recursive_mutex> lock(owner_->mu_);
  auto it = owner_->entries_.find(id_);
  if (it == owner_->entries_.end()) return;
  it->second.waiting = true;
  it->second.since = std::chrono::steady_clock::now();
}

bool UploadSlots::Slot::MessageArrived() {
  std::lock_guard<std::recursive_mutex> lock(owner_->mu_);
  auto it = owner_->entries_.find(id_);
  if (it == owner_->entries_.end()) return false;  // ended as idle, released
  it->second.waiting = false;
  return true;
}

void UploadSlots::Sweep() {
  const auto timeout = absl::ToChronoNanoseconds(limits_.idle_timeout);
  const auto period = std::max<std::chrono::nanoseconds>(
      std::chrono::milliseconds(50),
      std::min<std::chrono::nanoseconds>(timeout / 4, std::chrono::seconds(1)));
  std::unique_lock<std::recursive_mutex> lock(mu_);
  while (!stop_) {
    cv_.wait_for(lock, period, [this] { return stop_; });
    if (stop_) return;
    const auto now = std::chrono::steady_clock::now();
    std::vector<uint64_t> idle;
    for (const auto& [id, e] : entries_) {
      if (e.waiting && now - e.since >= timeout) idle.push_back(id);
    }
    for (uint64_t id : idle) {
      auto it = entries_.find(id);  // an earlier on_idle may have ended it
      if (it == entries_.end()) continue;
      LogWarning("upload ended: idle for %s (limits.upload_idle_timeout) caller=%s",
                 absl::FormatDuration(limits_.idle_timeout), it->second.caller);
      std::function<void()> on_idle = std::move(it->second.on_idle);
      // The slot is free before the call ends (a client told its upload
      // ended may start the next at once); the upload, finding no entry,
      // does nothing more (MessageArrived: false).
      auto c = per_caller_.find(it->second.caller);
      if (c != per_caller_.end() && --c->second <= 0) per_caller_.erase(c);
      entries_.erase(it);
      if (on_idle) on_idle();  // may destroy the slot (inline OnDone)
    }
  }
}

}  // namespace traind::server
