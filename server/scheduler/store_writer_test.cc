#include "server/scheduler/store_writer.h"

#include <atomic>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace traind::server {
namespace {

using traind::v1::JobEvent;

// Records what the writer applies, and can hold it up like a slow disk.
class FakeStore {
 public:
  absl::Status Apply(const StoreMutation& m, const std::string& job_id) {
    if (hold_) release_.WaitForNotification();
    absl::MutexLock lock(&mu_);
    if (fail_) return absl::DataLossError("disk full");
    if (full_) {
      ++full_tries_;
      return absl::ResourceExhaustedError("database or disk is full");
    }
    std::string row = job_id;
    if (m.job != nullptr) {
      row += " job:" + m.job->id() + (m.new_job ? "+new" : "");
      row += " job_tasks:" + std::to_string(m.job->tasks_size());
    }
    for (const traind::v1::Task* t : m.tasks) row += " task:" + std::to_string(t->index());
    for (const traind::v1::EpochMetrics* e : m.epochs)
      row += " epoch:" + std::to_string(e->epoch());
    for (const JobEvent* e : m.events) {
      row += " event:" + std::to_string(e->sequence());
      stored_sequences_.push_back(e->sequence());
    }
    rows_.push_back(row);
    return absl::OkStatus();
  }
  std::vector<std::string> rows() {
    absl::MutexLock lock(&mu_);
    return rows_;
  }
  bool Stored(int64_t sequence) {
    absl::MutexLock lock(&mu_);
    for (int64_t s : stored_sequences_) {
      if (s == sequence) return true;
    }
    return false;
  }

  void SetFull(bool full) {
    absl::MutexLock lock(&mu_);
    full_ = full;
  }
  int full_tries() {
    absl::MutexLock lock(&mu_);
    return full_tries_;
  }

  bool hold_ = false;
  bool fail_ = false;
  absl::Notification release_;

