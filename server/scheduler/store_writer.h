// StoreWriter: the scheduler's outbox to the job store. The scheduler makes
// a change under its mutex and hands a copy here; one thread of the
// writer's own applies the changes in the order they came, each in its own
// transaction, and then publishes the change's events. So nothing waits on
// the disk with the scheduler's mutex held, and an event is still never
// published before it is stored (what EventHub's watchers rely on).
//
// A caller that must not answer before its change is durable (a submit, an
// epoch report the worker then forgets) waits with WaitStored() once it has
// released the scheduler's mutex.
//
// Thread-safety: thread-safe. The writer only queues the events with the
// hub (scheduler/event_hub.h), whose own thread calls the subscribers.
#ifndef TRAIND_SERVER_SCHEDULER_STORE_WRITER_H_
#define TRAIND_SERVER_SCHEDULER_STORE_WRITER_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/scheduler/event_hub.h"
#include "server/store/job_store.h"
#include "traind/v1/job.pb.h"

namespace traind::server {

class StoreWriter final {
 public:
  // Applies one mutation of job `job_id` (JobStore::Apply in traind).
  using ApplyFn = std::function<absl::Status(const StoreMutation& m, const std::string& job_id)>;
  // Called when a write fails for good (an error other than the transient
  // ones below). traind cannot keep its promises then (nothing lost): the
  // default logs and aborts, and the next start recovers from the last
  // committed state.
  using FailFn = std::function<void(const std::string& job_id, const absl::Status& status)>;

  // A write that fails with RESOURCE_EXHAUSTED (the disk is full) or
  // UNAVAILABLE (an I/O error) is tried again every `retry_interval` until
  // it is stored, the writer degraded meanwhile (Degraded()); what comes
  // after it waits in the queue, in order.
  StoreWriter(ApplyFn apply, EventHub* hub, FailFn fail = nullptr,
              absl::Duration retry_interval = absl::Seconds(1));
  // Writes what is queued, then stops. While degraded it tries once more
  // and then drops what is left (logged): the next start recovers from the
  // last committed state, as after a kill.
  ~StoreWriter();
  StoreWriter(const StoreWriter&) = delete;
  StoreWriter& operator=(const StoreWriter&) = delete;

  // Queues a copy of `m` (what it points to is copied too) and of `events`,
  // which are published once the mutation is stored. Returns its ticket.
  uint64_t Enqueue(const StoreMutation& m, const std::string& job_id,
                   std::vector<traind::v1::JobEvent> events);
  // Returns once every mutation up to `ticket` is stored, its events are
  // published and the WhenStored callbacks up to it have run.
  void WaitStored(uint64_t ticket);
  // WaitStored for everything queued so far.
  void WaitAll();
  // Runs `done` once every mutation up to `ticket` is stored and published:
  // at once on the caller's thread if it already is, else on the writer's
  // thread (so `done` must not block). What an RPC handler replies from, so
  // that it answers only what is durable without holding its thread.
  void WhenStored(uint64_t ticket, std::function<void()> done);
  // The last ticket handed out (0: none yet).
  uint64_t last_ticket();

  // OK, or the error of the write being retried: while it is not OK nothing
  // queued is stored (reads of the store see the last write that was).
  absl::Status Degraded();
  // WaitStored that returns early once the writer is degraded: true if
  // `ticket` is stored. For reads, which serve what is stored rather than
  // wait for space.
  bool WaitStoredUnlessDegraded(uint64_t ticket);
  bool WaitAllUnlessDegraded() { return WaitStoredUnlessDegraded(last_ticket()); }
  // Whether `ticket` was dropped by a stop while degraded (never stored).
  bool Dropped(uint64_t ticket);
  // traind is stopping: from now on a write that cannot be stored for a
  // transient reason is tried once and dropped, with what is queued behind
  // it, so that nothing waits for space any longer (the waiters are let go).
  void GiveUpWhenDegraded();

 private:
  // A mutation that owns what it points to.
  struct Pending {
    uint64_t ticket = 0;
    std::string job_id;
    std::optional<traind::v1::Job> job;
    bool new_job = false;
    std::string idempotency_key;
    std::string request_sha256;
    bool delete_job = false;
    std::vector<traind::v1::Task> tasks;
    std::vector<traind::v1::EpochMetrics> epochs;
    std::vector<traind::v1::JobEvent> events;
  };
  void Run();
  // Stores `p` and publishes its events, retrying transient errors; false
  // if the writer stopped while degraded (nothing of it stored).
  bool Write(Pending& p);

  const ApplyFn apply_;
  EventHub* const hub_;
  const FailFn fail_;
  const absl::Duration retry_interval_;
  absl::Mutex mu_;
  std::deque<Pending> queue_ ABSL_GUARDED_BY(mu_);
  uint64_t next_ticket_ ABSL_GUARDED_BY(mu_) = 1;
  // Every ticket up to written_ is stored and published; up to stored_,
  // its WhenStored callbacks have run too.
  uint64_t written_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t stored_ ABSL_GUARDED_BY(mu_) = 0;
  std::multimap<uint64_t, std::function<void()>> waiters_ ABSL_GUARDED_BY(mu_);
  bool exit_ ABSL_GUARDED_BY(mu_) = false;
  bool give_up_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status degraded_ ABSL_GUARDED_BY(mu_);
  // The tickets dropped while giving up, as [first, last] ranges.
  std::vector<std::pair<uint64_t, uint64_t>> dropped_ ABSL_GUARDED_BY(mu_);
  bool DroppedLocked(uint64_t ticket) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::thread thread_;
};

}  // namespace traind::server

#endif  // TRAIND_SERVER_SCHEDULER_STORE_WRITER_H_
