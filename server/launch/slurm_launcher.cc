#include "server/launch/slurm_launcher.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "base/log.h"
#include "server/launch/command.h"

namespace traind::server {

namespace fs = std::filesystem;
using traind::v1::Failure;

namespace {

constexpr absl::Duration kCommandTimeout = absl::Seconds(60);
// A job Slurm calls ended gets this long for its exit record to appear (a
// shared file system may show it late).
constexpr absl::Duration kExitRecordGrace = absl::Seconds(5);
// A job squeue does not list (twice in a row) after this long since its
// submit is gone.
constexpr absl::Duration kVanishedAfter = absl::Seconds(10);

absl::Status WriteFile(const std::string& path, const std::string& text, mode_t mode) {
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
  if (fd < 0) return absl::InternalError(absl::StrCat(path, ": ", strerror(errno)));
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int e = errno;
      close(fd);
      return absl::InternalError(absl::StrCat(path, ": ", strerror(e)));
    }
    done += n;
  }
  if (close(fd) != 0) return absl::InternalError(absl::StrCat(path, ": ", strerror(errno)));
  return absl::OkStatus();
}

}  // namespace

SlurmLauncher::SlurmLauncher(SlurmOptions options)
    : options_(std::move(options)),
      scripts_dir_((fs::path(options_.shared_dir) / "slurm" / "scripts").string()),
      exits_dir_((fs::path(options_.shared_dir) / "slurm" / "exits").string()) {
  thread_ = std::thread([this] { Loop(); });
}

SlurmLauncher::~SlurmLauncher() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

absl::Status SlurmLauncher::Init() {
  if (options_.shared_dir.empty()) {
    return absl::InvalidArgumentError("slurm.shared_dir: required with launcher: slurm");
  }
  for (const std::string& dir : {scripts_dir_, exits_dir_}) {
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec) return absl::FailedPreconditionError(absl::StrCat(dir, ": ", ec.message()));
  }
  // The scripts hold the attempts' secrets; the workers write exit records.
  chmod(scripts_dir_.c_str(), 0700);
  chmod(exits_dir_.c_str(), 0700);
  // Batch scripts run srun without traind's PATH: its absolute path.
  if (options_.srun.find('/') == std::string::npos) {
    absl::StatusOr<CommandResult> r =
        RunCommand({"/bin/sh", "-c", absl::StrCat("command -v ", options_.srun)}, kCommandTimeout);
    if (r.ok() && r->exit_code == 0) {
      options_.srun = std::string(absl::StripAsciiWhitespace(r->out));
    }
  }
  for (const std::string& cmd : {options_.sbatch, options_.squeue}) {
    absl::StatusOr<CommandResult> r = RunCommand({cmd, "--version"}, kCommandTimeout);
    if (!r.ok())
      return absl::FailedPreconditionError(absl::StrCat("slurm: ", r.status().message()));
    if (r->exit_code != 0) {
      return absl::FailedPreconditionError(
          absl::StrCat("slurm: ", cmd, " --version: ", CommandError({cmd}, *r)));
    }
  }
  return absl::OkStatus();
}

SlurmLauncher::CommandCounts SlurmLauncher::command_counts() const {
  CommandCounts c;
  c.sbatch = sbatch_.load();
  c.sbatch_failed = sbatch_failed_.load();
  c.squeue = squeue_.load();
  c.squeue_failed = squeue_failed_.load();
  c.scancel = scancel_.load();
  c.scancel_failed = scancel_failed_.load();
  return c;
}

void SlurmLauncher::SetExitCallback(ExitCallback callback) {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](int* running) { return *running == 0; }, &callbacks_running_));
  exit_callback_ = std::move(callback);
}

void SlurmLauncher::SetStatusCallback(StatusCallback callback) {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](int* running) { return *running == 0; }, &callbacks_running_));
  status_callback_ = std::move(callback);
}

std::string SlurmLauncher::ExitPath(const Tracked& t) const {
  return (fs::path(exits_dir_) /
          (t.rank < 0 ? std::to_string(t.slurm_id) : absl::StrCat(t.slurm_id, ".", t.rank)))
      .string();
}

