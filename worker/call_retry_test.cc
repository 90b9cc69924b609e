#include "worker/call_retry.h"

#include <vector>

#include "absl/status/status.h"
#include "gtest/gtest.h"

namespace traind::worker {
namespace {

std::vector<absl::Duration> Delays(const RetryPolicy& p, int n) {
  std::vector<absl::Duration> d;
  for (int t = 0; t < n; ++t) d.push_back(p.DelayAfter(t));
  return d;
}

TEST(WorkerRetryPolicy, ReportScheduleDoublesFrom100Ms) {
  EXPECT_EQ(kReportRetry.max_tries, 5);
  EXPECT_EQ(Delays(kReportRetry, 5),
            (std::vector<absl::Duration>{absl::Milliseconds(100), absl::Milliseconds(200),
                                         absl::Milliseconds(400), absl::Milliseconds(800),
                                         absl::Milliseconds(1600)}));
}

TEST(WorkerRetryPolicy, RendezvousScheduleIsCappedAt1600Ms) {
  EXPECT_EQ(kRendezvousRetry.max_tries, 0);
  EXPECT_EQ(Delays(kRendezvousRetry, 8),
            (std::vector<absl::Duration>{absl::Milliseconds(100), absl::Milliseconds(200),
                                         absl::Milliseconds(400), absl::Milliseconds(800),
                                         absl::Milliseconds(1600), absl::Milliseconds(1600),
                                         absl::Milliseconds(1600), absl::Milliseconds(1600)}));
}

TEST(WorkerRetryPolicy, WhatIsRetried) {
  struct Row {
    absl::StatusCode code;
    bool report;
    bool rendezvous;
  };
  const Row rows[] = {
      {absl::StatusCode::kUnavailable, true, true},
      {absl::StatusCode::kDeadlineExceeded, true, false},
      {absl::StatusCode::kPermissionDenied, false, false},
      {absl::StatusCode::kNotFound, false, false},
      {absl::StatusCode::kFailedPrecondition, false, false},
      {absl::StatusCode::kInternal, false, false},
      {absl::StatusCode::kCancelled, true, false},
  };
  for (const Row& r : rows) {
    EXPECT_EQ(kReportRetry.Retries(r.code), r.report) << absl::StatusCodeToString(r.code);
    EXPECT_EQ(kRendezvousRetry.Retries(r.code), r.rendezvous) << absl::StatusCodeToString(r.code);
  }
}

// A call that fails with `failures` in turn, then succeeds.
struct ScriptedCall {
  std::vector<absl::Status> failures;
  int calls = 0;
  absl::Status operator()() {
    const int i = calls++;
    return i < static_cast<int>(failures.size()) ? failures[i] : absl::OkStatus();
  }
};

TEST(WorkerRetryPolicy, RetriesUntilSuccessSleepingTheSchedule) {
  ScriptedCall call{{absl::UnavailableError("down"), absl::DeadlineExceededError("slow")}};
  std::vector<absl::Duration> slept;
  absl::Status s = CallWithRetry(
      kReportRetry, [&] { return call(); }, [&](absl::Duration d) { slept.push_back(d); },
      [] { return false; });
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_EQ(call.calls, 3);
  EXPECT_EQ(slept, (std::vector<absl::Duration>{absl::Milliseconds(100), absl::Milliseconds(200)}));
}

TEST(WorkerRetryPolicy, PermanentErrorIsReturnedAtOnce) {
  ScriptedCall call{{absl::PermissionDeniedError("bad secret")}};
  int sleeps = 0;
  absl::Status s = CallWithRetry(
      kReportRetry, [&] { return call(); }, [&](absl::Duration) { ++sleeps; },
      [] { return false; });
  EXPECT_TRUE(absl::IsPermissionDenied(s)) << s;
  EXPECT_EQ(call.calls, 1);
  EXPECT_EQ(sleeps, 0);
}

TEST(WorkerRetryPolicy, ReportsGiveUpAfterFiveTries) {
  ScriptedCall call{std::vector<absl::Status>(10, absl::UnavailableError("down"))};
  absl::Duration slept;
  absl::Status s = CallWithRetry(
      kReportRetry, [&] { return call(); }, [&](absl::Duration d) { slept += d; },
      [] { return false; });
  EXPECT_TRUE(absl::IsUnavailable(s)) << s;
  EXPECT_EQ(call.calls, 5);
  EXPECT_EQ(slept, absl::Milliseconds(100 + 200 + 400 + 800 + 1600));
}

TEST(WorkerRetryPolicy, RendezvousStopsAtItsDeadline) {
  ScriptedCall call{std::vector<absl::Status>(100, absl::UnavailableError("down"))};
  int sleeps = 0;
  absl::Status s = CallWithRetry(
      kRendezvousRetry, [&] { return call(); }, [&](absl::Duration) { ++sleeps; },
      [&] { return call.calls >= 7; });
  EXPECT_TRUE(absl::IsUnavailable(s)) << s;
  EXPECT_EQ(call.calls, 7);
  EXPECT_EQ(sleeps, 6);
}

TEST(WorkerRetryPolicy, RendezvousDoesNotRetryItsOwnTimeout) {
  ScriptedCall call{{absl::DeadlineExceededError("rank 0 never came")}};
  absl::Status s = CallWithRetry(
      kRendezvousRetry, [&] { return call(); }, [](absl::Duration) {}, [] { return false; });
  EXPECT_TRUE(absl::IsDeadlineExceeded(s)) << s;
  EXPECT_EQ(call.calls, 1);
}

}  // namespace
}  // namespace traind::worker
