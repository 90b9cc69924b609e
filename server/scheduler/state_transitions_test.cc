#include "server/scheduler/state_transitions.h"

#include <deque>
#include <set>
#include <utility>

#include "gtest/gtest.h"

namespace traind::server {
namespace {

using traind::v1::Job;
using traind::v1::JobEvent;
using traind::v1::Task;

// The whole table, written out: every (from, to) pair not listed here is
// refused.
TEST(StateTransitionsTest, JobTable) {
  const std::set<std::pair<Job::State, Job::State>> allowed = {
      {Job::STATE_UNSPECIFIED, Job::QUEUED},
      {Job::QUEUED, Job::RUNNING},
      {Job::QUEUED, Job::CANCELLING},
      {Job::RUNNING, Job::CANCELLING},
      {Job::QUEUED, Job::FAILED},
      {Job::QUEUED, Job::CANCELLED},
      {Job::RUNNING, Job::SUCCEEDED},
      {Job::RUNNING, Job::FAILED},
      {Job::RUNNING, Job::CANCELLED},
      {Job::CANCELLING, Job::SUCCEEDED},
      {Job::CANCELLING, Job::FAILED},
      {Job::CANCELLING, Job::CANCELLED},
  };
  for (int from = Job::State_MIN; from <= Job::State_MAX; ++from) {
    for (int to = Job::State_MIN; to <= Job::State_MAX; ++to) {
      const auto f = static_cast<Job::State>(from), t = static_cast<Job::State>(to);
      EXPECT_EQ(IsAllowedTransition(f, t), allowed.count({f, t}) == 1)
          << Job::State_Name(f) << " -> " << Job::State_Name(t);
    }
  }
}

TEST(StateTransitionsTest, TaskTable) {
  const std::set<std::pair<Task::State, Task::State>> allowed = {
      {Task::STATE_UNSPECIFIED, Task::QUEUED},
      {Task::QUEUED, Task::STARTING},
      {Task::QUEUED, Task::FAILED},
      {Task::QUEUED, Task::CANCELLED},
      {Task::STARTING, Task::RUNNING},
      {Task::STARTING, Task::QUEUED},
      {Task::RUNNING, Task::QUEUED},
      {Task::STARTING, Task::SUCCEEDED},
      {Task::STARTING, Task::FAILED},
      {Task::STARTING, Task::CANCELLED},
      {Task::RUNNING, Task::SUCCEEDED},
      {Task::RUNNING, Task::FAILED},
      {Task::RUNNING, Task::CANCELLED},
      // ASHA pruned the task's trial (a fold waiting at a rung is QUEUED).
      {Task::QUEUED, Task::PRUNED},
      {Task::STARTING, Task::PRUNED},
      {Task::RUNNING, Task::PRUNED},
  };
  for (int from = Task::State_MIN; from <= Task::State_MAX; ++from) {
    for (int to = Task::State_MIN; to <= Task::State_MAX; ++to) {
      const auto f = static_cast<Task::State>(from), t = static_cast<Task::State>(to);
      EXPECT_EQ(IsAllowedTransition(f, t), allowed.count({f, t}) == 1)
          << Task::State_Name(f) << " -> " << Task::State_Name(t);
    }
  }
}

TEST(StateTransitionsTest, NothingFollowsATerminalState) {
  for (Job::State s : {Job::SUCCEEDED, Job::FAILED, Job::CANCELLED}) {
    EXPECT_TRUE(IsTerminal(s));
    for (int to = Job::State_MIN; to <= Job::State_MAX; ++to) {
      EXPECT_FALSE(IsAllowedTransition(s, static_cast<Job::State>(to)));
    }
  }
  for (Job::State s : {Job::QUEUED, Job::RUNNING, Job::CANCELLING}) EXPECT_FALSE(IsTerminal(s));
  for (Task::State s : {Task::SUCCEEDED, Task::FAILED, Task::CANCELLED}) {
    EXPECT_TRUE(IsTerminal(s));
    for (int to = Task::State_MIN; to <= Task::State_MAX; ++to) {
      EXPECT_FALSE(IsAllowedTransition(s, static_cast<Task::State>(to)));
    }
  }
  for (Task::State s : {Task::QUEUED, Task::STARTING, Task::RUNNING}) {
    EXPECT_FALSE(IsTerminal(s));
  }
}

// One call sets the state, announces it and marks the row for the store.
TEST(StateTransitionsTest, AChangeSetsStateEventAndRows) {
  Job job;
  job.set_id("j1");
  job.set_state(Job::QUEUED);
  job.add_tasks()->set_state(Task::QUEUED);
  job.add_tasks()->set_state(Task::QUEUED);
  std::deque<JobEvent> events;
  JobChange change(&job, [&] { return &events.emplace_back(); });

  change.SetJobState(Job::RUNNING);
  auto* e = change.SetTaskState(1, Task::STARTING, /*attempt=*/1, /*pid=*/42);
  EXPECT_EQ(job.state(), Job::RUNNING);
  EXPECT_EQ(job.tasks(1).state(), Task::STARTING);
  EXPECT_EQ(job.tasks(0).state(), Task::QUEUED);
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].job_state().state(), Job::RUNNING);
  EXPECT_EQ(events[1].task_state().task(), 1);
  EXPECT_EQ(events[1].task_state().attempt(), 1);
  EXPECT_EQ(events[1].task_state().state(), Task::STARTING);
  EXPECT_EQ(events[1].task_state().pid(), 42);
  EXPECT_EQ(e, events[1].mutable_task_state());
  EXPECT_EQ(change.mutation().job, &job);
  ASSERT_EQ(change.mutation().tasks.size(), 1u);
  EXPECT_EQ(change.mutation().tasks[0], &job.tasks(1));

  // A task written twice is one row; an event without a state change keeps it.
  change.WriteTask(1);
  change.TaskEvent(1, 1, 42)->set_warning("checkpoint skipped");
  EXPECT_EQ(change.mutation().tasks.size(), 1u);
  EXPECT_EQ(events.back().task_state().state(), Task::STARTING);
  EXPECT_EQ(events.back().task_state().warning(), "checkpoint skipped");
}

}  // namespace
}  // namespace traind::server