absl::StatusOr<int> SlurmLauncher::Submit(const std::string& name, const std::string& script_text,
                                          const std::vector<std::string>& argv_without_script) {
  const std::string script =
      (fs::path(scripts_dir_) /
       absl::StrCat(name, "-", getpid(), "-", script_counter_.fetch_add(1), ".sh"))
          .string();
  if (absl::Status s = WriteFile(script, script_text, 0700); !s.ok()) return s;
  std::vector<std::string> argv = argv_without_script;
  argv.back() = script;
  absl::StatusOr<CommandResult> r = RunCommand(argv, kCommandTimeout);
  ++sbatch_;
  if (!r.ok() || r->exit_code != 0) ++sbatch_failed_;
  // A controller that cannot be reached (restarting, failing over) got
  // nothing: tried again, twice, after 1 s and 3 s. (Not a timeout: the
  // job may have been taken.)
  for (absl::Duration wait : {absl::Seconds(1), absl::Seconds(3)}) {
    if (!r.ok() || r->exit_code == 0 || !SbatchNeverReachedSlurm(CommandError(argv, *r))) break;
    LogWarning("slurm sbatch name=%s: %s; again in %s", name, CommandError(argv, *r),
               absl::FormatDuration(wait));
    absl::SleepFor(wait);
    r = RunCommand(argv, kCommandTimeout);
    ++sbatch_;
    if (!r.ok() || r->exit_code != 0) ++sbatch_failed_;
  }
  // Slurm keeps its own copy of the script: this one (it holds the
  // attempt's secret) is not needed any more.
  unlink(script.c_str());
  if (!r.ok()) return r.status();
  if (r->exit_code != 0) {
    std::string why = CommandError(argv, *r);
    if (!absl::StartsWith(why, "sbatch")) why = absl::StrCat("sbatch: ", why);
    return absl::UnavailableError(why);
  }
  return ParseSbatchJobId(r->out);
}

absl::StatusOr<int> SlurmLauncher::Launch(const LaunchRequest& request) {
  absl::StatusOr<int> id = Submit(request.name, SlurmBatchScript(request, exits_dir_),
                                  SbatchArgv(options_, request, "SCRIPT"));
  if (!id.ok()) return id.status();
  absl::MutexLock lock(&mu_);
  Tracked& t = jobs_[*id];
  t.slurm_id = *id;
  t.name = request.name;
  t.since = absl::Now();
  LogInfo("slurm job submitted slurm_job=%d name=%s", *id, request.name);
  return *id;
}

absl::StatusOr<std::vector<int>> SlurmLauncher::LaunchRanks(
    const std::vector<LaunchRequest>& ranks) {
  if (ranks.empty()) return absl::InvalidArgumentError("no ranks");
  absl::StatusOr<int> id =
      Submit(ranks[0].name, SlurmRanksBatchScript(ranks, exits_dir_, options_.srun),
             SbatchArgv(options_, ranks[0], "SCRIPT", static_cast<int>(ranks.size())));
  if (!id.ok()) return id.status();
  std::vector<int> handles;
  absl::MutexLock lock(&mu_);
  for (size_t r = 0; r < ranks.size(); ++r) {
    const int handle = r == 0 ? *id : next_rank_handle_--;
    Tracked& t = jobs_[handle];
    t.slurm_id = *id;
    t.rank = static_cast<int>(r);
    t.name = ranks[r].name;
    t.since = absl::Now();
    handles.push_back(handle);
  }
  LogInfo("slurm job submitted slurm_job=%d name=%s ranks=%d", *id, ranks[0].name,
          static_cast<int>(ranks.size()));
  return handles;
}

absl::Status SlurmLauncher::Adopt(int pid, const std::string& name) {
  absl::MutexLock lock(&mu_);
  Tracked& t = jobs_[pid];
  t.slurm_id = pid;
  t.name = name;
  t.since = absl::Now() - kVanishedAfter;  // already running: judged on the first answers
  poll_now_ = true;
  return absl::OkStatus();
}

void SlurmLauncher::Signal(int pid, int sig) {
  absl::MutexLock lock(&mu_);
  if (sig == SIGTERM || sig == SIGKILL) {
    auto it = jobs_.find(pid);
    if (it != jobs_.end()) {
      const int slurm_id = it->second.slurm_id;
      for (auto& [handle, t] : jobs_) {
        if (t.slurm_id == slurm_id) t.cancelled_by_traind = true;
      }
    }
  }
  signals_.push_back({pid, sig});
}

