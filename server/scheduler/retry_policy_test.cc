#include "server/scheduler/retry_policy.h"

#include "gtest/gtest.h"

namespace traind::server {
namespace {

using traind::v1::Failure;

constexpr RetryDecision kRetry = RetryDecision::kRetry;
constexpr RetryDecision kFail = RetryDecision::kFail;
constexpr RetryDecision kCancel = RetryDecision::kCancel;

// Reason x attempt -> decision, with max_restarts = 2 (three attempts).
TEST(RetryPolicyTest, ReasonByAttemptOnTheCpu) {
  struct Row {
    Failure::Reason reason;
    RetryDecision attempt1, attempt2, attempt3;
  };
  const Row table[] = {
      {Failure::WORKER_CRASHED, kRetry, kRetry, kFail},
      {Failure::TIMEOUT, kRetry, kRetry, kFail},
      {Failure::INVALID_SPEC, kFail, kFail, kFail},
      {Failure::DATA_ERROR, kFail, kFail, kFail},
      {Failure::OUT_OF_MEMORY, kFail, kFail, kFail},  // on the CPU: the same again
      {Failure::DIVERGED, kFail, kFail, kFail},
      {Failure::DEVICE_ERROR, kFail, kFail, kFail},
      {Failure::LOST, kFail, kFail, kFail},
      {Failure::REASON_UNSPECIFIED, kFail, kFail, kFail},
      {Failure::CANCELLED, kCancel, kCancel, kCancel},
  };
  for (const Row& row : table) {
    const RetryDecision expected[] = {row.attempt1, row.attempt2, row.attempt3};
    for (int attempt = 1; attempt <= 3; ++attempt) {
      FailedAttempt a;
      a.reason = row.reason;
      // Every earlier attempt failed the same way.
      a.transient_failures = IsTransient(row.reason) ? attempt : 0;
      EXPECT_EQ(DecideRetry(a, /*max_restarts=*/2), expected[attempt - 1])
          << Failure::Reason_Name(row.reason) << " attempt " << attempt;
    }
  }
}

TEST(RetryPolicyTest, OnlyCrashesAndHangsAreTransient) {
  for (int r = Failure::Reason_MIN; r <= Failure::Reason_MAX; ++r) {
    const auto reason = static_cast<Failure::Reason>(r);
    EXPECT_EQ(IsTransient(reason), reason == Failure::WORKER_CRASHED || reason == Failure::TIMEOUT)
        << Failure::Reason_Name(reason);
  }
}

TEST(RetryPolicyTest, NothingIsRetriedOnceTheJobStops) {
  for (Failure::Reason reason :
       {Failure::WORKER_CRASHED, Failure::TIMEOUT, Failure::OUT_OF_MEMORY}) {
    FailedAttempt a;
    a.reason = reason;
    a.transient_failures = 1;
    a.job_running = false;
    a.on_gpus = true;
    a.gpus_elsewhere = 4;
    a.gpus_needed = 1;
    EXPECT_EQ(DecideRetry(a, 2), kFail) << Failure::Reason_Name(reason);
  }
  FailedAttempt cancelled;
  cancelled.reason = Failure::CANCELLED;
  cancelled.job_running = false;
  EXPECT_EQ(DecideRetry(cancelled, 2), kCancel);
}

// Out of memory on GPUs: retried where the placement would differ.
TEST(RetryPolicyTest, GpuOutOfMemoryByGpusElsewhere) {
  struct Row {
    int elsewhere, needed;
    RetryDecision expected;
  };
  const Row table[] = {
      {0, 1, kFail}, {1, 1, kRetry}, {1, 2, kFail}, {2, 2, kRetry}, {3, 2, kRetry}};
  for (const Row& row : table) {
    FailedAttempt a;
    a.reason = Failure::OUT_OF_MEMORY;
    a.on_gpus = true;
    a.gpus_elsewhere = row.elsewhere;
    a.gpus_needed = row.needed;
    EXPECT_EQ(DecideRetry(a, 0), row.expected)
        << row.elsewhere << " elsewhere, " << row.needed << " needed";
  }
}

// Preempted (SIGUSR2 before a time limit; checkpointed): goes on without
// using a retry while it makes progress; one that trained nothing counts
// as a transient failure (the caller adds it to transient_failures).
TEST(RetryPolicyTest, PreemptedGoesOnWhileItMakesProgress) {
  FailedAttempt a;
  a.reason = Failure::PREEMPTED;
  a.made_progress = true;
  a.transient_failures = 50;
  EXPECT_EQ(DecideRetry(a, 0), kRetry);
  a.made_progress = false;
  a.transient_failures = 1;
  EXPECT_EQ(DecideRetry(a, 0), kFail);
  EXPECT_EQ(DecideRetry(a, 1), kRetry);
  a.made_progress = true;
  a.job_running = false;  // cancelled or failed meanwhile
  EXPECT_EQ(DecideRetry(a, 2), kFail);
}

TEST(RetryPolicyTest, NoRestartsAllowed) {
  FailedAttempt a;
  a.reason = Failure::WORKER_CRASHED;
  a.transient_failures = 1;
  EXPECT_EQ(DecideRetry(a, 0), kFail);
  EXPECT_EQ(DecideRetry(a, 1), kRetry);
}

}  // namespace
}  // namespace traind::server
