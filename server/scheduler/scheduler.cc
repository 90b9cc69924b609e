#include "server/scheduler/scheduler.h"

#include <signal.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/log.h"
#include "google/protobuf/util/time_util.h"
#include "server/scheduler/attempt_outcome.h"
#include "server/scheduler/attempt_secrets.h"
#include "server/scheduler/list_jobs_query.h"
#include "server/secrets.h"
#include "spec/task_plan.h"
#include "spec/validation.h"

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

Scheduler::Scheduler(SchedulerOptions options, JobStore* store, Launcher* launcher,
                     Launcher* side_launcher)
    : options_(std::move(options)),
      clock_(options_.clock != nullptr ? options_.clock : SystemClock::Get()),
      store_(store),
      launcher_(launcher),
      side_launcher_(side_launcher != nullptr ? side_launcher : launcher),
      placement_(launcher->remote()
                     ? Placement::Cluster(options_.cpu_slots, options_.cluster_gpus_per_task)
                     : Placement::Local(options_.cpu_slots, options_.worker_has_gpu_backend)),
      attempt_key_(options_.attempt_key.empty() ? RandomBytes(32) : options_.attempt_key),
      writer_(
          [this, store](const StoreMutation& m, const std::string& job_id) {
            const absl::Time start = absl::Now();
            absl::Status s = store->Apply(m, job_id);
            if (options_.on_store_commit) options_.on_store_commit(absl::Now() - start);
            return s;
          },
          &hub_, nullptr, options_.store_retry_interval),
      fair_share_(options_.fair_share),
      gpus_(options_.gpu_probe, options_.gpu),
      last_loop_(clock_->Now()) {
  launcher_->SetExitCallback([this](const ProcessExit& e) { OnExit(e); });
  launcher_->SetStatusCallback([this](const LaunchStatus& s) { OnLaunchStatus(s); });
  if (side_launcher_ != launcher_) {
    side_launcher_->SetExitCallback([this](const ProcessExit& e) { OnSideExit(e); });
  }
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

void Scheduler::RefuseNewWork() {
  absl::MutexLock lock(&mu_);
  refusing_ = true;
}

void Scheduler::Stop() {
  std::vector<int> pids;
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return;
    stopping_ = true;  // nothing new is dispatched or accepted
    refusing_ = true;
    // A remote launcher's workers run on without traind: the next start
    // adopts them (Recover).
    if (!placement_->WorkersOutliveTraind()) pids = ranks_.pids();
    // Side processes (predict) hold no state worth a grace: they end now,
    // and their callers get UNAVAILABLE (RunProcess).
    for (const auto& [pid, exit] : side_processes_) {
      if (!exit.has_value()) side_launcher_->Signal(pid, SIGKILL);
    }
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
      for (const auto& [pid, exit] : side_processes_) {
        if (!exit.has_value()) return false;
      }
      return (ranks_.empty() || placement_->WorkersOutliveTraind()) && launches_in_flight_ == 0;
    };
    if (!mu_.AwaitWithDeadline(absl::Condition(&none_left), deadline)) {
      if (!placement_->WorkersOutliveTraind()) {
        for (int pid : ranks_.pids()) launcher_->Signal(pid, SIGKILL);
      }
      mu_.AwaitWithTimeout(absl::Condition(&none_left), options_.stop_grace);
    }
    loop_exit_ = true;
  }
  if (loop_.joinable()) loop_.join();
  // No exit reaches this scheduler after it is gone.
  launcher_->SetExitCallback(nullptr);
  launcher_->SetStatusCallback(nullptr);
  if (side_launcher_ != launcher_) side_launcher_->SetExitCallback(nullptr);
  // While the store is degraded, what it cannot take is dropped (the next
  // start recovers from the last commit): nothing waits for space any longer,
  // not even the replies of the RPCs still in flight.
  writer_.GiveUpWhenDegraded();
  writer_.WaitAllUnlessDegraded();
}