void SlurmLauncher::SendSignals(std::vector<PendingSignal> signals) {
  std::set<std::pair<int, int>> sent;  // (Slurm job, signal): once per job
  for (const PendingSignal& p : signals) {
    bool pending = false;
    int slurm_id = 0;
    {
      absl::MutexLock lock(&mu_);
      auto it = jobs_.find(p.pid);
      if (it == jobs_.end()) continue;  // ended meanwhile
      pending = it->second.state.empty() || SlurmStateIsPending(it->second.state);
      slurm_id = it->second.slurm_id;
    }
    if (!sent.insert({slurm_id, p.sig}).second) continue;
    const std::string id = std::to_string(slurm_id);
    std::vector<std::string> argv;
    if (p.sig == SIGKILL) {
      argv = {options_.scancel, id};
    } else {
      // To the batch script, which forwards it to the worker.
      argv = {options_.scancel, "--batch", absl::StrCat("--signal=", p.sig), id};
    }
    absl::StatusOr<CommandResult> r = RunCommand(argv, kCommandTimeout);
    ++scancel_;
    if (r.ok() && r->exit_code != 0 && p.sig == SIGTERM && pending) {
      // Nothing runs yet to stop gracefully: the job is cancelled.
      argv = {options_.scancel, id};
      r = RunCommand(argv, kCommandTimeout);
      ++scancel_;
    }
    if (!r.ok() || r->exit_code != 0) ++scancel_failed_;
    if (!r.ok()) {
      LogWarning("slurm scancel slurm_job=%d failed: %s", slurm_id, r.status().message());
    } else if (r->exit_code != 0) {
      LogWarning("slurm scancel slurm_job=%d failed: %s", slurm_id, CommandError(argv, *r));
    } else {
      LogInfo("slurm job signalled slurm_job=%d signal=%d", slurm_id, p.sig);
    }
  }
}

std::optional<std::vector<SlurmJobState>> SlurmLauncher::Squeue(
    const std::vector<std::string>& argv, const std::string& what) {
  absl::StatusOr<CommandResult> r = RunCommand(argv, kCommandTimeout);
  ++squeue_;
  if (!r.ok() || r->exit_code != 0) {
    ++squeue_failed_;
    LogWarning("slurm squeue%s failed: %s", what,
               r.ok() ? CommandError(argv, *r) : std::string(r.status().message()));
    return std::nullopt;
  }
  return ParseSqueue(r->out);
}

std::vector<ProcessExit> SlurmLauncher::CollectExits() {
  // One read of the directory: only the records there are opened.
  std::set<std::string> present;
  {
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(exits_dir_, ec)) {
      present.insert(entry.path().string());
    }
  }
  if (present.empty()) return {};
  struct Look {
    int handle;
    int slurm_id;
    bool by_traind;
    std::string path;
  };
  std::vector<Look> looks;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [handle, t] : jobs_) {
      looks.push_back({handle, t.slurm_id, t.cancelled_by_traind, ExitPath(t)});
    }
  }
  std::vector<ProcessExit> exits;
  for (const Look& look : looks) {
    const int id = look.slurm_id;
    const bool by_traind = look.by_traind;
    const std::string& path = look.path;
    if (present.count(path) == 0) continue;
    std::ifstream in(path);
    if (!in) continue;
    std::stringstream text;
    text << in.rdbuf();
    ProcessExit e;
    e.pid = look.handle;
    absl::StatusOr<SlurmExitRecord> rec = ParseExitRecord(text.str());
    if (!rec.ok()) {
      Failure f;
      f.set_reason(Failure::WORKER_CRASHED);
      f.set_message(absl::StrCat("Slurm job ", id, ": ", path, ": ", rec.status().message()));
      e.failure = f;
      e.signal = SIGKILL;
    } else {
      e.exit_code = rec->exit_code;
      e.signal = rec->signal;
      if (rec->got_term && !by_traind) {
        // Why: a time limit reads differently from a scancel in squeue
        // (TimeLimit, then TIMEOUT), for a few minutes (MinJobAge).
        const std::vector<SlurmJobState> now =
            Squeue(SqueueJobArgv(options_, id), absl::StrCat(" slurm_job=", id))
                .value_or(std::vector<SlurmJobState>());
        e.failure = SlurmTermFailure(id, now.empty() ? nullptr : &now.front(),
                                     options_.signal_before_limit);
      }
    }
    unlink(path.c_str());
    exits.push_back(std::move(e));
  }
  if (!exits.empty()) {
    absl::MutexLock lock(&mu_);
    for (const ProcessExit& e : exits) jobs_.erase(e.pid);
  }
  return exits;
}

