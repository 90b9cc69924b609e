#include "server/scheduler/dispatch_queue.h"

#include "gtest/gtest.h"

namespace traind::server {
namespace {

using traind::v1::Job;
using traind::v1::Task;

TEST(DispatchQueueTest, PriorityThenSubmitOrderThenTask) {
  DispatchQueue q;
  q.Add(/*priority=*/0, /*order=*/1, /*task=*/1, "a");
  q.Add(0, 1, 0, "a");
  q.Add(5, 2, 0, "b");
  q.Add(0, 0, 2, "c");
  q.Add(0, 0, 2, "c");  // already queued
  ASSERT_EQ(q.size(), 4u);
  auto it = q.begin();
  EXPECT_EQ(it->job_id, "b");
  ++it;
  EXPECT_EQ(it->job_id, "c");
  ++it;
  EXPECT_EQ(it->task, 0);
  ++it;
  EXPECT_EQ(it->task, 1);
  q.Remove("a", 0);
  q.Remove("a", 7);  // not queued: nothing
  EXPECT_EQ(q.size(), 3u);
}

TEST(DispatchQueueTest, WaitReasonsAndTasksAhead) {
  DispatchQueue q;
  q.Add(9, 1, 0, "urgent");
  Job view;
  view.set_id("j");
  for (int i = 0; i < 3; ++i) view.add_tasks()->set_state(Task::QUEUED);
  for (int i = 0; i < 3; ++i) q.Add(0, 2, i, "j");
  DispatchQueue::JobConditions c;
  c.dependencies_done = [](int task) { return task != 2; };
  q.DescribeWaiting(&view, c);
  EXPECT_EQ(view.tasks(0).wait_reason(), Task::PRIORITY);
  EXPECT_EQ(view.tasks(0).tasks_ahead(), 1);
  EXPECT_EQ(view.tasks(1).tasks_ahead(), 2);
  EXPECT_EQ(view.tasks(2).wait_reason(), Task::DEPENDENCY);

  c.at_job_limit = true;
  q.DescribeWaiting(&view, c);
  EXPECT_EQ(view.tasks(0).wait_reason(), Task::JOB_LIMIT);
  c.at_job_limit = false;
  c.devices_draining = true;
  q.DescribeWaiting(&view, c);
  EXPECT_EQ(view.tasks(1).wait_reason(), Task::DEVICE_DRAINING);

  q.Remove("urgent", 0);
  c.devices_draining = false;
  q.DescribeWaiting(&view, c);
  EXPECT_EQ(view.tasks(0).wait_reason(), Task::RESOURCES);
  EXPECT_EQ(view.tasks(0).tasks_ahead(), 0);
}

}  // namespace
}  // namespace traind::server
