#include "server/scheduler/recovery.h"

#include "server/log.h"
#include "server/scheduler/scheduler.h"

namespace traind::server {

using traind::v1::Attempt;
using traind::v1::Failure;
using traind::v1::Job;
using traind::v1::Task;

int RequeueLostAttempts(Job* job, const google::protobuf::Timestamp& now, JobChange* change) {
  int requeued = 0;
  for (int i = 0; i < job->tasks_size(); ++i) {
    Task* t = job->mutable_tasks(i);
    if (t->state() != Task::STARTING && t->state() != Task::RUNNING) continue;
    Attempt* a = t->mutable_attempts(t->attempts_size() - 1);
    *a->mutable_end_time() = now;
    a->mutable_failure()->set_reason(Failure::LOST);
    a->mutable_failure()->set_message("traind stopped while the attempt ran");
    *change->SetTaskState(i, Task::QUEUED, a->number())->mutable_failure() = a->failure();
    ++requeued;
  }
  return requeued;
}

absl::Status Scheduler::Recover() {
  StoredOnReturn stored(&writer_);
  // Store reads first, without the mutex.
  absl::StatusOr<std::vector<Job>> jobs = store_->LoadActiveJobs();
  if (!jobs.ok()) return jobs.status();
  std::vector<int64_t> last_sequences;
  for (const Job& job : *jobs) {
    absl::StatusOr<int64_t> last = store_->LastEventSequence(job.id());
    if (!last.ok()) return last.status();
    last_sequences.push_back(*last);
  }
  {
    absl::MutexLock lock(&mu_);
    if (absl::Status s = gpus_.Init(); !s.ok()) {
      LogWarning("gpu probe failed: %s; no GPUs used", s.message());
    }
    if (gpus_.gpus().empty()) {
      LogInfo("gpus none: %s", gpus_.unavailable());
    }
    for (const GpuPool::Gpu& g : gpus_.gpus()) {
      LogInfo("gpu%d %s %s total=%d used=%d", g.index, g.last.uuid, g.last.name, g.last.total_bytes,
              g.last.used_bytes);
    }
    int requeued = 0;
    for (size_t j = 0; j < jobs->size(); ++j) {
      auto lj = std::make_unique<LiveJob>();
      lj->job = std::move((*jobs)[j]);
      lj->next_sequence = last_sequences[j] + 1;
      JobChange change = ChangeLocked(*lj);
      change.WriteJob();
      requeued += RequeueLostAttempts(&lj->job, NowProto(), &change);
      lj->order = next_order_++;
      for (int i = 0; i < lj->job.tasks_size(); ++i) {
        if (lj->job.tasks(i).state() == Task::QUEUED) EnqueueLocked(*lj, i);
      }
      CommitLocked(*lj, change);
      const std::string id = lj->job.id();
      LiveJob& ref = *lj;
      jobs_[id] = std::move(lj);
      if (ref.job.state() == Job::CANCELLING) StopTasksLocked(ref, true);
      // Also ends a job whose tasks all ended before its own end was
      // written (the daemon stopped in between).
      MaybeFinishJobLocked(ref);
      EraseIfEndedLocked(id);
    }
    LogInfo("store recovered jobs=%d tasks_requeued=%d", static_cast<int>(jobs_.size()), requeued);
  }
  FinishMerges();
  return absl::OkStatus();
}

}  // namespace traind::server
