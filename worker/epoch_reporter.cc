#include "worker/epoch_reporter.h"

#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"

namespace traind::worker {

EpochReporter::EpochReporter(EpochSink* sink, EpochReporterOptions options)
    : sink_(sink), options_(options) {}

EpochReporter::~EpochReporter() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    done_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void EpochReporter::Start() {
  thread_ = std::thread([this] { Run(); });
}

void EpochReporter::Run() {
  std::unique_lock<std::mutex> lock(mu_);
  auto last_sent = std::chrono::steady_clock::now();
  // While a heartbeat is due but training makes no progress, the next look
  // is a fraction of the interval later (rather than at once, again and
  // again: that would spin a core while a long batch runs).
  auto stalled_until = last_sent;
  const auto stalled_poll = std::max<std::chrono::steady_clock::duration>(
      options_.heartbeat_every / 8, std::chrono::milliseconds(1));
  uint64_t last_progress = ~0ull;
  for (;;) {
    cv_.wait_until(lock, std::max(last_sent + options_.heartbeat_every, stalled_until),
                   [this] { return done_ || !epochs_.empty(); });
    if (!epochs_.empty()) {
      // At most one call per report_every (the first epoch after a pause
      // goes at once, a flush immediately).
      cv_.wait_until(lock, last_sent + options_.report_every, [this] {
        return done_ || flush_ || epochs_.size() >= options_.max_epochs_per_report;
      });
      // Everything queued goes in one call (at most max_epochs_per_report).
      traind::v1::ReportEpochRequest req;
      *req.mutable_metrics() = epochs_.front();
      const size_t n = std::min(epochs_.size(), options_.max_epochs_per_report);
      for (size_t i = 1; i < n; ++i) *req.add_more() = epochs_[i];
      lock.unlock();
      const absl::Status s = sink_->ReportEpochs(&req);
      lock.lock();
      last_sent = std::chrono::steady_clock::now();
      epochs_.erase(epochs_.begin(), epochs_.begin() + n);
      if (!s.ok() && report_error_.ok()) {
        report_error_ = absl::UnavailableError(absl::StrCat(
            "cannot report epoch ", req.metrics().epoch(), " to traind: ", s.message()));
        epochs_.clear();
      }
      cv_.notify_all();
      continue;
    }
    if (done_) return;
    const uint64_t progress = progress_.load(std::memory_order_relaxed);
    const auto now = std::chrono::steady_clock::now();
    if (now - last_sent < options_.heartbeat_every) continue;
    if (progress == last_progress && training_.load(std::memory_order_relaxed)) {
      stalled_until = now + stalled_poll;
      continue;
    }
    last_progress = progress;
    lock.unlock();
    sink_->Heartbeat();
    lock.lock();
    last_sent = std::chrono::steady_clock::now();
  }
}

void EpochReporter::SendNow() {
  std::lock_guard<std::mutex> lock(mu_);
  flush_ = true;
  cv_.notify_all();
}

absl::Status EpochReporter::Flush() {
  std::unique_lock<std::mutex> lock(mu_);
  flush_ = true;
  cv_.notify_all();
  cv_.wait(lock, [this] { return epochs_.empty(); });
  flush_ = false;
  return report_error_;
}

absl::Status EpochReporter::Add(const traind::v1::EpochMetrics& metrics) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!report_error_.ok()) return report_error_;
  epochs_.push_back(metrics);
  cv_.notify_all();
  cv_.wait(lock, [this] { return epochs_.size() < options_.max_queued; });
  return report_error_;
}

}  // namespace traind::worker
