#include "server/scheduler/scheduler.h"

#include <signal.h>
#include <sys/random.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "google/protobuf/util/time_util.h"
#include "server/log.h"
#include "spec/validation.h"
#include "spec/task_plan.h"

namespace traind::server {
namespace {

using google::protobuf::util::TimeUtil;
using traind::v1::Attempt;
using traind::v1::Failure;
using traind::v1::Job;
using traind::v1::JobEvent;
using traind::v1::JobSpec;
using traind::v1::Task;

google::protobuf::Timestamp NowProto() {
  return TimeUtil::MicrosecondsToTimestamp(absl::ToUnixMicros(absl::Now()));
}

std::string RandomHex(int bytes) {
  std::string raw(bytes, '\0');
  size_t got = 0;
  while (got < raw.size()) {
    ssize_t n = getrandom(raw.data() + got, raw.size() - got, 0);
    if (n > 0) got += n;
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (unsigned char c : raw) {
    out.push_back(kHex[c >> 4]);
    out.push_back(kHex[c & 15]);
  }
  return out;
}

bool ConstantTimeEquals(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

bool IsTerminal(Task::State s) {
  return s == Task::SUCCEEDED || s == Task::FAILED || s == Task::CANCELLED;
}
bool IsTerminal(Job::State s) {
  return s == Job::SUCCEEDED || s == Job::FAILED || s == Job::CANCELLED;
}

std::string ReasonName(Failure::Reason r) { return Failure::Reason_Name(r); }

std::string SignalName(int sig) {
  const char* d = sigdescr_np(sig);
  return absl::StrCat(sig, d ? absl::StrCat(" (", d, ")") : "");
}

}  // namespace

Scheduler::Scheduler(SchedulerOptions options, JobStore* store, Launcher* launcher)
    : options_(std::move(options)),
      store_(store),
      launcher_(launcher),
      gpus_(options_.gpu_probe, options_.gpu) {
  launcher_->SetExitCallback([this](const ProcessExit& e) { OnExit(e); });
}

Scheduler::~Scheduler() { Stop(); }

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
    for (const auto& [pid, ref] : by_pid_) pids.push_back(pid);
  }
  // Running attempts stay RUNNING in the store: the next start recovers
  // them as LOST and runs them again. They get stop_grace to checkpoint.
  // The loop thread runs until then: a worker spawned from it directly dies
  // with it (PR_SET_PDEATHSIG), which would cut the grace short.
  for (int pid : pids) launcher_->Signal(pid, SIGTERM);
  {
    absl::Time deadline = absl::Now() + options_.stop_grace;
    absl::MutexLock lock(&mu_);
    auto none_left = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return by_pid_.empty(); };
    if (!mu_.AwaitWithDeadline(absl::Condition(&none_left), deadline)) {
      for (const auto& [pid, ref] : by_pid_) launcher_->Signal(pid, SIGKILL);
      mu_.AwaitWithTimeout(absl::Condition(&none_left), options_.stop_grace);
    }
    loop_exit_ = true;
  }
  if (loop_.joinable()) loop_.join();
  // No exit reaches this scheduler after it is gone.
  launcher_->SetExitCallback(nullptr);
}

void Scheduler::Loop() {
  absl::MutexLock lock(&mu_);
  while (!loop_exit_) {
    last_loop_ = absl::Now();
    if (gpus_.AnyDraining()) RefreshGpusLocked(false);
    if (!stopping_) DispatchLocked();
    EnforceDeadlinesLocked();
    wake_ = false;
    auto woken = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return wake_ || loop_exit_; };
    mu_.AwaitWithTimeout(absl::Condition(&woken), gpus_.AnyDraining() ? absl::Milliseconds(100)
                                                                       : absl::Milliseconds(250));
  }
}

JobEvent* Scheduler::NewEventLocked(LiveJob& lj) {
  JobEvent& e = pending_events_.emplace_back();
  e.set_job_id(lj.job.id());
  e.set_sequence(lj.next_sequence++);
  *e.mutable_time() = NowProto();
  return &e;
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
  job.set_id(RandomHex(6));
  *job.mutable_spec() = spec;
  job.set_state(Job::QUEUED);
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
  absl::MutexLock lock(&mu_);
  if (stopping_) return absl::UnavailableError("traind is shutting down");
  if (!options.idempotency_key.empty()) {
    absl::StatusOr<std::optional<std::string>> existing =
        store_->FindByIdempotencyKey(options.owner, options.idempotency_key);
    if (!existing.ok()) return existing.status();
    if (existing->has_value()) {
      const std::string& id = **existing;
      LogInfo("job resubmitted job=%s idempotency_key=%s", id, options.idempotency_key);
      auto it = jobs_.find(id);
      if (it != jobs_.end()) return ViewLocked(*it->second);
      return store_->LoadJob(id);
    }
  }
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
  StoreMutation m;
  m.job = &job;
  m.new_job = true;
  m.idempotency_key = options.idempotency_key;
  NewEventLocked(*lj)->mutable_job_state()->set_state(Job::QUEUED);
  CommitLocked(*lj, m);
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
  queue_.insert(QueueEntry{lj.job.spec().priority(), lj.order, task, lj.job.id()});
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
    const bool at_cap = cap > 0 && static_cast<int>(lj.attempts.size()) >= cap;
    int ahead = 0;
    for (const QueueEntry& e : queue_) {
      if (e.job_id == view.id() && e.task < view.tasks_size() &&
          view.tasks(e.task).state() == Task::QUEUED) {
        Task* t = view.mutable_tasks(e.task);
        Task::WaitReason why = Task::RESOURCES;
        if (!DependenciesDoneLocked(lj, e.task)) {
          why = Task::DEPENDENCY;
        } else if (at_cap) {
          why = Task::JOB_LIMIT;
        } else if (view.spec().resources().device() == traind::v1::GPU && gpus_.AnyDraining()) {
          why = Task::DEVICE_DRAINING;
        } else if (ahead > 0 && queue_.begin()->priority > e.priority) {
          why = Task::PRIORITY;
        }
        t->set_wait_reason(why);
        t->set_tasks_ahead(ahead);
      }
      ++ahead;
    }
  }
  return view;
}

