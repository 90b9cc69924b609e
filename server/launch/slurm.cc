#include "server/launch/slurm.h"

#include <signal.h>

#include <algorithm>
#include <cmath>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace traind::server {

using traind::v1::Failure;
using traind::v1::Task;

namespace {

// 'text' for the shell: single quotes, each ' as '\''.
std::string ShellQuote(absl::string_view text) {
  std::string out = "'";
  for (char c : text) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out.push_back(c);
    }
  }
  out += "'";
  return out;
}

Failure MakeFailure(Failure::Reason reason, std::string message) {
  Failure f;
  f.set_reason(reason);
  f.set_message(std::move(message));
  return f;
}

}  // namespace

namespace {

// The start of every script: the signals it is sent are written to the
// job's signals file (`$signals_file`, named in the worker's environment as
// TRAIND_STOP_SIGNALS_FILE) before they are passed on, so a worker that
// starts or installs its handlers only after one arrived still sees it.
// The file is in the exit directory, next to the exit records, and removed
// by the batch step once its workers are done.
std::string SignalsPreamble(const std::string& exit_dir) {
  return absl::StrCat("exits=", ShellQuote(exit_dir),
                      "\n"
                      "signals_file=\"$exits/$SLURM_JOB_ID.signals\"\n"
                      "signals=\n"
                      "child=\n"
                      "forward() {\n"
                      "  signals=\"${signals:+$signals,}$1\"\n"
                      "  printf '%s\\n' \"$1\" >> \"$signals_file\"\n"
                      "  if [ -n \"$child\" ]; then kill -\"$1\" \"$child\" 2>/dev/null; fi\n"
                      "}\n"
                      "trap 'forward USR2' USR2\n"
                      "trap 'forward TERM' TERM\n");
}

// The part of a script that runs one child (`command`, shell words) with
// SIGUSR2 and SIGTERM passed on to it, then exits with its status. The child
// starts with both signals ignored until it installs its own handlers (a
// signal in between would otherwise kill it before it can checkpoint); it
// reads what it missed from the signals file.
std::string RunChild(const std::string& command) {
  return absl::StrCat("( trap '' USR2 TERM; exec ", command,
                      " ) &\n"
                      "child=$!\n"
                      "while :; do\n"
                      "  wait \"$child\"; rc=$?\n"
                      "  kill -0 \"$child\" 2>/dev/null || break\n"
                      "done\n"
                      "# An interrupted wait said 128 + the trapped signal: the child's own\n"
                      "# status, if the shell still holds it.\n"
                      "wait \"$child\" 2>/dev/null; again=$?\n"
                      "if [ \"$again\" -ne 127 ]; then rc=$again; fi\n");
}

// One worker: `request.env` plus Slurm's SLURM_* (and CUDA_VISIBLE_DEVICES
// when the request does not set it) is its whole environment; with
// `own_log`, its output is appended to request.log_path. Its status is
// recorded in the exit record `record` (a shell word) before the shell
// exits with that status.
std::string RunOneWorker(const LaunchRequest& request, const std::string& record, bool own_log) {
  std::string s = "env=(\n";
  bool sets_visible_devices = false;
  for (const std::string& e : request.env) {
    absl::StrAppend(&s, "  ", ShellQuote(e), "\n");
    if (absl::StartsWith(e, "CUDA_VISIBLE_DEVICES=")) sets_visible_devices = true;
  }
  s += ")\n";
  // What Slurm says about the job (SLURM_JOB_ID, SLURM_RESTART_COUNT, ...),
  // and the GPUs it gave the job.
  s += "for v in $(compgen -e); do\n"
       "  case \"$v\" in SLURM_*|SLURMD_*) env+=(\"$v=${!v}\");; esac\n"
       "done\n"
       "env+=(\"TRAIND_STOP_SIGNALS_FILE=$signals_file\")\n";
  if (!sets_visible_devices) {
    s += "if [ -n \"${CUDA_VISIBLE_DEVICES+x}\" ]; then\n"
         "  env+=(\"CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES\")\n"
         "fi\n";
  }
  std::string command = "/usr/bin/env -i \"${env[@]}\"";
  for (const std::string& a : request.argv) absl::StrAppend(&command, " ", ShellQuote(a));
  if (own_log) absl::StrAppend(&command, " >>", ShellQuote(request.log_path), " 2>&1");
  s += RunChild(command);
  absl::StrAppend(&s, "record=\"$exits/", record, "\"\n");
  s += "printf 'exit=%d signals=%s\\n' \"$rc\" \"${signals:--}\" > \"$record.tmp\" &&\n"
       "  mv -f \"$record.tmp\" \"$record\"\n";
  return s;
}

}  // namespace

