// Scheduler: the core of traind. Owns the live state of every unfinished
// job, turns jobs into tasks, dispatches task attempts to worker processes
// through a Launcher when a CPU slot is free, takes the workers' reports, and
// writes every change to the JobStore before publishing it as an event.
//
// Knows nothing of gRPC: server/api adapts it.
//
// Thread-safety: all public methods are thread-safe.
#ifndef TRAIND_SERVER_SCHEDULER_SCHEDULER_H_
#define TRAIND_SERVER_SCHEDULER_SCHEDULER_H_

#include <deque>
#include <functional>
#include <set>
#include <map>
#include <memory>
#include <optional>
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
#include "server/scheduler/event_hub.h"
#include "server/store/job_store.h"
#include "traind/v1/job.pb.h"
#include "traind/v1/training_service.pb.h"
#include "traind/v1/worker_service.pb.h"

namespace traind::server {

struct SchedulerOptions {
  // Root of the daemon's files; worker logs and artifacts go under jobs/.
  std::string state_dir;
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
  // attempt fails with TIMEOUT.
  absl::Duration heartbeat_timeout = absl::Seconds(30);
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
  std::vector<std::string> worker_env = {"PATH=/usr/local/bin:/usr/bin:/bin", "LANG=C.UTF-8"};
  GpuPoolOptions gpu;
};

struct SubmitOptions {
  // Who submits: a token's name, or "local" over the unix socket.
  std::string owner = "local";
  // Optional: a retried submit with the same (owner, key) returns the job
  // the first one created.
  std::string idempotency_key;
  // GPU jobs: the engine's memory estimate for one task on one GPU.
  int64_t gpu_memory_bytes = 0;
};

struct SchedulerStats {
  int jobs_active = 0;
  int tasks_running = 0;
  int tasks_queued = 0;
};

class Scheduler final {
 public:
  // `store` and `launcher` must outlive the scheduler.
  Scheduler(SchedulerOptions options, JobStore* store, Launcher* launcher);
  ~Scheduler();  // Stop()s
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Loads unfinished jobs from the store. Attempts that were running when
  // the daemon stopped end as LOST and their tasks are queued again;
  // finished tasks are kept. Call once, before Start().
  absl::Status Recover();
  // Starts dispatching.
  void Start();
  // Stops dispatching and kills running workers (their tasks are recovered
  // as LOST on the next start).
  void Stop();

  // --- TrainingService ---
  // REQUIRES: the spec was validated.
  absl::StatusOr<traind::v1::Job> Submit(const traind::v1::JobSpec& spec,
                                         const SubmitOptions& options = {});
  // Jobs of `owner` still waiting for their first task to start.
  int QueuedJobs(const std::string& owner);
  absl::StatusOr<traind::v1::Job> GetJob(const std::string& job_id);
  absl::StatusOr<traind::v1::ListJobsResponse> ListJobs(const traind::v1::ListJobsRequest& req);
  absl::StatusOr<traind::v1::Job> Cancel(const std::string& job_id, bool force);
  absl::StatusOr<traind::v1::JobResult> GetResult(const std::string& job_id);
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
  // healthy): for liveness checks such as the systemd watchdog.
  absl::Time LastLoopTime();

  // --- WorkerService --- (each checks the attempt's secret)
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

  EventHub* hub() { return &hub_; }
  JobStore* store() { return store_; }

 private:
  struct LiveAttempt {
    int number = 0;
    int pid = 0;
    std::string secret;
    int last_epoch = 0;
    bool stop_requested = false;
    std::optional<absl::Time> kill_at;
    std::optional<traind::v1::FoldResult> result;
    std::optional<traind::v1::Failure> failure;
    absl::Time last_seen;
    std::vector<int> gpus;  // GPU tasks: the GPUs it holds (gpus[r] for rank r)
    // One process per rank (one rank unless a multi-GPU task).
    std::vector<int> rank_pids;
    std::vector<bool> rank_alive;
    // Per rank: it reported a failure of its own; traind sent it SIGKILL.
    std::vector<bool> rank_failed;
    std::vector<bool> rank_killed;
    // The rank whose report is `failure` (-1: traind's own finding).
    int failure_rank = -1;
    int alive = 0;
    bool all_exits_clean = true;
    std::optional<ProcessExit> last_exit;
    std::string unique_id;  // posted by rank 0
    std::vector<std::function<void(absl::StatusOr<std::string>)>> rendezvous_waiters;
  };
  struct LiveJob {
    traind::v1::Job job;
    uint64_t order = 0;  // submit order, for FIFO within a priority
    int64_t next_sequence = 1;
    std::map<int, LiveAttempt> attempts;  // by task index, running ones only
    // GPU tasks: the GPUs a task ran out of memory on; a retry goes elsewhere.
    std::map<int, std::set<int>> oom_gpus;
  };