absl::StatusOr<Job> Scheduler::GetJob(const std::string& job_id) {
  {
    absl::MutexLock lock(&mu_);
    auto it = jobs_.find(job_id);
    if (it != jobs_.end()) return ViewLocked(*it->second);
    auto done = finished_.find(job_id);
    if (done != finished_.end()) return done->second;
  }
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
  JobListFilter f;
  if (req.page_size() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("page_size: must not be negative (got ", req.page_size(), ")"));
  }
  f.limit = req.page_size() == 0 ? 100 : std::min(req.page_size(), 1000);
  for (int s : req.states()) {
    if (!Job::State_IsValid(s) || s == Job::STATE_UNSPECIFIED) {
      return absl::InvalidArgumentError(absl::StrCat("states: unknown job state ", s));
    }
    f.states.push_back(static_cast<Job::State>(s));
  }
  f.name_contains = req.name_contains();
  if (!req.page_token().empty() &&
      (!absl::SimpleAtoi(req.page_token(), &f.before_seq) || f.before_seq <= 0)) {
    return absl::InvalidArgumentError("page_token: not a token from a previous ListJobs");
  }
  std::vector<int64_t> seqs;
  absl::StatusOr<std::vector<Job>> jobs = store_->ListJobs(f, &seqs);
  if (!jobs.ok()) return jobs.status();
  traind::v1::ListJobsResponse resp;
  absl::MutexLock lock(&mu_);
  for (Job& job : *jobs) {
    auto it = jobs_.find(job.id());
    *resp.add_jobs() = it != jobs_.end() ? ViewLocked(*it->second) : std::move(job);
  }
  if (static_cast<int>(seqs.size()) == f.limit) resp.set_next_page_token(absl::StrCat(seqs.back()));
  return resp;
}