 private:
  absl::Mutex mu_;
  std::vector<std::string> rows_;
  std::vector<int64_t> stored_sequences_;
  bool full_ = false;
  int full_tries_ = 0;
};

// Checks, when an event is published, that it was stored before.
class CheckingSubscriber : public EventSubscriber {
 public:
  explicit CheckingSubscriber(FakeStore* store) : store_(store) {}
  void OnEvent(const SharedEvent& e) override {
    if (!store_->Stored(e->sequence())) published_before_stored = true;
    sequences.push_back(e->sequence());
  }
  FakeStore* store_;
  std::vector<int64_t> sequences;
  bool published_before_stored = false;
};

JobEvent Event(const std::string& job, int64_t seq) {
  JobEvent e;
  e.set_job_id(job);
  e.set_sequence(seq);
  return e;
}

StoreWriter::ApplyFn ApplyTo(FakeStore* store) {
  return [store](const StoreMutation& m, const std::string& id) { return store->Apply(m, id); };
}

TEST(StoreWriterTest, WritesInOrderWithCopiesAndPublishesAfterStoring) {
  FakeStore store;
  EventHub hub;
  CheckingSubscriber sub(&store);
  hub.Subscribe("j", &sub);
  StoreWriter writer(ApplyTo(&store), &hub);
  {
    // What the mutation points to dies before the write: the writer copies.
    traind::v1::Job job;
    job.set_id("j");
    job.add_tasks()->set_index(0);
    job.add_tasks()->set_index(1);
    StoreMutation insert;
    insert.job = &job;
    insert.new_job = true;
    writer.Enqueue(insert, "j", {Event("j", 1)});

    StoreMutation update;
    update.job = &job;  // an update writes the job's columns, not its tasks
    traind::v1::EpochMetrics e2;
    e2.set_epoch(2);
    traind::v1::EpochMetrics e3;
    e3.set_epoch(3);
    update.epoch = &e2;
    update.epochs = {&e3};
    update.tasks = {&job.tasks(1)};
    JobEvent moved = Event("j", 2);
    update.events = {&moved};
    writer.Enqueue(update, "j", {Event("j", 3)});
  }
  writer.WaitAll();
  hub.Flush();  // the hub's thread delivers what the writer queued
  EXPECT_EQ(store.rows(), (std::vector<std::string>{
                              "j job:j+new job_tasks:2 event:1",
                              "j job:j job_tasks:0 task:1 epoch:2 epoch:3 event:2 event:3"}));
  EXPECT_EQ(sub.sequences, (std::vector<int64_t>{1, 2, 3}));
  EXPECT_FALSE(sub.published_before_stored);
  hub.Unsubscribe("j", &sub);
}

TEST(StoreWriterTest, EnqueueDoesNotWaitForTheDiskButWaitStoredDoes) {
  FakeStore store;
  store.hold_ = true;  // the disk is stuck until released
  EventHub hub;
  StoreWriter writer(ApplyTo(&store), &hub);
  const uint64_t t1 = writer.Enqueue({}, "a", {Event("a", 1)});
  const uint64_t t2 = writer.Enqueue({}, "a", {Event("a", 2)});
  EXPECT_EQ(t2, t1 + 1);
  EXPECT_EQ(writer.last_ticket(), t2);
  std::atomic<bool> replied{false};
  writer.WhenStored(t2, [&] { replied = true; });
  EXPECT_FALSE(replied.load());  // nothing is stored yet
  EXPECT_TRUE(store.rows().empty());
  store.release_.Notify();
  writer.WaitStored(t2);
  EXPECT_EQ(store.rows().size(), 2u);
  // The reply ran on the writer's thread before WaitStored could return.
  EXPECT_TRUE(replied.load());
  // Once stored, WhenStored runs at once.
  bool at_once = false;
  writer.WhenStored(t1, [&] { at_once = true; });
  EXPECT_TRUE(at_once);
}

TEST(StoreWriterTest, DestructorWritesWhatIsQueued) {
  FakeStore store;
  EventHub hub;
  {
    StoreWriter writer(ApplyTo(&store), &hub);
    for (int i = 1; i <= 50; ++i) writer.Enqueue({}, "k", {Event("k", i)});
  }
  EXPECT_EQ(store.rows().size(), 50u);
}

TEST(StoreWriterTest, AFailedWriteIsReportedAndNotPublished) {
  FakeStore store;
  store.fail_ = true;
  EventHub hub;
  CheckingSubscriber sub(&store);
  hub.Subscribe("f", &sub);
  std::string failed_job;
  std::string failed_message;
  StoreWriter writer(ApplyTo(&store), &hub, [&](const std::string& job, const absl::Status& s) {
    failed_job = job;
    failed_message = std::string(s.message());
  });
  writer.Enqueue({}, "f", {Event("f", 1)});
  writer.WaitAll();
  EXPECT_EQ(failed_job, "f");
  EXPECT_EQ(failed_message, "disk full");
  hub.Flush();
  EXPECT_TRUE(sub.sequences.empty());
  hub.Unsubscribe("f", &sub);
}

// Waits (bounded) until the writer says it is degraded.
absl::Status AwaitDegraded(StoreWriter* writer) {
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  absl::Status s;
  while ((s = writer->Degraded()).ok() && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  return s;
}

TEST(StoreWriterTest, AWriteThatFindsTheDiskFullIsRetriedUntilItIsStored) {
  FakeStore store;
  store.SetFull(true);
  EventHub hub;
  CheckingSubscriber sub(&store);
  hub.Subscribe("d", &sub);
  StoreWriter writer(ApplyTo(&store), &hub, nullptr, absl::Milliseconds(5));
  const uint64_t t1 = writer.Enqueue({}, "d", {Event("d", 1)});
  const uint64_t t2 = writer.Enqueue({}, "d", {Event("d", 2)});
  std::atomic<bool> replied{false};
  writer.WhenStored(t2, [&] { replied = true; });
  const absl::Status degraded = AwaitDegraded(&writer);
  EXPECT_EQ(degraded.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(degraded.message(), "database or disk is full");
  // Reads do not wait for space; nothing is stored, published or replied.
  EXPECT_FALSE(writer.WaitStoredUnlessDegraded(t1));
  while (store.full_tries() < 3) absl::SleepFor(absl::Milliseconds(1));  // it keeps trying
  EXPECT_TRUE(store.rows().empty());
  hub.Flush();
  EXPECT_TRUE(sub.sequences.empty());
  EXPECT_FALSE(replied.load());
  EXPECT_FALSE(writer.Dropped(t1));

  store.SetFull(false);  // space returns
  writer.WaitStored(t2);
  EXPECT_TRUE(writer.Degraded().ok());
  EXPECT_TRUE(writer.WaitStoredUnlessDegraded(t2));
  EXPECT_EQ(store.rows(), (std::vector<std::string>{"d event:1", "d event:2"}));
  hub.Flush();
  EXPECT_EQ(sub.sequences, (std::vector<int64_t>{1, 2}));
  EXPECT_FALSE(sub.published_before_stored);
  EXPECT_TRUE(replied.load());
  EXPECT_FALSE(writer.Dropped(t2));
  hub.Unsubscribe("d", &sub);
}

TEST(StoreWriterTest, StoppingWhileDegradedDropsWhatIsQueued) {
  FakeStore store;
  store.SetFull(true);
  EventHub hub;
  CheckingSubscriber sub(&store);
  hub.Subscribe("s", &sub);
  std::atomic<int> released{0};
  std::atomic<bool> reported_dropped{false};
  const absl::Time start = absl::Now();
  {
    // A retry interval far longer than the test: the stop must not wait it out.
    StoreWriter writer(ApplyTo(&store), &hub, nullptr, absl::Hours(1));
    writer.Enqueue({}, "s", {Event("s", 1)});
    writer.Enqueue({}, "s", {Event("s", 2)});
    const uint64_t t3 = writer.Enqueue({}, "s", {Event("s", 3)});
    writer.WhenStored(t3, [&] {
      ++released;
      reported_dropped = writer.Dropped(t3);
    });
    ASSERT_FALSE(AwaitDegraded(&writer).ok());
  }
  EXPECT_LT(absl::Now() - start, absl::Minutes(1));
  EXPECT_EQ(released.load(), 1);  // waiters are let go, told it was dropped
  EXPECT_TRUE(reported_dropped.load());
  EXPECT_GE(store.full_tries(), 2);  // once more at the stop
  EXPECT_TRUE(store.rows().empty());
  hub.Flush();
  EXPECT_TRUE(sub.sequences.empty());
  hub.Unsubscribe("s", &sub);
}

TEST(StoreWriterTest, GivingUpWhileDegradedLetsEveryWaiterGoAndDropsLaterWritesAtOnce) {
  FakeStore store;
  store.SetFull(true);
  EventHub hub;
  StoreWriter writer(ApplyTo(&store), &hub, nullptr, absl::Hours(1));
  const uint64_t t1 = writer.Enqueue({}, "g", {Event("g", 1)});
  ASSERT_FALSE(AwaitDegraded(&writer).ok());
  writer.GiveUpWhenDegraded();
  writer.WaitStored(t1);  // returns: dropped
  EXPECT_TRUE(writer.Dropped(t1));
  const uint64_t t2 = writer.Enqueue({}, "g", {Event("g", 2)});
  writer.WaitStored(t2);  // tried once, dropped
  EXPECT_TRUE(writer.Dropped(t2));
  EXPECT_TRUE(store.rows().empty());
  // With space again, a write after the give-up is stored.
  store.SetFull(false);
  const uint64_t t3 = writer.Enqueue({}, "g", {Event("g", 3)});
  writer.WaitStored(t3);
  EXPECT_FALSE(writer.Dropped(t3));
  EXPECT_EQ(store.rows(), (std::vector<std::string>{"g event:3"}));
  EXPECT_TRUE(writer.Degraded().ok());
}

}  // namespace
}  // namespace traind::server