  void Loop();
  void DispatchLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void EnforceDeadlinesLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void OnExit(const ProcessExit& exit);
  absl::Status LaunchLocked(LiveJob& lj, int task, const std::vector<int>& gpus)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Ends the attempt running `task` with `failure` (none: success) and
  // decides what happens next to the task and the job.
  void FinishAttemptLocked(LiveJob& lj, int task, const traind::v1::Failure* failure)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void StopTasksLocked(LiveJob& lj, bool force) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void MaybeFinishJobLocked(LiveJob& lj) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<LiveJob*> AuthLocked(const traind::v1::AttemptCredentials& c,
                                      LiveAttempt** attempt) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Adds an event for `lj` to `m` (sequence and time set) and remembers it
  // for publishing after the store write.
  traind::v1::JobEvent* NewEventLocked(LiveJob& lj) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Writes `m` plus the pending events, then publishes them. On a store
  // error the daemon cannot keep its promises: it logs and aborts.
  void CommitLocked(LiveJob& lj, StoreMutation& m) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RemoveQueuedLocked(const std::string& job_id, int task) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  traind::v1::Job ViewLocked(const LiveJob& lj) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void UpdateResultLocked(LiveJob& lj) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void MergePredictionsLocked(LiveJob& lj) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool DependenciesDoneLocked(const LiveJob& lj, int task) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const SchedulerOptions options_;
  JobStore* const store_;
  Launcher* const launcher_;
  EventHub hub_;

  absl::Mutex mu_;
  std::map<std::string, std::unique_ptr<LiveJob>> jobs_ ABSL_GUARDED_BY(mu_);
  // Recently finished jobs, so GetJob of a job that just ended (what
  // dashboards poll) needs no store read. Bounded; oldest out first.
  static constexpr size_t kFinishedCacheSize = 1024;
  void CacheFinishedLocked(const traind::v1::Job& job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::map<std::string, traind::v1::Job> finished_ ABSL_GUARDED_BY(mu_);
  std::deque<std::string> finished_order_ ABSL_GUARDED_BY(mu_);
  // Queued tasks in dispatch order: higher priority first, then submit
  // order, then task index.
  struct QueueEntry {
    int32_t priority;
    uint64_t order;
    int task;
    std::string job_id;
    bool operator<(const QueueEntry& o) const {
      if (priority != o.priority) return priority > o.priority;
      if (order != o.order) return order < o.order;
      return task < o.task;
    }
  };
  void EnqueueLocked(const LiveJob& lj, int task) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::set<QueueEntry> queue_ ABSL_GUARDED_BY(mu_);
  uint64_t next_order_ ABSL_GUARDED_BY(mu_) = 1;
  struct RankRef {
    std::string job_id;
    int task;
    int rank;
  };
  std::map<int, RankRef> by_pid_ ABSL_GUARDED_BY(mu_);
  // Sends `sig` to every live rank of the attempt but `except_rank`.
  void SignalAttemptLocked(LiveAttempt& la, int sig, int except_rank = -1)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Multi-GPU attempts: a rank failed (`failure` is the attempt's now, unless
  // it has one): the others cannot finish without it. Kills the live ranks
  // but `except_rank` (which reported and exits by itself) and fails the
  // ranks waiting at the rendezvous.
  void StopPeersLocked(LiveAttempt& la, int except_rank) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Fails every pending Rendezvous of the attempt with `why`.
  void FailRendezvousLocked(LiveAttempt& la, absl::string_view why)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::deque<traind::v1::JobEvent> pending_events_ ABSL_GUARDED_BY(mu_);  // stable addresses
  int running_ ABSL_GUARDED_BY(mu_) = 0;  // CPU tasks
  GpuPool gpus_ ABSL_GUARDED_BY(mu_);
  std::map<int, std::string> gpu_last_job_ ABSL_GUARDED_BY(mu_);  // GPU index -> job id
  absl::Time last_gpu_refresh_ ABSL_GUARDED_BY(mu_);
  void RefreshGpusLocked(bool force) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool wake_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;   // Stop() called: no new work
  bool loop_exit_ ABSL_GUARDED_BY(mu_) = false;  // the loop thread returns
  bool started_ ABSL_GUARDED_BY(mu_) = false;
  absl::Time last_loop_ ABSL_GUARDED_BY(mu_) = absl::Now();
  std::thread loop_;
};

}  // namespace traind::server

#endif  // TRAIND_SERVER_SCHEDULER_SCHEDULER_H_
