// The attempt's timeline: intervals between marks from the launcher's stamp
// (or from its creation), in order, and the summary line the benchmark reads.
#include "worker/attempt_timeline.h"

#include <stdlib.h>
#include <time.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "traind/zygote_protocol.h"

namespace traind::worker {
namespace {

void SleepMs(int ms) {
  timespec t{0, ms * 1000000L};
  nanosleep(&t, nullptr);
}

TEST(AttemptTimelineTest, IntervalsFromTheLaunchStamp) {
  const int64_t launched = MonotonicNanos() - 5000000;  // 5 ms ago
  ASSERT_EQ(setenv(zygote::kLaunchStampEnv, absl::StrCat(launched).c_str(), 1), 0);
  AttemptTimeline t = AttemptTimeline::FromEnvironment();
  t.Mark("main");
  SleepMs(3);
  t.Mark("load");
  const auto phases = t.Phases();
  ASSERT_EQ(phases.size(), 2u);
  EXPECT_EQ(phases[0].first, "main");
  EXPECT_GE(phases[0].second, 5.0);
  EXPECT_EQ(phases[1].first, "load");
  EXPECT_GE(phases[1].second, 3.0);
  const std::string line = t.Summary();
  EXPECT_THAT(line, ::testing::StartsWith("launch\xE2\x86\x92main "));
  EXPECT_THAT(line, ::testing::HasSubstr(" ms \xC2\xB7 load "));
  EXPECT_THAT(line, ::testing::HasSubstr(" (total "));
  unsetenv(zygote::kLaunchStampEnv);
}

TEST(AttemptTimelineTest, WithoutAStampItStartsWhenMade) {
  for (const char* bad : {"", "soon", "-5", "99999999999999999999"}) {
    setenv(zygote::kLaunchStampEnv, bad, 1);
    AttemptTimeline t = AttemptTimeline::FromEnvironment();
    t.Mark("main");
    EXPECT_LT(t.Phases()[0].second, 1000.0) << bad;
    EXPECT_THAT(t.Summary(), ::testing::StartsWith("start\xE2\x86\x92main ")) << bad;
  }
  unsetenv(zygote::kLaunchStampEnv);
}

}  // namespace
}  // namespace traind::worker
