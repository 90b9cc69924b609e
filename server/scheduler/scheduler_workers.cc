// The WorkerService side of the Scheduler: the calls a task attempt's
// workers make (fetch the task, report epochs and events, heartbeats, the
// NCCL id rendezvous), each checked against the attempt's secret.
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "base/log.h"
#include "server/scheduler/attempt_secrets.h"
#include "server/scheduler/scheduler.h"

namespace traind::server {

using traind::v1::Job;
using traind::v1::Task;

absl::StatusOr<Scheduler::LiveJob*> Scheduler::AuthLocked(const traind::v1::AttemptCredentials& c,
                                                          LiveAttempt** attempt) {
  // A worker of an attempt whose launch is not recorded yet (its ranks are
  // still being started): wait until it is, moments at most.
  auto recorded = [this, &c]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    auto it = jobs_.find(c.job_id());
    if (it == jobs_.end()) return true;
    auto ait = it->second->attempts.find(c.task());
    return ait == it->second->attempts.end() || !ait->second.launching ||
           ait->second.number != c.attempt();  // another attempt's worker: denied below
  };
  mu_.Await(absl::Condition(&recorded));
  auto it = jobs_.find(c.job_id());
  if (it != jobs_.end()) {
    auto ait = it->second->attempts.find(c.task());
    if (ait != it->second->attempts.end() && ait->second.number == c.attempt() && c.rank() >= 0 &&
        c.rank() < static_cast<int>(ait->second.rank_pids.size()) &&
        SecretMatches(ait->second.secret, c.secret())) {
      ait->second.last_seen = clock_->Now();
      ait->second.queued_remotely = false;  // it runs (a cluster's queue may say so later)
      *attempt = &ait->second;
      return it->second.get();
    }
  }
  return absl::PermissionDeniedError(absl::StrCat("no running attempt ", c.attempt(), " of task ",
                                                  c.task(), " of job ", c.job_id(),
                                                  " with these credentials"));
}

bool Scheduler::AfterLaunchRecorded(const traind::v1::AttemptCredentials& c,
                                    std::function<void()> then) {
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(c.job_id());
  if (it == jobs_.end()) return false;
  auto ait = it->second->attempts.find(c.task());
  if (ait == it->second->attempts.end() || !ait->second.launching ||
      ait->second.number != c.attempt()) {
    return false;
  }
  ait->second.after_launch.push_back(std::move(then));
  return true;
}

absl::StatusOr<traind::v1::TaskAssignment> Scheduler::GetTask(
    const traind::v1::AttemptCredentials& c) {
  absl::MutexLock lock(&mu_);
  LiveAttempt* la = nullptr;
  absl::StatusOr<LiveJob*> lj = AuthLocked(c, &la);
  if (!lj.ok()) return lj.status();
  const Job& job = (*lj)->job;
  traind::v1::TaskAssignment a;
  a.set_job_id(job.id());
  a.set_task(c.task());
  a.set_attempt(c.attempt());
  // A trial's task: the trial's spec, and the task within it.
  absl::StatusOr<SearchController::Assignment> assigned = (*lj)->search.Assign(job, c.task());
  if (!assigned.ok()) return assigned.status();
  const int spec_task = assigned->spec_task;
  *a.mutable_spec() = std::move(assigned->spec);
  la->pause_after = assigned->pause_after;
  if (la->pause_after > 0) a.set_pause_after_epoch(la->pause_after);
  a.set_spec_task(spec_task);
  a.set_fold(job.spec().has_cross_validation() ? spec_task : -1);
  a.set_rank(c.rank());
  a.set_world_size(static_cast<int>(la->rank_pids.size()));
  const std::filesystem::path job_dir =
      (options_.worker_jobs_dir.empty() ? std::filesystem::path(options_.state_dir) / "jobs"
                                        : std::filesystem::path(options_.worker_jobs_dir)) /
      job.id();
  const std::string task_dir = absl::StrCat("task-", c.task());
  a.set_artifacts_dir((job_dir / task_dir).string());
  // One run directory per task, side by side, so that `tensorboard --logdir
  // jobs/<job>/tensorboard` overlays the folds.
  if (options_.tensorboard) a.set_tensorboard_dir((job_dir / "tensorboard" / task_dir).string());
  a.set_heartbeat_interval_ms(HeartbeatIntervalMs(options_.heartbeat_timeout));
  return a;
}

absl::StatusOr<bool> Scheduler::ReportEpoch(const traind::v1::AttemptCredentials& c,
                                            const traind::v1::EpochMetrics& metrics) {
  return ReportEpochs(c, {&metrics});
}

absl::StatusOr<bool> Scheduler::ReportEpochs(
    const traind::v1::AttemptCredentials& c,
    const std::vector<const traind::v1::EpochMetrics*>& metrics) {
  absl::MutexLock lock(&mu_);
  LiveAttempt* la = nullptr;
  absl::StatusOr<LiveJob*> ljp = AuthLocked(c, &la);
  if (!ljp.ok()) return ljp.status();
  LiveJob& lj = **ljp;
  const bool stop = la->stop_requested || lj.job.state() == Job::CANCELLING;
  // Ranks agree on their metrics (all-reduced): rank 0 speaks for them.
  if (c.rank() != 0) return stop;
  std::deque<traind::v1::EpochMetrics> accepted;  // stable addresses
  for (const traind::v1::EpochMetrics* in : metrics) {
    if (in->epoch() <= la->last_epoch) continue;  // a repeated report
    if (in->epoch() != la->last_epoch + 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("epoch ", in->epoch(), " reported after epoch ", la->last_epoch));
    }
    traind::v1::EpochMetrics& m = accepted.emplace_back(*in);
    m.set_task(c.task());
    m.set_attempt(c.attempt());
    la->last_epoch = m.epoch();
    ++la->trained_epochs;
  }
  if (accepted.empty()) return stop;
  lj.job.mutable_tasks(c.task())->set_epochs_done(la->last_epoch);
  // One transaction for the batch; one event per epoch.
  JobChange change = ChangeLocked(lj);
  change.WriteTask(c.task());
  for (const traind::v1::EpochMetrics& m : accepted) {
    *change.Event()->mutable_epoch() = m;
    change.mutation().epochs.push_back(&m);
  }
  CommitLocked(lj, change);
  for (const traind::v1::EpochMetrics& m : accepted) {
    ActOnSearchLocked(lj, lj.search.RecordEpoch(c.task(), m));
  }
  return stop;
}

