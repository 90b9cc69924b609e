#include "server/scheduler/attempt_outcome.h"

#include <optional>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "spec/loader.h"

namespace traind::server {
namespace {

using traind::v1::Failure;
using traind::v1::Task;
using Kind = AttemptOutcome::Kind;
using Fails = AttemptOutcome::Fails;

EndedAttempt Failed(Failure::Reason reason) {
  EndedAttempt a;
  a.reason = reason;
  return a;
}

// One row per rule of attempt_outcome.h, with max_restarts = 2.
TEST(AttemptOutcomeTest, Table) {
  struct Row {
    std::string name;
    EndedAttempt attempt;
    Kind kind;
    Task::State state;
    Fails fails;
  };
  auto with = [](EndedAttempt a, auto&& edit) {
    edit(a);
    return a;
  };
  const Row rows[] = {
      {"succeeded", with(EndedAttempt(), [](EndedAttempt& a) { a.succeeded = true; }),
       Kind::kSucceeded, Task::SUCCEEDED, Fails::kNothing},
      {"crash, first", Failed(Failure::WORKER_CRASHED), Kind::kRetried, Task::QUEUED,
       Fails::kNothing},
      {"crash, two restarts used",
       with(Failed(Failure::WORKER_CRASHED), [](EndedAttempt& a) { a.earlier_restarts = 2; }),
       Kind::kFailed, Task::FAILED, Fails::kJob},
      {"hang, one restart used",
       with(Failed(Failure::TIMEOUT), [](EndedAttempt& a) { a.earlier_restarts = 1; }),
       Kind::kRetried, Task::QUEUED, Fails::kNothing},
      {"crash while the job stops",
       with(Failed(Failure::WORKER_CRASHED), [](EndedAttempt& a) { a.job_running = false; }),
       Kind::kFailed, Task::FAILED, Fails::kJob},
      {"preempted after training, restarts used up",
       with(Failed(Failure::PREEMPTED),
            [](EndedAttempt& a) {
              a.trained_epochs = 3;
              a.earlier_restarts = 50;
            }),
       Kind::kRetried, Task::QUEUED, Fails::kNothing},
      {"preempted before its first epoch, restarts left", Failed(Failure::PREEMPTED),
       Kind::kRetried, Task::QUEUED, Fails::kNothing},
      {"preempted before its first epoch, restarts used up",
       with(Failed(Failure::PREEMPTED), [](EndedAttempt& a) { a.earlier_restarts = 2; }),
       Kind::kFailed, Task::FAILED, Fails::kJob},
      {"preempted while the job stops",
       with(Failed(Failure::PREEMPTED),
            [](EndedAttempt& a) {
              a.trained_epochs = 3;
              a.job_running = false;
            }),
       Kind::kFailed, Task::FAILED, Fails::kJob},
      {"out of memory on the CPU", Failed(Failure::OUT_OF_MEMORY), Kind::kFailed, Task::FAILED,
       Fails::kJob},
      {"out of GPU memory, other GPUs free",
       with(Failed(Failure::OUT_OF_MEMORY),
            [](EndedAttempt& a) {
              a.on_gpus = true;
              a.gpus_elsewhere = 2;
              a.gpus_needed = 2;
            }),
       Kind::kRetried, Task::QUEUED, Fails::kNothing},
      {"out of GPU memory, too few other GPUs",
       with(Failed(Failure::OUT_OF_MEMORY),
            [](EndedAttempt& a) {
              a.on_gpus = true;
              a.gpus_elsewhere = 1;
              a.gpus_needed = 2;
            }),
       Kind::kFailed, Task::FAILED, Fails::kJob},
      {"invalid spec", Failed(Failure::INVALID_SPEC), Kind::kFailed, Task::FAILED, Fails::kJob},
      {"data error", Failed(Failure::DATA_ERROR), Kind::kFailed, Task::FAILED, Fails::kJob},
      {"diverged", Failed(Failure::DIVERGED), Kind::kFailed, Task::FAILED, Fails::kJob},
      {"device error", Failed(Failure::DEVICE_ERROR), Kind::kFailed, Task::FAILED, Fails::kJob},
      {"lost", Failed(Failure::LOST), Kind::kFailed, Task::FAILED, Fails::kJob},
      {"no reason", Failed(Failure::REASON_UNSPECIFIED), Kind::kFailed, Task::FAILED, Fails::kJob},
      {"a search's fold fails its trial",
       with(Failed(Failure::DIVERGED), [](EndedAttempt& a) { a.search_fold = true; }),
       Kind::kFailed, Task::FAILED, Fails::kTrial},
      {"stopped by traind",
       with(Failed(Failure::CANCELLED), [](EndedAttempt& a) { a.stop_requested = true; }),
       Kind::kStopped, Task::CANCELLED, Fails::kNothing},
      {"stopped by traind, its trial pruned",
       with(Failed(Failure::CANCELLED),
            [](EndedAttempt& a) {
              a.stop_requested = true;
              a.trial_pruned = true;
            }),
       Kind::kStopped, Task::PRUNED, Fails::kNothing},
      {"at its ASHA rung",
       with(Failed(Failure::CANCELLED),
            [](EndedAttempt& a) {
              a.pause_after = 3;
              a.last_epoch = 3;
              a.trained_epochs = 3;
              a.search_fold = true;
            }),
       Kind::kPaused, Task::QUEUED, Fails::kNothing},
      {"stopped before its rung",
       with(Failed(Failure::CANCELLED),
            [](EndedAttempt& a) {
              a.pause_after = 3;
              a.last_epoch = 2;
            }),
       Kind::kStopped, Task::CANCELLED, Fails::kNothing},
      {"at its rung, but the job stops",
       with(Failed(Failure::CANCELLED),
            [](EndedAttempt& a) {
              a.pause_after = 3;
              a.last_epoch = 3;
              a.job_running = false;
            }),
       Kind::kStopped, Task::CANCELLED, Fails::kNothing},
      {"at its rung, but traind stopped it",
       with(Failed(Failure::CANCELLED),
            [](EndedAttempt& a) {
              a.pause_after = 3;
              a.last_epoch = 3;
              a.stop_requested = true;
            }),
       Kind::kStopped, Task::CANCELLED, Fails::kNothing},
  };
  for (const Row& row : rows) {
    const AttemptOutcome o = DecideAttemptOutcome(row.attempt, /*max_restarts=*/2);
    EXPECT_EQ(o.kind, row.kind) << row.name << " (" << o.why << ")";
    EXPECT_EQ(o.task_state, row.state) << row.name << " (" << o.why << ")";
    EXPECT_EQ(o.fails, row.fails) << row.name << " (" << o.why << ")";
    EXPECT_NE(std::string(o.why), "") << row.name;
  }
}

// Reason x attempt on the CPU, every earlier attempt failing the same way:
// what the task's attempts 1, 2, 3 come to with max_restarts = 2.
TEST(AttemptOutcomeTest, ReasonByAttempt) {
  struct Row {
    Failure::Reason reason;
    Kind attempt1, attempt2, attempt3;
  };
  const Row table[] = {
      {Failure::WORKER_CRASHED, Kind::kRetried, Kind::kRetried, Kind::kFailed},
      {Failure::TIMEOUT, Kind::kRetried, Kind::kRetried, Kind::kFailed},
      // Preempted before training: each counts, as a crash would.
      {Failure::PREEMPTED, Kind::kRetried, Kind::kRetried, Kind::kFailed},
      {Failure::INVALID_SPEC, Kind::kFailed, Kind::kFailed, Kind::kFailed},
      {Failure::DATA_ERROR, Kind::kFailed, Kind::kFailed, Kind::kFailed},
      {Failure::OUT_OF_MEMORY, Kind::kFailed, Kind::kFailed, Kind::kFailed},
      {Failure::DIVERGED, Kind::kFailed, Kind::kFailed, Kind::kFailed},
      {Failure::CANCELLED, Kind::kStopped, Kind::kStopped, Kind::kStopped},
  };
  for (const Row& row : table) {
    const Kind expected[] = {row.attempt1, row.attempt2, row.attempt3};
    int earlier = 0;
    for (int attempt = 1; attempt <= 3; ++attempt) {
      EndedAttempt a = Failed(row.reason);
      a.earlier_restarts = earlier;
      EXPECT_EQ(DecideAttemptOutcome(a, 2).kind, expected[attempt - 1])
          << Failure::Reason_Name(row.reason) << " attempt " << attempt;
      earlier += CountsAgainstRestarts(row.reason, /*trained_epochs=*/0);
    }
  }
}

TEST(AttemptOutcomeTest, WhatCountsAgainstRestarts) {
  for (int r = Failure::Reason_MIN; r <= Failure::Reason_MAX; ++r) {
    const auto reason = static_cast<Failure::Reason>(r);
    const bool crash = reason == Failure::WORKER_CRASHED || reason == Failure::TIMEOUT;
    EXPECT_EQ(CountsAgainstRestarts(reason, 0), crash || reason == Failure::PREEMPTED)
        << Failure::Reason_Name(reason);
    EXPECT_EQ(CountsAgainstRestarts(reason, 5), crash) << Failure::Reason_Name(reason);
  }
}

TEST(AttemptOutcomeTest, NoRestartsAllowed) {
  EndedAttempt a = Failed(Failure::WORKER_CRASHED);
  EXPECT_EQ(DecideAttemptOutcome(a, 0).kind, Kind::kFailed);
  EXPECT_EQ(DecideAttemptOutcome(a, 1).kind, Kind::kRetried);
}

// A job of `states` tasks: a plain 2-fold CV, or a search of two trials of
// two folds and a refit (tasks 0-1 trial 0, 2-3 trial 1, 4 the refit).
traind::v1::Job JobOf(bool search, const std::vector<Task::State>& states) {
  absl::StatusOr<traind::v1::JobSpec> spec = spec::ParseJobSpec(search ? R"(
data: {path: /x.csv, label: y}
cross_validation: {folds: 2}
model: {layers: [{dense: {units: 3}}]}
optimizer: {adam: {learning_rate: 0.5}}
search:
  space: [{path: optimizer.adam.learning_rate, values: [0.1, 0.01]}]
  sampler: {grid: {}}
  metric: val.accuracy
  refit_best: true
)"
                                                                       : R"(
data: {path: /x.csv, label: y}
cross_validation: {folds: 2}
model: {layers: [{dense: {units: 3}}]}
)",
                                                                "job.yaml");
  EXPECT_TRUE(spec.ok()) << spec.status();
  traind::v1::Job job;
  *job.mutable_spec() = *spec;
  job.set_state(traind::v1::Job::RUNNING);
  job.mutable_result()->set_best_trial(-1);
  for (size_t i = 0; i < states.size(); ++i) {
    Task* t = job.add_tasks();
    t->set_index(static_cast<int>(i));
    t->set_state(states[i]);
    if (states[i] == Task::FAILED) {
      t->mutable_failure()->set_reason(Failure::DIVERGED);
      t->mutable_failure()->set_message("task " + std::to_string(i) + " diverged");
    }
  }
  return job;
}