absl::StatusOr<Job> Scheduler::Cancel(const std::string& job_id, bool force) {
  {
    absl::MutexLock lock(&mu_);
    auto it = jobs_.find(job_id);
    if (it != jobs_.end()) {
      LiveJob& lj = *it->second;
      if (lj.job.state() != Job::CANCELLING) {
        lj.job.set_state(Job::CANCELLING);
        NewEventLocked(lj)->mutable_job_state()->set_state(Job::CANCELLING);
        StoreMutation m;
        m.job = &lj.job;
        CommitLocked(lj, m);
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
  const absl::Time now = absl::Now();
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
    auto* e = NewEventLocked(*it->second)->mutable_device();
    e->set_device_id(absl::StrCat("gpu", g.index));
    e->set_state("UNHEALTHY");
    e->set_message(g.note);
    StoreMutation m;
    CommitLocked(*it->second, m);
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

// --------------------------------------------------------------------------
// Dispatch
// --------------------------------------------------------------------------

void Scheduler::DispatchLocked() {
  bool gpus_refreshed = false;
  for (auto next = queue_.begin(); next != queue_.end();) {
    auto entry = next++;
    const std::string job_id = entry->job_id;
    const int task = entry->task;
    auto it = jobs_.find(job_id);
    if (it == jobs_.end() || it->second->job.tasks(task).state() != Task::QUEUED) {
      queue_.erase(entry);
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
    queue_.erase(entry);
    absl::Status s = LaunchLocked(lj, task, gpus);
    if (!s.ok()) {
      Failure f;
      f.set_reason(Failure::WORKER_CRASHED);
      f.set_message(absl::StrCat("cannot start the worker: ", s.message()));
      LogError("task launch failed job=%s task=%d: %s", job_id, task, s.message());
      // Not retried: the same launch would fail again.
      Task* t = lj.job.mutable_tasks(task);
      t->set_state(Task::FAILED);
      *t->mutable_failure() = f;
      if (!lj.job.has_failure()) {
        *lj.job.mutable_failure() = f;
        lj.job.mutable_failure()->set_message(absl::StrCat("fold ", task, ": ", f.message()));
      }
      auto* e = NewEventLocked(lj)->mutable_task_state();
      e->set_task(task);
      e->set_attempt(t->attempts_size());
      e->set_state(Task::FAILED);
      *e->mutable_failure() = f;
      StoreMutation m;
      m.job = &lj.job;
      m.tasks.push_back(t);
      CommitLocked(lj, m);
      StopTasksLocked(lj, false);
      MaybeFinishJobLocked(lj);
      if (IsTerminal(lj.job.state())) jobs_.erase(job_id);
      next = queue_.begin();  // the queue changed under the iterator
    }
  }
}

absl::Status Scheduler::LaunchLocked(LiveJob& lj, int task, const std::vector<int>& gpus) {
  Job& job = lj.job;
  Task* t = job.mutable_tasks(task);
  const int number = t->attempts_size() + 1;
  std::filesystem::path dir = std::filesystem::path(options_.state_dir) / "jobs" / job.id() /
                              absl::StrCat("task-", task);
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return absl::InternalError(absl::StrCat(dir.string(), ": ", ec.message()));

  LiveAttempt la;
  la.number = number;
  la.secret = RandomHex(16);
  // A multi-GPU task runs one process (rank) per GPU; everything else one.
  const int world = gpus.size() > 1 ? static_cast<int>(gpus.size()) : 1;
  std::vector<std::string> uuids;
  for (int g : gpus) uuids.push_back(gpus_.gpus()[g].last.uuid);
  Attempt* a = t->add_attempts();
  a->set_number(number);
  *a->mutable_start_time() = NowProto();
  a->set_log_path((dir / absl::StrCat("attempt-", number, ".log")).string());
  for (int rank = 0; rank < world; ++rank) {
    LaunchRequest req;
    req.argv = {options_.worker_path,
                absl::StrCat("--server=", options_.worker_address),
                absl::StrCat("--job=", job.id()),
                absl::StrCat("--task=", task),
                absl::StrCat("--attempt=", number)};
    if (world > 1) {
      req.argv.push_back(absl::StrCat("--rank=", rank));
      req.argv.push_back(absl::StrCat("--world-size=", world));
    }
    // CPU tasks see no GPU. The ranks of a GPU task all see the task's GPUs,
    // in rank order, and rank r trains on the r-th: NCCL needs the peers
    // visible to use CUDA IPC / NVLink between the ranks' processes (with
    // only its own GPU visible, each falls back to host shared memory).
    // Other tasks' GPUs stay invisible.
    const std::string visible = absl::StrJoin(uuids, ",");
    req.env = {absl::StrCat("TRAIND_WORKER_SECRET=", la.secret),
               absl::StrCat("OMP_NUM_THREADS=", options_.worker_threads),
               absl::StrCat("CUDA_VISIBLE_DEVICES=", visible), "CUDA_DEVICE_ORDER=PCI_BUS_ID"};
    req.env.insert(req.env.end(), options_.worker_env.begin(), options_.worker_env.end());
    req.log_path = rank == 0 ? a->log_path()
                             : (dir / absl::StrCat("attempt-", number, ".rank-", rank, ".log"))
                                   .string();
    absl::StatusOr<int> pid = launcher_->Launch(req);
    if (!pid.ok()) {
      if (rank == 0) {
        *a->mutable_end_time() = a->start_time();
        a->mutable_failure()->set_reason(Failure::WORKER_CRASHED);
        a->mutable_failure()->set_message(std::string(pid.status().message()));
        return pid.status();
      }
      // Some ranks run: stop them; the attempt ends when they have exited.
      Failure f;
      f.set_reason(Failure::WORKER_CRASHED);
      f.set_message(absl::StrCat("cannot start rank ", rank, ": ", pid.status().message()));
      la.failure = f;
      la.all_exits_clean = false;
      SignalAttemptLocked(la, SIGKILL);
      break;
    }
    la.rank_pids.push_back(*pid);
    la.rank_alive.push_back(true);
    la.rank_failed.push_back(false);
    la.rank_killed.push_back(false);
    ++la.alive;
    by_pid_[*pid] = {job.id(), task, rank};
    if (world > 1) a->add_rank_pids(*pid);
  }
  const int pid0 = la.rank_pids[0];
  la.pid = pid0;
  la.last_seen = absl::Now();
  a->set_pid(pid0);
  la.gpus = gpus;
  if (gpus.empty()) {
    ++running_;
  } else {
    for (int r = 0; r < static_cast<int>(gpus.size()); ++r) {
      const int pid = la.rank_pids[std::min<int>(r, la.rank_pids.size() - 1)];
      gpus_.MarkBusy({gpus[r]}, pid);
      gpu_last_job_[gpus[r]] = job.id();
    }
  }
  const int* pid = &pid0;
  lj.attempts[task] = std::move(la);
  t->set_state(Task::STARTING);
  t->set_epochs_done(0);
  StoreMutation m;
  if (job.state() == Job::QUEUED) {
    job.set_state(Job::RUNNING);
    *job.mutable_start_time() = NowProto();
    NewEventLocked(lj)->mutable_job_state()->set_state(Job::RUNNING);
    LogInfo("job running job=%s", job.id());
  }
  m.job = &job;
  m.tasks.push_back(t);
  auto* e = NewEventLocked(lj)->mutable_task_state();
  e->set_task(task);
  e->set_attempt(number);
  e->set_state(Task::STARTING);
  e->set_pid(*pid);
  CommitLocked(lj, m);
  LogInfo("task started job=%s task=%d attempt=%d pid=%d%s%s", job.id(), task, number, *pid,
          world > 1 ? absl::StrCat(" ranks=", world) : "",
          uuids.empty() ? "" : absl::StrCat(" gpus=", absl::StrJoin(uuids, ",")));
  return absl::OkStatus();
}

void Scheduler::EnforceDeadlinesLocked() {
  const absl::Time now = absl::Now();
  for (auto& [id, lj] : jobs_) {
    for (auto& [task, la] : lj->attempts) {
      // Enforced while any rank runs that traind has not killed yet, also
      // after a failure was recorded (the failure stays the first one): a
      // rank that hangs must not keep the attempt, and its GPUs, forever.
      bool unkilled = false;
      for (size_t r = 0; r < la.rank_pids.size(); ++r) {
        unkilled = unkilled || (la.rank_alive[r] && !la.rank_killed[r]);
      }
      if (unkilled && !la.stop_requested && now - la.last_seen > options_.heartbeat_timeout) {
        const std::string message = absl::StrCat(
            "no heartbeat from the worker for ", absl::FormatDuration(now - la.last_seen),
            "; killed");
        if (!la.failure.has_value()) {
          Failure f;
          f.set_reason(Failure::TIMEOUT);
          f.set_message(message);
          la.failure = f;
          la.failure_rank = -1;
        }
        LogWarning("task hung job=%s task=%d attempt=%d pid=%d: %s", id, task, la.number, la.pid,
                   message);
        SignalAttemptLocked(la, SIGKILL);
        FailRendezvousLocked(la, message);
        continue;
      }
      if (la.kill_at.has_value() && now >= *la.kill_at) {
        LogWarning("task kill job=%s task=%d attempt=%d pid=%d: did not stop within the grace "
                   "period",
                   id, task, la.number, la.pid);
        SignalAttemptLocked(la, SIGKILL);
        la.kill_at.reset();
      }
    }
  }
}

void Scheduler::StopTasksLocked(LiveJob& lj, bool force) {
  StoreMutation m;
  for (int i = 0; i < lj.job.tasks_size(); ++i) {
    Task* t = lj.job.mutable_tasks(i);
    if (t->state() != Task::QUEUED) continue;
    t->set_state(Task::CANCELLED);
    RemoveQueuedLocked(lj.job.id(), i);
    auto* e = NewEventLocked(lj)->mutable_task_state();
    e->set_task(i);
    e->set_attempt(t->attempts_size());
    e->set_state(Task::CANCELLED);
    m.tasks.push_back(t);
  }
  if (!m.tasks.empty()) CommitLocked(lj, m);
  for (auto& [task, la] : lj.attempts) {
    if (force) {
      SignalAttemptLocked(la, SIGKILL);
      la.kill_at.reset();
    } else if (!la.stop_requested) {
      SignalAttemptLocked(la, SIGTERM);
      la.kill_at = absl::Now() + options_.cancel_grace;
    }
    la.stop_requested = true;
  }
}

void Scheduler::RemoveQueuedLocked(const std::string& job_id, int task) {
  for (auto it = queue_.begin(); it != queue_.end(); ++it) {
    if (it->job_id == job_id && it->task == task) {
      queue_.erase(it);
      return;
    }
  }
}

void Scheduler::SignalAttemptLocked(LiveAttempt& la, int sig, int except_rank) {
  for (size_t r = 0; r < la.rank_pids.size(); ++r) {
    if (!la.rank_alive[r] || static_cast<int>(r) == except_rank) continue;
    if (sig == SIGKILL) {
      if (la.rank_killed[r]) continue;  // once is enough
      la.rank_killed[r] = true;
    }
    launcher_->Signal(la.rank_pids[r], sig);
  }
}

void Scheduler::FailRendezvousLocked(LiveAttempt& la, absl::string_view why) {
  if (la.rendezvous_waiters.empty()) return;
  std::vector<std::function<void(absl::StatusOr<std::string>)>> waiters;
  waiters.swap(la.rendezvous_waiters);
  for (auto& waiter : waiters) {
    waiter(absl::AbortedError(
        absl::StrCat("the attempt failed before rank 0 posted its NCCL id: ", why)));
  }
}

void Scheduler::StopPeersLocked(LiveAttempt& la, int except_rank) {
  // A rank that reported its own failure is on its way out, releasing its
  // device (NCCL finalize, the CUDA context): not cut short here. The
  // heartbeat timeout still ends it if it hangs.
  for (size_t r = 0; r < la.rank_pids.size(); ++r) {
    if (!la.rank_alive[r] || static_cast<int>(r) == except_rank || la.rank_failed[r] ||
        la.rank_killed[r]) {
      continue;
    }
    la.rank_killed[r] = true;
    launcher_->Signal(la.rank_pids[r], SIGKILL);
  }
  FailRendezvousLocked(la, la.failure.has_value() ? la.failure->message()
                                                  : std::string("rank 0 exited"));
}

void Scheduler::OnExit(const ProcessExit& exit) {
  absl::MutexLock lock(&mu_);
  auto it = by_pid_.find(exit.pid);
  if (it == by_pid_.end()) return;
  const RankRef ref = it->second;
  by_pid_.erase(it);
  wake_ = true;
  auto jit = jobs_.find(ref.job_id);
  if (jit == jobs_.end()) return;
  LiveJob& lj = *jit->second;
  const int task = ref.task;
  LiveAttempt& la = lj.attempts[task];
  la.rank_alive[ref.rank] = false;
  --la.alive;
  const bool clean = exit.signal == 0 && exit.exit_code == 0;
  la.all_exits_clean = la.all_exits_clean && clean;
  // The GPUs of this rank are not reusable until the probe shows them released.
  if (!la.gpus.empty()) {
    if (la.rank_pids.size() > 1) {
      gpus_.Release({la.gpus[ref.rank]}, absl::Now());
    } else {
      gpus_.Release(la.gpus, absl::Now());
    }
  }
  if (stopping_) {  // recovered as LOST on the next start
    if (la.alive == 0 && la.gpus.empty()) --running_;
    return;
  }
  if (!clean && !la.last_exit.has_value()) la.last_exit = exit;
  if (la.rank_pids.size() > 1 && !la.stop_requested) {
    // A rank that died by itself (no failure report of its own, not by
    // traind's SIGKILL) crashed. The crash is the attempt's failure unless
    // one was recorded first; it also replaces what a surviving rank
    // reported as a device error or crash, which is likely only that rank
    // seeing its peer go (NCCL's remote errors, aborts, timeouts): the dead
    // rank's crash is the cause, and it is retried.
    const bool killed_by_traind = exit.signal == SIGKILL && la.rank_killed[ref.rank];
    if (!clean && !la.rank_failed[ref.rank] && !killed_by_traind) {
      const bool replace =
          !la.failure.has_value() ||
          (la.failure_rank >= 0 && la.failure_rank != ref.rank &&
           (la.failure->reason() == Failure::DEVICE_ERROR ||
            la.failure->reason() == Failure::WORKER_CRASHED));
      if (replace) {
        Failure f;
        f.set_reason(Failure::WORKER_CRASHED);
        f.set_message(absl::StrCat("rank ", ref.rank, " (pid ", exit.pid, ") ",
                                   exit.signal != 0
                                       ? absl::StrCat("killed by signal ", SignalName(exit.signal))
                                       : absl::StrCat("exited with code ", exit.exit_code)));
        f.set_exit_code(exit.exit_code);
        f.set_signal(exit.signal);
        if (la.failure.has_value()) {
          LogWarning("rank crash job=%s task=%d attempt=%d: %s (rank %d reported: %s)",
                     ref.job_id, task, la.number, f.message(), la.failure_rank,
                     la.failure->message());
        }
        la.failure = f;
        la.failure_rank = -1;
      }
    }
    if (la.alive > 0 && (!clean || la.failure.has_value())) {
      // The others cannot finish without this rank: stop them now rather
      // than let them wait on a collective until their own timeout.
      StopPeersLocked(la, -1);
    } else if (ref.rank == 0 && la.unique_id.empty()) {
      FailRendezvousLocked(la, "rank 0 exited");
    }
  }
  if (la.alive > 0) return;
  if (la.gpus.empty()) --running_;
  const ProcessExit last = la.last_exit.value_or(exit);
  if (la.result.has_value() && la.all_exits_clean) {
    FinishAttemptLocked(lj, task, nullptr);
  } else {
    Failure f;
    if (la.failure.has_value()) {
      f = *la.failure;
    } else if (la.stop_requested) {
      f.set_reason(Failure::CANCELLED);
      f.set_message("cancelled");
    } else {
      f.set_reason(Failure::WORKER_CRASHED);
      f.set_message(last.signal != 0
                        ? absl::StrCat("worker killed by signal ", SignalName(last.signal))
                        : absl::StrCat("worker exited with code ", last.exit_code,
                                       " without reporting a result"));
    }
    if (f.exit_code() == 0 && f.signal() == 0) {
      f.set_exit_code(last.exit_code);
      f.set_signal(last.signal);
    }
    FinishAttemptLocked(lj, task, &f);
  }
  if (IsTerminal(lj.job.state())) jobs_.erase(ref.job_id);
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
  StoreMutation m;
  m.job = &job;
  m.tasks.push_back(t);
  auto* e = NewEventLocked(lj)->mutable_task_state();
  e->set_task(task);
  e->set_attempt(la.number);
  e->set_pid(la.pid);
  if (failure == nullptr) {
    t->set_state(Task::SUCCEEDED);
    *t->mutable_result() = *la.result;
    t->clear_failure();
    e->set_state(Task::SUCCEEDED);
    *e->mutable_result() = *la.result;
    UpdateResultLocked(lj);
    LogInfo("task succeeded job=%s task=%d attempt=%d pid=%d", job.id(), task, la.number, la.pid);
  } else {
    *a->mutable_failure() = *failure;
    *e->mutable_failure() = *failure;
    // Crashes and hangs may not happen again: retried. What a retry cannot
    // fix (INVALID_SPEC, DATA_ERROR, DIVERGED) is not.
    auto transient = [](Failure::Reason r) {
      return r == Failure::WORKER_CRASHED || r == Failure::TIMEOUT;
    };
    int crashes = 0;
    for (const Attempt& prev : t->attempts()) crashes += transient(prev.failure().reason());
    bool retry = transient(failure->reason()) && crashes <= options_.max_restarts &&
                 job.state() == Job::RUNNING && !job.has_failure();
    // Out of memory on a GPU: retried only where the placement would differ,
    // on GPUs this task has not run out of memory on.
    if (failure->reason() == Failure::OUT_OF_MEMORY && !la.gpus.empty() &&
        job.state() == Job::RUNNING && !job.has_failure()) {
      std::set<int>& avoid = lj.oom_gpus[task];
      avoid.insert(la.gpus.begin(), la.gpus.end());
      int elsewhere = 0;
      for (const GpuPool::Gpu& g : gpus_.gpus()) {
        elsewhere += g.state != GpuPool::State::kUnhealthy && avoid.count(g.index) == 0;
      }
      retry = elsewhere >= job.spec().resources().count();
    }
    if (retry) {
      t->set_state(Task::QUEUED);
      e->set_state(Task::QUEUED);
      EnqueueLocked(lj, task);
      LogWarning("task retry job=%s task=%d attempt=%d pid=%d reason=%s: %s", job.id(), task,
                 la.number, la.pid, ReasonName(failure->reason()), failure->message());
    } else if (failure->reason() == Failure::CANCELLED) {
      t->set_state(Task::CANCELLED);
      e->set_state(Task::CANCELLED);
      LogInfo("task cancelled job=%s task=%d attempt=%d pid=%d", job.id(), task, la.number,
              la.pid);
    } else {
      t->set_state(Task::FAILED);
      *t->mutable_failure() = *failure;
      e->set_state(Task::FAILED);
      LogWarning("task failed job=%s task=%d attempt=%d pid=%d reason=%s: %s", job.id(), task,
                 la.number, la.pid, ReasonName(failure->reason()), failure->message());
      if (!job.has_failure()) {
        *job.mutable_failure() = *failure;
        job.mutable_failure()->set_message(
            absl::StrCat("fold ", task, ": ", failure->message()));
      }
    }
  }
  CommitLocked(lj, m);
  // One fold that cannot succeed fails the job: stop the others.
  if (job.has_failure()) StopTasksLocked(lj, false);
  MaybeFinishJobLocked(lj);
}

void Scheduler::UpdateResultLocked(LiveJob& lj) {
  traind::v1::JobResult* r = lj.job.mutable_result();
  r->clear_folds();
  r->clear_val();
  r->set_selection("val.loss (min)");
  std::map<std::string, std::vector<double>> values;
  r->clear_refit();
  for (const Task& t : lj.job.tasks()) {
    if (t.state() != Task::SUCCEEDED) continue;
    if (engine::IsRefitTask(lj.job.spec(), t.index())) {
      *r->mutable_refit() = t.result();
      continue;
    }
    *r->add_folds() = t.result();
    if (!t.result().selection().empty()) r->set_selection(t.result().selection());
    for (const auto& [name, v] : t.result().val()) values[name].push_back(v);
  }
  for (const auto& [name, vs] : values) {
    double mean = 0;
    for (double v : vs) mean += v;
    mean /= vs.size();
    double var = 0;
    for (double v : vs) var += (v - mean) * (v - mean);
    var /= vs.size();
    traind::v1::MetricSummary& s = (*r->mutable_val())[name];
    s.set_mean(mean);
    s.set_std(std::sqrt(var));
  }
}

void Scheduler::MergePredictionsLocked(LiveJob& lj) {
  // One file of every fold's out-of-fold predictions, ordered by row. Each
  // fold's file has the same header; the first column is the row index.
  std::vector<std::string> paths;
  for (const auto& f : lj.job.result().folds()) {
    if (!f.predictions_path().empty()) paths.push_back(f.predictions_path());
  }
  if (paths.empty()) return;
  std::string header;
  std::vector<std::pair<int64_t, std::string>> rows;
  for (const std::string& p : paths) {
    std::ifstream in(p);
    std::string line;
    if (!std::getline(in, line)) {
      LogWarning("predictions of job=%s: cannot read %s", lj.job.id(), p);
      return;
    }
    if (header.empty()) header = line;
    while (std::getline(in, line)) {
      int64_t row = 0;
      if (!absl::SimpleAtoi(line.substr(0, line.find(',')), &row)) continue;
      rows.emplace_back(row, line);
    }
  }
  std::sort(rows.begin(), rows.end());
  const std::string out =
      (std::filesystem::path(options_.state_dir) / "jobs" / lj.job.id() / "predictions.csv")
          .string();
  std::ofstream file(out);
  file << header << "\n";
  for (const auto& [row, line] : rows) file << line << "\n";
  file.close();
  if (!file) {
    LogWarning("predictions of job=%s: cannot write %s", lj.job.id(), out);
    return;
  }
  lj.job.mutable_result()->set_predictions_path(out);
}

void Scheduler::MaybeFinishJobLocked(LiveJob& lj) {
  Job& job = lj.job;
  if (IsTerminal(job.state())) return;
  for (const Task& t : job.tasks()) {
    if (!IsTerminal(t.state())) return;
  }
  bool all_ok = true;
  for (const Task& t : job.tasks()) all_ok = all_ok && t.state() == Task::SUCCEEDED;
  Job::State final_state = job.has_failure() ? Job::FAILED
                           : all_ok          ? Job::SUCCEEDED
                                             : Job::CANCELLED;
  job.set_state(final_state);
  *job.mutable_end_time() = NowProto();
  if (final_state == Job::SUCCEEDED) {
    job.mutable_result()->set_complete(true);
    MergePredictionsLocked(lj);
  }
  JobEvent* e = NewEventLocked(lj);
  e->mutable_job_state()->set_state(final_state);
  if (job.has_failure()) *e->mutable_job_state()->mutable_failure() = job.failure();
  e->set_last(true);
  StoreMutation m;
  m.job = &job;
  CommitLocked(lj, m);
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

// --------------------------------------------------------------------------
// Workers
// --------------------------------------------------------------------------

absl::StatusOr<Scheduler::LiveJob*> Scheduler::AuthLocked(const traind::v1::AttemptCredentials& c,
                                                          LiveAttempt** attempt) {
  auto it = jobs_.find(c.job_id());
  if (it != jobs_.end()) {
    auto ait = it->second->attempts.find(c.task());
    if (ait != it->second->attempts.end() && ait->second.number == c.attempt() &&
        c.rank() >= 0 && c.rank() < static_cast<int>(ait->second.rank_pids.size()) &&
        ConstantTimeEquals(ait->second.secret, c.secret())) {
      ait->second.last_seen = absl::Now();
      *attempt = &ait->second;
      return it->second.get();
    }
  }
  return absl::PermissionDeniedError(absl::StrCat("no running attempt ", c.attempt(), " of task ",
                                                  c.task(), " of job ", c.job_id(),
                                                  " with these credentials"));
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
  *a.mutable_spec() = job.spec();
  a.set_fold(job.spec().has_cross_validation() ? c.task() : -1);
  a.set_rank(c.rank());
  a.set_world_size(static_cast<int>(la->rank_pids.size()));
  a.set_artifacts_dir((std::filesystem::path(options_.state_dir) / "jobs" / job.id() /
                       absl::StrCat("task-", c.task()))
                          .string());
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
  }
  if (accepted.empty()) return stop;
  Task* t = lj.job.mutable_tasks(c.task());
  t->set_epochs_done(la->last_epoch);
  // One transaction for the batch; one event per epoch.
  StoreMutation sm;
  sm.tasks.push_back(t);
  for (const traind::v1::EpochMetrics& m : accepted) {
    *NewEventLocked(lj)->mutable_epoch() = m;
    sm.epochs.push_back(&m);
  }
  CommitLocked(lj, sm);
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
        t->set_state(Task::RUNNING);
        if (req.started().epochs_total() > 0) t->set_epochs_total(req.started().epochs_total());
        if (lj.job.result().classes().empty()) {
          *lj.job.mutable_result()->mutable_classes() = req.started().classes();
        }
        auto* e = NewEventLocked(lj)->mutable_task_state();
        e->set_task(task);
        e->set_attempt(la->number);
        e->set_state(Task::RUNNING);
        e->set_pid(la->pid);
        StoreMutation m;
        m.job = &lj.job;
        m.tasks.push_back(t);
        CommitLocked(lj, m);
      }
      break;
    }
    case traind::v1::ReportEventRequest::kResumed: {
      // Epochs continue after the checkpoint: the next report is k + 1.
      const int k = req.resumed().completed_epochs();
      la->last_epoch = k;
      Task* t = lj.job.mutable_tasks(task);
      t->set_epochs_done(k);
      auto* e = NewEventLocked(lj)->mutable_task_state();
      e->set_task(task);
      e->set_attempt(la->number);
      e->set_state(t->state());
      e->set_pid(la->pid);
      e->set_resumed_epochs(k);
      StoreMutation m;
      m.tasks.push_back(t);
      CommitLocked(lj, m);
      LogInfo("task resumed job=%s task=%d attempt=%d pid=%d after_epoch=%d", lj.job.id(), task,
              la->number, la->pid, k);
      break;
    }
    case traind::v1::ReportEventRequest::kWarning: {
      auto* e = NewEventLocked(lj)->mutable_task_state();
      e->set_task(task);
      e->set_attempt(la->number);
      e->set_state(lj.job.tasks(task).state());
      e->set_pid(la->pid);
      e->set_warning(req.warning().message());
      StoreMutation m;
      CommitLocked(lj, m);
      LogWarning("task warning job=%s task=%d attempt=%d: %s", lj.job.id(), task, la->number,
                 req.warning().message());
      break;
    }
    case traind::v1::ReportEventRequest::kFinished:
      la->result = req.finished().result();
      la->result->set_fold(task);
      break;
    case traind::v1::ReportEventRequest::kFailed: {
      const int rank = req.credentials().rank();
      la->rank_failed[rank] = true;
      if (!la->failure.has_value()) {
        la->failure = req.failed().failure();
        la->failure_rank = rank;
        if (la->rank_pids.size() > 1) {
          la->failure->set_message(absl::StrCat("rank ", rank, ": ", la->failure->message()));
        }
      }
      // The other ranks cannot finish without this one (which exits by
      // itself): stop them now. Not while traind stops or the attempt is
      // being stopped: those give every rank its grace.
      if (la->rank_pids.size() > 1 && !la->stop_requested && !stopping_ &&
          lj.job.state() != Job::CANCELLING) {
        StopPeersLocked(*la, rank);
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
  if (world_size != static_cast<int>(la->rank_pids.size())) {
    done(absl::InvalidArgumentError(absl::StrCat("world_size ", world_size, ", but the attempt has ",
                                                 la->rank_pids.size(), " ranks")));
    return;
  }
  if (c.rank() == 0) {
    if (unique_id.empty()) {
      done(absl::InvalidArgumentError("unique_id: rank 0 must post the communicator id"));
      return;
    }
    la->unique_id = unique_id;
    for (auto& waiter : la->rendezvous_waiters) waiter(unique_id);
    la->rendezvous_waiters.clear();
    done(unique_id);
    return;
  }
  if (!la->unique_id.empty()) {
    done(la->unique_id);
    return;
  }
  if (la->failure.has_value() || !la->rank_alive[0]) {
    // Rank 0 will never post: fail now rather than at the worker's timeout.
    done(absl::AbortedError(absl::StrCat(
        "the attempt failed before rank 0 posted its NCCL id: ",
        la->failure.has_value() ? la->failure->message() : std::string("rank 0 exited"))));
    return;
  }
  la->rendezvous_waiters.push_back(std::move(done));
}

// --------------------------------------------------------------------------
// Recovery
// --------------------------------------------------------------------------

absl::Status Scheduler::Recover() {
  absl::StatusOr<std::vector<Job>> jobs = store_->LoadActiveJobs();
  if (!jobs.ok()) return jobs.status();
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
  for (Job& job : *jobs) {
    absl::StatusOr<int64_t> last = store_->LastEventSequence(job.id());
    if (!last.ok()) return last.status();
    auto lj = std::make_unique<LiveJob>();
    lj->job = std::move(job);
    lj->next_sequence = *last + 1;
    StoreMutation m;
    m.job = &lj->job;
    for (int i = 0; i < lj->job.tasks_size(); ++i) {
      Task* t = lj->job.mutable_tasks(i);
      if (t->state() == Task::STARTING || t->state() == Task::RUNNING) {
        Attempt* a = t->mutable_attempts(t->attempts_size() - 1);
        *a->mutable_end_time() = NowProto();
        a->mutable_failure()->set_reason(Failure::LOST);
        a->mutable_failure()->set_message("traind stopped while the attempt ran");
        t->set_state(Task::QUEUED);
        auto* e = NewEventLocked(*lj)->mutable_task_state();
        e->set_task(i);
        e->set_attempt(a->number());
        e->set_state(Task::QUEUED);
        *e->mutable_failure() = a->failure();
        m.tasks.push_back(t);
        ++requeued;
      }
    }
    lj->order = next_order_++;
    for (int i = 0; i < lj->job.tasks_size(); ++i) {
      if (lj->job.tasks(i).state() == Task::QUEUED) EnqueueLocked(*lj, i);
    }
    CommitLocked(*lj, m);
    const std::string id = lj->job.id();
    LiveJob& ref = *lj;
    jobs_[id] = std::move(lj);
    if (ref.job.state() == Job::CANCELLING) {
      StopTasksLocked(ref, true);
      MaybeFinishJobLocked(ref);
      if (IsTerminal(ref.job.state())) jobs_.erase(id);
    }
  }
  LogInfo("store recovered jobs=%d tasks_requeued=%d", static_cast<int>(jobs_.size()), requeued);
  return absl::OkStatus();
}

}  // namespace traind::server