std::string SlurmBatchScript(const LaunchRequest& request, const std::string& exit_dir) {
  return absl::StrCat(
      "#!/bin/bash\n"
      "# A traind task attempt, submitted by traind (sbatch). The worker runs as\n"
      "# a child: SIGUSR2 (time limit ahead) and SIGTERM reach it through here,\n"
      "# and its exit status is recorded for traind before this script exits.\n",
      SignalsPreamble(exit_dir), RunOneWorker(request, "$SLURM_JOB_ID", /*own_log=*/false),
      "rm -f \"$signals_file\"\n"
      "exit \"$rc\"\n");
}

std::string SlurmRanksBatchScript(const std::vector<LaunchRequest>& ranks,
                                  const std::string& exit_dir, const std::string& srun) {
  std::string s = absl::StrCat(
      "#!/bin/bash\n"
      "# A traind multi-GPU task attempt, submitted by traind (sbatch): its ranks\n"
      "# are the tasks of one srun step, each running this script with --rank\n"
      "# (rank = SLURM_PROCID). Each rank's worker runs as a child of its shell,\n"
      "# gets SIGUSR2 and SIGTERM through it, and has its own exit record.\n",
      SignalsPreamble(exit_dir));
  for (size_t r = 0; r < ranks.size(); ++r) {
    absl::StrAppend(&s, "rank_", r, "() {\n",
                    RunOneWorker(ranks[r], absl::StrCat("$SLURM_JOB_ID.", r), /*own_log=*/true),
                    "  exit \"$rc\"\n"
                    "}\n");
  }
  s += "if [ \"${1:-}\" = --rank ]; then\n"
       "  case \"$SLURM_PROCID\" in\n";
  for (size_t r = 0; r < ranks.size(); ++r) {
    absl::StrAppend(&s, "    ", r, ") rank_", r, ";;\n");
  }
  s += "  esac\n"
       "  echo \"traind: unexpected SLURM_PROCID $SLURM_PROCID\" >&2\n"
       "  exit 2\n"
       "fi\n";
  // The batch step: one srun of every rank; signals go to srun, which
  // passes them on to the ranks (and a rank that starts later reads them
  // from the signals file).
  absl::StrAppend(&s,
                  RunChild(absl::StrCat(ShellQuote(srun), " --ntasks=", ranks.size(),
                                        " --nodes=1 --kill-on-bad-exit=0 /bin/bash \"$0\" --rank")),
                  "rm -f \"$signals_file\"\n"
                  "exit \"$rc\"\n");
  return s;
}

std::vector<std::string> SbatchArgv(const SlurmOptions& o, const LaunchRequest& r,
                                    const std::string& script, int ranks) {
  std::vector<std::string> argv = {o.sbatch, "--parsable", absl::StrCat("--job-name=", r.name),
                                   absl::StrCat("--output=", r.log_path), "--open-mode=append",
                                   absl::StrCat("--chdir=", o.shared_dir),
                                   // The script sets the worker's environment itself.
                                   "--export=NONE",
                                   // A job Slurm would requeue ends instead: traind starts
                                   // a new attempt, with a new secret.
                                   "--no-requeue", "--nodes=1",
                                   absl::StrCat("--ntasks=", std::max(1, ranks)),
                                   absl::StrCat("--cpus-per-task=", std::max(1, r.cpus))};
  if (r.memory_bytes > 0) {
    // --mem is per node: every rank's.
    const int64_t mib = (r.memory_bytes * std::max(1, ranks) + (1 << 20) - 1) >> 20;
    argv.push_back(absl::StrCat("--mem=", mib, "M"));
  }
  if (r.gpus > 0) argv.push_back(absl::StrCat("--gres=gpu:", r.gpus));
  if (r.nice > 0) argv.push_back(absl::StrCat("--nice=", r.nice));
  const int64_t before = std::max<int64_t>(1, absl::ToInt64Seconds(o.signal_before_limit));
  argv.push_back(absl::StrCat("--signal=B:USR2@", before));
  if (!o.partition.empty()) argv.push_back(absl::StrCat("--partition=", o.partition));
  if (!o.account.empty()) argv.push_back(absl::StrCat("--account=", o.account));
  if (!o.qos.empty()) argv.push_back(absl::StrCat("--qos=", o.qos));
  argv.insert(argv.end(), o.extra_sbatch_args.begin(), o.extra_sbatch_args.end());
  argv.push_back(script);
  return argv;
}

