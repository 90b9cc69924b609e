// Scheduler: the core of traind. Owns the live state of every unfinished
// job, turns jobs into tasks, dispatches task attempts to worker processes
// through a Launcher when a CPU slot is free, takes the workers' reports, and
// writes every change to the JobStore before publishing it as an event.
//
// Knows nothing of gRPC: server/api adapts it. Its rules live in their own
// files: state_transitions (which state may follow which), attempt_outcome
// (what an ended attempt means for its task, trial and job: the retry rule),
// dispatch_queue (order and wait reasons), attempt_tracker (ranks, signals,
// heartbeats, rendezvous), job_results (aggregation, predictions) and
// recovery.cc; scheduler_dispatch.cc holds dispatch, launches and the GPU pool,
// scheduler_workers.cc the WorkerService side, scheduler_side_processes.cc the
// processes run for a caller (RunProcess), scheduler_deletion.cc deletion and
// retention; search_controller (a job's trials, ASHA's rungs, when a trial's
// task or a refit may start) answers, scheduler_search.cc acts on it.
//
// Nothing that can wait on a process or on files runs under the scheduler's
// mutex: launches, GPU probes and the predictions merge run without it, then
// re-lock to record what they did; store writes go through an outbox
// (store_writer) whose thread writes them in order, and a public method that
// changed something returns once its change is stored.
//
// Thread-safety: all public methods are thread-safe.
#ifndef TRAIND_SERVER_SCHEDULER_SCHEDULER_H_
#define TRAIND_SERVER_SCHEDULER_SCHEDULER_H_

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/devices/gpu_pool.h"
#include "server/launch/launcher.h"
#include "server/launch/worker_environment.h"
#include "server/scheduler/attempt_tracker.h"
#include "server/scheduler/clock.h"
#include "server/scheduler/dispatch_queue.h"
#include "server/scheduler/event_hub.h"
#include "server/scheduler/fair_share.h"
#include "server/scheduler/job_results.h"
#include "server/scheduler/placement.h"
#include "server/scheduler/search_controller.h"
#include "server/scheduler/state_transitions.h"
#include "server/scheduler/store_writer.h"
#include "server/store/job_store.h"
#include "traind/v1/job.pb.h"
#include "traind/v1/training_service.pb.h"
#include "traind/v1/worker_service.pb.h"

