#include "server/core/upload_slots.h"

#include <atomic>
#include <chrono>
#include <thread>

#include "gtest/gtest.h"

namespace traind::server {
namespace {

TEST(UploadSlotsTest, CapsPerCallerAndInAllNameTheLimit) {
  UploadSlots slots({/*max_total=*/3, /*max_per_caller=*/2, absl::Minutes(1)});
  auto a1 = slots.Acquire("ann", "Predict", nullptr);
  auto a2 = slots.Acquire("ann", "Predict", nullptr);
  ASSERT_TRUE(a1.ok() && a2.ok());
  auto a3 = slots.Acquire("ann", "Predict", nullptr);
  ASSERT_FALSE(a3.ok());
  EXPECT_EQ(a3.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(a3.status().message(),
            "Predict: ann has 2 uploads in flight, the most one caller may "
            "(limits.max_uploads_per_user): wait for one to end");
  auto b1 = slots.Acquire("bob", "UploadDataset", nullptr);
  ASSERT_TRUE(b1.ok());
  auto c1 = slots.Acquire("cy", "UploadDataset", nullptr);
  ASSERT_FALSE(c1.ok());
  EXPECT_EQ(c1.status().message(),
            "UploadDataset: 3 uploads are in flight, the most traind takes at once "
            "(limits.max_uploads): retry later");
  EXPECT_EQ(slots.InFlight(), 3);
  a1->reset();  // an upload ends: its slot is free for anyone
  EXPECT_TRUE(slots.Acquire("cy", "UploadDataset", nullptr).ok());
  EXPECT_TRUE(slots.Acquire("ann", "Predict", nullptr).ok());
}

TEST(UploadSlotsTest, AnUploadWaitingTooLongIsEndedOnce) {
  UploadSlots slots({8, 8, absl::Milliseconds(200)});
  std::atomic<int> idle{0};
  auto waiting = slots.Acquire("ann", "Predict", [&idle] { ++idle; });
  auto busy = slots.Acquire("ann", "Predict", [&idle] { idle += 100; });
  ASSERT_TRUE(waiting.ok() && busy.ok());
  (*waiting)->WaitingForMessage();
  // `busy` gets a message every 50 ms: never idle.
  for (int i = 0; i < 12; ++i) {
    (*busy)->WaitingForMessage();
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    EXPECT_TRUE((*busy)->MessageArrived());
  }
  EXPECT_EQ(idle.load(), 1);
  EXPECT_FALSE((*waiting)->MessageArrived()) << "ended: the upload does nothing more";
  EXPECT_EQ(slots.InFlight(), 1) << "its slot is free once it was ended";
  // A slot destroyed inside on_idle (a call whose OnDone ran inline).
  std::unique_ptr<UploadSlots::Slot> holder;
  std::atomic<bool> ended{false};
  auto s = slots.Acquire("bob", "Predict", [&holder, &ended] {
    holder.reset();
    ended = true;
  });
  ASSERT_TRUE(s.ok());
  holder = *std::move(s);
  holder->WaitingForMessage();  // from here on only the sweeper touches it
  for (int i = 0; i < 100 && !ended; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_TRUE(ended);
  EXPECT_EQ(slots.InFlight(), 1);
}

}  // namespace
}  // namespace traind::server
