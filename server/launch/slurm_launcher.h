// SlurmLauncher: each task attempt is one Slurm job (sbatch), so traind
// stays the API, the store and the stream in front of a Slurm cluster.
//
// The workers' own calls are the truth about an attempt (as locally); this
// launcher only says when its Slurm job ended and, when the worker did not
// end by itself, why. Two loops, on one thread:
//  - exit records: the batch script (slurm.h SlurmBatchScript) writes
//    <shared_dir>/slurm/exits/<slurm job id> when the worker exits; they are
//    looked at every exit_poll_interval (a directory read, no Slurm call);
//  - one batched squeue for all of traind's jobs (by name: the traind job
//    ids), spaced at max(poll_interval, 5 × the last query's time): pending
//    reasons (the status callback), and jobs that ended without an exit
//    record (node failure, out of memory, cancelled, time limit, vanished),
//    each mapped to a typed failure (slurm.h SlurmStateFailure). Never one
//    call per job; sacct is not needed.
// Signals go through scancel from the same thread (Signal does not block):
// SIGTERM to the batch script, which forwards it to the worker (a pending
// job is cancelled); SIGKILL cancels the job.
//
// Launch handles are Slurm job ids. Workers outlive traind: Adopt tracks
// the jobs of attempts recorded before a restart.
//
// Thread-safety: all methods are thread-safe.
#ifndef TRAIND_SERVER_LAUNCH_SLURM_LAUNCHER_H_
#define TRAIND_SERVER_LAUNCH_SLURM_LAUNCHER_H_

#include <atomic>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/launch/launcher.h"
#include "server/launch/slurm.h"

namespace traind::server {

class SlurmLauncher final : public Launcher {
 public:
  explicit SlurmLauncher(SlurmOptions options);
  // Stops polling; the Slurm jobs run on.
  ~SlurmLauncher() override;

  // Creates <shared_dir>/slurm/{scripts,exits} and checks that sbatch and
  // squeue answer (a clear error naming the command otherwise). Call once,
  // before the first Launch.
  absl::Status Init();

  void SetExitCallback(ExitCallback callback) override;
  void SetStatusCallback(StatusCallback callback) override;
  // Writes the batch script and runs sbatch (waits for it: call without
  // locks that matter). Returns the Slurm job id.
  absl::StatusOr<int> Launch(const LaunchRequest& request) override;
  bool launches_ranks_together() const override { return true; }
  // One Slurm job of ranks.size() tasks on one node. Rank 0's handle is
  // the Slurm job id; the others' are handles of this launcher's own
  // (negative).
  absl::StatusOr<std::vector<int>> LaunchRanks(const std::vector<LaunchRequest>& ranks) override;
  void Signal(int pid, int sig) override;
  bool remote() const override { return true; }
  absl::Status Adopt(int pid, const std::string& name) override;

  // The Slurm commands run so far, and how many of them failed (the
  // polling load; traind_slurm_commands_total).
  struct CommandCounts {
    int64_t sbatch = 0, sbatch_failed = 0;
    int64_t squeue = 0, squeue_failed = 0;
    int64_t scancel = 0, scancel_failed = 0;
  };
  CommandCounts command_counts() const;

 private:
  struct Tracked {
    int slurm_id = 0;
    int rank = -1;  // of a multi-rank job; -1: a job of one worker
    std::string name;
    absl::Time since;  // submitted or adopted
    bool cancelled_by_traind = false;
    std::string state;  // as squeue last said ("" before the first answer)
    std::string reason;
    bool started_told = false;
    std::optional<LaunchStatus> last_status;
    std::optional<absl::Time> final_since;  // squeue said it ended
    int missing = 0;                        // answers that did not list it
  };
  struct PendingSignal {
    int pid;
    int sig;
  };
  void Loop();
  // One exit-record pass; returns the exits found (and forgets their jobs).
  std::vector<ProcessExit> CollectExits() ABSL_LOCKS_EXCLUDED(mu_);
  // One squeue run (counted in the metrics): the jobs it lists, or nothing
  // when it failed (logged as "slurm squeue<what> failed").
  std::optional<std::vector<SlurmJobState>> Squeue(const std::vector<std::string>& argv,
                                                   const std::string& what);
  // One squeue: updates the tracked jobs; fills the statuses and exits due.
  void PollSlurm(std::vector<LaunchStatus>* statuses, std::vector<ProcessExit>* exits)
      ABSL_LOCKS_EXCLUDED(mu_);
  void SendSignals(std::vector<PendingSignal> signals) ABSL_LOCKS_EXCLUDED(mu_);
  void Deliver(const std::vector<LaunchStatus>& statuses, const std::vector<ProcessExit>& exits);
  // The exit record of a tracked launch.
  std::string ExitPath(const Tracked& t) const;
  // Writes the script and submits it; the Slurm job id.
  absl::StatusOr<int> Submit(const std::string& name, const std::string& script_text,
                             const std::vector<std::string>& argv_without_script);

  SlurmOptions options_;  // srun made absolute by Init
  const std::string scripts_dir_;
  const std::string exits_dir_;
  // Each command's runs and failures (CommandCounts).
  std::atomic<int64_t> sbatch_{0}, sbatch_failed_{0};
  std::atomic<int64_t> squeue_{0}, squeue_failed_{0};
  std::atomic<int64_t> scancel_{0}, scancel_failed_{0};
  std::atomic<uint64_t> script_counter_{0};

  absl::Mutex mu_;
  ExitCallback exit_callback_ ABSL_GUARDED_BY(mu_);
  StatusCallback status_callback_ ABSL_GUARDED_BY(mu_);
  int callbacks_running_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<int, Tracked> jobs_ ABSL_GUARDED_BY(mu_);  // by handle
  int next_rank_handle_ ABSL_GUARDED_BY(mu_) = -1;
  std::deque<PendingSignal> signals_ ABSL_GUARDED_BY(mu_);
  bool poll_now_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace traind::server

#endif  // TRAIND_SERVER_LAUNCH_SLURM_LAUNCHER_H_