namespace traind::server {

// The GPUs a task of `spec` holds (0: a CPU task).
int TaskGpus(const traind::v1::JobSpec& spec);

// How often a worker says it is alive while it trains
// (TaskAssignment.heartbeat_interval_ms) under `heartbeat_timeout`: a quarter
// of it, so that a heartbeat can be late or lost three times before the
// worker is killed; at most 2 s (the worker's own default), at least 1 ms.
inline int32_t HeartbeatIntervalMs(absl::Duration heartbeat_timeout) {
  const int64_t quarter = absl::ToInt64Milliseconds(heartbeat_timeout / 4);
  return static_cast<int32_t>(std::clamp<int64_t>(quarter, 1, 2000));
}

struct SchedulerOptions {
  // Root of the daemon's files; worker logs and artifacts go under jobs/.
  std::string state_dir;
  // Whether every task writes TensorBoard scalars, to
  // <state_dir>/jobs/<job>/tensorboard/task-<i> (TaskAssignment.tensorboard_dir).
  bool tensorboard = true;
  // Path of the traind-worker executable.
  std::string worker_path;
  // Address workers use to reach the WorkerService ("unix:/path").
  std::string worker_address;
  // Tasks that may run at once on the CPU.
  int cpu_slots = 1;
  // OMP_NUM_THREADS of each CPU worker.
  int worker_threads = 1;
  // Retries of a task whose worker crashed.
  int max_restarts = 2;
  // Time a cancelled worker gets to stop before it is killed.
  absl::Duration cancel_grace = absl::Seconds(10);
  // On Stop(), time workers get after SIGTERM (to checkpoint) before SIGKILL.
  absl::Duration stop_grace = absl::Seconds(10);
  // A worker silent for this long (no heartbeat or report) is killed and its
  // attempt fails with TIMEOUT. Workers are told to say they are alive four
  // times as often (HeartbeatIntervalMs).
  absl::Duration heartbeat_timeout = absl::Seconds(30);
  // Where the scheduler reads the time (the system clock when null). Must
  // outlive the scheduler.
  Clock* clock = nullptr;
  // GPUs: none when null. Must outlive the scheduler.
  DeviceProbe* gpu_probe = nullptr;
  // Whether traind-worker has a GPU backend (`traind-worker --capabilities`
  // lists "cuda"): without one, GPUs are listed but no GPU job is accepted.
  bool worker_has_gpu_backend = false;
  // Whether the workers' oneDNN has bf16 matmuls (`traind-worker
  // --capabilities` lists "cpu-bf16"): submit accepts training.precision:
  // bf16 for CPU jobs only then, so it agrees with the worker.
  bool worker_cpu_bf16 = false;
  // The environment every worker starts from (BaseWorkerEnvironment); each
  // task adds its secret, thread count and visible GPUs.
  std::vector<std::string> worker_env = BaseWorkerEnvironment(nullptr);
  // Called on the store writer's thread with the time of every store
  // transaction (metrics); must not block.
  std::function<void(absl::Duration)> on_store_commit;
  // How often a store write that found the disk full is tried again.
  absl::Duration store_retry_interval = absl::Seconds(1);
  GpuPoolOptions gpu;
  // A remote launcher (Slurm): the most GPUs one task may ask for (a node's).
  // GPU jobs are then placed by the cluster, not on this machine's GPUs.
  int cluster_gpus_per_task = 0;
  // Where workers find the jobs' directories (TaskAssignment.artifacts_dir,
  // logs): <state_dir>/jobs unless set (launcher: slurm: <shared_dir>/jobs,
  // which <state_dir>/jobs links to).
  std::string worker_jobs_dir;
  // The key attempt secrets are derived from (HMAC-SHA256 of job, task and
  // attempt), so that a restarted traind knows the secrets of workers that
  // outlived it (a remote launcher's). Random when empty.
  std::string attempt_key;
  // The order between owners (scheduling.*): fair share, or fifo.
  FairShareOptions fair_share;
};

// Which finished jobs Scheduler::ApplyRetention deletes.
struct RetentionPolicy {
  // Jobs that ended longer ago than this (zero: no age limit).
  absl::Duration max_age = absl::ZeroDuration();
  // Beyond this many finished jobs, the oldest (by end time) go (0: no limit).
  int max_finished_jobs = 0;
  bool enabled() const { return max_age > absl::ZeroDuration() || max_finished_jobs > 0; }
};

struct SubmitOptions {
  // Who submits: a token's name, or "local" over the unix socket.
  std::string owner = "local";
  // Optional: a retried submit with the same (owner, key) returns the job
  // the first one created.
  std::string idempotency_key;
  // The SHA-256 of the request (its key aside): the same key with another
  // request is ALREADY_EXISTS, not the first job ("": not checked).
  std::string request_sha256;
  // Jobs of `owner` still queued beyond which Submit is RESOURCE_EXHAUSTED
  // (0: no limit). Counted after the idempotency lookup, under the same
  // lock as the insert: a retry of a submit that already created its job
  // gets that job back even when the owner is at the limit.
  int max_queued_jobs = 0;
  // GPU jobs: spec/memory_estimate.h's estimate for one task on one GPU.
  int64_t gpu_memory_bytes = 0;
  // What one task's worker needs on its host (Job.host_memory_bytes).
  int64_t host_memory_bytes = 0;
};

struct SchedulerStats {
  int jobs_active = 0;
  int tasks_running = 0;
  int tasks_queued = 0;
};

class Scheduler final {
 public:
  // `store` and `launcher` must outlive the scheduler. Processes that are
  // not tasks (RunProcess) go through `side_launcher` when given (a local
  // one beside a remote `launcher`).
  Scheduler(SchedulerOptions options, JobStore* store, Launcher* launcher,
            Launcher* side_launcher = nullptr);
  ~Scheduler();  // Stop()s
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Loads unfinished jobs from the store. Attempts that were running when
  // the daemon stopped end as LOST and their tasks are queued again;
  // finished tasks are kept. Call once, before Start(). (recovery.cc)
  absl::Status Recover();
  // Starts dispatching.
  void Start();
  // Refuses new work from now on (Submit and RunProcess get UNAVAILABLE)
  // and returns at once; running work goes on. What a stopping
  // daemon does before it says NOT_SERVING, so that nobody who heard it can
  // still get a job in. Stop does it too.
  void RefuseNewWork();
  // Stops dispatching and kills running workers (their tasks are recovered
  // as LOST on the next start).
  void Stop();

