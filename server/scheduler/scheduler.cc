#include "server/scheduler/scheduler.h"

#include <signal.h>

#include <algorithm>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "google/protobuf/util/time_util.h"
#include "server/log.h"
#include "server/scheduler/attempt_secrets.h"
#include "server/scheduler/list_jobs_query.h"
#include "server/scheduler/retry_policy.h"
#include "worker/engine/spec_validation.h"

namespace traind::server {
namespace {

using google::protobuf::util::TimeUtil;
using traind::v1::Attempt;
using traind::v1::Failure;
using traind::v1::Job;
using traind::v1::JobEvent;
using traind::v1::JobSpec;
using traind::v1::Task;

std::string ReasonName(Failure::Reason r) { return Failure::Reason_Name(r); }

}  // namespace

Scheduler::Scheduler(SchedulerOptions options, JobStore* store, Launcher* launcher)
    : options_(std::move(options)),
      clock_(options_.clock != nullptr ? options_.clock : SystemClock::Get()),
      store_(store),
      launcher_(launcher),
      gpus_(options_.gpu_probe, options_.gpu),
      last_loop_(clock_->Now()) {
  launcher_->SetExitCallback([this](const ProcessExit& e) { OnExit(e); });
}

Scheduler::~Scheduler() { Stop(); }

google::protobuf::Timestamp Scheduler::NowProto() {
  return TimeUtil::MicrosecondsToTimestamp(absl::ToUnixMicros(clock_->Now()));
}

void Scheduler::Start() {
  absl::MutexLock lock(&mu_);
  if (started_) return;
  started_ = true;
  // Workers are forked from this thread: it lives as long as the scheduler,
  // which their parent-death signal depends on.
  loop_ = std::thread([this] { Loop(); });
}

void Scheduler::Stop() {
  std::vector<int> pids;
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return;
    stopping_ = true;  // nothing new is dispatched or accepted
    pids = ranks_.pids();
  }
  // Running attempts stay RUNNING in the store: the next start recovers
  // them as LOST and runs them again. They get stop_grace to checkpoint.
  // The loop thread runs until then: a worker spawned from it directly dies
  // with it (PR_SET_PDEATHSIG), which would cut the grace short. A launch in
  // flight signals its ranks itself when it records them.
  for (int pid : pids) launcher_->Signal(pid, SIGTERM);
  {
    // The grace is real time: the workers' own clocks run.
    absl::Time deadline = absl::Now() + options_.stop_grace;
    absl::MutexLock lock(&mu_);
    auto none_left = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return ranks_.empty() && launches_in_flight_ == 0;
    };
    if (!mu_.AwaitWithDeadline(absl::Condition(&none_left), deadline)) {
      for (int pid : ranks_.pids()) launcher_->Signal(pid, SIGKILL);
      mu_.AwaitWithTimeout(absl::Condition(&none_left), options_.stop_grace);
    }
    loop_exit_ = true;
  }
  if (loop_.joinable()) loop_.join();
  // No exit reaches this scheduler after it is gone.
  launcher_->SetExitCallback(nullptr);
}

void Scheduler::Loop() {
  mu_.Lock();
  while (!loop_exit_) {
    last_loop_ = clock_->Now();
    if (gpus_.AnyDraining()) RefreshGpusLocked(false);
    if (!stopping_) DispatchLocked();
    EnforceDeadlinesLocked();
    if (!merges_.empty()) {  // from exits that came during a launch
      mu_.Unlock();
      FinishMerges();
      mu_.Lock();
    }
    wake_ = false;
    auto woken = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return wake_ || loop_exit_; };
    mu_.AwaitWithTimeout(absl::Condition(&woken), gpus_.AnyDraining() ? absl::Milliseconds(100)
                                                                       : absl::Milliseconds(250));
  }
  mu_.Unlock();
}

JobEvent* Scheduler::NewEventLocked(LiveJob& lj) {
  JobEvent& e = pending_events_.emplace_back();
  e.set_job_id(lj.job.id());
  e.set_sequence(lj.next_sequence++);
  *e.mutable_time() = NowProto();
  return &e;
}

JobChange Scheduler::ChangeLocked(LiveJob& lj) {
  return JobChange(&lj.job, [this, &lj]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    return NewEventLocked(lj);
  });
}

