// What traind says to Slurm and how it reads Slurm's answers: the sbatch
// command line of a task attempt, its batch script, the batched squeue
// query and its output, Slurm's job states and pending reasons in traind's
// terms, and the exit record a batch script leaves. Pure functions (no
// processes, no files): slurm_launcher.h runs them.
//
// Thread-safety: thread-safe (no state).
#ifndef TRAIND_SERVER_LAUNCH_SLURM_H_
#define TRAIND_SERVER_LAUNCH_SLURM_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "server/launch/launcher.h"
#include "traind/v1/job.pb.h"

namespace traind::server {

struct SlurmOptions {
  std::string partition;  // --partition (empty: the cluster's default)
  std::string account;    // --account
  std::string qos;        // --qos
  // Appended to every sbatch command line as given (e.g. "--time=04:00:00",
  // "--constraint=a100").
  std::vector<std::string> extra_sbatch_args;
  // A directory every node sees at the same path: batch scripts, exit
  // records, and (as <shared_dir>/jobs) the jobs' logs, checkpoints and
  // artifacts.
  std::string shared_dir;
  // The address workers call back on (host:port); traind's WorkerService
  // listens there too.
  std::string worker_address;
  // Slurm sends SIGUSR2 this long before a job's time limit (or on
  // preemption): the worker checkpoints and its task goes on in a new attempt.
  absl::Duration signal_before_limit = absl::Seconds(120);
  // The shortest spacing of the batched squeue query (it is spaced at
  // max(this, 5 × the last query's time)).
  absl::Duration poll_interval = absl::Seconds(5);
  // How often the exit records in <shared_dir>/slurm/exits are looked at (a
  // directory read, no Slurm call).
  absl::Duration exit_poll_interval = absl::Milliseconds(500);
  // The commands (found in PATH unless absolute).
  std::string sbatch = "sbatch";
  std::string squeue = "squeue";
  std::string scancel = "scancel";
  std::string srun = "srun";  // run inside jobs: SlurmLauncher::Init makes it absolute
};

// The batch script of one launch: exports exactly `request.env` (plus what
// Slurm sets for the job: SLURM_*, and CUDA_VISIBLE_DEVICES when the
// request does not set it), runs the worker as a child, forwards SIGUSR2 and
// SIGTERM to it, and writes the exit record <exit_dir>/$SLURM_JOB_ID
// (ParseExitRecord) before it exits with the worker's status.
std::string SlurmBatchScript(const LaunchRequest& request, const std::string& exit_dir);

// The batch script of a multi-GPU attempt: its ranks (ranks[r] is rank r's
// request) are the tasks of one srun step on one node; each runs its worker
// as SlurmBatchScript does, with its output appended to its request's
// log_path and its exit record at <exit_dir>/$SLURM_JOB_ID.<rank>. `srun`:
// its absolute path (the job's environment has no PATH of traind's).
std::string SlurmRanksBatchScript(const std::vector<LaunchRequest>& ranks,
                                  const std::string& exit_dir, const std::string& srun);

// The sbatch command line (argv) that submits `script` for `request`
// (rank 0's request of a multi-GPU attempt of `ranks` ranks: that many
// Slurm tasks on one node, memory for all).
std::vector<std::string> SbatchArgv(const SlurmOptions& options, const LaunchRequest& request,
                                    const std::string& script, int ranks = 1);

// Whether sbatch's error says it never reached the controller (a
// connection refused or not made), so that submitting again cannot make a
// second job. A timeout is not such an error: the job may have been taken.
bool SbatchNeverReachedSlurm(absl::string_view error);

// The job id from `sbatch --parsable` output ("123" or "123;cluster").
absl::StatusOr<int> ParseSbatchJobId(absl::string_view out);

// The batched query of the jobs named `names` (every state, one call).
std::vector<std::string> SqueueArgv(const SlurmOptions& options,
                                    const std::vector<std::string>& names);

// The query of one job, by id, in SqueueArgv's format.
std::vector<std::string> SqueueJobArgv(const SlurmOptions& options, int job_id);

struct SlurmJobState {
  int job_id = 0;
  std::string state;   // "PENDING", "RUNNING", "COMPLETED", ...
  std::string reason;  // squeue's %r ("Priority", "None", ...)
};
// squeue's output for SqueueArgv's format; lines that do not parse are
// skipped (and counted in `*bad`, if given).
std::vector<SlurmJobState> ParseSqueue(absl::string_view out, int* bad = nullptr);

// Whether Slurm will not run the job any more (its state is final).
bool SlurmStateIsFinal(absl::string_view state);
bool SlurmStateIsPending(absl::string_view state);

// A pending job's reason in traind's terms (Task.WaitReason).
traind::v1::Task::WaitReason SlurmWaitReason(absl::string_view reason);

// What a final Slurm state means for an attempt whose worker did not end by
// itself: the failure (typed; transient ones are retried), or nothing when
// the state says the job ended on its own (COMPLETED, FAILED: the exit
// status tells). `cancelled_by_traind`: traind itself cancelled the job.
std::optional<traind::v1::Failure> SlurmStateFailure(int job_id, absl::string_view state,
                                                     absl::string_view reason,
                                                     bool cancelled_by_traind);

// The failure of a job whose worker a SIGTERM from outside traind stopped
// (the exit record says TERM, and traind did not cancel it), given what
// squeue says about the job now (nullptr: nothing). At a time limit or a
// preemption that came before Slurm's warning did, or without one, the
// worker still checkpointed on SIGTERM: PREEMPTED, and the task goes on from
// there; otherwise (scancel, an administrator) WORKER_CRASHED.
traind::v1::Failure SlurmTermFailure(int job_id, const SlurmJobState* now,
                                     absl::Duration signal_before_limit);

// The exit record a batch script writes: "exit=<status> signals=<names>"
// (status as the shell reports it: 128 + N for a worker killed by signal N;
// signals: those the batch script received, comma-separated, or "-").
struct SlurmExitRecord {
  int exit_code = 0;
  int signal = 0;
  bool got_term = false;  // the batch script got SIGTERM (scancel, preemption)
  bool got_usr2 = false;  // ... SIGUSR2 (time limit ahead, preemption)
};
absl::StatusOr<SlurmExitRecord> ParseExitRecord(absl::string_view text);

// How long the next squeue waits: max(min_interval, 5 × the last query's time).
absl::Duration NextSlurmPoll(absl::Duration min_interval, absl::Duration last_query);

}  // namespace traind::server

#endif  // TRAIND_SERVER_LAUNCH_SLURM_H_