TEST(JobEndTest, SearchFailure) {
  constexpr auto Q = Task::QUEUED, S = Task::SUCCEEDED, F = Task::FAILED, C = Task::CANCELLED,
                 P = Task::PRUNED;
  struct Row {
    std::string name;
    traind::v1::Job job;
    bool fails;
    Failure::Reason reason = Failure::REASON_UNSPECIFIED;
    std::string message = "";
  };
  auto with = [](traind::v1::Job job, auto&& edit) {
    edit(job);
    return job;
  };
  const Row rows[] = {
      {"not a search", JobOf(false, {F, F}), false},
      {"a trial goes on", JobOf(true, {F, C, S, Q, Q}), false},
      {"every trial failed", JobOf(true, {F, C, C, F, Q}), true, Failure::DIVERGED,
       "no trial succeeded: task 0 diverged"},
      {"one failed, one pruned", JobOf(true, {P, P, F, C, Q}), true, Failure::DIVERGED,
       "no trial succeeded: task 2 diverged"},
      {"every trial pruned", JobOf(true, {P, P, P, P, Q}), true, Failure::CANCELLED,
       "no trial succeeded"},
      {"a best trial",
       with(JobOf(true, {F, C, S, S, Q}),
            [](traind::v1::Job& j) { j.mutable_result()->set_best_trial(1); }),
       false},
      {"failed already",
       with(JobOf(true, {F, C, C, F, Q}),
            [](traind::v1::Job& j) { j.mutable_failure()->set_reason(Failure::DATA_ERROR); }),
       false},
      {"being cancelled",
       with(JobOf(true, {C, C, C, C, Q}),
            [](traind::v1::Job& j) { j.set_state(traind::v1::Job::CANCELLING); }),
       false},
  };
  for (const Row& row : rows) {
    const std::optional<Failure> f = SearchFailure(row.job);
    ASSERT_EQ(f.has_value(), row.fails) << row.name;
    if (!f.has_value()) continue;
    EXPECT_EQ(f->reason(), row.reason) << row.name;
    EXPECT_EQ(f->message(), row.message) << row.name;
  }
}