void Scheduler::CommitLocked(LiveJob& lj, StoreMutation& m) {
  for (JobEvent& e : pending_events_) m.events.push_back(&e);
  absl::Status s = store_->Apply(m, lj.job.id());
  if (!s.ok()) {
    // Going on would break what traind promises (nothing lost): stop here,
    // the next start recovers from the last committed state.
    LogError("store write failed job=%s: %s", lj.job.id(), s.ToString());
    std::abort();
  }
  for (const JobEvent& e : pending_events_) hub_.Publish(e);
  pending_events_.clear();
}

absl::StatusOr<Job> Scheduler::Submit(const JobSpec& spec, const SubmitOptions& options) {
  auto lj = std::make_unique<LiveJob>();
  Job& job = lj->job;
  job.set_id(NewJobId());
  *job.mutable_spec() = spec;
  *job.mutable_create_time() = NowProto();
  job.set_owner(options.owner);
  job.set_gpu_memory_bytes(options.gpu_memory_bytes);
  const int tasks = engine::TaskCount(spec);
  for (int i = 0; i < tasks; ++i) {
    Task* t = job.add_tasks();
    t->set_index(i);
    t->set_state(Task::QUEUED);
    t->set_epochs_total(spec.training().epochs());
  }
  absl::MutexLock submit_lock(&submit_mu_);
  if (!options.idempotency_key.empty()) {
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) return absl::UnavailableError("traind is shutting down");
    }
    absl::StatusOr<std::optional<std::string>> existing =
        store_->FindByIdempotencyKey(options.owner, options.idempotency_key);
    if (!existing.ok()) return existing.status();
    if (existing->has_value()) {
      const std::string& id = **existing;
      LogInfo("job resubmitted job=%s idempotency_key=%s", id, options.idempotency_key);
      {
        absl::MutexLock lock(&mu_);
        auto it = jobs_.find(id);
        if (it != jobs_.end()) return ViewLocked(*it->second);
      }
      return store_->LoadJob(id);
    }
  }
  absl::MutexLock lock(&mu_);
  if (stopping_) return absl::UnavailableError("traind is shutting down");
  if (spec.resources().device() == traind::v1::GPU) {
    const int usable = options_.worker_has_gpu_backend ? gpus_.Usable() : 0;
    if (spec.resources().count() > usable) {
      return absl::InvalidArgumentError(absl::StrCat(
          "spec.resources.count: ", spec.resources().count(), " GPUs per task, but this server has ",
          usable, " usable"));
    }
    if (options.gpu_memory_bytes > gpus_.MaxTotalBytes()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "spec.resources: a task needs about ", options.gpu_memory_bytes,
          " bytes of GPU memory, but the largest usable GPU has ", gpus_.MaxTotalBytes()));
    }
  }
  lj->order = next_order_++;
  JobChange change = ChangeLocked(*lj);
  change.SetJobState(Job::QUEUED);
  change.mutation().new_job = true;
  change.mutation().idempotency_key = options.idempotency_key;
  CommitLocked(*lj, change);
  for (int i = 0; i < tasks; ++i) EnqueueLocked(*lj, i);
  LogInfo("job submitted job=%s name=%s owner=%s priority=%d tasks=%d", job.id(), spec.name(),
          options.owner, spec.priority(), tasks);
  Job view = ViewLocked(*lj);
  jobs_[job.id()] = std::move(lj);
  wake_ = true;
  return view;
}

bool Scheduler::DependenciesDoneLocked(const LiveJob& lj, int task) {
  // The refit task trains on all rows once every fold has succeeded.
  if (!engine::IsRefitTask(lj.job.spec(), task)) return true;
  for (const Task& t : lj.job.tasks()) {
    if (t.index() != task && t.state() != Task::SUCCEEDED) return false;
  }
  return true;
}

void Scheduler::EnqueueLocked(const LiveJob& lj, int task) {
  queue_.Add(lj.job.spec().priority(), lj.order, task, lj.job.id());
  wake_ = true;
}

int Scheduler::QueuedJobs(const std::string& owner) {
  absl::MutexLock lock(&mu_);
  int n = 0;
  for (const auto& [id, lj] : jobs_) n += lj->job.owner() == owner && lj->job.state() == Job::QUEUED;
  return n;
}

