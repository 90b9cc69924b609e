#include "server/scheduler/fair_share.h"

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace traind::server {
namespace {

const absl::Time t0 = absl::FromUnixSeconds(1'800'000'000);

FairShare Share(std::map<std::string, double> weights = {},
                absl::Duration half_life = absl::Hours(1)) {
  FairShareOptions o;
  o.weights = std::move(weights);
  o.half_life = half_life;
  return FairShare(o);
}

// By hand: one unit held for one half-life h accrues ∫0^h 2^(-(h-s)/h) ds
// = h/ln2 · (1 - 1/2) resource-seconds; held on for a second half-life, the
// first half's usage halves and as much again accrues: h/ln2 · 3/4; then
// released, a third half-life halves it.
TEST(FairShareTest, UsageAccruesWhileHeldAndDecaysByHalfEachHalfLife) {
  FairShare fs = Share();
  const double h = 3600;
  EXPECT_EQ(fs.Usage("alice", t0), 0);
  fs.Started("alice", 1, t0);
  EXPECT_NEAR(fs.Usage("alice", t0 + absl::Hours(1)), h / std::log(2.0) * 0.5, 1e-6);
  EXPECT_NEAR(fs.Usage("alice", t0 + absl::Hours(2)), h / std::log(2.0) * 0.75, 1e-6);
  fs.Ended("alice", 1, t0 + absl::Hours(2));
  EXPECT_NEAR(fs.Usage("alice", t0 + absl::Hours(3)), h / std::log(2.0) * 0.375, 1e-6);
  EXPECT_EQ(fs.Running("alice"), 0);
  // A minute of two units: a little under 120 s, the first seconds decayed.
  FairShare s = Share();
  s.Started("bob", 2, t0);
  EXPECT_NEAR(s.Usage("bob", t0 + absl::Minutes(1)),
              2 * h / std::log(2.0) * (1 - std::exp2(-60 / h)), 1e-9);
  EXPECT_GT(s.Usage("bob", t0 + absl::Minutes(1)), 119);
  EXPECT_EQ(s.Running("bob"), 2);
}

// The closed form against a sum of small steps (each step's usage decays
// from its midpoint).
TEST(FairShareTest, TheClosedFormAgreesWithASumOfSmallSteps) {
  FairShare fs = Share({}, absl::Minutes(30));
  const double h = 1800;
  double sum = 0;
  const double dt = 0.5;
  absl::Time now = t0;
  // Two units for 40 minutes, one for 20 more, then none for 10.
  std::vector<std::pair<double, double>> spans = {{2, 2400}, {1, 1200}, {0, 600}};
  fs.Started("c", 2, now);
  for (size_t i = 0; i < spans.size(); ++i) {
    const auto [units, seconds] = spans[i];
    for (double s = 0; s < seconds; s += dt)
      sum = sum * std::exp2(-dt / h) + units * dt * std::exp2(-dt / 2 / h);
    now += absl::Seconds(seconds);
    if (i + 1 < spans.size()) fs.Ended("c", units - spans[i + 1].first, now);
  }
  EXPECT_NEAR(fs.Usage("c", now), sum, 1e-3 * sum);
}

TEST(FairShareTest, AWeightDividesTheKey) {
  FairShare fs = Share({{"team-a", 2}});
  fs.Started("team-a", 1, t0);
  fs.Started("team-b", 1, t0);
  const absl::Time later = t0 + absl::Minutes(10);
  EXPECT_DOUBLE_EQ(fs.Usage("team-a", later), fs.Usage("team-b", later));
  EXPECT_DOUBLE_EQ(fs.Key("team-a", later) * 2, fs.Key("team-b", later));
  EXPECT_EQ(fs.Weight("nobody"), 1);
}

// A box of `slots` slots where every owner always has work waiting and
// each task holds a slot for a minute: each freed slot goes to the owner
// with the lowest key. Over hours, the slots are shared by weight.
std::map<std::string, double> SlotShares(const std::map<std::string, double>& weights, int slots) {
  FairShare fs = Share(weights, absl::Minutes(30));
  std::map<std::string, double> held;  // slot-minutes per owner
  std::vector<std::string> running(slots);
  absl::Time now = t0;
  auto pick = [&] {
    std::string best;
    for (const auto& [owner, w] : weights) {
      if (best.empty() || fs.Key(owner, now) < fs.Key(best, now) ||
          (fs.Key(owner, now) == fs.Key(best, now) &&
           fs.Running(owner) / w < fs.Running(best) / weights.at(best))) {
        best = owner;
      }
    }
    return best;
  };
  for (int s = 0; s < slots; ++s) {
    running[s] = pick();
    fs.Started(running[s], 1, now);
  }
  for (int minute = 0; minute < 8 * 60; ++minute) {
    now += absl::Minutes(1);
    for (int s = 0; s < slots; ++s) {
      if (minute >= 60) held[running[s]] += 1;  // after the first hour
      fs.Ended(running[s], 1, now);
      running[s] = pick();
      fs.Started(running[s], 1, now);
    }
  }
  double total = 0;
  for (const auto& [o, m] : held) total += m;
  for (auto& [o, m] : held) m /= total;
  return held;
}

TEST(FairShareTest, TwoOwnersShareTheSlotsEvenly) {
  std::map<std::string, double> shares = SlotShares({{"alice", 1}, {"bob", 1}}, 4);
  EXPECT_NEAR(shares["alice"], 0.5, 0.02);
  EXPECT_NEAR(shares["bob"], 0.5, 0.02);
}

TEST(FairShareTest, ThreeOwnersShareTheSlotsByWeight) {
  std::map<std::string, double> shares = SlotShares({{"alice", 1}, {"bob", 1}, {"team-a", 2}}, 4);
  EXPECT_NEAR(shares["alice"], 0.25, 0.02);
  EXPECT_NEAR(shares["bob"], 0.25, 0.02);
  EXPECT_NEAR(shares["team-a"], 0.5, 0.02);
}

TEST(FairShareTest, WeightsAreOwnerEqualsANumberAboveZero) {
  auto w = ParseWeights({"team-a=2", "bob=0.5", "a=b=3"});
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(*w, (std::map<std::string, double>{{"team-a", 2}, {"bob", 0.5}, {"a=b", 3}}));
  EXPECT_EQ(ParseWeights({"x=1", "team-a"}).status().message(),
            "scheduling.weights[1] \"team-a\": expected OWNER=WEIGHT");
  EXPECT_EQ(ParseWeights({"team-a=0"}).status().message(),
            "scheduling.weights[0] \"team-a=0\": the weight must be a number above 0");
  EXPECT_EQ(ParseWeights({"team-a=two"}).status().message(),
            "scheduling.weights[0] \"team-a=two\": the weight must be a number above 0");
  EXPECT_EQ(ParseWeights({"a=1", "a=2"}).status().message(),
            "scheduling.weights[1] \"a=2\": a is listed twice");
  EXPECT_EQ(ParseWeights({"=2"}).status().message(),
            "scheduling.weights[0] \"=2\": expected OWNER=WEIGHT");
}

TEST(FairShareTest, OwnerLimitsCountRunningTasksAndHeldGpus) {
  FairShareOptions o;
  o.max_tasks_per_owner = 3;
  o.max_gpus_per_owner = 4;
  FairShare fs(o);
  fs.Started("alice", 2, t0, /*gpus=*/2);
  fs.Started("alice", 1, t0);
  EXPECT_EQ(fs.Tasks("alice"), 2);
  EXPECT_EQ(fs.Gpus("alice"), 2);
  EXPECT_FALSE(fs.AtOwnerLimit("alice", 0));  // a CPU task: 3rd of 3
  EXPECT_FALSE(fs.AtOwnerLimit("alice", 2));  // 2 + 2 GPUs of 4
  EXPECT_TRUE(fs.AtOwnerLimit("alice", 3));   // 2 + 3 > 4
  EXPECT_FALSE(fs.AtOwnerLimit("bob", 4));
  fs.Started("alice", 1, t0);
  EXPECT_TRUE(fs.AtOwnerLimit("alice", 0));  // 3 tasks run
  fs.Ended("alice", 2, t0 + absl::Minutes(1), /*gpus=*/2);
  EXPECT_EQ(fs.Tasks("alice"), 2);
  EXPECT_EQ(fs.Gpus("alice"), 0);
  EXPECT_FALSE(fs.AtOwnerLimit("alice", 4));
  EXPECT_FALSE(FairShare(FairShareOptions()).AtOwnerLimit("alice", 100));  // no limits
}

}  // namespace
}  // namespace traind::server