void SlurmLauncher::PollSlurm(std::vector<LaunchStatus>* statuses,
                              std::vector<ProcessExit>* exits) {
  std::vector<std::string> names;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [id, t] : jobs_) {
      if (std::find(names.begin(), names.end(), t.name) == names.end()) names.push_back(t.name);
    }
  }
  if (names.empty()) return;
  std::optional<std::vector<SlurmJobState>> jobs = Squeue(SqueueArgv(options_, names), "");
  // Slurm does not answer (slurmctld restarting): nothing is concluded.
  if (!jobs.has_value()) return;
  std::map<int, SlurmJobState> listed;
  for (SlurmJobState& j : *jobs) listed[j.job_id] = std::move(j);
  const absl::Time now = absl::Now();
  absl::MutexLock lock(&mu_);
  for (auto it = jobs_.begin(); it != jobs_.end();) {
    const int handle = it->first;
    Tracked& t = it->second;
    const int id = t.slurm_id;
    auto found = listed.find(id);
    std::optional<Failure> failure;
    if (found == listed.end()) {
      if (++t.missing >= 2 && now - t.since >= kVanishedAfter) {
        Failure f;
        f.set_reason(Failure::WORKER_CRASHED);
        f.set_message(
            absl::StrCat("Slurm job ", id, " is no longer known to Slurm and left no exit record"));
        failure = f;
      }
    } else {
      t.missing = 0;
      t.state = found->second.state;
      t.reason = found->second.reason;
      if (SlurmStateIsPending(t.state)) {
        LaunchStatus s;
        s.pid = handle;
        s.pending = true;
        s.reason = SlurmWaitReason(t.reason);
        s.detail =
            absl::StrCat("Slurm job ", id, " ", absl::AsciiStrToLower(t.state), ": ", t.reason);
        if (!t.last_status.has_value() || t.last_status->detail != s.detail) {
          t.last_status = s;
          statuses->push_back(s);
        }
        t.started_told = false;
      } else if (SlurmStateIsFinal(t.state)) {
        if (!t.final_since.has_value()) t.final_since = now;
        if (now - *t.final_since >= kExitRecordGrace) {
          failure = SlurmStateFailure(id, t.state, t.reason, t.cancelled_by_traind);
        }
      } else if (!t.started_told) {  // RUNNING, CONFIGURING, COMPLETING, ...
        t.started_told = true;
        t.last_status.reset();
        LaunchStatus s;
        s.pid = handle;
        statuses->push_back(s);
      }
    }
    if (failure.has_value()) {
      ProcessExit e;
      e.pid = handle;
      e.signal = SIGKILL;
      e.failure = *failure;
      LogWarning("slurm job ended without an exit record slurm_job=%d name=%s state=%s: %s", id,
                 t.name, t.state.empty() ? "unknown" : t.state, failure->message());
      exits->push_back(std::move(e));
      it = jobs_.erase(it);
    } else {
      ++it;
    }
  }
}

void SlurmLauncher::Deliver(const std::vector<LaunchStatus>& statuses,
                            const std::vector<ProcessExit>& exits) {
  if (statuses.empty() && exits.empty()) return;
  ExitCallback on_exit;
  StatusCallback on_status;
  {
    absl::MutexLock lock(&mu_);
    on_exit = exit_callback_;
    on_status = status_callback_;
    ++callbacks_running_;
  }
  for (const LaunchStatus& s : statuses) {
    if (on_status) on_status(s);
  }
  for (const ProcessExit& e : exits) {
    LogInfo("slurm job ended slurm_job=%d exit=%d signal=%d", e.pid, e.exit_code, e.signal);
    if (on_exit) on_exit(e);
  }
  absl::MutexLock lock(&mu_);
  --callbacks_running_;
}

void SlurmLauncher::Loop() {
  absl::Time next_squeue = absl::Now();
  for (;;) {
    std::vector<PendingSignal> signals;
    bool poll = false;
    bool listened = false;
    {
      absl::MutexLock lock(&mu_);
      auto wake = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stopping_ || !signals_.empty() || poll_now_;
      };
      mu_.AwaitWithTimeout(absl::Condition(&wake), options_.exit_poll_interval);
      if (stopping_) return;
      signals.assign(signals_.begin(), signals_.end());
      signals_.clear();
      // Nobody to tell (before the scheduler, or after it stopped): exit
      // records stay where they are, for the next traind to read.
      listened = exit_callback_ != nullptr;
      poll = listened && (poll_now_ || (!jobs_.empty() && absl::Now() >= next_squeue));
      poll_now_ = false;
    }
    if (!signals.empty()) SendSignals(std::move(signals));
    if (!listened) continue;
    std::vector<ProcessExit> exits = CollectExits();
    std::vector<LaunchStatus> statuses;
    if (poll) {
      const absl::Time start = absl::Now();
      PollSlurm(&statuses, &exits);
      next_squeue = absl::Now() + NextSlurmPoll(options_.poll_interval, absl::Now() - start);
    }
    Deliver(statuses, exits);
  }
}

}  // namespace traind::server