Job Scheduler::ViewLocked(const LiveJob& lj) {
  Job view = lj.job;
  if (view.state() == Job::QUEUED || view.state() == Job::RUNNING) {
    const int cap = view.spec().resources().max_parallel_tasks();
    DispatchQueue::JobConditions c;
    c.dependencies_done = [this, &lj](int task) ABSL_NO_THREAD_SAFETY_ANALYSIS {
      return DependenciesDoneLocked(lj, task);
    };
    c.at_job_limit = cap > 0 && static_cast<int>(lj.attempts.size()) >= cap;
    c.devices_draining =
        view.spec().resources().device() == traind::v1::GPU && gpus_.AnyDraining();
    queue_.DescribeWaiting(&view, c);
  }
  return view;
}

std::optional<Job> Scheduler::GetJobInMemory(const std::string& job_id) {
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(job_id);
  if (it != jobs_.end()) return ViewLocked(*it->second);
  auto done = finished_.find(job_id);
  if (done != finished_.end()) return done->second;
  return std::nullopt;
}

absl::StatusOr<Job> Scheduler::GetJob(const std::string& job_id) {
  if (std::optional<Job> job = GetJobInMemory(job_id); job.has_value()) return *std::move(job);
  absl::StatusOr<Job> job = store_->LoadJob(job_id);
  if (job.ok()) {
    absl::MutexLock lock(&mu_);
    // Only a finished job is read from the store: cache it (unless it came
    // back to life in between, which a finished job never does).
    if (jobs_.find(job_id) == jobs_.end()) CacheFinishedLocked(*job);
  }
  return job;
}

void Scheduler::CacheFinishedLocked(const Job& job) {
  if (finished_.emplace(job.id(), job).second) {
    finished_order_.push_back(job.id());
    if (finished_order_.size() > kFinishedCacheSize) {
      finished_.erase(finished_order_.front());
      finished_order_.pop_front();
    }
  }
}

absl::StatusOr<traind::v1::ListJobsResponse> Scheduler::ListJobs(
    const traind::v1::ListJobsRequest& req) {
  absl::StatusOr<JobListFilter> f = ParseListJobsRequest(req);
  if (!f.ok()) return f.status();
  std::vector<int64_t> seqs;
  absl::StatusOr<std::vector<Job>> jobs = store_->ListJobs(*f, &seqs);
  if (!jobs.ok()) return jobs.status();
  traind::v1::ListJobsResponse resp;
  absl::MutexLock lock(&mu_);
  for (Job& job : *jobs) {
    auto it = jobs_.find(job.id());
    *resp.add_jobs() = it != jobs_.end() ? ViewLocked(*it->second) : std::move(job);
  }
  resp.set_next_page_token(NextPageToken(*f, seqs));
  return resp;
}

absl::StatusOr<Job> Scheduler::Cancel(const std::string& job_id, bool force) {
  {
    absl::MutexLock lock(&mu_);
    auto it = jobs_.find(job_id);
    if (it != jobs_.end()) {
      LiveJob& lj = *it->second;
      if (lj.job.state() != Job::CANCELLING) {
        JobChange change = ChangeLocked(lj);
        change.SetJobState(Job::CANCELLING);
        CommitLocked(lj, change);
        LogInfo("job cancelling job=%s force=%d", job_id, force);
      }
      StopTasksLocked(lj, force);
      Job view = ViewLocked(lj);
      MaybeFinishJobLocked(lj);
      if (IsTerminal(lj.job.state())) {
        view = lj.job;
        jobs_.erase(job_id);
      }
      return view;
    }
  }
  // Not live: finished (cancelling it changes nothing) or unknown.
  return store_->LoadJob(job_id);
}

absl::StatusOr<traind::v1::JobResult> Scheduler::GetResult(const std::string& job_id) {
  absl::StatusOr<Job> job = GetJob(job_id);
  if (!job.ok()) return job.status();
  return job->result();
}

absl::Status Scheduler::JobEventsState(const std::string& job_id, int64_t* last_sequence,
                                       bool* terminal) {
  {
    absl::MutexLock lock(&mu_);
    auto it = jobs_.find(job_id);
    if (it != jobs_.end()) {
      *last_sequence = it->second->next_sequence - 1;
      *terminal = false;
      return absl::OkStatus();
    }
  }
  absl::StatusOr<Job> job = store_->LoadJob(job_id);
  if (!job.ok()) return job.status();
  absl::StatusOr<int64_t> last = store_->LastEventSequence(job_id);
  if (!last.ok()) return last.status();
  *last_sequence = *last;
  *terminal = IsTerminal(job->state());
  return absl::OkStatus();
}

