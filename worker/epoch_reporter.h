// Sends a task's epoch reports to traind from a thread of its own, so that
// training never waits for the daemon's answer, and heartbeats while there
// is nothing else to send.
#ifndef TRAIND_WORKER_EPOCH_REPORTER_H_
#define TRAIND_WORKER_EPOCH_REPORTER_H_

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>
#include <thread>

#include "absl/status/status.h"
#include "traind/v1/worker_service.pb.h"

namespace traind::worker {

// Where the reporter's calls go (the daemon: DaemonClient; tests: a fake).
// Called from the reporter's thread only, one call at a time.
class EpochSink {
 public:
  virtual ~EpochSink() = default;
  // Delivers req.metrics() then req.more(), in order (retrying as it sees
  // fit; the sink may set req's credentials). An error is final: the
  // reporter reports nothing after it.
  virtual absl::Status ReportEpochs(traind::v1::ReportEpochRequest* req) = 0;
  // Says the task is alive; best effort.
  virtual void Heartbeat() = 0;
};

struct EpochReporterOptions {
  // Coalescing: at most one ReportEpochs per report_every. The first epoch
  // after a pause goes at once; Flush() sends at once.
  std::chrono::milliseconds report_every{50};
  // At most this many epochs per ReportEpochs (one request).
  size_t max_epochs_per_report = 256;
  // Add() blocks while this many epochs wait: a daemon that cannot keep up
  // slows training down rather than let reports pile up.
  size_t max_queued = 1024;
  // A heartbeat after this long without a call, while training progresses
  // (NotifyProgress since the last one) or before it has started. While one
  // is withheld for lack of progress, the reporter looks again every
  // heartbeat_every / 8 (sleeping in between).
  std::chrono::milliseconds heartbeat_every{2000};
};

// The queue of epoch reports and the thread that drains it into an
// EpochSink, in order. A small fold's epochs come faster than anyone reads
// them, and each call costs the daemon a commit and the worker CPU it trains
// with: everything queued goes in one call (coalesced).
//
// A heartbeat says the task is making progress: it is sent only while
// training advances (a NotifyProgress since the last heartbeat) or before
// TrainingStarted(), so a training loop that hangs goes silent and traind
// kills it.
//
// Thread-safe: Add, Flush, NotifyProgress and TrainingStarted may be called
// from any thread (Fit's). The sink must outlive the reporter. The
// destructor sends what is queued, then stops and joins the thread.
class EpochReporter {
 public:
  explicit EpochReporter(EpochSink* sink, EpochReporterOptions options = {});
  ~EpochReporter();
  EpochReporter(const EpochReporter&) = delete;
  EpochReporter& operator=(const EpochReporter&) = delete;

  // Heartbeats every `every` instead of options.heartbeat_every (what traind
  // asks for: TaskAssignment.heartbeat_interval_ms). REQUIRES: before
  // Start(); every > 0.
  void set_heartbeat_every(std::chrono::milliseconds every) { options_.heartbeat_every = every; }

  // Starts the thread. REQUIRES: called once.
  void Start();

  // Queues one epoch's report; blocks while max_queued wait. Returns the
  // first delivery error (Unavailable, "cannot report epoch N to traind:
  // ..."), once one happened: nothing is queued after it.
  absl::Status Add(const traind::v1::EpochMetrics& metrics);

  // Waits until every queued report has been delivered (or dropped after an
  // error); returns the first delivery error. REQUIRES: Start() was called.
  absl::Status Flush();

  // Sends what is queued at once, without waiting for it, and every epoch
  // added later as it comes (until Flush): training has ended and only its
  // artifacts remain, which the call then overlaps.
  void SendNow();

  // Training advanced (a batch or an epoch). Lock-free.
  void NotifyProgress() { progress_.fetch_add(1, std::memory_order_relaxed); }

  // Training has started: from now on heartbeats follow its progress.
  void TrainingStarted() { training_.store(true, std::memory_order_relaxed); }

 private:
  void Run();

  EpochSink* const sink_;
  EpochReporterOptions options_;  // not changed once the thread runs
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;                            // guarded by mu_
  bool flush_ = false;                           // guarded by mu_; Flush() is waiting: send now
  std::deque<traind::v1::EpochMetrics> epochs_;  // guarded by mu_; not yet delivered
  absl::Status report_error_;                    // guarded by mu_
  std::atomic<uint64_t> progress_{0};
  std::atomic<bool> training_{false};
  std::thread thread_;
};

}  // namespace traind::worker

#endif  // TRAIND_WORKER_EPOCH_REPORTER_H_
