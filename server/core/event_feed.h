// A job's event feed for one watcher: the stored events after the watcher's
// cursor, then the live ones, each exactly once and in order, ending after
// the `last` event. WatchJob (api/services.cc) and the dashboard's
// server-sent events (http/http_server.cc) are both thin wrappers around it.
//
// Live events reach the feed from the EventHub (OnLive: it only enqueues,
// with the hub's lock held). They are kept while they follow the cursor
// without a gap and fit the buffer (kMaxBuffered); otherwise the feed asks
// its owner to read the store (kStoreBatch events after the cursor) and
// drops what it buffered, so a slow watcher never holds up the scheduler,
// never loses an event and never sees one twice. Events are stored before
// they are published, so the store always has what the buffer missed.
//
// Thread-safety: not thread-safe. The owner serializes every call under its
// own lock; the feed never blocks and never calls out (no store reads, no
// writes, no callbacks), so that lock may be taken on the hub's thread.
#ifndef TRAIND_SERVER_CORE_EVENT_FEED_H_
#define TRAIND_SERVER_CORE_EVENT_FEED_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <vector>

#include "server/core/published_event.h"
#include "traind/v1/job.pb.h"

namespace traind::server {

class EventFeed final {
 public:
  static constexpr size_t kMaxBuffered = 256;
  static constexpr int kStoreBatch = 128;

  // The watcher has seen every event up to sequence `after` (0: none).
  explicit EventFeed(int64_t after) : cursor_(after) {}

  // What the owner should do next.
  enum class Next {
    kWait,       // nothing to hand out: wait for OnLive (or a read in flight)
    kSend,       // Take() has events
    kReadStore,  // call BeginRead(), read the store, then EndRead()
  };
  Next next() const;

  // A live event from the hub. Returns true when next() may have changed
  // from kWait (the owner then wakes its writer).
  bool OnLive(const SharedEvent& event);

  // Starts a store read; returns the sequence to read after (kStoreBatch
  // events at most). REQUIRES: next() == kReadStore.
  int64_t BeginRead();
  // The read's events: ascending sequences after BeginRead's; fewer than
  // kStoreBatch means the store had no more then.
  void EndRead(std::vector<traind::v1::JobEvent> events);
  // The read failed: the feed asks for it again on the next call.
  void AbortRead();

  // Hands out up to `max` events in order; the cursor moves past them.
  // REQUIRES: next() == kSend.
  std::vector<SharedEvent> Take(size_t max);
  // The next event alone (a writer that sends one at a time).
  // REQUIRES: next() == kSend.
  SharedEvent TakeOne();

  // The sequence of the last event handed out.
  int64_t cursor() const { return cursor_; }
  // True once the `last` event was handed out: the feed is over.
  bool ended() const { return ended_; }
  bool reading() const { return reading_; }

 private:
  int64_t cursor_;
  std::deque<SharedEvent> buffer_;  // cursor_+1, cursor_+2, ... without a gap
  bool need_store_ = true;          // the store may hold events the buffer lacks
  bool reading_ = false;            // a store read is in flight
  bool live_during_read_ = false;   // a live event arrived during that read
  bool ended_ = false;
};

}  // namespace traind::server

#endif  // TRAIND_SERVER_CORE_EVENT_FEED_H_
