// Dispatch and launches: the Scheduler's dispatch loop picks queued tasks
// whose resources are free, and starts their attempts without holding the
// scheduler's mutex (a launch can wait on the zygote or the file system),
// then records them. Also the GPU pool it places tasks on (probes, usable
// GPUs), the deadlines of running attempts, a side launcher's exits and a
// remote launcher's news of its launches.
#include <signal.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/log.h"
#include "server/scheduler/attempt_secrets.h"
#include "server/scheduler/scheduler.h"

namespace traind::server {

using traind::v1::Attempt;
using traind::v1::Failure;
using traind::v1::Job;
using traind::v1::Task;

std::vector<GpuPool::Gpu> Scheduler::Gpus(std::string* unavailable) {
  absl::MutexLock lock(&mu_);
  if (unavailable != nullptr) *unavailable = gpus_.unavailable();
  return gpus_.gpus();
}

int Scheduler::UsableGpus(std::string* why) {
  absl::MutexLock lock(&mu_);
  return placement_->UsableGpus(gpus_, why);
}

void Scheduler::RefreshGpusLocked(bool force) {
  if (gpus_.gpus().empty()) return;
  const absl::Time now = clock_->Now();
  if (!force && now - last_gpu_refresh_ < absl::Milliseconds(100)) return;
  last_gpu_refresh_ = now;
  // The probe is a driver call: without the mutex. Only the loop thread
  // refreshes, so no other refresh runs meanwhile.
  mu_.Unlock();
  absl::StatusOr<std::vector<GpuState>> states = options_.gpu_probe->Probe();
  mu_.Lock();
  for (const std::string& note : gpus_.Update(now, states)) {
    if (note.find("UNHEALTHY") == std::string::npos) {
      LogInfo("%s", note);
      continue;
    }
    LogError("%s", note);
  }
  // Tell the last job on each newly unhealthy GPU.
  for (const GpuPool::Gpu& g : gpus_.gpus()) {
    if (g.state != GpuPool::State::kUnhealthy) continue;
    auto last = gpu_last_job_.find(g.index);
    if (last == gpu_last_job_.end()) continue;
    auto it = jobs_.find(last->second);
    gpu_last_job_.erase(last);
    if (it == jobs_.end()) continue;
    JobChange change = ChangeLocked(*it->second);
    auto* e = change.Event()->mutable_device();
    e->set_device_id(absl::StrCat("gpu", g.index));
    e->set_state("UNHEALTHY");
    e->set_message(g.note);
    CommitLocked(*it->second, change);
  }
}

std::vector<DispatchQueue::Entry> Scheduler::DispatchOrderLocked() {
  std::vector<DispatchQueue::Entry> order(queue_.begin(), queue_.end());
  if (!fair_share_.enabled() || order.size() < 2) return order;
  // Within a priority, the owner with the least recent use per unit of
  // weight first (then the fewest units held now, per weight); within an
  // owner, as queued (submit order, then task). fair_share.h.
  const absl::Time now = clock_->Now();
  std::map<std::string, std::pair<double, double>> keys;  // by owner
  for (const DispatchQueue::Entry& e : order) {
    if (keys.count(e.owner) > 0) continue;
    keys[e.owner] = {fair_share_.Key(e.owner, now),
                     fair_share_.Running(e.owner) / fair_share_.Weight(e.owner)};
  }
  std::stable_sort(order.begin(), order.end(),
                   [&keys](const DispatchQueue::Entry& a, const DispatchQueue::Entry& b) {
                     if (a.priority != b.priority) return a.priority > b.priority;
                     return keys.at(a.owner) < keys.at(b.owner);
                   });
  return order;
}

int TaskGpus(const traind::v1::JobSpec& spec) {
  return spec.resources().device() == traind::v1::GPU ? std::max(1, spec.resources().count()) : 0;
}

const std::vector<DispatchQueue::Entry>& Scheduler::ViewOrderLocked() {
  const absl::Time now = clock_->Now();
  if (queue_.version() != view_order_version_ ||
      fair_share_.version() != view_order_share_version_ ||
      now - view_order_at_ > absl::Seconds(1) || now < view_order_at_) {
    view_order_ = DispatchOrderLocked();
    view_order_version_ = queue_.version();
    view_order_share_version_ = fair_share_.version();
    view_order_at_ = now;
  }
  return view_order_;
}

void Scheduler::DispatchLocked() {
  bool gpus_refreshed = false;
  std::vector<DispatchQueue::Entry> order = DispatchOrderLocked();
  for (size_t next = 0; next < order.size() && !stopping_;) {
    const DispatchQueue::Entry entry = order[next++];
    const std::string job_id = entry.job_id;
    const int task = entry.task;
    auto it = jobs_.find(job_id);
    if (it == jobs_.end() || it->second->job.tasks(task).state() != Task::QUEUED) {
      queue_.Erase(entry);
      continue;
    }
    LiveJob& lj = *it->second;
    const int cap = lj.job.spec().resources().max_parallel_tasks();
    if (cap > 0 && static_cast<int>(lj.attempts.size()) >= cap) continue;  // stays queued
    if (fair_share_.AtOwnerLimit(lj.job.owner(), TaskGpus(lj.job.spec()))) continue;
    if (!DependenciesDoneLocked(lj, task)) continue;
    if (AtTrialLimitLocked(lj, task)) continue;  // stays queued
    std::vector<int> gpus;
    if (placement_->PicksGpus(lj.job.spec())) {
      if (!gpus_refreshed) {
        gpus_refreshed = true;
        RefreshGpusLocked(true);        // current free memory (frees the mutex meanwhile)
        order = DispatchOrderLocked();  // so the queue may have changed: start again
        next = 0;
        continue;
      }
      std::optional<std::vector<int>> picked = gpus_.Allocate(
          lj.job.spec().resources().count(), lj.job.gpu_memory_bytes(), lj.oom_gpus[task]);
      if (!picked.has_value()) continue;  // waits for GPUs
      gpus = *picked;
    } else if (!placement_->SlotFree(running_)) {
      continue;  // waits for a CPU slot (a cluster's: for fewer tasks handed to it)
    }
    queue_.Erase(entry);
    // Only this thread dispatches, so the resources picked stay free while
    // the launch runs without the mutex.
    LaunchPlan plan = PlanLaunchLocked(lj, task, gpus);
    ++launches_in_flight_;
    mu_.Unlock();
    LaunchOutcome outcome = RunLaunch(plan);
    mu_.Lock();
    --launches_in_flight_;
    RecordLaunchLocked(plan, outcome);
    if (!recorded_calls_.empty()) {
      // Worker calls that raced their launch's record (AfterLaunchRecorded).
      std::vector<std::function<void()>> calls = std::move(recorded_calls_);
      recorded_calls_.clear();
      mu_.Unlock();
      for (std::function<void()>& call : calls) call();
      mu_.Lock();
    }
    // The queue changed while the mutex was free, and the owners' use.
    order = DispatchOrderLocked();
    next = 0;
  }
}

Scheduler::LaunchPlan Scheduler::PlanLaunchLocked(LiveJob& lj, int task,
                                                  const std::vector<int>& gpus) {
  const Job& job = lj.job;
  const Task& t = job.tasks(task);
  const int number = t.attempts_size() + 1;
  LaunchPlan plan;
  plan.job_id = job.id();
  plan.task = task;
  const std::filesystem::path dir =
      std::filesystem::path(options_.state_dir) / "jobs" / job.id() / absl::StrCat("task-", task);
  plan.dir = dir.string();
  plan.attempt.set_number(number);
  *plan.attempt.mutable_start_time() = NowProto();
  // Paths the workers see (a remote launcher's see the shared directory).
  const std::filesystem::path worker_dir = options_.worker_jobs_dir.empty()
                                               ? dir
                                               : std::filesystem::path(options_.worker_jobs_dir) /
                                                     job.id() / absl::StrCat("task-", task);
  plan.attempt.set_log_path((worker_dir / absl::StrCat("attempt-", number, ".log")).string());

  LiveAttempt la;
  la.number = number;
  la.secret = AttemptSecret(attempt_key_, job.id(), task, number);
  la.launching = true;
  la.gpus = gpus;
  la.last_seen = clock_->Now();
  // What it holds: its GPUs (a cluster's GPU task: the count it asks for), else a slot.
  la.share_gpus = !gpus.empty() ? static_cast<int>(gpus.size()) : TaskGpus(job.spec());
  la.share_units = std::max(1, la.share_gpus);
  fair_share_.Started(job.owner(), la.share_units, la.last_seen, la.share_gpus);
  const int world = placement_->Ranks(job.spec(), static_cast<int>(gpus.size()));
  for (int g : gpus) plan.gpu_uuids.push_back(gpus_.gpus()[g].last.uuid);
  const std::string visible = absl::StrJoin(plan.gpu_uuids, ",");
  for (int rank = 0; rank < world; ++rank) {
    LaunchRequest& req = plan.ranks.emplace_back();
    req.argv = {options_.worker_path, absl::StrCat("--server=", options_.worker_address),
                absl::StrCat("--job=", job.id()), absl::StrCat("--task=", task),
                absl::StrCat("--attempt=", number)};
    if (world > 1) {
      req.argv.push_back(absl::StrCat("--rank=", rank));
      req.argv.push_back(absl::StrCat("--world-size=", world));
    }
    req.env = {absl::StrCat("TRAIND_WORKER_SECRET=", la.secret),
               absl::StrCat("OMP_NUM_THREADS=", options_.worker_threads),
               "CUDA_DEVICE_ORDER=PCI_BUS_ID"};
    placement_->SetDevices(job.spec(), visible, &req);
    req.env.insert(req.env.end(), options_.worker_env.begin(), options_.worker_env.end());
    req.log_path =
        rank == 0
            ? plan.attempt.log_path()
            : (worker_dir / absl::StrCat("attempt-", number, ".rank-", rank, ".log")).string();
    req.name = job.id();
    req.cpus = options_.worker_threads;
    req.memory_bytes = job.host_memory_bytes();
    // Higher priorities first: a lower one waits behind them (nice > 0).
    req.nice = std::max(0, -job.spec().priority());
  }
  lj.attempts[task] = std::move(la);
  return plan;
}

Scheduler::LaunchOutcome Scheduler::RunLaunch(const LaunchPlan& plan) {
  LaunchOutcome out;
  std::error_code ec;
  std::filesystem::create_directories(plan.dir, ec);
  if (ec) {
    out.status = absl::InternalError(absl::StrCat(plan.dir, ": ", ec.message()));
    return out;
  }
  out.attempted = true;
  if (plan.ranks.size() > 1 && launcher_->launches_ranks_together()) {
    // One unit (a Slurm job of N tasks): all ranks or none.
    absl::StatusOr<std::vector<int>> handles = launcher_->LaunchRanks(plan.ranks);
    if (handles.ok()) {
      out.pids = *std::move(handles);
    } else {
      out.status = handles.status();
    }
    return out;
  }
  for (size_t rank = 0; rank < plan.ranks.size(); ++rank) {
    absl::StatusOr<int> pid = launcher_->Launch(plan.ranks[rank]);
    if (!pid.ok()) {
      out.status = pid.status();
      break;
    }
    out.pids.push_back(*pid);
  }
  return out;
}

void Scheduler::RecordLaunchLocked(const LaunchPlan& plan, const LaunchOutcome& outcome) {
  LiveJob& lj = *jobs_.at(plan.job_id);  // a job with a launching task stays live
  Job& job = lj.job;
  const int task = plan.task;
  Task* t = job.mutable_tasks(task);
  LiveAttempt& la = lj.attempts.at(task);
  la.launching = false;
  // Worker calls that came before this record go on once the mutex is free
  // (DispatchLocked runs them).
  for (std::function<void()>& then : la.after_launch) recorded_calls_.push_back(std::move(then));
  la.after_launch.clear();
  if (outcome.pids.empty()) {
    fair_share_.Ended(job.owner(), la.share_units, clock_->Now(), la.share_gpus);
    lj.attempts.erase(task);
    if (outcome.attempted) {
      // The attempt exists but never ran.
      Attempt* a = t->add_attempts();
      *a = plan.attempt;
      *a->mutable_end_time() = a->start_time();
      a->mutable_failure()->set_reason(Failure::WORKER_CRASHED);
      a->mutable_failure()->set_message(std::string(outcome.status.message()));
    }
    FailLaunchLocked(lj, task, outcome.status);
    return;
  }
  Attempt* a = t->add_attempts();
  *a = plan.attempt;
  const int world = static_cast<int>(plan.ranks.size());
  for (size_t rank = 0; rank < outcome.pids.size(); ++rank) {
    const int pid = outcome.pids[rank];
    la.AddRank(pid);
    ranks_.Add(pid, {job.id(), task, static_cast<int>(rank)});
    if (world > 1 && !placement_->HandlesAreClusterJobs()) a->add_rank_pids(pid);
  }
  if (!outcome.status.ok()) {
    // Some ranks run: stop them; the attempt ends when they have exited.
    Failure f;
    f.set_reason(Failure::WORKER_CRASHED);
    f.set_message(
        absl::StrCat("cannot start rank ", outcome.pids.size(), ": ", outcome.status.message()));
    la.failure = f;
    la.all_exits_clean = false;
    la.Signal(launcher_, SIGKILL);
  }
  const int pid0 = la.rank_pids[0];
  la.pid = pid0;
  la.last_seen = clock_->Now();
  if (placement_->HandlesAreClusterJobs()) {
    a->set_slurm_job_id(pid0);
  } else {
    a->set_pid(pid0);
  }
  if (la.gpus.empty()) {
    ++running_;
  } else {
    for (int r = 0; r < static_cast<int>(la.gpus.size()); ++r) {
      const int pid = la.rank_pids[std::min<int>(r, la.rank_pids.size() - 1)];
      gpus_.MarkBusy({la.gpus[r]}, pid);
      gpu_last_job_[la.gpus[r]] = job.id();
    }
  }
  t->set_epochs_done(0);
  JobChange change = ChangeLocked(lj);
  if (job.state() == Job::QUEUED) {
    change.SetJobState(Job::RUNNING);
    *job.mutable_start_time() = NowProto();
    LogInfo("job running job=%s", job.id());
  }
  change.WriteJob();
  change.SetTaskState(task, Task::STARTING, a->number(), pid0);
  CommitLocked(lj, change);
  LogInfo("task started job=%s task=%d attempt=%d %s=%d%s%s", job.id(), task, a->number(),
          placement_->HandleName(), pid0, world > 1 ? absl::StrCat(" ranks=", world) : "",
          plan.gpu_uuids.empty() ? "" : absl::StrCat(" gpus=", absl::StrJoin(plan.gpu_uuids, ",")));
  // Stopped while it launched (StopTasksLocked had no process to signal):
  // told now. Without a grace deadline it was a forced stop.
  if (la.stop_requested && !la.kill_at.has_value()) {
    la.Signal(launcher_, SIGKILL);
  } else if (la.stop_requested || stopping_) {
    la.Signal(launcher_, SIGTERM);
  }
}

void Scheduler::FailLaunchLocked(LiveJob& lj, int task, const absl::Status& why) {
  Failure f;
  f.set_reason(Failure::WORKER_CRASHED);
  f.set_message(absl::StrCat("cannot start the worker: ", why.message()));
  LogError("task launch failed job=%s task=%d: %s", lj.job.id(), task, why.message());
  // Not retried: the same launch would fail again.
  Task* t = lj.job.mutable_tasks(task);
  *t->mutable_failure() = f;
  if (!lj.job.has_failure()) {
    *lj.job.mutable_failure() = f;
    lj.job.mutable_failure()->set_message(absl::StrCat("fold ", task, ": ", f.message()));
  }
  JobChange change = ChangeLocked(lj);
  change.WriteJob();
  *change.SetTaskState(task, Task::FAILED, t->attempts_size())->mutable_failure() = f;
  CommitLocked(lj, change);
  StopTasksLocked(lj, false);
  MaybeFinishJobLocked(lj);
  EraseIfEndedLocked(lj.job.id());
}

void Scheduler::EnforceDeadlines() {
  StoredOnReturn stored(&writer_);
  absl::MutexLock lock(&mu_);
  EnforceDeadlinesLocked();
}

void Scheduler::EnforceDeadlinesLocked() {
  const absl::Time now = clock_->Now();
  for (auto& [id, lj] : jobs_) {
    for (auto& [task, la] : lj->attempts) {
      if (la.launching) continue;  // its deadlines start once it is recorded
      if (std::optional<std::string> message = la.MissedHeartbeat(now, options_.heartbeat_timeout);
          message.has_value()) {
        if (!la.failure.has_value()) {
          Failure f;
          f.set_reason(Failure::TIMEOUT);
          f.set_message(*message);
          la.failure = f;
          la.failure_rank = -1;
        }
        LogWarning("task hung job=%s task=%d attempt=%d pid=%d: %s", id, task, la.number, la.pid,
                   *message);
        la.Signal(launcher_, SIGKILL);
        la.FailRendezvous(*message);
        continue;
      }
      if (la.kill_at.has_value() && now >= *la.kill_at) {
        LogWarning(
            "task kill job=%s task=%d attempt=%d pid=%d: did not stop within the grace "
            "period",
            id, task, la.number, la.pid);
        la.Signal(launcher_, SIGKILL);
        la.kill_at.reset();
      }
    }
  }
}

void Scheduler::StopTasksLocked(LiveJob& lj, bool force, const std::function<bool(int)>& which,
                                Task::State queued_end) {
  JobChange change = ChangeLocked(lj);
  bool changed = false;
  for (int i = 0; i < lj.job.tasks_size(); ++i) {
    if (which && !which(i)) continue;
    const Task& t = lj.job.tasks(i);
    // A task being launched has an attempt: it is stopped below.
    if (t.state() != Task::QUEUED || lj.attempts.count(i) != 0) continue;
    queue_.Remove(lj.job.id(), i);
    change.SetTaskState(i, queued_end, t.attempts_size());
    changed = true;
  }
  if (changed) CommitLocked(lj, change);
  for (auto& [task, la] : lj.attempts) {
    if (which && !which(task)) continue;
    if (force) {
      la.Signal(launcher_, SIGKILL);
      la.kill_at.reset();
    } else if (!la.stop_requested) {
      la.Signal(launcher_, SIGTERM);
      la.kill_at = clock_->Now() + options_.cancel_grace;
    }
    la.stop_requested = true;
  }
}

void Scheduler::OnLaunchStatus(const LaunchStatus& status) {
  absl::MutexLock lock(&mu_);
  auto known = [this, &status]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return launches_in_flight_ == 0 || ranks_.Has(status.pid);
  };
  mu_.Await(absl::Condition(&known));
  std::optional<AttemptTracker::RankRef> ref = ranks_.Find(status.pid);
  if (!ref.has_value()) return;
  auto jit = jobs_.find(ref->job_id);
  if (jit == jobs_.end()) return;
  auto ait = jit->second->attempts.find(ref->task);
  if (ait == jit->second->attempts.end()) return;
  LiveAttempt& la = ait->second;
  la.queued_remotely = status.pending;
  la.remote_wait = status.pending ? status.reason : Task::WAIT_REASON_UNSPECIFIED;
  la.remote_wait_detail = status.pending ? status.detail : "";
  // The heartbeat deadline counts from the start in the cluster.
  la.last_seen = clock_->Now();
  if (status.pending) {
    LogInfo("task waits in the cluster job=%s task=%d attempt=%d: %s", ref->job_id, ref->task,
            la.number, status.detail);
  }
}

}  // namespace traind::server
