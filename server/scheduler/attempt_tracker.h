// The attempt tracker: what traind knows of each running task attempt — its
// ranks (one worker process per GPU rank, one for everything else), the
// signals sent to them, their heartbeats, the NCCL id rendezvous of
// multi-GPU ranks, and how the ranks' exits and reports become the
// attempt's outcome.
//
// Thread-safety: not thread-safe; the Scheduler guards every LiveAttempt
// and the AttemptTracker with its mutex. Signals go to the Launcher, which
// does not block.
#ifndef TRAIND_SERVER_SCHEDULER_ATTEMPT_TRACKER_H_
#define TRAIND_SERVER_SCHEDULER_ATTEMPT_TRACKER_H_

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "server/launch/launcher.h"
#include "traind/v1/job.pb.h"

namespace traind::server {

// "11 (Segmentation fault)".
std::string SignalName(int sig);

using RendezvousDone = std::function<void(absl::StatusOr<std::string>)>;

struct LiveAttempt {
  int number = 0;
  int pid = 0;  // rank 0's
  std::string secret;
  // Its processes are being started (outside the scheduler's mutex): worker
  // calls wait until the launch is recorded, or are handed to
  // `after_launch` (Scheduler::AfterLaunchRecorded).
  bool launching = false;
  std::vector<std::function<void()>> after_launch;
  int last_epoch = 0;
  int trained_epochs = 0;  // epochs this attempt reported
  // What it holds, in FairShare's units (a CPU slot 1, else its GPUs),
  // counted to its owner from its launch to its end.
  double share_units = 0;
  int share_gpus = 0;  // of them GPUs
  bool stop_requested = false;
  // ASHA: the worker stops after this epoch (TaskAssignment.pause_after_epoch).
  int pause_after = 0;
  std::optional<absl::Time> kill_at;
  std::optional<traind::v1::FoldResult> result;
  std::optional<traind::v1::Failure> failure;
  absl::Time last_seen;
  // A remote launcher's: the attempt waits in the cluster's queue (no
  // heartbeat is due meanwhile), and why.
  bool queued_remotely = false;
  traind::v1::Task::WaitReason remote_wait = traind::v1::Task::WAIT_REASON_UNSPECIFIED;
  std::string remote_wait_detail;
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
  std::vector<RendezvousDone> rendezvous_waiters;

  // A rank's process was started.
  void AddRank(int pid);
  bool multi_rank() const { return rank_pids.size() > 1; }
  // Sends `sig` to every live rank but `except_rank` (SIGKILL once each).
  void Signal(Launcher* launcher, int sig, int except_rank = -1);
  // Multi-GPU attempts: a rank failed (`failure` is the attempt's now,
  // unless it has one): the others cannot finish without it. Kills the live
  // ranks but `except_rank` (which reported and exits by itself) and those
  // that reported their own failure, and fails the ranks waiting at the
  // rendezvous.
  void StopPeers(Launcher* launcher, int except_rank);
  // Fails every pending Rendezvous with `why`.
  void FailRendezvous(absl::string_view why);

  // --- heartbeats ---
  // A message when a rank traind has not killed still runs and no worker
  // call came for longer than `timeout` (while not being stopped).
  std::optional<std::string> MissedHeartbeat(absl::Time now, absl::Duration timeout) const;

  // --- reports and exits ---
  // Rank `rank` reported `failure`; the first failure stays the attempt's.
  // Returns whether the peers should be stopped (a multi-rank attempt, not
  // PREEMPTED: every rank got that signal and stops by itself).
  bool RecordRankFailure(int rank, const traind::v1::Failure& failure);
  // Rank `rank` exited: it no longer runs.
  void MarkRankExited(int rank, const ProcessExit& exit);
  // What the exit of rank `rank` (marked already) means for the attempt.
  // Multi-rank attempts not being stopped: a rank that crashed (no report of
  // its own, not traind's SIGKILL) is the attempt's failure, unless one came
  // first that is not merely a survivor seeing its peer go (a device error or
  // crash reported by another rank); its peers are stopped. `job_id` and
  // `task` name the attempt in the log.
  void ExplainRankExit(int rank, const ProcessExit& exit, Launcher* launcher,
                       absl::string_view job_id, int task);
  // Once every rank exited: whether it succeeded (a result, clean exits).
  bool Succeeded() const { return result.has_value() && all_exits_clean; }
  // Once every rank exited without success: why (`exit` the last rank's).
  traind::v1::Failure Outcome(const ProcessExit& exit) const;

  // --- rendezvous (multi-GPU) ---
  // Rank 0 posts `unique_id`; `done` gets it once it is there (at once for
  // rank 0), or an error when the attempt fails first. `done` may run
  // before this returns; it must not block.
  void Rendezvous(int rank, int world_size, const std::string& unique_id, RendezvousDone done);
};

// Which attempt and rank each worker process is.
class AttemptTracker final {
 public:
  struct RankRef {
    std::string job_id;
    int task;
    int rank;
  };
  void Add(int pid, RankRef ref) { by_pid_[pid] = std::move(ref); }
  // Removes and returns the process's rank; nothing for an unknown pid.
  std::optional<RankRef> Take(int pid);
  bool Has(int pid) const { return by_pid_.count(pid) != 0; }
  std::optional<RankRef> Find(int pid) const {
    auto it = by_pid_.find(pid);
    if (it == by_pid_.end()) return std::nullopt;
    return it->second;
  }
  bool empty() const { return by_pid_.empty(); }
  std::vector<int> pids() const;

 private:
  std::map<int, RankRef> by_pid_;
};

}  // namespace traind::server

#endif  // TRAIND_SERVER_SCHEDULER_ATTEMPT_TRACKER_H_