TEST(JobEndTest, FinalJobState) {
  using traind::v1::Job;
  constexpr auto Q = Task::QUEUED, R = Task::RUNNING, S = Task::SUCCEEDED, F = Task::FAILED,
                 C = Task::CANCELLED, P = Task::PRUNED;
  struct Row {
    std::string name;
    Job job;
    std::optional<Job::State> state;
  };
  auto failed = [](Job job) {
    job.mutable_failure()->set_reason(Failure::DIVERGED);
    return job;
  };
  auto cancelling = [](Job job) {
    job.set_state(Job::CANCELLING);
    return job;
  };
  const Row rows[] = {
      {"a task runs", JobOf(false, {S, R}), std::nullopt},
      {"a task is queued", JobOf(false, {S, Q}), std::nullopt},
      {"every task succeeded", JobOf(false, {S, S}), Job::SUCCEEDED},
      {"a task was cancelled", JobOf(false, {S, C}), Job::CANCELLED},
      {"the job failed", failed(JobOf(false, {F, C})), Job::FAILED},
      {"a search with failed and pruned trials", JobOf(true, {F, C, S, S, S}), Job::SUCCEEDED},
      {"a search with a pruned trial", JobOf(true, {P, P, S, S, S}), Job::SUCCEEDED},
      {"a cancelled search", cancelling(JobOf(true, {C, C, S, S, C})), Job::CANCELLED},
      {"a failed search", failed(JobOf(true, {F, C, F, C, C})), Job::FAILED},
      {"a search's refit runs", JobOf(true, {S, S, S, S, R}), std::nullopt},
  };
  for (const Row& row : rows) EXPECT_EQ(FinalJobState(row.job), row.state) << row.name;
}

}  // namespace
}  // namespace traind::server
