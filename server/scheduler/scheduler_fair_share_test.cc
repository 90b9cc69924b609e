// Fair share between owners in the dispatch order (scheduler/fair_share.h),
// on the injected clock: each task holds the one slot for ten minutes.
#include <map>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "server/scheduler/scheduler.h"
#include "server/testing/scheduler_fixture.h"

namespace traind::server {
namespace {

using traind::v1::Task;

class SchedulerFairShareTest : public SchedulerTest {
 protected:
  void Start(bool fair_share, std::map<std::string, double> weights = {}, int slots = 1,
             int max_tasks_per_owner = 0) {
    Close();
    Open(slots, [&](SchedulerOptions* o) {
      o->clock = &clock_;
      o->fair_share.enabled = fair_share;
      o->fair_share.weights = weights;
      o->fair_share.half_life = absl::Hours(1);
      o->fair_share.max_tasks_per_owner = max_tasks_per_owner;
    });
    ASSERT_TRUE(scheduler_->Recover().ok());
    scheduler_->Start();
  }
  std::string Submit(const std::string& owner, int folds, int priority = 0) {
    traind::v1::JobSpec spec = ThreeFoldSpec();
    spec.mutable_cross_validation()->set_folds(folds);
    spec.set_priority(priority);
    SubmitOptions o;
    o.owner = owner;
    auto job = scheduler_->Submit(spec, o);
    EXPECT_TRUE(job.ok()) << job.status();
    owners_[job.ok() ? job->id() : ""] = owner;
    return job.ok() ? job->id() : "";
  }
  // Runs the next `n` launches, each for ten minutes; returns who ran what.
  std::vector<std::string> RunNext(size_t n) {
    std::vector<std::string> order;
    for (size_t i = 0; i < n; ++i) {
      EXPECT_TRUE(launcher_->WaitForLaunches(ran_ + 1)) << "launch " << ran_ + 1;
      if (launcher_->launched().size() <= ran_) return order;
      const FakeLauncher::Launched l = launcher_->launched()[ran_++];
      order.push_back(owners_[l.Arg("job")] + "/" + l.Arg("task"));
      clock_.Advance(absl::Minutes(10));
      RunWorker(l, 1.0);
    }
    return order;
  }
  std::map<std::string, std::string> owners_;  // job -> owner
  size_t ran_ = 0;
};

// Alice's 4 folds started first; Bob's job, submitted while her first fold
// runs, gets the next slot, then they alternate by their decayed use
// (by hand, with h = 1 h and 10 minutes a task: d = 2^(-1/6) = 0.8909, a
// task's use h/ln2·(1-d) = 566.6 s): at 10 min alice 566.6, bob 0 -> bob;
// at 20 alice 504.8, bob 566.6 -> alice; at 30 alice 1016.3, bob 504.8 ->
// bob; then only alice's folds are left.
TEST_F(SchedulerFairShareTest, AColleaguesJobStartsWithinOneFoldOfTheFirstOwnersLongJob) {
  Start(/*fair_share=*/true);
  const std::string alice = Submit("alice", 4);
  ASSERT_TRUE(launcher_->WaitForLaunches(1));
  const std::string bob = Submit("bob", 2);
  // Each queued task says where it stands: Bob's go first (both owners
  // have used nothing yet; Alice holds the slot), and Alice's say why.
  auto a = scheduler_->GetJob(alice);
  auto b = scheduler_->GetJob(bob);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(b->tasks(0).wait_reason(), Task::RESOURCES);
  EXPECT_EQ(b->tasks(0).tasks_ahead(), 0);
  EXPECT_EQ(b->tasks(1).tasks_ahead(), 1);
  EXPECT_EQ(a->tasks(1).wait_reason(), Task::FAIR_SHARE);
  EXPECT_EQ(a->tasks(1).tasks_ahead(), 2);
  EXPECT_EQ(a->tasks(3).tasks_ahead(), 4);
  EXPECT_EQ(RunNext(6), (std::vector<std::string>{"alice/0", "bob/0", "alice/1", "bob/1", "alice/2",
                                                  "alice/3"}));
}

TEST_F(SchedulerFairShareTest, FifoRunsTheFirstJobToItsEnd) {
  Start(/*fair_share=*/false);
  Submit("alice", 4);
  ASSERT_TRUE(launcher_->WaitForLaunches(1));
  const std::string bob = Submit("bob", 2);
  auto b = scheduler_->GetJob(bob);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->tasks(0).wait_reason(), Task::RESOURCES);
  EXPECT_EQ(b->tasks(0).tasks_ahead(), 3);
  EXPECT_EQ(RunNext(6), (std::vector<std::string>{"alice/0", "alice/1", "alice/2", "alice/3",
                                                  "bob/0", "bob/1"}));
}

// Priority orders across owners before fair share does.
TEST_F(SchedulerFairShareTest, APriorityStillGoesFirst) {
  Start(/*fair_share=*/true);
  Submit("alice", 4, /*priority=*/1);
  ASSERT_TRUE(launcher_->WaitForLaunches(1));
  Submit("bob", 2);
  EXPECT_EQ(RunNext(6), (std::vector<std::string>{"alice/0", "alice/1", "alice/2", "alice/3",
                                                  "bob/0", "bob/1"}));
}

// Alice weighs 3: her use counts a third. By hand (as above): at 10 min
// alice 188.9, bob 0 -> bob; at 20 alice 168.3, bob 566.6 -> alice; at 30
// alice 338.8, bob 504.8 -> alice; at 40 alice 490.7, bob 449.7 -> bob.
TEST_F(SchedulerFairShareTest, AWeightGivesItsOwnerMoreOfTheSlot) {
  Start(/*fair_share=*/true, {{"alice", 3}});
  Submit("alice", 4);
  ASSERT_TRUE(launcher_->WaitForLaunches(1));
  Submit("bob", 2);
  EXPECT_EQ(RunNext(6), (std::vector<std::string>{"alice/0", "bob/0", "alice/1", "alice/2", "bob/1",
                                                  "alice/3"}));
}

// scheduling.max_tasks_per_owner: 1. Two slots: Alice's second fold waits
// for her limit although a slot is free, and Bob's first fold takes it.
TEST_F(SchedulerFairShareTest, AnOwnerLimitLeavesTheFreeSlotToAnotherOwner) {
  Start(/*fair_share=*/true, {}, /*slots=*/2, /*max_tasks_per_owner=*/1);
  const std::string alice = Submit("alice", 3);
  ASSERT_TRUE(launcher_->WaitForLaunches(1));
  auto a = scheduler_->GetJob(alice);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->tasks(1).wait_reason(), Task::OWNER_LIMIT);
  const std::string bob = Submit("bob", 2);
  ASSERT_TRUE(launcher_->WaitForLaunches(2));
  EXPECT_EQ(owners_[launcher_->launched()[1].Arg("job")], "bob");
  auto b = scheduler_->GetJob(bob);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->tasks(1).wait_reason(), Task::OWNER_LIMIT);
  EXPECT_EQ(launcher_->launched().size(), 2u);
  // Alice's fold ends: her next one starts in her slot.
  ran_ = 0;
  EXPECT_EQ(RunNext(1), std::vector<std::string>{"alice/0"});
  ASSERT_TRUE(launcher_->WaitForLaunches(3));
  EXPECT_EQ(owners_[launcher_->launched()[2].Arg("job")], "alice");
}

// One owner's jobs keep their submit order, and a view right after a
// submit already places the new job behind the queued tasks before it.
TEST_F(SchedulerFairShareTest, OneOwnersJobsKeepTheirSubmitOrder) {
  Start(/*fair_share=*/true);
  const std::string first = Submit("alice", 2);
  ASSERT_TRUE(launcher_->WaitForLaunches(1));
  const std::string second = Submit("alice", 2);
  auto f = scheduler_->GetJob(first);
  auto s = scheduler_->GetJob(second);
  ASSERT_TRUE(f.ok() && s.ok());
  EXPECT_EQ(f->tasks(1).tasks_ahead(), 0);
  EXPECT_EQ(s->tasks(0).tasks_ahead(), 1);
  EXPECT_EQ(s->tasks(1).tasks_ahead(), 2);
  EXPECT_EQ(s->tasks(0).wait_reason(), Task::RESOURCES);
  EXPECT_EQ(RunNext(4), (std::vector<std::string>{"alice/0", "alice/1", "alice/0", "alice/1"}));
  EXPECT_EQ(launcher_->launched()[1].Arg("job"), first);
  EXPECT_EQ(launcher_->launched()[2].Arg("job"), second);
}

}  // namespace
}  // namespace traind::server
