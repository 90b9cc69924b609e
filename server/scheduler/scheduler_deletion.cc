// Scheduler: deleting jobs, retention, and the state directory's size.

#include <algorithm>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/log.h"
#include "server/scheduler/scheduler.h"
#include "server/store/job_files.h"

namespace traind::server {

using traind::v1::Job;

void Scheduler::AddDeletionListener(std::function<void(const std::string&)> listener) {
  deletion_listeners_.push_back(std::move(listener));
}

void Scheduler::MeasureStateDir() { state_dir_bytes_.store(DirectoryBytes(options_.state_dir)); }

void Scheduler::RecoverDeletions() {
  DeletionRecovery r = server::RecoverDeletions(options_.state_dir, [this](const std::string& id) {
    absl::StatusOr<bool> has = store_->HasJob(id);
    return !has.ok() || *has;  // when in doubt, keep the files
  });
  for (const std::string& id : r.restored) {
    LogInfo("job delete undone job=%s: traind stopped before the store forgot it", id);
  }
  for (const std::string& id : r.removed) {
    LogInfo("job delete finished job=%s: its files were removed", id);
  }
}

absl::StatusOr<int64_t> Scheduler::Delete(const std::string& job_id, bool cancel) {
  if (job_id.empty()) return absl::InvalidArgumentError("job_id: required");
  if (cancel) {
    absl::StatusOr<Job> job = Cancel(job_id, /*force=*/true);
    if (!job.ok()) return job.status();
    // A forced cancel kills the workers at once; their exits end the job.
    const absl::Time deadline = absl::Now() + options_.cancel_grace + absl::Seconds(30);
    for (;;) {
      {
        absl::MutexLock lock(&mu_);
        if (jobs_.find(job_id) == jobs_.end()) break;
      }
      if (absl::Now() > deadline) {
        return absl::DeadlineExceededError(
            absl::StrCat("job ", job_id, " did not end after its cancel; try again later"));
      }
      absl::SleepFor(absl::Milliseconds(20));
    }
  }
  {
    absl::MutexLock lock(&mu_);
    auto it = jobs_.find(job_id);
    if (it != jobs_.end()) {
      return absl::FailedPreconditionError(
          absl::StrCat("job ", job_id, " is ", Job::State_Name(it->second->job.state()),
                       ": cancel it first, or delete with cancel (trainctl delete --cancel)"));
    }
    if (!deleting_.insert(job_id).second) {
      return absl::FailedPreconditionError(absl::StrCat("job ", job_id, " is being deleted"));
    }
  }
  auto done = [&] {
    absl::MutexLock lock(&mu_);
    deleting_.erase(job_id);
  };
  writer_.WaitAllUnlessDegraded();
  absl::StatusOr<bool> has = store_->HasJob(job_id);
  if (!has.ok() || !*has) {
    done();
    if (!has.ok()) return has.status();
    return absl::NotFoundError(absl::StrCat("job ", job_id, " not found"));
  }
  // Files aside first: a kill from here on leaves the job whole (the start
  // moves them back) until the store forgets it, and gone after.
  absl::StatusOr<int64_t> bytes = MoveAside(options_.state_dir, job_id);
  if (!bytes.ok()) {
    done();
    return bytes.status();
  }
  // A full disk (the store degraded): the store cannot forget the job
  // before there is space, so its files go first. A kill before the store
  // forgets it then leaves a job without files (delete it again).
  const bool degraded = !writer_.Degraded().ok();
  if (degraded) {
    if (absl::Status s = RemoveAside(options_.state_dir, job_id); !s.ok()) {
      LogWarning("job delete job=%s: its files stay until the next start: %s", job_id, s.message());
    }
    LogInfo("job files removed job=%s bytes=%d: the store is degraded, it forgets the job next",
            job_id, *bytes);
  }
  StoreMutation m;
  m.delete_job = true;
  const uint64_t ticket = writer_.Enqueue(m, job_id, {});
  writer_.WaitStored(ticket);
  if (writer_.Dropped(ticket)) {
    done();
    return absl::UnavailableError(absl::StrCat("traind stopped before its store could forget job ",
                                               job_id, ": delete it again"));
  }
  {
    absl::MutexLock lock(&mu_);
    finished_.erase(job_id);
    auto pos = std::find(finished_order_.begin(), finished_order_.end(), job_id);
    if (pos != finished_order_.end()) finished_order_.erase(pos);
  }
  if (absl::Status s = degraded ? absl::OkStatus() : RemoveAside(options_.state_dir, job_id);
      !s.ok()) {
    LogWarning("job deleted job=%s, but its files stay until the next start: %s", job_id,
               s.message());
  }
  // Watchers still reading the deleted job's events end (NOT_FOUND).
  hub()->Removed(job_id);
  for (const auto& listener : deletion_listeners_) listener(job_id);
  done();
  if (absl::Status s = store_->ReclaimSpace(); !s.ok()) {
    LogWarning("store space not reclaimed after deleting job=%s: %s", job_id, s.message());
  }
  MeasureStateDir();
  return *bytes;
}

int Scheduler::ApplyRetention(const RetentionPolicy& policy) {
  if (!policy.enabled()) return 0;
  if (!writer_.WaitAllUnlessDegraded()) return 0;  // again once the store is written
  absl::StatusOr<std::vector<FinishedJob>> finished = store_->FinishedJobs();
  if (!finished.ok()) {
    LogWarning("retention skipped: %s", finished.status().message());
    return 0;
  }
  const int64_t now_us = absl::ToUnixMicros(clock_->Now());
  int deleted = 0;
  for (size_t i = 0; i < finished->size(); ++i) {
    const FinishedJob& f = (*finished)[i];
    std::string reason;
    if (policy.max_finished_jobs > 0 && i >= static_cast<size_t>(policy.max_finished_jobs)) {
      reason = absl::StrCat("max_finished_jobs=", policy.max_finished_jobs);
    } else if (policy.max_age > absl::ZeroDuration() &&
               absl::Microseconds(now_us - f.end_us) > policy.max_age) {
      reason = absl::StrCat("max_age=", absl::FormatDuration(policy.max_age));
    } else {
      continue;
    }
    absl::StatusOr<int64_t> bytes = Delete(f.id, /*cancel=*/false);
    if (bytes.ok()) {
      ++deleted;
      LogInfo("job deleted by retention job=%s reason=%s freed_bytes=%d", f.id, reason, *bytes);
    } else if (bytes.status().code() != absl::StatusCode::kNotFound) {
      LogWarning("retention could not delete job=%s: %s", f.id, bytes.status().message());
    }
  }
  MeasureStateDir();
  return deleted;
}

}  // namespace traind::server
