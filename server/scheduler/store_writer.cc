#include "server/scheduler/store_writer.h"

#include <cstdlib>
#include <utility>

#include "base/log.h"

namespace traind::server {

StoreWriter::StoreWriter(ApplyFn apply, EventHub* hub, FailFn fail, absl::Duration retry_interval)
    : apply_(std::move(apply)), hub_(hub), fail_(std::move(fail)), retry_interval_(retry_interval) {
  thread_ = std::thread([this] { Run(); });
}

StoreWriter::~StoreWriter() {
  {
    absl::MutexLock lock(&mu_);
    exit_ = true;
  }
  thread_.join();
}

uint64_t StoreWriter::Enqueue(const StoreMutation& m, const std::string& job_id,
                              std::vector<traind::v1::JobEvent> events) {
  Pending p;
  p.job_id = job_id;
  if (m.job != nullptr) {
    p.job = *m.job;
    // An update writes the job's own columns only: its tasks go in `tasks`.
    if (!m.new_job) p.job->clear_tasks();
  }
  p.new_job = m.new_job;
  p.idempotency_key = m.idempotency_key;
  p.request_sha256 = m.request_sha256;
  p.delete_job = m.delete_job;
  p.tasks.reserve(m.tasks.size());
  for (const traind::v1::Task* t : m.tasks) p.tasks.push_back(*t);
  if (m.epoch != nullptr) p.epochs.push_back(*m.epoch);
  for (const traind::v1::EpochMetrics* e : m.epochs) p.epochs.push_back(*e);
  for (const traind::v1::JobEvent* e : m.events) p.events.push_back(*e);
  for (traind::v1::JobEvent& e : events) p.events.push_back(std::move(e));
  absl::MutexLock lock(&mu_);
  p.ticket = next_ticket_++;
  const uint64_t ticket = p.ticket;
  queue_.push_back(std::move(p));
  return ticket;
}

void StoreWriter::WaitStored(uint64_t ticket) {
  absl::MutexLock lock(&mu_);
  auto stored = [this, ticket]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stored_ >= ticket; };
  mu_.Await(absl::Condition(&stored));
}

void StoreWriter::WaitAll() { WaitStored(last_ticket()); }

void StoreWriter::WhenStored(uint64_t ticket, std::function<void()> done) {
  {
    absl::MutexLock lock(&mu_);
    if (written_ < ticket) {
      waiters_.emplace(ticket, std::move(done));
      return;
    }
  }
  done();
}

uint64_t StoreWriter::last_ticket() {
  absl::MutexLock lock(&mu_);
  return next_ticket_ - 1;
}

absl::Status StoreWriter::Degraded() {
  absl::MutexLock lock(&mu_);
  return degraded_;
}

bool StoreWriter::WaitStoredUnlessDegraded(uint64_t ticket) {
  absl::MutexLock lock(&mu_);
  auto done = [this, ticket]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return stored_ >= ticket || !degraded_.ok();
  };
  mu_.Await(absl::Condition(&done));
  return stored_ >= ticket && !DroppedLocked(ticket);
}

bool StoreWriter::Dropped(uint64_t ticket) {
  absl::MutexLock lock(&mu_);
  return DroppedLocked(ticket);
}

bool StoreWriter::DroppedLocked(uint64_t ticket) const {
  for (const auto& [first, last] : dropped_) {
    if (ticket >= first && ticket <= last) return true;
  }
  return false;
}

void StoreWriter::GiveUpWhenDegraded() {
  absl::MutexLock lock(&mu_);
  give_up_ = true;
}

void StoreWriter::Run() {
  absl::MutexLock lock(&mu_);
  for (;;) {
    auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !queue_.empty() || exit_; };
    mu_.Await(absl::Condition(&ready));
    if (queue_.empty()) return;  // exit_, and everything is written
    Pending p = std::move(queue_.front());
    queue_.pop_front();
    mu_.Unlock();
    const bool stored = Write(p);
    mu_.Lock();
    if (stored) {
      written_ = p.ticket;
    } else {
      // Stopping while degraded: this change and all after it are lost to
      // the store, as after a kill. Their waiters are released (traind is
      // stopping; Dropped() tells them).
      const size_t lost = 1 + queue_.size();
      queue_.clear();
      written_ = next_ticket_ - 1;
      dropped_.emplace_back(p.ticket, written_);
      LogError(
          "store write given up while stopping: %d changes not stored (%s); the next start "
          "recovers from the last committed state",
          lost, degraded_.message());
    }
    std::vector<std::function<void()>> done;
    while (!waiters_.empty() && waiters_.begin()->first <= written_) {
      done.push_back(std::move(waiters_.begin()->second));
      waiters_.erase(waiters_.begin());
    }
    if (!done.empty()) {
      mu_.Unlock();
      for (auto& fn : done) fn();
      mu_.Lock();
    }
    // Only now: WaitStored returns after the replies that waited on the
    // same tickets have run.
    stored_ = written_;
  }
}

bool StoreWriter::Write(Pending& p) {
  StoreMutation m;
  if (p.job.has_value()) m.job = &*p.job;
  m.new_job = p.new_job;
  m.idempotency_key = p.idempotency_key;
  m.request_sha256 = p.request_sha256;
  m.delete_job = p.delete_job;
  for (const traind::v1::Task& t : p.tasks) m.tasks.push_back(&t);
  for (const traind::v1::EpochMetrics& e : p.epochs) m.epochs.push_back(&e);
  for (const traind::v1::JobEvent& e : p.events) m.events.push_back(&e);
  for (;;) {
    absl::Status s = apply_(m, p.job_id);
    if (s.ok()) break;
    if (!absl::IsResourceExhausted(s) && !absl::IsUnavailable(s)) {
      if (fail_ != nullptr) {
        fail_(p.job_id, s);
        return true;  // (a test's): nothing of it is published
      }
      LogError("store write failed job=%s: %s", p.job_id, s.ToString());
      std::abort();
    }
    absl::MutexLock lock(&mu_);
    if (degraded_.ok()) {
      LogError(
          "store degraded job=%s: %s; new jobs are refused and changes wait in order, "
          "retrying every %s",
          p.job_id, s.message(), absl::FormatDuration(retry_interval_));
    }
    degraded_ = s;
    if (exit_ || give_up_) return false;
    auto stop = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return exit_ || give_up_; };
    mu_.AwaitWithTimeout(absl::Condition(&stop), retry_interval_);
  }
  {
    absl::MutexLock lock(&mu_);
    if (!degraded_.ok()) {
      LogInfo("store recovered job=%s: changes are stored again", p.job_id);
      degraded_ = absl::OkStatus();
    }
  }
  hub_->Publish(std::move(p.events));
  return true;
}

}  // namespace traind::server