  // --- TrainingService ---
  // REQUIRES: the spec was validated.
  absl::StatusOr<traind::v1::Job> Submit(const traind::v1::JobSpec& spec,
                                         const SubmitOptions& options = {});
  // The job an earlier Submit of `owner` with idempotency key `key` created,
  // if any (nothing for an empty key). Callers look a retry up before they
  // validate its spec again: the answer to a retry is the job, whatever has
  // changed since (the data file, the limits, the owner's queue). A key
  // used for another request (`request_sha256` differs from the stored
  // one) is ALREADY_EXISTS naming the job.
  absl::StatusOr<std::optional<traind::v1::Job>> FindSubmitted(
      const std::string& owner, const std::string& key, const std::string& request_sha256 = "");
  // Jobs of `owner` still waiting for their first task to start.
  int QueuedJobs(const std::string& owner);
  absl::StatusOr<traind::v1::Job> GetJob(const std::string& job_id);
  // The job if GetJob needs no store read for it (live, or finished
  // recently); nothing otherwise.
  std::optional<traind::v1::Job> GetJobInMemory(const std::string& job_id);
  absl::StatusOr<traind::v1::ListJobsResponse> ListJobs(const traind::v1::ListJobsRequest& req);
  absl::StatusOr<traind::v1::Job> Cancel(const std::string& job_id, bool force);
  absl::StatusOr<traind::v1::JobResult> GetResult(const std::string& job_id);
  // Deletes a finished job: its store rows (events, epochs, attempts, tasks,
  // the job) and its directory (store/job_files.h: crash-safe). A live job is
  // FAILED_PRECONDITION unless `cancel`: then it is cancelled (workers
  // killed at once) and deleted once it has ended. NOT_FOUND for an unknown
  // job. Returns the bytes of files removed. (scheduler_deletion.cc)
  absl::StatusOr<int64_t> Delete(const std::string& job_id, bool cancel);
  // Deletes the finished jobs `policy` says have expired, logging each
  // (job id, reason). Returns how many. (scheduler_deletion.cc)
  int ApplyRetention(const RetentionPolicy& policy);
  // At start, before Start(): finishes deletions a kill interrupted
  // (store/job_files.h RecoverDeletions).
  void RecoverDeletions();
  // Called (without the scheduler's lock) after a job was deleted, e.g. to
  // drop what a front end cached of it. Add before Start().
  void AddDeletionListener(std::function<void(const std::string& job_id)> listener);
  // Runs a process that is not a task (traind-worker --predict) through the
  // launcher, in a fresh process as tasks run, and waits for its exit; after
  // `timeout` it is killed (SIGKILL to its group) and the wait goes on. Its
  // environment is the workers' base environment plus `extra_env`.
  // With `want_gpu`, and an idle GPU now or within 5 s (one still draining
  // after a task may come back; the worker has a GPU backend), it
  // runs on that GPU: CUDA_VISIBLE_DEVICES names it, "--device=gpu" is
  // appended to argv, the GPU is busy until the process exits and then
  // drains like a task's. Otherwise (and always without `want_gpu`) it sees
  // no GPU. `*placed` (if given) receives "gpu <uuid>" or "cpu".
  // UNAVAILABLE once Stop() has begun: Stop() kills side processes at once
  // (they hold nothing a grace would save) and waits for their exits.
  // (scheduler_side_processes.cc)
  absl::StatusOr<ProcessExit> RunProcess(LaunchRequest request, absl::Duration timeout,
                                         bool want_gpu = false, std::string* placed = nullptr);
  const std::string& worker_path() const { return options_.worker_path; }
  const std::string& state_dir() const { return options_.state_dir; }
  // Bytes under the state directory as last measured (MeasureStateDir runs
  // at Recover, after each deletion and each retention pass).
  int64_t state_dir_bytes() const { return state_dir_bytes_.load(); }
  void MeasureStateDir();
  // NotFound for an unknown job. `*last_sequence` receives the job's last
  // event sequence and `*terminal` whether no further event will come.
  absl::Status JobEventsState(const std::string& job_id, int64_t* last_sequence, bool* terminal);
  SchedulerStats Stats();
  // The GPUs and why there are none.
  std::vector<GpuPool::Gpu> Gpus(std::string* unavailable);
  // GPUs a task may be placed on (0 without a worker GPU backend); `*why`
  // (if given) says why there are none.
  int UsableGpus(std::string* why = nullptr);
  // Whether CPU tasks can train in bf16 (SchedulerOptions::worker_cpu_bf16).
  bool WorkerCpuBf16() const { return options_.worker_cpu_bf16; }
  // When the dispatch loop last ran (it runs at least every 250 ms while
  // healthy), on the scheduler's clock: for liveness checks such as the
  // systemd watchdog.
  absl::Time LastLoopTime();
  // Kills the attempts whose heartbeat or cancel grace ran out by the
  // clock's time now. The dispatch loop does this on every pass; a test with
  // a fake clock calls it after advancing the clock.
  void EnforceDeadlines();