bool SbatchNeverReachedSlurm(absl::string_view error) {
  return absl::StrContains(error, "Unable to contact slurm controller") &&
         absl::StrContains(error, "connect failure");
}

absl::StatusOr<int> ParseSbatchJobId(absl::string_view out) {
  absl::string_view line = absl::StripAsciiWhitespace(out);
  // The last line: sbatch may print warnings first.
  if (size_t nl = line.rfind('\n'); nl != absl::string_view::npos) line = line.substr(nl + 1);
  absl::string_view id = line.substr(0, line.find(';'));
  int job_id = 0;
  if (!absl::SimpleAtoi(id, &job_id) || job_id <= 0) {
    return absl::InternalError(
        absl::StrCat("sbatch --parsable printed \"", out, "\", not a job id"));
  }
  return job_id;
}

std::vector<std::string> SqueueArgv(const SlurmOptions& o, const std::vector<std::string>& names) {
  return {o.squeue, "--noheader", "--states=all",
          absl::StrCat("--name=", absl::StrJoin(names, ",")), "--format=%i|%T|%r"};
}

std::vector<std::string> SqueueJobArgv(const SlurmOptions& o, int job_id) {
  return {o.squeue, "--noheader", "--states=all", absl::StrCat("--jobs=", job_id),
          "--format=%i|%T|%r"};
}

std::vector<SlurmJobState> ParseSqueue(absl::string_view out, int* bad) {
  std::vector<SlurmJobState> jobs;
  int skipped = 0;
  for (absl::string_view line : absl::StrSplit(out, '\n', absl::SkipWhitespace())) {
    std::vector<absl::string_view> f = absl::StrSplit(absl::StripAsciiWhitespace(line), '|');
    SlurmJobState j;
    if (f.size() != 3 || !absl::SimpleAtoi(f[0], &j.job_id) || f[1].empty()) {
      ++skipped;
      continue;
    }
    j.state = std::string(f[1]);
    j.reason = std::string(f[2]);
    jobs.push_back(std::move(j));
  }
  if (bad != nullptr) *bad = skipped;
  return jobs;
}

bool SlurmStateIsPending(absl::string_view state) {
  return state == "PENDING" || state == "REQUEUED" || state == "REQUEUE_HOLD" ||
         state == "REQUEUE_FED" || state == "RESV_DEL_HOLD";
}

bool SlurmStateIsFinal(absl::string_view state) {
  static constexpr absl::string_view kFinal[] = {
      "COMPLETED", "FAILED",   "CANCELLED", "TIMEOUT", "NODE_FAIL",   "OUT_OF_MEMORY",
      "BOOT_FAIL", "DEADLINE", "PREEMPTED", "REVOKED", "SPECIAL_EXIT"};
  return std::find(std::begin(kFinal), std::end(kFinal), state) != std::end(kFinal);
}

Task::WaitReason SlurmWaitReason(absl::string_view reason) {
  if (reason == "Priority") return Task::PRIORITY;
  if (reason == "Dependency" || reason == "BeginTime") return Task::DEPENDENCY;
  if (reason == "JobHeldUser" || reason == "JobHeldAdmin") return Task::HELD;
  if (reason == "JobArrayTaskLimit") return Task::JOB_LIMIT;
  if (absl::StartsWith(reason, "QOS") || absl::StartsWith(reason, "Assoc") ||
      absl::StartsWith(reason, "Partition") || reason == "AccountingPolicy") {
    return Task::LIMIT;
  }
  return Task::RESOURCES;  // Resources, None (just submitted), ReqNodeNotAvail, ...
}

