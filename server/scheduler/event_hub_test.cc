#include "server/scheduler/event_hub.h"

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace traind::server {
namespace {

using traind::v1::JobEvent;

JobEvent Event(const std::string& job, int64_t sequence) {
  JobEvent e;
  e.set_job_id(job);
  e.set_sequence(sequence);
  e.mutable_epoch()->set_epoch(static_cast<int>(sequence));
  (*e.mutable_epoch()->mutable_train())["loss"] = 1.0 / static_cast<double>(sequence);
  return e;
}

// Records what it is handed, on the hub's thread.
class Recorder : public EventSubscriber {
 public:
  void OnEvent(const SharedEvent& e) override {
    absl::MutexLock lock(&mu_);
    events_.push_back(e);
    threads_.push_back(std::this_thread::get_id());
  }
  void OnJobRemoved() override {
    absl::MutexLock lock(&mu_);
    removed_at_ = static_cast<int>(events_.size());
  }
  std::vector<int64_t> Sequences() {
    absl::MutexLock lock(&mu_);
    std::vector<int64_t> out;
    for (const SharedEvent& e : events_) out.push_back(e->sequence());
    return out;
  }
  std::vector<SharedEvent> Events() {
    absl::MutexLock lock(&mu_);
    return events_;
  }
  std::vector<std::thread::id> Threads() {
    absl::MutexLock lock(&mu_);
    return threads_;
  }
  int removed_at() {
    absl::MutexLock lock(&mu_);
    return removed_at_;
  }

 private:
  absl::Mutex mu_;
  std::vector<SharedEvent> events_;
  std::vector<std::thread::id> threads_;
  int removed_at_ = -1;
};

TEST(EventHubTest, EveryWatcherGetsTheSameEventInOrderOnTheHubsThread) {
  EventHub hub;
  Recorder a, b, other, all;
  hub.Subscribe("j", &a);
  hub.Subscribe("j", &b);
  hub.Subscribe("k", &other);
  hub.SubscribeAll(&all);
  for (int64_t s = 1; s <= 50; ++s) hub.Publish(Event("j", s));
  hub.Publish({Event("k", 1), Event("j", 51)});
  hub.Flush();
  std::vector<int64_t> expected;
  for (int64_t s = 1; s <= 51; ++s) expected.push_back(s);
  EXPECT_EQ(a.Sequences(), expected);
  EXPECT_EQ(b.Sequences(), expected);
  EXPECT_EQ(other.Sequences(), std::vector<int64_t>{1});
  EXPECT_EQ(all.Events().size(), 52u);
  // One event object for every watcher (not a copy each), its wire bytes
  // made once: the message serialized.
  const std::vector<SharedEvent> ea = a.Events(), eb = b.Events();
  for (size_t i = 0; i < ea.size(); ++i) {
    ASSERT_EQ(ea[i].get(), eb[i].get()) << i;
    EXPECT_EQ(&ea[i]->wire(), &eb[i]->wire());
  }
  EXPECT_EQ(ea[6]->wire(), Event("j", 7).SerializeAsString());
  JobEvent parsed;
  ASSERT_TRUE(parsed.ParseFromString(ea[6]->wire()));
  EXPECT_EQ(parsed.epoch().train().at("loss"), 1.0 / 7);
  // Not on the publisher's thread.
  for (std::thread::id t : a.Threads()) EXPECT_NE(t, std::this_thread::get_id());
  hub.Unsubscribe("j", &a);
  hub.Unsubscribe("j", &b);
  hub.Unsubscribe("k", &other);
  hub.UnsubscribeAll(&all);
}

// The store writer publishes: it must never wait for a watcher.
TEST(EventHubTest, PublishReturnsWhileAWatcherIsStillBusy) {
  class Slow : public EventSubscriber {
   public:
    void OnEvent(const SharedEvent&) override {
      if (!entered.HasBeenNotified()) entered.Notify();
      release.WaitForNotification();
    }
    absl::Notification entered, release;
  } slow;
  EventHub hub;
  hub.Subscribe("j", &slow);
  hub.Publish(Event("j", 1));
  ASSERT_TRUE(slow.entered.WaitForNotificationWithTimeout(absl::Seconds(30)));
  // The watcher is inside OnEvent; more events are only queued.
  const absl::Time start = absl::Now();
  for (int64_t s = 2; s <= 100; ++s) hub.Publish(Event("j", s));
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  slow.release.Notify();
  hub.Flush();
  hub.Unsubscribe("j", &slow);
}

TEST(EventHubTest, ARemovalFollowsTheJobsEventsPublishedBefore) {
  EventHub hub;
  Recorder r;
  hub.Subscribe("j", &r);
  for (int64_t s = 1; s <= 20; ++s) hub.Publish(Event("j", s));
  hub.Removed("j");
  hub.Flush();
  EXPECT_EQ(r.Sequences().size(), 20u);
  EXPECT_EQ(r.removed_at(), 20);
  hub.Unsubscribe("j", &r);
}

// After Unsubscribe returns the watcher may be gone: it is never called
// again, while events keep coming on another thread.
TEST(EventHubTest, AnUnsubscribedWatcherIsNeverCalledAgain) {
  class Checked : public EventSubscriber {
   public:
    void OnEvent(const SharedEvent&) override {
      EXPECT_FALSE(gone.load()) << "called after Unsubscribe returned";
      ++calls;
    }
    std::atomic<bool> gone{false};
    std::atomic<int> calls{0};
  };
  EventHub hub;
  std::atomic<bool> stop{false};
  std::thread publisher([&] {
    for (int64_t s = 1; !stop.load(); ++s) hub.Publish(Event("j", s));
  });
  for (int i = 0; i < 200; ++i) {
    auto w = std::make_unique<Checked>();
    hub.Subscribe("j", w.get());
    while (w->calls.load() == 0) std::this_thread::yield();
    hub.Unsubscribe("j", w.get());
    w->gone = true;
  }
  stop = true;
  publisher.join();
  hub.Flush();
}

TEST(EventHubTest, StoppingDeliversWhatWasPublished) {
  Recorder r;
  {
    EventHub hub;
    hub.Subscribe("j", &r);
    for (int64_t s = 1; s <= 1000; ++s) hub.Publish(Event("j", s));
  }
  EXPECT_EQ(r.Sequences().size(), 1000u);
}

}  // namespace
}  // namespace traind::server
