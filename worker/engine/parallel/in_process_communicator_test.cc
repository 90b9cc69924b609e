#include "worker/engine/parallel/in_process_communicator.h"

#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace traind::engine {
namespace {

TEST(InProcessGroupTest, SumsAcrossRanksEveryRound) {
  constexpr int kRanks = 4, kRounds = 50, kCount = 7;
  InProcessGroup group(kRanks);
  std::vector<std::vector<float>> results(kRanks);
  std::vector<std::thread> threads;
  for (int r = 0; r < kRanks; ++r) {
    threads.emplace_back([&, r] {
      auto comm = group.Rank(r);
      EXPECT_EQ(comm->size(), kRanks);
      for (int round = 0; round < kRounds; ++round) {
        std::vector<float> v(kCount);
        for (int i = 0; i < kCount; ++i) v[i] = static_cast<float>(r * 100 + i + round);
        ASSERT_TRUE(comm->AllReduceSum(v.data(), kCount).ok());
        // sum over r of (100 r + i + round) = 100 * 6 + 4 (i + round)
        for (int i = 0; i < kCount; ++i) {
          ASSERT_EQ(v[i], 600.0f + 4.0f * (i + round)) << "rank " << r << " round " << round;
        }
        double d[2] = {1.0, static_cast<double>(r)};
        ASSERT_TRUE(comm->AllReduceSum(d, 2).ok());
        ASSERT_EQ(d[0], 4.0);
        ASSERT_EQ(d[1], 6.0);
      }
    });
  }
  for (auto& t : threads) t.join();
}

// A started sum is there only once waited for (WaitAll, or the next
// collective, which completes the started ones first, in order).
TEST(InProcessGroupTest, StartedSumsCompleteAtTheWaitInOrder) {
  constexpr int kRanks = 3;
  InProcessGroup group(kRanks);
  std::vector<std::thread> threads;
  for (int r = 0; r < kRanks; ++r) {
    threads.emplace_back([&, r] {
      auto comm = group.Rank(r);
      float a[2] = {1.0f, static_cast<float>(r)};
      float b[1] = {10.0f * static_cast<float>(r)};
      ASSERT_TRUE(comm->StartAllReduceSum(a, 2).ok());
      ASSERT_TRUE(comm->StartAllReduceSum(b, 1).ok());
      EXPECT_EQ(a[0], 1.0f);  // not yet summed
      EXPECT_EQ(b[0], 10.0f * static_cast<float>(r));
      ASSERT_TRUE(comm->WaitAll().ok());
      EXPECT_EQ(a[0], 3.0f);
      EXPECT_EQ(a[1], 3.0f);  // 0 + 1 + 2
      EXPECT_EQ(b[0], 30.0f);
      ASSERT_TRUE(comm->WaitAll().ok());  // nothing started: no collective
      // A started sum, then a blocking one: both complete, in order.
      ASSERT_TRUE(comm->StartAllReduceSum(b, 1).ok());
      double d = 1;
      ASSERT_TRUE(comm->AllReduceSum(&d, 1).ok());
      EXPECT_EQ(b[0], 90.0f);
      EXPECT_EQ(d, 3.0);
    });
  }
  for (auto& t : threads) t.join();
}

TEST(InProcessGroupTest, AnAbortingRankReleasesItsPeers) {
  InProcessGroup group(3, absl::Seconds(30));
  std::vector<absl::Status> got(3);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      auto comm = group.Rank(r);
      float x = 1;
      got[r] = comm->AllReduceSum(&x, 1);
    });
  }
  absl::SleepFor(absl::Milliseconds(50));
  group.Rank(2)->Abort("out of memory");
  for (auto& t : threads) t.join();
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(got[r].code(), absl::StatusCode::kAborted);
    EXPECT_NE(got[r].message().find("rank 2 aborted: out of memory"), std::string::npos);
  }
}

TEST(InProcessGroupTest, AMissingRankTimesOutInsteadOfHanging) {
  InProcessGroup group(2, absl::Milliseconds(100));
  auto comm = group.Rank(0);
  float x = 1;
  absl::Status s = comm->AllReduceSum(&x, 1);
  EXPECT_EQ(s.code(), absl::StatusCode::kAborted);
}

TEST(InProcessGroupTest, MismatchedCountsFail) {
  InProcessGroup group(2, absl::Seconds(5));
  absl::Status s0, s1;
  std::thread t([&] {
    float v[3] = {};
    s1 = group.Rank(1)->AllReduceSum(v, 3);
  });
  float v[2] = {};
  s0 = group.Rank(0)->AllReduceSum(v, 2);
  t.join();
  EXPECT_FALSE(s0.ok() && s1.ok());
}

}  // namespace
}  // namespace traind::engine
