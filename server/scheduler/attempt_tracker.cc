#include "server/scheduler/attempt_tracker.h"

#include <signal.h>

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/log.h"

namespace traind::server {

using traind::v1::Failure;

std::string SignalName(int sig) {
  const char* d = sigdescr_np(sig);
  return absl::StrCat(sig, d ? absl::StrCat(" (", d, ")") : "");
}

void LiveAttempt::AddRank(int rank_pid) {
  rank_pids.push_back(rank_pid);
  rank_alive.push_back(true);
  rank_failed.push_back(false);
  rank_killed.push_back(false);
  ++alive;
}

void LiveAttempt::Signal(Launcher* launcher, int sig, int except_rank) {
  for (size_t r = 0; r < rank_pids.size(); ++r) {
    if (!rank_alive[r] || static_cast<int>(r) == except_rank) continue;
    if (sig == SIGKILL) {
      if (rank_killed[r]) continue;  // once is enough
      rank_killed[r] = true;
    }
    launcher->Signal(rank_pids[r], sig);
  }
}

void LiveAttempt::FailRendezvous(absl::string_view why) {
  if (rendezvous_waiters.empty()) return;
  std::vector<RendezvousDone> waiters;
  waiters.swap(rendezvous_waiters);
  for (auto& waiter : waiters) {
    waiter(absl::AbortedError(
        absl::StrCat("the attempt failed before rank 0 posted its NCCL id: ", why)));
  }
}

void LiveAttempt::StopPeers(Launcher* launcher, int except_rank) {
  // A rank that reported its own failure is on its way out, releasing its
  // device (NCCL finalize, the CUDA context): not cut short here. The
  // heartbeat timeout still ends it if it hangs.
  for (size_t r = 0; r < rank_pids.size(); ++r) {
    if (!rank_alive[r] || static_cast<int>(r) == except_rank || rank_failed[r] || rank_killed[r]) {
      continue;
    }
    rank_killed[r] = true;
    launcher->Signal(rank_pids[r], SIGKILL);
  }
  FailRendezvous(failure.has_value() ? failure->message() : std::string("rank 0 exited"));
}

std::optional<std::string> LiveAttempt::MissedHeartbeat(absl::Time now,
                                                        absl::Duration timeout) const {
  // Enforced while any rank runs that traind has not killed yet, also after
  // a failure was recorded (the failure stays the first one): a rank that
  // hangs must not keep the attempt, and its GPUs, forever.
  bool unkilled = false;
  for (size_t r = 0; r < rank_pids.size(); ++r) {
    unkilled = unkilled || (rank_alive[r] && !rank_killed[r]);
  }
  if (!unkilled || stop_requested || queued_remotely || now - last_seen <= timeout) {
    return std::nullopt;
  }
  return absl::StrCat("no heartbeat from the worker for ", absl::FormatDuration(now - last_seen),
                      "; killed");
}

bool LiveAttempt::RecordRankFailure(int rank, const Failure& f) {
  rank_failed[rank] = true;
  if (!failure.has_value()) {
    failure = f;
    failure_rank = rank;
    if (multi_rank()) failure->set_message(absl::StrCat("rank ", rank, ": ", failure->message()));
  }
  // Preempted (SIGUSR2 reaches every rank: Slurm's time limit ahead): the
  // peers checkpoint and stop by themselves; killing them would lose that.
  return multi_rank() && f.reason() != Failure::PREEMPTED;
}

void LiveAttempt::MarkRankExited(int rank, const ProcessExit& exit) {
  rank_alive[rank] = false;
  --alive;
  const bool clean = exit.signal == 0 && exit.exit_code == 0;
  all_exits_clean = all_exits_clean && clean;
}

void LiveAttempt::ExplainRankExit(int rank, const ProcessExit& exit, Launcher* launcher,
                                  absl::string_view job_id, int task) {
  const bool clean = exit.signal == 0 && exit.exit_code == 0;
  if (!clean && !last_exit.has_value()) last_exit = exit;
  if (!multi_rank() || stop_requested) return;
  // A rank that died by itself (no failure report of its own, not by
  // traind's SIGKILL) crashed. The crash is the attempt's failure unless one
  // was recorded first; it also replaces what a surviving rank reported as a
  // device error or crash, which is likely only that rank seeing its peer go
  // (NCCL's remote errors, aborts, timeouts): the dead rank's crash is the
  // cause, and it is retried.
  const bool killed_by_traind = exit.signal == SIGKILL && rank_killed[rank];
  if (!clean && !rank_failed[rank] && !killed_by_traind) {
    const bool replace = !failure.has_value() || (failure_rank >= 0 && failure_rank != rank &&
                                                  (failure->reason() == Failure::DEVICE_ERROR ||
                                                   failure->reason() == Failure::WORKER_CRASHED));
    if (replace) {
      Failure f;
      f.set_reason(Failure::WORKER_CRASHED);
      f.set_message(absl::StrCat("rank ", rank, " (pid ", exit.pid, ") ",
                                 exit.signal != 0
                                     ? absl::StrCat("killed by signal ", SignalName(exit.signal))
                                     : absl::StrCat("exited with code ", exit.exit_code)));
      f.set_exit_code(exit.exit_code);
      f.set_signal(exit.signal);
      if (failure.has_value()) {
        LogWarning("rank crash job=%s task=%d attempt=%d: %s (rank %d reported: %s)", job_id, task,
                   number, f.message(), failure_rank, failure->message());
      }
      failure = f;
      failure_rank = -1;
    }
  }
  if (alive > 0 && (!clean || failure.has_value())) {
    // The others cannot finish without this rank: stop them now rather
    // than let them wait on a collective until their own timeout.
    StopPeers(launcher, -1);
  } else if (rank == 0 && unique_id.empty()) {
    FailRendezvous("rank 0 exited");
  }
}

Failure LiveAttempt::Outcome(const ProcessExit& exit) const {
  const ProcessExit last = last_exit.value_or(exit);
  Failure f;
  if (last.failure.has_value() && !stop_requested &&
      (!failure.has_value() || failure->reason() == Failure::CANCELLED)) {
    // The launcher knows why (a Slurm job cancelled outside traind, a node
    // failure, ...): the worker's own "cancelled" was only what it saw.
    f = *last.failure;
  } else if (failure.has_value()) {
    f = *failure;
  } else if (stop_requested) {
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
  return f;
}

void LiveAttempt::Rendezvous(int rank, int world_size, const std::string& id, RendezvousDone done) {
  if (world_size != static_cast<int>(rank_pids.size())) {
    done(absl::InvalidArgumentError(absl::StrCat(
        "world_size ", world_size, ", but the attempt has ", rank_pids.size(), " ranks")));
    return;
  }
  if (rank == 0) {
    if (id.empty()) {
      done(absl::InvalidArgumentError("unique_id: rank 0 must post the communicator id"));
      return;
    }
    unique_id = id;
    for (auto& waiter : rendezvous_waiters) waiter(unique_id);
    rendezvous_waiters.clear();
    done(unique_id);
    return;
  }
  if (!unique_id.empty()) {
    done(unique_id);
    return;
  }
  if (failure.has_value() || !rank_alive[0]) {
    // Rank 0 will never post: fail now rather than at the worker's timeout.
    done(absl::AbortedError(
        absl::StrCat("the attempt failed before rank 0 posted its NCCL id: ",
                     failure.has_value() ? failure->message() : std::string("rank 0 exited"))));
    return;
  }
  rendezvous_waiters.push_back(std::move(done));
}

std::optional<AttemptTracker::RankRef> AttemptTracker::Take(int pid) {
  auto it = by_pid_.find(pid);
  if (it == by_pid_.end()) return std::nullopt;
  RankRef ref = std::move(it->second);
  by_pid_.erase(it);
  return ref;
}

std::vector<int> AttemptTracker::pids() const {
  std::vector<int> out;
  for (const auto& [pid, ref] : by_pid_) out.push_back(pid);
  return out;
}

}  // namespace traind::server
