#include "base/random.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "gtest/gtest.h"

namespace traind {
namespace {

TEST(RngTest, MatchesSplitMix64Reference) {
  // Reference outputs of SplitMix64 seeded with 0 (Vigna's splitmix64.c).
  Rng rng(0);
  EXPECT_EQ(rng.Next(), 0xE220A8397B1DCDAFULL);
  EXPECT_EQ(rng.Next(), 0x6E789E6AA1B965F4ULL);
  EXPECT_EQ(rng.Next(), 0x06C45D188009454FULL);
}

TEST(RngTest, UniformIntIsInRangeAndCoversIt) {
  Rng rng(5);
  std::vector<int> counts(7, 0);
  for (int i = 0; i < 70000; ++i) {
    const uint64_t v = rng.UniformInt(7);
    ASSERT_LT(v, 7u);
    ++counts[v];
  }
  // Expected 10000 each; 5 sigma is about 460.
  for (int c : counts) EXPECT_NEAR(c, 10000, 460);
}

TEST(RngTest, NormalMoments) {
  Rng rng(9);
  double sum = 0, sum_sq = 0;
  const int n = 200000;
  for (int i = 0; i < n; ++i) {
    const double x = rng.Normal();
    sum += x;
    sum_sq += x * x;
  }
  EXPECT_NEAR(sum / n, 0.0, 0.01);
  EXPECT_NEAR(sum_sq / n, 1.0, 0.01);
}

TEST(RngTest, ShuffleIsAPermutationAndSeeded) {
  std::vector<int> a(100), b(100);
  std::iota(a.begin(), a.end(), 0);
  std::iota(b.begin(), b.end(), 0);
  Rng r1(3), r2(3);
  Shuffle(a.data(), a.size(), r1);
  Shuffle(b.data(), b.size(), r2);
  EXPECT_EQ(a, b);
  std::vector<int> sorted = a;
  std::sort(sorted.begin(), sorted.end());
  for (int i = 0; i < 100; ++i) EXPECT_EQ(sorted[i], i);
  std::vector<int> identity(100);
  std::iota(identity.begin(), identity.end(), 0);
  EXPECT_NE(a, identity);
}

TEST(DeriveSeedTest, StreamsDiffer) {
  EXPECT_NE(DeriveSeed(1, 0, kInitStream), DeriveSeed(1, 1, kInitStream));
  EXPECT_NE(DeriveSeed(1, 0, kInitStream), DeriveSeed(1, 0, kShuffleStream));
  EXPECT_NE(DeriveSeed(1, 0, kInitStream), DeriveSeed(2, 0, kInitStream));
  EXPECT_EQ(DeriveSeed(1, 0, kInitStream), DeriveSeed(1, 0, kInitStream));
}

}  // namespace
}  // namespace traind
