// PublishedEvent: one job event as the EventHub hands it to every watcher.
//
// Immutable and shared (SharedEvent): 500 watchers of a job hold one copy of
// each event, not 500, and the gRPC streams send the same wire bytes, made
// once (wire()), instead of serializing the message once per stream.
//
// Thread-safety: thread-safe (immutable; wire() is made once, under
// absl::call_once, by its first caller).
#ifndef TRAIND_SERVER_CORE_PUBLISHED_EVENT_H_
#define TRAIND_SERVER_CORE_PUBLISHED_EVENT_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "absl/base/call_once.h"
#include "traind/v1/job.pb.h"

namespace traind::server {

class PublishedEvent final {
 public:
  explicit PublishedEvent(traind::v1::JobEvent event) : event_(std::move(event)) {}
  PublishedEvent(const PublishedEvent&) = delete;
  PublishedEvent& operator=(const PublishedEvent&) = delete;

  const traind::v1::JobEvent& event() const { return event_; }
  int64_t sequence() const { return event_.sequence(); }
  bool last() const { return event_.last(); }

  // The serialized JobEvent (what a WatchJob stream writes).
  const std::string& wire() const {
    absl::call_once(wire_once_, [this] { event_.SerializeToString(&wire_); });
    return wire_;
  }

 private:
  const traind::v1::JobEvent event_;
  mutable absl::once_flag wire_once_;
  mutable std::string wire_;
};

using SharedEvent = std::shared_ptr<const PublishedEvent>;

inline SharedEvent Share(traind::v1::JobEvent event) {
  return std::make_shared<const PublishedEvent>(std::move(event));
}

}  // namespace traind::server

#endif  // TRAIND_SERVER_CORE_PUBLISHED_EVENT_H_