std::optional<Failure> SlurmStateFailure(int job_id, absl::string_view state,
                                         absl::string_view reason, bool cancelled_by_traind) {
  const std::string job = absl::StrCat("Slurm job ", job_id);
  const std::string why = reason.empty() || reason == "None" ? "" : absl::StrCat(" (", reason, ")");
  if (state == "CANCELLED") {
    if (cancelled_by_traind) return MakeFailure(Failure::CANCELLED, "cancelled");
    return MakeFailure(Failure::WORKER_CRASHED,
                       absl::StrCat(job, " was cancelled outside traind (scancel, an ",
                                    "administrator or a preemption)", why));
  }
  if (state == "TIMEOUT" || state == "DEADLINE") {
    return MakeFailure(Failure::TIMEOUT, absl::StrCat(job, " reached its time limit", why));
  }
  if (state == "NODE_FAIL") {
    return MakeFailure(Failure::WORKER_CRASHED, absl::StrCat(job, ": its node failed", why));
  }
  if (state == "BOOT_FAIL") {
    return MakeFailure(Failure::WORKER_CRASHED, absl::StrCat(job, ": its node did not boot", why));
  }
  if (state == "OUT_OF_MEMORY") {
    return MakeFailure(Failure::OUT_OF_MEMORY,
                       absl::StrCat(job, " used more memory than it asked for (--mem)", why));
  }
  if (state == "PREEMPTED") {
    return MakeFailure(Failure::PREEMPTED, absl::StrCat(job, " was preempted", why));
  }
  return MakeFailure(Failure::WORKER_CRASHED,
                     absl::StrCat(job, " ended ", state, why, " without an exit record"));
}

Failure SlurmTermFailure(int job_id, const SlurmJobState* now, absl::Duration signal_before_limit) {
  const std::string job = absl::StrCat("Slurm job ", job_id);
  if (now != nullptr && now->job_id == job_id) {
    if (now->state == "TIMEOUT" || now->state == "DEADLINE" || now->reason == "TimeLimit" ||
        now->reason == "DeadLine") {
      return MakeFailure(
          Failure::PREEMPTED,
          absl::StrCat(job, " reached its time limit before Slurm's warning (--signal=B:USR2@",
                       absl::ToInt64Seconds(signal_before_limit),
                       ") reached the worker; the task goes on from its last checkpoint"));
    }
    if (now->state == "PREEMPTED") {
      return MakeFailure(
          Failure::PREEMPTED,
          absl::StrCat(job, " was preempted; the task goes on from its last ", "checkpoint"));
    }
  }
  return MakeFailure(Failure::WORKER_CRASHED,
                     absl::StrCat(job,
                                  " was stopped by SIGTERM from outside traind (scancel, an "
                                  "administrator or a preemption)"));
}

absl::StatusOr<SlurmExitRecord> ParseExitRecord(absl::string_view text) {
  SlurmExitRecord r;
  bool have_exit = false;
  for (absl::string_view field : absl::StrSplit(text, absl::ByAnyChar(" \n"), absl::SkipEmpty())) {
    if (absl::ConsumePrefix(&field, "exit=")) {
      int status = 0;
      if (!absl::SimpleAtoi(field, &status) || status < 0 || status > 255) break;
      if (status > 128) {
        r.signal = status - 128;
      } else {
        r.exit_code = status;
      }
      have_exit = true;
    } else if (absl::ConsumePrefix(&field, "signals=")) {
      for (absl::string_view sig : absl::StrSplit(field, ',')) {
        r.got_term |= sig == "TERM";
        r.got_usr2 |= sig == "USR2";
      }
    }
  }
  if (!have_exit) {
    return absl::DataLossError(
        absl::StrCat("exit record \"", absl::CHexEscape(text), "\" has no exit=<status>"));
  }
  return r;
}

absl::Duration NextSlurmPoll(absl::Duration min_interval, absl::Duration last_query) {
  return std::max(min_interval, 5 * last_query);
}

}  // namespace traind::server
