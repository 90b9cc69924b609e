#include "server/scheduler/recovery.h"

#include <signal.h>

#include <algorithm>
#include <cstdint>

#include "base/log.h"
#include "server/scheduler/attempt_secrets.h"
#include "server/scheduler/scheduler.h"

namespace traind::server {

using traind::v1::Attempt;
using traind::v1::Failure;
using traind::v1::Job;
using traind::v1::Task;

int RequeueLostAttempts(Job* job, const google::protobuf::Timestamp& now, JobChange* change,
                        const std::function<bool(int)>& adopted) {
  int requeued = 0;
  for (int i = 0; i < job->tasks_size(); ++i) {
    Task* t = job->mutable_tasks(i);
    if (t->state() != Task::STARTING && t->state() != Task::RUNNING) continue;
    if (adopted && adopted(i)) continue;
    Attempt* a = t->mutable_attempts(t->attempts_size() - 1);
    *a->mutable_end_time() = now;
    a->mutable_failure()->set_reason(Failure::LOST);
    a->mutable_failure()->set_message("traind stopped while the attempt ran");
    *change->SetTaskState(i, Task::QUEUED, a->number())->mutable_failure() = a->failure();
    ++requeued;
  }
  return requeued;
}

int Scheduler::AdoptRemoteAttemptsLocked(LiveJob& lj) {
  int adopted = 0;
  const Job& job = lj.job;
  for (int i = 0; i < job.tasks_size(); ++i) {
    const Task& t = job.tasks(i);
    if (t.state() != Task::STARTING && t.state() != Task::RUNNING) continue;
    if (t.attempts_size() == 0) continue;
    const Attempt& a = t.attempts(t.attempts_size() - 1);
    if (a.slurm_job_id() <= 0 || a.has_end_time()) continue;
    const int handle = static_cast<int>(a.slurm_job_id());
    if (absl::Status s = launcher_->Adopt(handle, job.id()); !s.ok()) {
      LogWarning("task not adopted job=%s task=%d attempt=%d slurm_job=%d: %s", job.id(), i,
                 a.number(), handle, s.message());
      continue;
    }
    if (job.spec().resources().device() == traind::v1::GPU && job.spec().resources().count() > 1) {
      // Several ranks in one Slurm job: not adopted (their ranks' handles
      // were this launcher's own); the job is cancelled and the task runs
      // again from its last checkpoint (LOST).
      launcher_->Signal(handle, SIGKILL);
      LogWarning(
          "task not adopted job=%s task=%d attempt=%d slurm_job=%d: a multi-GPU attempt "
          "is cancelled and run again",
          job.id(), i, a.number(), handle);
      continue;
    }
    LiveAttempt& la = lj.attempts[i];
    la.number = a.number();
    la.secret = AttemptSecret(attempt_key_, job.id(), i, a.number());
    la.pid = handle;
    la.AddRank(handle);
    la.last_epoch = t.epochs_done();
    // Its worker reported its result before traind stopped (stored then).
    if (t.has_result()) la.result = t.result();
    la.last_seen = clock_->Now();
    la.share_gpus = TaskGpus(job.spec());
    la.share_units = std::max(1, la.share_gpus);
    fair_share_.Started(job.owner(), la.share_units, clock_->Now(), la.share_gpus);
    // Until the cluster says it runs (or its worker calls): no heartbeat due.
    la.queued_remotely = true;
    ranks_.Add(handle, {job.id(), i, 0});
    ++running_;
    ++adopted;
    LogInfo("task adopted job=%s task=%d attempt=%d slurm_job=%d epochs_done=%d", job.id(), i,
            a.number(), handle, t.epochs_done());
  }
  return adopted;
}

absl::Status Scheduler::Recover() {
  StoredOnReturn stored(&writer_);
  // Store reads first, without the mutex.
  absl::StatusOr<std::vector<Job>> jobs = store_->LoadActiveJobs();
  if (!jobs.ok()) return jobs.status();
  std::vector<int64_t> last_sequences;
  // ASHA's rungs are rebuilt from the stored epochs, in the order they came.
  std::vector<std::vector<traind::v1::JobEvent>> rung_history(jobs->size());
  for (size_t j = 0; j < jobs->size(); ++j) {
    const Job& job = (*jobs)[j];
    absl::StatusOr<int64_t> last = store_->LastEventSequence(job.id());
    if (!last.ok()) return last.status();
    last_sequences.push_back(*last);
    if (SearchController(job.spec()).needs_history()) {
      absl::StatusOr<std::vector<traind::v1::JobEvent>> events =
          store_->ReadEvents(job.id(), 0, static_cast<int>(std::min<int64_t>(*last, INT32_MAX)));
      if (!events.ok()) return events.status();
      rung_history[j] = *std::move(events);
    }
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
    int adopted = 0;
    for (size_t j = 0; j < jobs->size(); ++j) {
      auto lj = std::make_unique<LiveJob>();
      lj->job = std::move((*jobs)[j]);
      lj->next_sequence = last_sequences[j] + 1;
      lj->search = SearchController(lj->job.spec());
      lj->search.Replay(rung_history[j]);
      if (placement_->WorkersOutliveTraind()) adopted += AdoptRemoteAttemptsLocked(*lj);
      JobChange change = ChangeLocked(*lj);
      change.WriteJob();
      requeued += RequeueLostAttempts(&lj->job, NowProto(), &change,
                                      [&lj](int task) { return lj->attempts.count(task) != 0; });
      lj->order = next_order_++;
      for (int i = 0; i < lj->job.tasks_size(); ++i) {
        if (lj->job.tasks(i).state() == Task::QUEUED) EnqueueLocked(*lj, i);
      }
      CommitLocked(*lj, change);
      const std::string id = lj->job.id();
      LiveJob& ref = *lj;
      jobs_[id] = std::move(lj);
      if (ref.job.state() == Job::CANCELLING) StopTasksLocked(ref, true);
      // A trial pruned just before the stop, its tasks not yet ended.
      for (int trial : ref.search.PrunedTrials()) PruneTrialLocked(ref, trial);
      // Also ends a job whose tasks all ended before its own end was
      // written (the daemon stopped in between).
      MaybeFinishJobLocked(ref);
      EraseIfEndedLocked(id);
    }
    LogInfo("store recovered jobs=%d tasks_requeued=%d tasks_adopted=%d",
            static_cast<int>(jobs_.size()), requeued, adopted);
  }
  FinishMerges();
  return absl::OkStatus();
}

}  // namespace traind::server
