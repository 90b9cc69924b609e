#include "server/core/event_feed.h"

#include <iterator>
#include <utility>

namespace traind::server {

EventFeed::Next EventFeed::next() const {
  if (ended_ || reading_) return Next::kWait;
  if (!buffer_.empty()) return Next::kSend;
  return need_store_ ? Next::kReadStore : Next::kWait;
}

bool EventFeed::OnLive(const SharedEvent& event) {
  if (ended_) return false;
  if (reading_) {  // the read may have missed it: read again after
    live_during_read_ = true;
    return false;
  }
  if (need_store_) return false;  // the store read to come covers it
  const int64_t expected = cursor_ + static_cast<int64_t>(buffer_.size()) + 1;
  if (event->sequence() < expected) return false;  // already buffered or handed out
  if (event->sequence() == expected && buffer_.size() < kMaxBuffered) {
    buffer_.push_back(event);
    return buffer_.size() == 1;
  }
  // A gap, or the buffer is full: the store has them all. What is buffered
  // is dropped, so the read starts right after the cursor and nothing is
  // handed out twice.
  buffer_.clear();
  need_store_ = true;
  return true;
}

int64_t EventFeed::BeginRead() {
  reading_ = true;
  live_during_read_ = false;
  return cursor_;
}

void EventFeed::EndRead(std::vector<traind::v1::JobEvent> events) {
  reading_ = false;
  buffer_.clear();
  need_store_ = static_cast<int>(events.size()) == kStoreBatch || live_during_read_;
  for (traind::v1::JobEvent& e : events) {
    const int64_t after = buffer_.empty() ? cursor_ : buffer_.back()->sequence();
    if (e.sequence() > after) buffer_.push_back(Share(std::move(e)));  // ascending, never twice
  }
}

void EventFeed::AbortRead() {
  reading_ = false;
  need_store_ = true;
}

SharedEvent EventFeed::TakeOne() {
  SharedEvent e = std::move(buffer_.front());
  buffer_.pop_front();
  cursor_ = e->sequence();
  if (e->last()) {
    ended_ = true;
    buffer_.clear();
  }
  return e;
}

std::vector<SharedEvent> EventFeed::Take(size_t max) {
  std::vector<SharedEvent> out;
  while (!buffer_.empty() && out.size() < max && !ended_) out.push_back(TakeOne());
  return out;
}

}  // namespace traind::server