void Scheduler::Loop() {
  mu_.Lock();
  while (!loop_exit_) {
    last_loop_ = clock_->Now();
    if (gpus_.AnyDraining()) RefreshGpusLocked(false);
    // Nothing new starts while the store cannot record it.
    if (!stopping_ && writer_.Degraded().ok()) DispatchLocked();
    EnforceDeadlinesLocked();
    if (!merges_.empty()) {  // from exits that came during a launch
      mu_.Unlock();
      FinishMerges();
      mu_.Lock();
    }
    wake_ = false;
    auto woken = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return wake_ || loop_exit_; };
    mu_.AwaitWithTimeout(absl::Condition(&woken),
                         gpus_.AnyDraining() ? absl::Milliseconds(100) : absl::Milliseconds(250));
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
  return JobChange(
      &lj.job, [this, &lj]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return NewEventLocked(lj); },
      placement_->HandlesAreClusterJobs());
}

uint64_t Scheduler::CommitLocked(LiveJob& lj, StoreMutation& m) {
  std::vector<JobEvent> events(std::make_move_iterator(pending_events_.begin()),
                               std::make_move_iterator(pending_events_.end()));
  pending_events_.clear();
  return writer_.Enqueue(m, lj.job.id(), std::move(events));
}

absl::StatusOr<Job> Scheduler::Submit(const JobSpec& spec, const SubmitOptions& options) {
  uint64_t ticket = 0;
  absl::StatusOr<Job> job = SubmitUnstored(spec, options, &ticket);
  if (ticket == 0) return job;
  // A job is acknowledged only once it is stored, however long that takes.
  writer_.WaitStored(ticket);
  if (writer_.Dropped(ticket)) {
    return absl::UnavailableError(
        absl::StrCat("traind stopped before it could record job ", job->id(), ": submit it again"));
  }
  return job;
}

absl::StatusOr<Job> Scheduler::SubmitUnstored(const JobSpec& spec, const SubmitOptions& options,
                                              uint64_t* ticket) {
  auto lj = std::make_unique<LiveJob>();
  Job& job = lj->job;
  job.set_id(RandomHex(6));  // 12 hex digits
  *job.mutable_spec() = spec;
  *job.mutable_create_time() = NowProto();
  job.set_owner(options.owner);
  job.set_gpu_memory_bytes(options.gpu_memory_bytes);
  job.set_host_memory_bytes(options.host_memory_bytes);
  const int tasks = spec::TaskCount(spec);
  for (int i = 0; i < tasks; ++i) {
    Task* t = job.add_tasks();
    t->set_index(i);
    t->set_state(Task::QUEUED);
    t->set_epochs_total(spec.training().epochs());
  }
  if (absl::Status s = SearchController::InitTrials(&lj->job); !s.ok()) return s;
  lj->search = SearchController(spec);
  absl::MutexLock submit_lock(&submit_mu_);
  absl::StatusOr<std::optional<Job>> existing =
      FindSubmittedLocked(options.owner, options.idempotency_key, options.request_sha256);
  if (!existing.ok()) return existing.status();
  if (existing->has_value()) {
    LogInfo("job resubmitted job=%s idempotency_key=%s", (*existing)->id(),
            options.idempotency_key);
    return **std::move(existing);
  }
  if (absl::Status degraded = writer_.Degraded(); !degraded.ok()) {
    return absl::UnavailableError(absl::StrCat(
        "traind cannot record new jobs now (its store cannot be written: ", degraded.message(),
        "); jobs already stored go on as space allows and reads are served; retry later"));
  }
  absl::MutexLock lock(&mu_);
  if (refusing_) return absl::UnavailableError("traind is shutting down");
  if (spec.resources().device() == traind::v1::GPU) {
    if (absl::Status s = placement_->CheckGpuJob(spec, options.gpu_memory_bytes, gpus_); !s.ok()) {
      return s;
    }
  }
  if (options.max_queued_jobs > 0 && QueuedJobsLocked(options.owner) >= options.max_queued_jobs) {
    return absl::ResourceExhaustedError(absl::StrCat(
        options.owner, " already has ", options.max_queued_jobs,
        " queued jobs (limits.max_queued_jobs_per_user): wait for one to start or cancel one"));
  }
  lj->order = next_order_++;
  JobChange change = ChangeLocked(*lj);
  change.SetJobState(Job::QUEUED);
  change.mutation().new_job = true;
  change.mutation().idempotency_key = options.idempotency_key;
  change.mutation().request_sha256 = options.request_sha256;
  *ticket = CommitLocked(*lj, change);
  for (int i = 0; i < tasks; ++i) EnqueueLocked(*lj, i);
  LogInfo("job submitted job=%s name=%s owner=%s priority=%d tasks=%d", job.id(), spec.name(),
          options.owner, spec.priority(), tasks);
  Job view = ViewLocked(*lj);
  jobs_[job.id()] = std::move(lj);
  wake_ = true;
  return view;
}