absl::StatusOr<bool> Scheduler::ReportEvent(const traind::v1::ReportEventRequest& req) {
  absl::MutexLock lock(&mu_);
  LiveAttempt* la = nullptr;
  absl::StatusOr<LiveJob*> ljp = AuthLocked(req.credentials(), &la);
  if (!ljp.ok()) return ljp.status();
  LiveJob& lj = **ljp;
  const int task = req.credentials().task();
  if (req.credentials().rank() != 0 && req.kind_case() != traind::v1::ReportEventRequest::kFailed &&
      req.kind_case() != traind::v1::ReportEventRequest::kWarning) {
    return la->stop_requested || lj.job.state() == Job::CANCELLING;
  }
  switch (req.kind_case()) {
    case traind::v1::ReportEventRequest::kStarted: {
      Task* t = lj.job.mutable_tasks(task);
      if (t->state() == Task::STARTING) {
        if (req.started().epochs_total() > 0) t->set_epochs_total(req.started().epochs_total());
        if (lj.job.result().classes().empty()) {
          *lj.job.mutable_result()->mutable_classes() = req.started().classes();
        }
        JobChange change = ChangeLocked(lj);
        change.WriteJob();
        change.SetTaskState(task, Task::RUNNING, la->number, la->pid);
        // A search's trials table: this task's trial runs now.
        if (lj.job.spec().has_search()) AggregateFoldResults(&lj.job);
        CommitLocked(lj, change);
      }
      break;
    }
    case traind::v1::ReportEventRequest::kResumed: {
      // Epochs continue after the checkpoint: the next report is k + 1.
      const int k = req.resumed().completed_epochs();
      la->last_epoch = k;
      lj.job.mutable_tasks(task)->set_epochs_done(k);
      JobChange change = ChangeLocked(lj);
      change.WriteTask(task);
      change.TaskEvent(task, la->number, la->pid)->set_resumed_epochs(k);
      CommitLocked(lj, change);
      LogInfo("task resumed job=%s task=%d attempt=%d pid=%d after_epoch=%d", lj.job.id(), task,
              la->number, la->pid, k);
      break;
    }
    case traind::v1::ReportEventRequest::kWarning: {
      JobChange change = ChangeLocked(lj);
      change.TaskEvent(task, la->number, la->pid)->set_warning(req.warning().message());
      CommitLocked(lj, change);
      LogWarning("task warning job=%s task=%d attempt=%d: %s", lj.job.id(), task, la->number,
                 req.warning().message());
      break;
    }
    case traind::v1::ReportEventRequest::kFinished:
      la->result = req.finished().result();
      la->result->set_fold(task);
      if (placement_->WorkersOutliveTraind()) {
        // Stored before it is acknowledged: a worker that outlives traind
        // exits once its result is acknowledged, and the next traind adopts
        // the attempt with it (Recover).
        *lj.job.mutable_tasks(task)->mutable_result() = *la->result;
        JobChange change = ChangeLocked(lj);
        change.WriteTask(task);
        CommitLocked(lj, change);
      }
      break;
    case traind::v1::ReportEventRequest::kFailed: {
      const int rank = req.credentials().rank();
      // The other ranks cannot finish without this one (which exits by
      // itself): stop them now. Not while traind stops or the attempt is
      // being stopped: those give every rank its grace.
      if (la->RecordRankFailure(rank, req.failed().failure()) && !la->stop_requested &&
          !stopping_ && lj.job.state() != Job::CANCELLING) {
        la->StopPeers(launcher_, rank);
      }
      break;
    }
    case traind::v1::ReportEventRequest::KIND_NOT_SET:
      return absl::InvalidArgumentError("report: no event set");
  }
  return la->stop_requested || lj.job.state() == Job::CANCELLING;
}

absl::StatusOr<bool> Scheduler::Heartbeat(const traind::v1::AttemptCredentials& c) {
  absl::MutexLock lock(&mu_);
  LiveAttempt* la = nullptr;
  absl::StatusOr<LiveJob*> lj = AuthLocked(c, &la);
  if (!lj.ok()) return lj.status();
  return la->stop_requested || (*lj)->job.state() == Job::CANCELLING;
}

void Scheduler::Rendezvous(const traind::v1::AttemptCredentials& c, int world_size,
                           const std::string& unique_id,
                           std::function<void(absl::StatusOr<std::string>)> done) {
  absl::MutexLock lock(&mu_);
  LiveAttempt* la = nullptr;
  absl::StatusOr<LiveJob*> lj = AuthLocked(c, &la);
  if (!lj.ok()) {
    done(lj.status());
    return;
  }
  la->Rendezvous(c.rank(), world_size, unique_id, std::move(done));
}

}  // namespace traind::server
