#include "server/core/event_feed.h"

#include <cstdint>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace traind::server {
namespace {

using ::testing::ElementsAre;
using traind::v1::JobEvent;
using Next = EventFeed::Next;

JobEvent Event(int64_t sequence, bool last = false) {
  JobEvent e;
  e.set_sequence(sequence);
  e.set_last(last);
  return e;
}

// The store's events after `after`, at most EventFeed::kStoreBatch.
std::vector<JobEvent> Read(const std::vector<JobEvent>& stored, int64_t after) {
  std::vector<JobEvent> out;
  for (const JobEvent& e : stored) {
    if (e.sequence() > after && out.size() < EventFeed::kStoreBatch) out.push_back(e);
  }
  return out;
}

std::vector<int64_t> Sequences(const std::vector<SharedEvent>& events) {
  std::vector<int64_t> out;
  for (const SharedEvent& e : events) out.push_back(e->sequence());
  return out;
}

// One step of a scripted feed: what the hub or the owner does, and what
// next() must say afterwards.
struct Step {
  enum Kind { kLive, kStoreOnly, kRead, kTake } kind;
  // kLive: the event, stored then published; kStoreOnly: stored, its
  // publication missed (before the watcher subscribed, in the real thing).
  int64_t sequence = 0;
  std::vector<int64_t> taken = {};  // kTake: the sequences handed out
  Next then = Next::kWait;
};

struct Case {
  std::string name;
  int64_t after;
  std::vector<int64_t> stored;  // stored before the watch starts
  std::vector<Step> steps;
};

// Every rule of the feed, one row each.
TEST(EventFeedTest, Table) {
  const std::vector<Case> cases = {
      {"starts by reading the store",
       0,
       {1, 2, 3},
       {
           {Step::kRead, 0, {}, Next::kSend},
           {Step::kTake, 0, {1, 2, 3}, Next::kWait},
       }},
      {"resumes after the cursor",
       2,
       {1, 2, 3, 4},
       {
           {Step::kRead, 0, {}, Next::kSend},
           {Step::kTake, 0, {3, 4}, Next::kWait},
       }},
      {"live events in order are buffered, not read",
       0,
       {1},
       {
           {Step::kRead, 0, {}, Next::kSend},
           {Step::kTake, 0, {1}, Next::kWait},
           {Step::kLive, 2, {}, Next::kSend},
           {Step::kLive, 3, {}, Next::kSend},
           {Step::kTake, 0, {2, 3}, Next::kWait},
       }},
      {"a live event already handed out is dropped",
       0,
       {1, 2},
       {
           {Step::kRead, 0, {}, Next::kSend},
           {Step::kTake, 0, {1, 2}, Next::kWait},
           {Step::kLive, 2, {}, Next::kWait},
       }},
      {"a gap sends the feed to the store, dropping what it buffered",
       0,
       {1},
       {
           {Step::kRead, 0, {}, Next::kSend},
           {Step::kTake, 0, {1}, Next::kWait},
           {Step::kLive, 2, {}, Next::kSend},
           {Step::kLive, 3, {}, Next::kSend},
           {Step::kStoreOnly, 4, {}, Next::kSend},  // its publication missed
           {Step::kLive, 5, {}, Next::kReadStore},
           {Step::kRead, 0, {}, Next::kSend},
           {Step::kTake, 0, {2, 3, 4, 5}, Next::kWait},
           {Step::kLive, 6, {}, Next::kSend},
           {Step::kTake, 0, {6}, Next::kWait},
       }},
      {"an event during a read asks for another read",
       0,
       {1},
       {
           {Step::kLive, 2, {}, Next::kReadStore},  // before the first read: the read covers it
           {Step::kRead, 0, {}, Next::kSend},
           {Step::kTake, 0, {1, 2}, Next::kWait},
       }},
      {"the last event ends the feed",
       0,
       {1, 2},
       {
           {Step::kRead, 0, {}, Next::kSend},
           {Step::kTake, 0, {1, 2}, Next::kWait},
           {Step::kLive, -3, {}, Next::kSend},  // negative: the `last` event
           {Step::kTake, 0, {3}, Next::kWait},
           {Step::kLive, 4, {}, Next::kWait},
       }},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    std::vector<JobEvent> stored;
    for (int64_t s : c.stored) stored.push_back(Event(s));
    EventFeed feed(c.after);
    EXPECT_EQ(feed.next(), Next::kReadStore);
    for (size_t i = 0; i < c.steps.size(); ++i) {
      SCOPED_TRACE(i);
      const Step& step = c.steps[i];
      switch (step.kind) {
        case Step::kLive:
        case Step::kStoreOnly: {
          const JobEvent e = Event(std::abs(step.sequence), step.sequence < 0);
          stored.push_back(e);
          if (step.kind == Step::kLive) feed.OnLive(Share(e));
          break;
        }
        case Step::kRead: {
          ASSERT_EQ(feed.next(), Next::kReadStore);
          const int64_t after = feed.BeginRead();
          EXPECT_EQ(feed.next(), Next::kWait);  // while the read is in flight
          feed.EndRead(Read(stored, after));
          break;
        }
        case Step::kTake:
          ASSERT_EQ(feed.next(), Next::kSend);
          EXPECT_EQ(Sequences(feed.Take(1000)), step.taken);
          break;
      }
      EXPECT_EQ(feed.next(), step.then);
    }
  }
}

TEST(EventFeedTest, LiveEventDuringAReadIsReadAgain) {
  std::vector<JobEvent> stored = {Event(1)};
  EventFeed feed(0);
  const int64_t after = feed.BeginRead();
  std::vector<JobEvent> read = Read(stored, after);  // the store answered [1]...
  stored.push_back(Event(2));
  feed.OnLive(Share(stored.back()));  // ...then 2 was stored and published
  feed.EndRead(std::move(read));
  EXPECT_THAT(Sequences(feed.Take(10)), ElementsAre(1));
  ASSERT_EQ(feed.next(), Next::kReadStore);
  feed.EndRead(Read(stored, feed.BeginRead()));
  EXPECT_THAT(Sequences(feed.Take(10)), ElementsAre(2));
  EXPECT_EQ(feed.next(), Next::kWait);
}

TEST(EventFeedTest, FullBufferGoesToTheStoreInBatches) {
  std::vector<JobEvent> stored;
  EventFeed feed(0);
  feed.EndRead(Read(stored, feed.BeginRead()));  // nothing stored yet
  const int64_t n = EventFeed::kMaxBuffered + 300;
  for (int64_t s = 1; s <= n; ++s) {  // a watcher that takes nothing for a while
    stored.push_back(Event(s, s == n));
    feed.OnLive(Share(stored.back()));
  }
  ASSERT_EQ(feed.next(), Next::kReadStore);
  std::vector<int64_t> seen;
  int reads = 0;
  while (!feed.ended()) {
    if (feed.next() == Next::kReadStore) {
      feed.EndRead(Read(stored, feed.BeginRead()));
      ++reads;
    }
    ASSERT_EQ(feed.next(), Next::kSend);
    for (int64_t s : Sequences(feed.Take(7))) seen.push_back(s);
  }
  ASSERT_EQ(static_cast<int64_t>(seen.size()), n);
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(seen[i], i + 1);
  EXPECT_EQ(reads, (n + EventFeed::kStoreBatch - 1) / EventFeed::kStoreBatch);
}

TEST(EventFeedTest, AbortedReadIsAskedAgain) {
  EventFeed feed(5);
  EXPECT_EQ(feed.BeginRead(), 5);
  feed.AbortRead();
  EXPECT_EQ(feed.next(), Next::kReadStore);
  EXPECT_EQ(feed.BeginRead(), 5);
}

// Any interleaving of publication, store reads (answered late) and takes
// of any size hands out every event after the cursor exactly once, in
// order, and ends after the last.
TEST(EventFeedTest, RandomInterleavingsMissNothingAndRepeatNothing) {
  for (uint32_t seed = 1; seed <= 300; ++seed) {
    SCOPED_TRACE(seed);
    std::mt19937 rng(seed);
    const int64_t n = 1 + rng() % 700;
    const int64_t after = rng() % 3 == 0 ? static_cast<int64_t>(rng() % n) : 0;
    int64_t published = static_cast<int64_t>(rng() % (n + 1));  // stored before the watch
    std::vector<JobEvent> stored;
    for (int64_t s = 1; s <= published; ++s) stored.push_back(Event(s, s == n));
    EventFeed feed(after);
    std::vector<int64_t> seen;
    bool read_pending = false;
    int64_t read_after = 0;
    std::vector<JobEvent> read_result;
    for (int guard = 0; !feed.ended() && guard < 100000; ++guard) {
      switch (rng() % 4) {
        case 0:  // the scheduler stores an event, then publishes it
          if (published < n) {
            ++published;
            stored.push_back(Event(published, published == n));
            feed.OnLive(Share(stored.back()));
          }
          break;
        case 1:  // a store read starts, or the one in flight answers
          if (read_pending) {
            feed.EndRead(std::move(read_result));
            read_pending = false;
          } else if (feed.next() == Next::kReadStore) {
            read_after = feed.BeginRead();
            read_result = Read(stored, read_after);
            read_pending = true;
          }
          break;
        default:
          if (feed.next() == Next::kSend) {
            for (int64_t s : Sequences(feed.Take(1 + rng() % 20))) seen.push_back(s);
          }
      }
    }
    ASSERT_TRUE(feed.ended());
    ASSERT_EQ(static_cast<int64_t>(seen.size()), n - after);
    for (size_t i = 0; i < seen.size(); ++i)
      ASSERT_EQ(seen[i], after + 1 + static_cast<int64_t>(i));
  }
}

}  // namespace
}  // namespace traind::server