bool Scheduler::DependenciesDoneLocked(const LiveJob& lj, int task) {
  return !lj.search.AtRung(lj.job, task) && lj.search.RefitMayStart(lj.job, task);
}

void Scheduler::EnqueueLocked(const LiveJob& lj, int task) {
  queue_.Add(lj.job.spec().priority(), lj.order, task, lj.job.id(), lj.job.owner());
  wake_ = true;
}

absl::StatusOr<std::optional<Job>> Scheduler::FindSubmitted(const std::string& owner,
                                                            const std::string& key,
                                                            const std::string& request_sha256) {
  absl::MutexLock submit_lock(&submit_mu_);
  return FindSubmittedLocked(owner, key, request_sha256);
}

absl::StatusOr<std::optional<Job>> Scheduler::FindSubmittedLocked(
    const std::string& owner, const std::string& key, const std::string& request_sha256) {
  if (key.empty()) return std::nullopt;
  {
    absl::MutexLock lock(&mu_);
    if (refusing_) return absl::UnavailableError("traind is shutting down");
  }
  writer_.WaitAllUnlessDegraded();  // the last submit's insert among it
  std::string stored_sha256;
  absl::StatusOr<std::optional<std::string>> id =
      store_->FindByIdempotencyKey(owner, key, &stored_sha256);
  if (!id.ok()) return id.status();
  if (!id->has_value()) return std::nullopt;
  if (!request_sha256.empty() && !stored_sha256.empty() && request_sha256 != stored_sha256) {
    return absl::AlreadyExistsError(absl::StrCat(
        "idempotency_key \"", key, "\": job ", **id,
        " was submitted with this key and a different request (spec, spec_text, overrides or "
        "base_dir): a new job needs a new key"));
  }
  {
    absl::MutexLock lock(&mu_);
    auto it = jobs_.find(**id);
    if (it != jobs_.end()) return ViewLocked(*it->second);
  }
  absl::StatusOr<Job> job = store_->LoadJob(**id);
  if (!job.ok()) return job.status();
  return *std::move(job);
}

int Scheduler::QueuedJobs(const std::string& owner) {
  absl::MutexLock lock(&mu_);
  return QueuedJobsLocked(owner);
}