  // --- WorkerService --- (each checks the attempt's secret)
  // A worker may call before the launch that started it is recorded (its
  // processes are still being started, outside the scheduler's mutex). The
  // calls below then wait until it is (moments); a caller that must not wait
  // (a gRPC reactor) first calls AfterLaunchRecorded: it returns false when
  // the credentials' attempt is not being launched (call now), else keeps
  // `then` and calls it once the launch is recorded or failed, on the
  // dispatch thread without the scheduler's lock (`then` makes the call).
  bool AfterLaunchRecorded(const traind::v1::AttemptCredentials& c, std::function<void()> then);
  absl::StatusOr<traind::v1::TaskAssignment> GetTask(const traind::v1::AttemptCredentials& c);
  // Return whether the worker should stop.
  absl::StatusOr<bool> ReportEpoch(const traind::v1::AttemptCredentials& c,
                                   const traind::v1::EpochMetrics& metrics);
  // Several consecutive epochs at once (one store transaction).
  absl::StatusOr<bool> ReportEpochs(const traind::v1::AttemptCredentials& c,
                                    const std::vector<const traind::v1::EpochMetrics*>& metrics);
  absl::StatusOr<bool> ReportEvent(const traind::v1::ReportEventRequest& req);
  absl::StatusOr<bool> Heartbeat(const traind::v1::AttemptCredentials& c);
  // Multi-GPU attempts: rank 0 posts `unique_id`; `done` gets it once it is
  // there (at once for rank 0), or an error when the attempt ends first. Called
  // with the scheduler's lock held: it must not block or call back.
  void Rendezvous(const traind::v1::AttemptCredentials& c, int world_size,
                  const std::string& unique_id,
                  std::function<void(absl::StatusOr<std::string>)> done);