std::vector<GpuPool::Gpu> Scheduler::Gpus(std::string* unavailable) {
  absl::MutexLock lock(&mu_);
  if (unavailable != nullptr) *unavailable = gpus_.unavailable();
  return gpus_.gpus();
}

int Scheduler::UsableGpus(std::string* why) {
  absl::MutexLock lock(&mu_);
  std::string reason;
  int usable = gpus_.Usable();
  if (gpus_.gpus().empty()) {
    reason = gpus_.unavailable();
  } else if (usable == 0) {
    reason = "every GPU is UNHEALTHY";
  } else if (!options_.worker_has_gpu_backend) {
    reason = "traind-worker has no GPU backend (built without CUDA)";
    usable = 0;
  }
  if (why != nullptr) *why = reason;
  return usable;
}

void Scheduler::RefreshGpusLocked(bool force) {
  if (gpus_.gpus().empty()) return;
  const absl::Time now = clock_->Now();
  if (!force && now - last_gpu_refresh_ < absl::Milliseconds(100)) return;
  last_gpu_refresh_ = now;
  for (const std::string& note : gpus_.Refresh(now)) {
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

absl::Time Scheduler::LastLoopTime() {
  absl::MutexLock lock(&mu_);
  return last_loop_;
}

SchedulerStats Scheduler::Stats() {
  absl::MutexLock lock(&mu_);
  SchedulerStats s;
  s.jobs_active = static_cast<int>(jobs_.size());
  s.tasks_running = running_;
  s.tasks_queued = static_cast<int>(queue_.size());
  return s;
}

void Scheduler::EraseIfEndedLocked(const std::string& job_id) {
  auto it = jobs_.find(job_id);
  if (it != jobs_.end() && IsTerminal(it->second->job.state())) jobs_.erase(it);
}

// --------------------------------------------------------------------------
// Dispatch and launches
// --------------------------------------------------------------------------

void Scheduler::DispatchLocked() {
  bool gpus_refreshed = false;
  for (auto next = queue_.begin(); next != queue_.end() && !stopping_;) {
    auto entry = next++;
    const std::string job_id = entry->job_id;
    const int task = entry->task;
    auto it = jobs_.find(job_id);
    if (it == jobs_.end() || it->second->job.tasks(task).state() != Task::QUEUED) {
      queue_.Erase(entry);
      continue;
    }
    LiveJob& lj = *it->second;
    const int cap = lj.job.spec().resources().max_parallel_tasks();
    if (cap > 0 && static_cast<int>(lj.attempts.size()) >= cap) continue;  // stays queued
    if (!DependenciesDoneLocked(lj, task)) continue;
    std::vector<int> gpus;
    if (lj.job.spec().resources().device() == traind::v1::GPU) {
      if (!gpus_refreshed) {
        RefreshGpusLocked(true);  // current free memory
        gpus_refreshed = true;
      }
      std::optional<std::vector<int>> picked = gpus_.Allocate(
          lj.job.spec().resources().count(), lj.job.gpu_memory_bytes(), lj.oom_gpus[task]);
      if (!picked.has_value()) continue;  // waits for GPUs
      gpus = *picked;
    } else if (running_ >= options_.cpu_slots) {
      continue;  // waits for a CPU slot
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
    if (launches_in_flight_ == 0) early_exits_.clear();
    next = queue_.begin();  // the queue changed while the mutex was free
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
  const std::filesystem::path dir = std::filesystem::path(options_.state_dir) / "jobs" /
                                    job.id() / absl::StrCat("task-", task);
  plan.dir = dir.string();
  plan.attempt.set_number(number);
  *plan.attempt.mutable_start_time() = NowProto();
  plan.attempt.set_log_path((dir / absl::StrCat("attempt-", number, ".log")).string());

  LiveAttempt la;
  la.number = number;
  la.secret = NewAttemptSecret();
  la.launching = true;
  la.gpus = gpus;
  la.last_seen = clock_->Now();
  // A multi-GPU task runs one process (rank) per GPU; everything else one.
  const int world = gpus.size() > 1 ? static_cast<int>(gpus.size()) : 1;
  for (int g : gpus) plan.gpu_uuids.push_back(gpus_.gpus()[g].last.uuid);
  // CPU tasks see no GPU. The ranks of a GPU task all see the task's GPUs,
  // in rank order, and rank r trains on the r-th: NCCL needs the peers
  // visible to use CUDA IPC / NVLink between the ranks' processes (with
  // only its own GPU visible, each falls back to host shared memory).
  // Other tasks' GPUs stay invisible.
  const std::string visible = absl::StrJoin(plan.gpu_uuids, ",");
  for (int rank = 0; rank < world; ++rank) {
    LaunchRequest& req = plan.ranks.emplace_back();
    req.argv = {options_.worker_path,
                absl::StrCat("--server=", options_.worker_address),
                absl::StrCat("--job=", job.id()),
                absl::StrCat("--task=", task),
                absl::StrCat("--attempt=", number)};
    if (world > 1) {
      req.argv.push_back(absl::StrCat("--rank=", rank));
      req.argv.push_back(absl::StrCat("--world-size=", world));
    }
    req.env = {absl::StrCat("TRAIND_WORKER_SECRET=", la.secret),
               absl::StrCat("OMP_NUM_THREADS=", options_.worker_threads),
               absl::StrCat("CUDA_VISIBLE_DEVICES=", visible), "CUDA_DEVICE_ORDER=PCI_BUS_ID"};
    req.env.insert(req.env.end(), options_.worker_env.begin(), options_.worker_env.end());
    req.log_path = rank == 0 ? plan.attempt.log_path()
                             : (dir / absl::StrCat("attempt-", number, ".rank-", rank, ".log"))
                                   .string();
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
  if (outcome.pids.empty()) {
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
    if (world > 1) a->add_rank_pids(pid);
  }
  if (!outcome.status.ok()) {
    // Some ranks run: stop them; the attempt ends when they have exited.
    Failure f;
    f.set_reason(Failure::WORKER_CRASHED);
    f.set_message(absl::StrCat("cannot start rank ", outcome.pids.size(), ": ",
                               outcome.status.message()));
    la.failure = f;
    la.all_exits_clean = false;
    la.Signal(launcher_, SIGKILL);
  }
  const int pid0 = la.rank_pids[0];
  la.pid = pid0;
  la.last_seen = clock_->Now();
  a->set_pid(pid0);
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
  LogInfo("task started job=%s task=%d attempt=%d pid=%d%s%s", job.id(), task, a->number(), pid0,
          world > 1 ? absl::StrCat(" ranks=", world) : "",
          plan.gpu_uuids.empty() ? "" : absl::StrCat(" gpus=", absl::StrJoin(plan.gpu_uuids, ",")));
  // Stopped while it launched (StopTasksLocked had no process to signal):
  // told now. Without a grace deadline it was a forced stop.
  if (la.stop_requested && !la.kill_at.has_value()) {
    la.Signal(launcher_, SIGKILL);
  } else if (la.stop_requested || stopping_) {
    la.Signal(launcher_, SIGTERM);
  }
  // Ranks that exited before they were recorded here.
  std::vector<ProcessExit> early;
  for (const ProcessExit& e : early_exits_) {
    if (std::find(la.rank_pids.begin(), la.rank_pids.end(), e.pid) != la.rank_pids.end()) {
      early.push_back(e);
    }
  }
  for (const ProcessExit& e : early) {
    std::optional<AttemptTracker::RankRef> ref = ranks_.Take(e.pid);
    if (ref.has_value()) OnExitLocked(e, *ref);
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
        LogWarning("task kill job=%s task=%d attempt=%d pid=%d: did not stop within the grace "
                   "period",
                   id, task, la.number, la.pid);
        la.Signal(launcher_, SIGKILL);
        la.kill_at.reset();
      }
    }
  }
}

void Scheduler::StopTasksLocked(LiveJob& lj, bool force) {
  JobChange change = ChangeLocked(lj);
  bool changed = false;
  for (int i = 0; i < lj.job.tasks_size(); ++i) {
    const Task& t = lj.job.tasks(i);
    // A task being launched has an attempt: it is stopped below.
    if (t.state() != Task::QUEUED || lj.attempts.count(i) != 0) continue;
    queue_.Remove(lj.job.id(), i);
    change.SetTaskState(i, Task::CANCELLED, t.attempts_size());
    changed = true;
  }
  if (changed) CommitLocked(lj, change);
  for (auto& [task, la] : lj.attempts) {
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

// --------------------------------------------------------------------------
// Exits and outcomes
// --------------------------------------------------------------------------

void Scheduler::OnExit(const ProcessExit& exit) {
  {
    absl::MutexLock lock(&mu_);
    std::optional<AttemptTracker::RankRef> ref = ranks_.Take(exit.pid);
    if (!ref.has_value()) {
      // Maybe a rank whose launch is not recorded yet: it is, shortly.
      if (launches_in_flight_ > 0) early_exits_.push_back(exit);
      return;
    }
    OnExitLocked(exit, *ref);
  }
  FinishMerges();
}

void Scheduler::OnExitLocked(const ProcessExit& exit, const AttemptTracker::RankRef& ref) {
  wake_ = true;
  auto jit = jobs_.find(ref.job_id);
  if (jit == jobs_.end()) return;
  LiveJob& lj = *jit->second;
  const int task = ref.task;
  LiveAttempt& la = lj.attempts[task];
  la.MarkRankExited(ref.rank, exit);
  // The GPUs of this rank are not reusable until the probe shows them released.
  if (!la.gpus.empty()) {
    if (la.multi_rank()) {
      gpus_.Release({la.gpus[ref.rank]}, clock_->Now());
    } else {
      gpus_.Release(la.gpus, clock_->Now());
    }
  }
  if (stopping_) {  // recovered as LOST on the next start
    if (la.alive == 0 && la.gpus.empty()) --running_;
    return;
  }
  la.ExplainRankExit(ref.rank, exit, launcher_, ref.job_id, task);
  if (la.alive > 0) return;
  if (la.gpus.empty()) --running_;
  if (la.Succeeded()) {
    FinishAttemptLocked(lj, task, nullptr);
  } else {
    const Failure f = la.Outcome(exit);
    FinishAttemptLocked(lj, task, &f);
  }
  EraseIfEndedLocked(ref.job_id);
}

void Scheduler::FinishAttemptLocked(LiveJob& lj, int task, const Failure* failure) {
  Job& job = lj.job;
  Task* t = job.mutable_tasks(task);
  Attempt* a = t->mutable_attempts(t->attempts_size() - 1);
  *a->mutable_end_time() = NowProto();
  LiveAttempt la = std::move(lj.attempts[task]);
  lj.attempts.erase(task);
  for (auto& waiter : la.rendezvous_waiters) {
    waiter(absl::AbortedError("the attempt ended before rank 0 posted its id"));
  }
  JobChange change = ChangeLocked(lj);
  change.WriteJob();
  if (failure == nullptr) {
    *t->mutable_result() = *la.result;
    t->clear_failure();
    *change.SetTaskState(task, Task::SUCCEEDED, la.number, la.pid)->mutable_result() = *la.result;
    AggregateFoldResults(&job);
    LogInfo("task succeeded job=%s task=%d attempt=%d pid=%d", job.id(), task, la.number, la.pid);
  } else {
    *a->mutable_failure() = *failure;
    FailedAttempt fa;
    fa.reason = failure->reason();
    for (const Attempt& prev : t->attempts()) {
      fa.transient_failures += IsTransient(prev.failure().reason());
    }
    fa.job_running = job.state() == Job::RUNNING && !job.has_failure();
    // Out of memory on GPUs: a retry avoids the GPUs this task ran out of
    // memory on.
    if (failure->reason() == Failure::OUT_OF_MEMORY && !la.gpus.empty() && fa.job_running) {
      std::set<int>& avoid = lj.oom_gpus[task];
      avoid.insert(la.gpus.begin(), la.gpus.end());
      fa.on_gpus = true;
      for (const GpuPool::Gpu& g : gpus_.gpus()) {
        fa.gpus_elsewhere += g.state != GpuPool::State::kUnhealthy && avoid.count(g.index) == 0;
      }
      fa.gpus_needed = job.spec().resources().count();
    }
    switch (DecideRetry(fa, options_.max_restarts)) {
      case RetryDecision::kRetry:
        *change.SetTaskState(task, Task::QUEUED, la.number, la.pid)->mutable_failure() = *failure;
        EnqueueLocked(lj, task);
        LogWarning("task retry job=%s task=%d attempt=%d pid=%d reason=%s: %s", job.id(), task,
                   la.number, la.pid, ReasonName(failure->reason()), failure->message());
        break;
      case RetryDecision::kCancel:
        *change.SetTaskState(task, Task::CANCELLED, la.number, la.pid)->mutable_failure() =
            *failure;
        LogInfo("task cancelled job=%s task=%d attempt=%d pid=%d", job.id(), task, la.number,
                la.pid);
        break;
      case RetryDecision::kFail:
        *t->mutable_failure() = *failure;
        *change.SetTaskState(task, Task::FAILED, la.number, la.pid)->mutable_failure() = *failure;
        LogWarning("task failed job=%s task=%d attempt=%d pid=%d reason=%s: %s", job.id(), task,
                   la.number, la.pid, ReasonName(failure->reason()), failure->message());
        if (!job.has_failure()) {
          *job.mutable_failure() = *failure;
          job.mutable_failure()->set_message(
              absl::StrCat("fold ", task, ": ", failure->message()));
        }
        break;
    }
  }
  CommitLocked(lj, change);
  // One fold that cannot succeed fails the job: stop the others.
  if (job.has_failure()) StopTasksLocked(lj, false);
  MaybeFinishJobLocked(lj);
}

void Scheduler::MaybeFinishJobLocked(LiveJob& lj) {
  Job& job = lj.job;
  if (IsTerminal(job.state()) || lj.finishing) return;
  for (const Task& t : job.tasks()) {
    if (!IsTerminal(t.state())) return;
  }
  bool all_ok = true;
  for (const Task& t : job.tasks()) all_ok = all_ok && t.state() == Task::SUCCEEDED;
  const Job::State final_state = job.has_failure() ? Job::FAILED
                                 : all_ok          ? Job::SUCCEEDED
                                                   : Job::CANCELLED;
  if (final_state == Job::SUCCEEDED) {
    job.mutable_result()->set_complete(true);
    std::optional<PredictionsMerge> merge = PlanPredictionsMerge(job, options_.state_dir);
    if (merge.has_value()) {
      // Reading every fold's file waits on the disk: done without the mutex
      // (FinishMerges), then the job ends.
      lj.finishing = true;
      merges_.push_back(*std::move(merge));
      return;
    }
  }
  EndJobLocked(lj, final_state);
}

void Scheduler::FinishMerges() {
  for (;;) {
    std::vector<PredictionsMerge> merges;
    {
      absl::MutexLock lock(&mu_);
      merges.swap(merges_);
    }
    if (merges.empty()) return;
    for (const PredictionsMerge& merge : merges) {
      std::optional<std::string> path = MergePredictions(merge);
      absl::MutexLock lock(&mu_);
      auto it = jobs_.find(merge.job_id);
      if (it == jobs_.end()) continue;
      LiveJob& lj = *it->second;
      if (path.has_value()) lj.job.mutable_result()->set_predictions_path(*path);
      lj.finishing = false;
      EndJobLocked(lj, Job::SUCCEEDED);
      EraseIfEndedLocked(merge.job_id);
    }
  }
}

void Scheduler::EndJobLocked(LiveJob& lj, Job::State final_state) {
  Job& job = lj.job;
  *job.mutable_end_time() = NowProto();
  JobChange change = ChangeLocked(lj);
  traind::v1::JobStateChange* e = change.SetJobState(final_state);
  if (job.has_failure()) *e->mutable_failure() = job.failure();
  pending_events_.back().set_last(true);
  CommitLocked(lj, change);
  CacheFinishedLocked(job);
  if (final_state == Job::SUCCEEDED) {
    std::string summary;
    for (const auto& [name, s] : job.result().val()) {
      absl::StrAppend(&summary, " val.", name, "=", absl::StrFormat("%.4f", s.mean()), "±",
                      absl::StrFormat("%.4f", s.std()));
    }
    LogInfo("job succeeded job=%s%s", job.id(), summary);
  } else if (final_state == Job::FAILED) {
    LogWarning("job failed job=%s reason=%s: %s", job.id(), ReasonName(job.failure().reason()),
               job.failure().message());
  } else {
    LogInfo("job cancelled job=%s", job.id());
  }
}

}  // namespace traind::server