int Scheduler::QueuedJobsLocked(const std::string& owner) {
  int n = 0;
  for (const auto& [id, lj] : jobs_)
    n += lj->job.owner() == owner && lj->job.state() == Job::QUEUED;
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
    c.at_owner_limit = fair_share_.AtOwnerLimit(view.owner(), TaskGpus(view.spec()));
    c.at_trial_limit = [this, &lj](int task)
                           ABSL_NO_THREAD_SAFETY_ANALYSIS { return AtTrialLimitLocked(lj, task); };
    c.at_rung = [&lj](int task) { return lj.search.AtRung(lj.job, task); };
    c.devices_draining = view.spec().resources().device() == traind::v1::GPU && gpus_.AnyDraining();
    bool queued = false;
    for (const Task& t : view.tasks()) queued = queued || t.state() == Task::QUEUED;
    if (queued && fair_share_.enabled()) {
      // In the order dispatch tries, owners interleaved by their use.
      const std::vector<DispatchQueue::Entry>& order = ViewOrderLocked();
      queue_.DescribeWaiting(&view, c, &order);
    } else {
      queue_.DescribeWaiting(&view, c);
    }
    // Started, but waiting in the cluster's queue (a remote launcher's).
    for (const auto& [task, la] : lj.attempts) {
      if (!la.queued_remotely) continue;
      view.mutable_tasks(task)->set_wait_reason(la.remote_wait);
      view.mutable_tasks(task)->set_wait_detail(la.remote_wait_detail);
    }
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
  // A job that just ended may still be on its way to the store.
  const bool stored = writer_.WaitAllUnlessDegraded();
  absl::StatusOr<Job> job = store_->LoadJob(job_id);
  if (job.ok() && stored) {
    absl::MutexLock lock(&mu_);
    // Only a finished job is read from the store: cache it (unless it came
    // back to life in between, which a finished job never does).
    if (jobs_.find(job_id) == jobs_.end() && deleting_.count(job_id) == 0) {
      CacheFinishedLocked(*job);
    }
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
  writer_.WaitAllUnlessDegraded();
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
  StoredOnReturn stored(&writer_);
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
  writer_.WaitAllUnlessDegraded();
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
  writer_.WaitAllUnlessDegraded();
  absl::StatusOr<Job> job = store_->LoadJob(job_id);
  if (!job.ok()) return job.status();
  absl::StatusOr<int64_t> last = store_->LastEventSequence(job_id);
  if (!last.ok()) return last.status();
  *last_sequence = *last;
  *terminal = IsTerminal(job->state());
  return absl::OkStatus();
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
// Exits and outcomes
// --------------------------------------------------------------------------

void Scheduler::OnExit(const ProcessExit& exit) {
  StoredOnReturn stored(&writer_);
  {
    absl::MutexLock lock(&mu_);
    // A rank can exit before its launch is recorded: wait for the record
    // (this is the launcher's thread; the mutex is free meanwhile).
    auto known = [this, &exit]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return launches_in_flight_ == 0 || ranks_.Has(exit.pid) ||
             side_processes_.count(exit.pid) > 0;
    };
    mu_.Await(absl::Condition(&known));
    if (auto side = side_processes_.find(exit.pid); side != side_processes_.end()) {
      side->second = exit;
      return;
    }
    std::optional<AttemptTracker::RankRef> ref = ranks_.Take(exit.pid);
    if (!ref.has_value()) return;
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
  fair_share_.Ended(job.owner(), la.share_units, clock_->Now(), la.share_gpus);
  a->set_trained_epochs(la.trained_epochs);
  for (auto& waiter : la.rendezvous_waiters) {
    waiter(absl::AbortedError("the attempt ended before rank 0 posted its id"));
  }
  const int trial = lj.search.TrialOf(task);

  // What the attempt's end means (attempt_outcome.h's table).
  EndedAttempt ended;
  ended.succeeded = failure == nullptr;
  ended.job_running = job.state() == Job::RUNNING && !job.has_failure();
  ended.trained_epochs = la.trained_epochs;
  ended.last_epoch = la.last_epoch;
  ended.stop_requested = la.stop_requested;
  ended.search_fold = lj.search.IsTrialFold(task);
  if (ended.search_fold) {
    ended.pause_after = la.pause_after;
    ended.trial_pruned = lj.search.TrialPruned(trial);
  }
  if (failure != nullptr) {
    ended.reason = failure->reason();
    for (int i = 0; i + 1 < t->attempts_size(); ++i) {
      const Attempt& prev = t->attempts(i);
      ended.earlier_restarts +=
          CountsAgainstRestarts(prev.failure().reason(), prev.trained_epochs());
    }
    // Out of memory on GPUs: a retry avoids the GPUs this task ran out of
    // memory on.
    if (failure->reason() == Failure::OUT_OF_MEMORY && !la.gpus.empty() && ended.job_running) {
      std::set<int>& avoid = lj.oom_gpus[task];
      avoid.insert(la.gpus.begin(), la.gpus.end());
      ended.on_gpus = true;
      for (const GpuPool::Gpu& g : gpus_.gpus()) {
        ended.gpus_elsewhere += g.state != GpuPool::State::kUnhealthy && avoid.count(g.index) == 0;
      }
      ended.gpus_needed = job.spec().resources().count();
    }
  }
  const AttemptOutcome outcome = DecideAttemptOutcome(ended, options_.max_restarts);

  JobChange change = ChangeLocked(lj);
  change.WriteJob();
  int failed_trial = -1;
  switch (outcome.kind) {
    case AttemptOutcome::Kind::kPaused:
      // The fold stopped at its rung (checkpointed); it goes on once its
      // trial is promoted there (SearchController::AtRung holds it until then).
      change.SetTaskState(task, Task::QUEUED, la.number, la.pid)->set_rung_epoch(la.last_epoch);
      EnqueueLocked(lj, task);
      CommitLocked(lj, change);
      LogInfo("task paused job=%s task=%d attempt=%d epoch=%d: at a rung", job.id(), task,
              la.number, la.last_epoch);
      return;
    case AttemptOutcome::Kind::kSucceeded:
      *t->mutable_result() = *la.result;
      t->clear_failure();
      *change.SetTaskState(task, Task::SUCCEEDED, la.number, la.pid)->mutable_result() = *la.result;
      AggregateFoldResults(&job);
      LogInfo("task succeeded job=%s task=%d attempt=%d pid=%d", job.id(), task, la.number, la.pid);
      break;
    case AttemptOutcome::Kind::kRetried:
      *a->mutable_failure() = *failure;
      t->clear_result();  // one a remote attempt reported before it failed
      *change.SetTaskState(task, Task::QUEUED, la.number, la.pid)->mutable_failure() = *failure;
      EnqueueLocked(lj, task);
      LogWarning("task retry job=%s task=%d attempt=%d pid=%d reason=%s: %s (%s)", job.id(), task,
                 la.number, la.pid, ReasonName(failure->reason()), failure->message(), outcome.why);
      break;
    case AttemptOutcome::Kind::kStopped:
      *a->mutable_failure() = *failure;
      t->clear_result();
      *change.SetTaskState(task, outcome.task_state, la.number, la.pid)->mutable_failure() =
          *failure;
      LogInfo("task %s job=%s task=%d attempt=%d pid=%d",
              outcome.task_state == Task::PRUNED ? "pruned" : "cancelled", job.id(), task,
              la.number, la.pid);
      break;
    case AttemptOutcome::Kind::kFailed:
      *a->mutable_failure() = *failure;
      t->clear_result();
      *t->mutable_failure() = *failure;
      *change.SetTaskState(task, Task::FAILED, la.number, la.pid)->mutable_failure() = *failure;
      LogWarning("task failed job=%s task=%d attempt=%d pid=%d reason=%s: %s", job.id(), task,
                 la.number, la.pid, ReasonName(failure->reason()), failure->message());
      if (outcome.fails == AttemptOutcome::Fails::kTrial) {
        // In a search, a task that fails ends its trial, not the job.
        failed_trial = trial;
        AggregateFoldResults(&job);
      } else if (!job.has_failure()) {
        *job.mutable_failure() = *failure;
        job.mutable_failure()->set_message(absl::StrCat("fold ", task, ": ", failure->message()));
      }
      break;
  }
  CommitLocked(lj, change);
  if (outcome.kind == AttemptOutcome::Kind::kSucceeded) {
    // A fold that ended before the later rungs counts at its score there.
    ActOnSearchLocked(lj, lj.search.RecordFoldEnd(task, la.last_epoch, t->result()));
  }
  if (failed_trial >= 0) {
    LogWarning("trial failed job=%s trial=%d: its other tasks are stopped", job.id(), failed_trial);
    StopTasksLocked(lj, false, [&](int i) { return lj.search.TrialOf(i) == failed_trial; });
    if (SearchController::EveryTrialFailed(job) && !job.has_failure()) {
      *job.mutable_failure() = *failure;
      job.mutable_failure()->set_message(absl::StrCat("every trial failed; the last, trial ",
                                                      failed_trial, ": ", failure->message()));
    }
  }
  // One fold that cannot succeed fails the job: stop the others.
  if (job.has_failure()) StopTasksLocked(lj, false);
  MaybeFinishJobLocked(lj);
}

void Scheduler::MaybeFinishJobLocked(LiveJob& lj) {
  Job& job = lj.job;
  if (IsTerminal(job.state()) || lj.finishing) return;
  if (std::optional<Failure> failed = SearchFailure(job); failed.has_value()) {
    *job.mutable_failure() = *std::move(failed);
    StopTasksLocked(lj, false);
  }
  const std::optional<Job::State> ended = FinalJobState(job);
  if (!ended.has_value()) return;
  const Job::State final_state = *ended;
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