  // Runs `done` once every change made so far is stored and its events
  // published: at once when nothing is pending, else on the store writer's
  // thread (`done` must not block). The WorkerService replies from here, so
  // a worker's report is acknowledged once durable, without holding a gRPC
  // thread on the disk. (The TrainingService methods above wait themselves:
  // they run on work pools.)
  void WhenStored(std::function<void()> done) {
    writer_.WhenStored(writer_.last_ticket(), std::move(done));
  }
  EventHub* hub() { return &hub_; }
  // The store as it is, without waiting for the writer: for readers off
  // the scheduler's threads that need only what is stored (an event feed:
  // an event is published once it is stored, so a read never misses one
  // the feed has not had live; a metrics scrape). Never blocks a reactor
  // or a pool thread on the writer.
  JobStore* store_as_is() { return store_; }
  // The store, once every change made so far is in it (changes are written
  // by the StoreWriter's thread); tests read through it.
  // While the store is degraded: the store as it is (the last change it
  // took); live jobs are read from memory.
  JobStore* store() {
    writer_.WaitAllUnlessDegraded();
    return store_;
  }
  // OK, or why the store cannot be written now (RESOURCE_EXHAUSTED: the
  // disk is full). Meanwhile new jobs are refused, nothing new starts, and
  // changes wait in order; writes are retried every second.
  absl::Status StoreStatus() { return writer_.Degraded(); }

 private:
  struct LiveJob {
    traind::v1::Job job;
    uint64_t order = 0;  // submit order, for FIFO within a priority
    int64_t next_sequence = 1;
    std::map<int, LiveAttempt> attempts;  // by task index, running ones only
    // GPU tasks: the GPUs a task ran out of memory on; a retry goes elsewhere.
    std::map<int, std::set<int>> oom_gpus;
    // Every task succeeded; the job ends once its predictions are merged.
    bool finishing = false;
    // Its trials, ASHA's rungs and when a task may start (a search's or a
    // CV's refit).
    SearchController search;
  };
  // An attempt being launched: prepared under the mutex, started without it.
  struct LaunchPlan {
    std::string job_id;
    int task = 0;
    std::string dir;              // the task's directory (created by the launch)
    traind::v1::Attempt attempt;  // added to the task once launched
    std::vector<LaunchRequest> ranks;
    std::vector<std::string> gpu_uuids;
  };
  struct LaunchOutcome {
    std::vector<int> pids;   // of the ranks started, in rank order
    absl::Status status;     // the first rank that could not start
    bool attempted = false;  // the directory exists and a launch was tried
  };

  void Loop();
  void DispatchLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The queue in the order DispatchLocked tries it (fair share between
  // owners within a priority, when on).
  std::vector<DispatchQueue::Entry> DispatchOrderLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The same for job views (GetJob, ListJobs: every queued job's view), kept
  // while neither the queue nor any owner's running tasks changed, for at
  // most a second (use decays slowly): a list of many jobs sorts the queue
  // once, not once per job.
  const std::vector<DispatchQueue::Entry>& ViewOrderLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void EnforceDeadlinesLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void OnExit(const ProcessExit& exit);
  // Recover: tracks the job's attempts a remote launcher still runs; returns
  // how many. (recovery.cc)
  int AdoptRemoteAttemptsLocked(LiveJob& lj) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A side process's exit, from a side launcher of its own.
  void OnSideExit(const ProcessExit& exit);
  // A remote launcher's news of a launch (pending in its queue, started).
  void OnLaunchStatus(const LaunchStatus& status);
  void OnExitLocked(const ProcessExit& exit, const AttemptTracker::RankRef& ref)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Registers the attempt (launching) and builds its requests.
  LaunchPlan PlanLaunchLocked(LiveJob& lj, int task, const std::vector<int>& gpus)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Creates the task's directory and starts the ranks. Without the mutex:
  // a launch can wait on the zygote or the file system.
  LaunchOutcome RunLaunch(const LaunchPlan& plan) ABSL_LOCKS_EXCLUDED(mu_);
  void RecordLaunchLocked(const LaunchPlan& plan, const LaunchOutcome& outcome)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The launch of `task` failed before any rank started: the task fails.
  void FailLaunchLocked(LiveJob& lj, int task, const absl::Status& why)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Ends the attempt running `task` with `failure` (none: success) and
  // decides what happens next to the task and the job.
  void FinishAttemptLocked(LiveJob& lj, int task, const traind::v1::Failure* failure)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Stops the job's tasks (those `which` selects, when given): queued ones
  // are cancelled, running ones signalled.
  void StopTasksLocked(LiveJob& lj, bool force, const std::function<bool(int)>& which = nullptr,
                       traind::v1::Task::State queued_end = traind::v1::Task::CANCELLED)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Ends the job once every task has ended. A job that succeeded with
  // predictions to merge waits in merges_ (see FinishMerges).
  void MaybeFinishJobLocked(LiveJob& lj) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void EndJobLocked(LiveJob& lj, traind::v1::Job::State final_state)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Merges the predictions of the jobs in merges_ (file I/O, without the
  // mutex), then ends those jobs. Called after a locked section that may
  // have queued merges.
  void FinishMerges() ABSL_LOCKS_EXCLUDED(mu_);
  // Forgets `job_id` when its job has ended.
  void EraseIfEndedLocked(const std::string& job_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<LiveJob*> AuthLocked(const traind::v1::AttemptCredentials& c,
                                      LiveAttempt** attempt) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A new change of `lj` whose events go to pending_events_.
  JobChange ChangeLocked(LiveJob& lj) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Adds an event for `lj` (sequence and time set) and remembers it for
  // publishing after the store write.
  traind::v1::JobEvent* NewEventLocked(LiveJob& lj) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Hands `m` plus the pending events to the writer, which stores them and
  // then publishes the events. On a store error the daemon cannot keep its
  // promises: it logs and aborts.
  // Queues the change for the store; returns its ticket.
  uint64_t CommitLocked(LiveJob& lj, StoreMutation& m) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  uint64_t CommitLocked(LiveJob& lj, JobChange& change) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return CommitLocked(lj, change.mutation());
  }
  traind::v1::Job ViewLocked(const LiveJob& lj) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool DependenciesDoneLocked(const LiveJob& lj, int task) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Acts on ASHA's decisions: a pruned trial's tasks stop, a promoted
  // trial's folds waiting at the rung go on.
  void ActOnSearchLocked(LiveJob& lj, const std::vector<SearchController::Decision>& decisions)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Stops the tasks of a pruned trial (PRUNED).
  void PruneTrialLocked(LiveJob& lj, int trial) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A search's task whose trial would pass search.max_concurrent_trials.
  bool AtTrialLimitLocked(const LiveJob& lj, int task) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  google::protobuf::Timestamp NowProto();

  // Declared first in a public method that may change jobs: when the method
  // returns (its locks released), waits until those changes are stored, so
  // that what it answered is durable. While the store is degraded (a full
  // disk) it does not wait: the changes are in effect and stored, in order,
  // once there is space.
  class StoredOnReturn {
   public:
    explicit StoredOnReturn(StoreWriter* writer) : writer_(writer) {}
    ~StoredOnReturn() { writer_->WaitAllUnlessDegraded(); }
    StoredOnReturn(const StoredOnReturn&) = delete;
    StoredOnReturn& operator=(const StoredOnReturn&) = delete;

   private:
    StoreWriter* const writer_;
  };

  const SchedulerOptions options_;
  Clock* const clock_;
  JobStore* const store_;
  Launcher* const launcher_;
  Launcher* const side_launcher_;  // launcher_ unless the scheduler was given one
  // Where attempts run (this machine, or the cluster of a remote launcher).
  const std::unique_ptr<Placement> placement_;
  std::string attempt_key_;  // options_.attempt_key, or a random one
  EventHub hub_;
  // After hub_: it publishes there until it is destroyed.
  StoreWriter writer_;

  // Makes Submit's idempotency-key lookup (a store read, done without mu_)
  // and the insert one step.
  absl::Mutex submit_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  // Submit without waiting for the store; *ticket: the new job's (0: none).
  absl::StatusOr<traind::v1::Job> SubmitUnstored(const traind::v1::JobSpec& spec,
                                                 const SubmitOptions& options, uint64_t* ticket);
  absl::StatusOr<std::optional<traind::v1::Job>> FindSubmittedLocked(
      const std::string& owner, const std::string& key, const std::string& request_sha256)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(submit_mu_);
  int QueuedJobsLocked(const std::string& owner) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Mutex mu_;
  std::map<std::string, std::unique_ptr<LiveJob>> jobs_ ABSL_GUARDED_BY(mu_);
  // Recently finished jobs, so GetJob of a job that just ended (what
  // dashboards poll) needs no store read. Bounded; oldest out first.
  static constexpr size_t kFinishedCacheSize = 1024;
  void CacheFinishedLocked(const traind::v1::Job& job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::map<std::string, traind::v1::Job> finished_ ABSL_GUARDED_BY(mu_);
  std::deque<std::string> finished_order_ ABSL_GUARDED_BY(mu_);
  void EnqueueLocked(const LiveJob& lj, int task) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  DispatchQueue queue_ ABSL_GUARDED_BY(mu_);
  uint64_t next_order_ ABSL_GUARDED_BY(mu_) = 1;
  AttemptTracker ranks_ ABSL_GUARDED_BY(mu_);
  // Launches in progress (without the mutex). An exit of a pid not known
  // yet waits for them to be recorded.
  int launches_in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  // Worker calls whose attempt's launch was just recorded, for DispatchLocked
  // to run without the mutex (AfterLaunchRecorded).
  std::vector<std::function<void()>> recorded_calls_ ABSL_GUARDED_BY(mu_);
  std::vector<PredictionsMerge> merges_ ABSL_GUARDED_BY(mu_);
  std::deque<traind::v1::JobEvent> pending_events_ ABSL_GUARDED_BY(mu_);  // stable addresses
  FairShare fair_share_ ABSL_GUARDED_BY(mu_);
  std::vector<DispatchQueue::Entry> view_order_ ABSL_GUARDED_BY(mu_);
  uint64_t view_order_version_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t view_order_share_version_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Time view_order_at_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  int running_ ABSL_GUARDED_BY(mu_) = 0;  // CPU tasks
  GpuPool gpus_ ABSL_GUARDED_BY(mu_);
  std::map<int, std::string> gpu_last_job_ ABSL_GUARDED_BY(mu_);  // GPU index -> job id
  absl::Time last_gpu_refresh_ ABSL_GUARDED_BY(mu_);
  // Probes the GPUs (at most every 100 ms unless `force`) and moves the pool
  // on. Releases the mutex during the probe. Loop thread only.
  void RefreshGpusLocked(bool force) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool wake_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;   // Stop() called: no new work
  bool refusing_ ABSL_GUARDED_BY(mu_) = false;   // RefuseNewWork() or Stop() called
  bool loop_exit_ ABSL_GUARDED_BY(mu_) = false;  // the loop thread returns
  bool started_ ABSL_GUARDED_BY(mu_) = false;
  absl::Time last_loop_ ABSL_GUARDED_BY(mu_);
  // Processes of RunProcess by pid: their exit, once it came.
  std::map<int, std::optional<ProcessExit>> side_processes_ ABSL_GUARDED_BY(mu_);
  // Jobs being deleted: not cached again by GetJob meanwhile.
  std::set<std::string> deleting_ ABSL_GUARDED_BY(mu_);
  std::vector<std::function<void(const std::string&)>> deletion_listeners_;
  std::atomic<int64_t> state_dir_bytes_{0};
  std::thread loop_;
};

}  // namespace traind::server

#endif  // TRAIND_SERVER_SCHEDULER_SCHEDULER_H_
