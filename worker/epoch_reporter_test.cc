#include "worker/epoch_reporter.h"

#include <time.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "gtest/gtest.h"

namespace traind::worker {
namespace {

using std::chrono::milliseconds;

// Records every call; can hold the next ReportEpochs until released, and
// fail them.
class FakeSink final : public EpochSink {
 public:
  absl::Status ReportEpochs(traind::v1::ReportEpochRequest* req) override {
    std::unique_lock<std::mutex> lock(mu_);
    std::vector<int32_t> epochs = {req->metrics().epoch()};
    for (const traind::v1::EpochMetrics& m : req->more()) epochs.push_back(m.epoch());
    calls_.push_back(epochs);
    cv_.notify_all();
    cv_.wait(lock, [this] { return !hold_; });
    return error_;
  }
  void Heartbeat() override {
    std::lock_guard<std::mutex> lock(mu_);
    ++heartbeats_;
    cv_.notify_all();
  }

  void Hold() {
    std::lock_guard<std::mutex> lock(mu_);
    hold_ = true;
  }
  void Release() {
    std::lock_guard<std::mutex> lock(mu_);
    hold_ = false;
    cv_.notify_all();
  }
  void FailWith(absl::Status s) {
    std::lock_guard<std::mutex> lock(mu_);
    error_ = std::move(s);
  }
  // Waits (at most 10 s) until `n` ReportEpochs calls were made.
  bool WaitForCalls(size_t n) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, std::chrono::seconds(10), [&] { return calls_.size() >= n; });
  }
  bool WaitForHeartbeats(int n) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, std::chrono::seconds(10), [&] { return heartbeats_ >= n; });
  }
  std::vector<std::vector<int32_t>> calls() {
    std::lock_guard<std::mutex> lock(mu_);
    return calls_;
  }
  int heartbeats() {
    std::lock_guard<std::mutex> lock(mu_);
    return heartbeats_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool hold_ = false;
  absl::Status error_;
  std::vector<std::vector<int32_t>> calls_;
  int heartbeats_ = 0;
};

traind::v1::EpochMetrics Epoch(int32_t n) {
  traind::v1::EpochMetrics m;
  m.set_epoch(n);
  return m;
}

// No heartbeats in these tests unless they ask for them.
EpochReporterOptions Quiet() {
  EpochReporterOptions o;
  o.heartbeat_every = milliseconds(600'000);
  return o;
}

TEST(WorkerEpochReporter, EpochsQueuedDuringACallGoInOneCallInOrder) {
  FakeSink sink;
  EpochReporter reporter(&sink, Quiet());
  reporter.Start();
  sink.Hold();
  ASSERT_TRUE(reporter.Add(Epoch(1)).ok());
  ASSERT_TRUE(sink.WaitForCalls(1));
  // While epoch 1's call is in flight, 299 more epochs come.
  for (int e = 2; e <= 300; ++e) ASSERT_TRUE(reporter.Add(Epoch(e)).ok());
  sink.Release();
  ASSERT_TRUE(reporter.Flush().ok());
  const std::vector<std::vector<int32_t>> calls = sink.calls();
  // At most 256 epochs per call: 1, then 2..257, then 258..300.
  ASSERT_EQ(calls.size(), 3u);
  EXPECT_EQ(calls[0], std::vector<int32_t>{1});
  ASSERT_EQ(calls[1].size(), 256u);
  ASSERT_EQ(calls[2].size(), 43u);
  int32_t next = 2;
  for (size_t c = 1; c < calls.size(); ++c) {
    for (int32_t e : calls[c]) EXPECT_EQ(e, next++);
  }
}

TEST(WorkerEpochReporter, FastEpochsAreCoalesced) {
  FakeSink sink;
  EpochReporterOptions o = Quiet();
  o.report_every = milliseconds(200);
  EpochReporter reporter(&sink, o);
  reporter.Start();
  // 100 epochs faster than one call per 200 ms: far fewer calls than epochs.
  for (int e = 1; e <= 100; ++e) ASSERT_TRUE(reporter.Add(Epoch(e)).ok());
  ASSERT_TRUE(reporter.Flush().ok());
  const std::vector<std::vector<int32_t>> calls = sink.calls();
  int32_t next = 1;
  for (const std::vector<int32_t>& call : calls) {
    for (int32_t e : call) EXPECT_EQ(e, next++);
  }
  EXPECT_EQ(next, 101);
  EXPECT_LE(calls.size(), 3u);
}

TEST(WorkerEpochReporter, FlushSendsAtOnce) {
  FakeSink sink;
  EpochReporterOptions o = Quiet();
  o.report_every = milliseconds(600'000);  // never by the clock
  EpochReporter reporter(&sink, o);
  reporter.Start();
  ASSERT_TRUE(reporter.Add(Epoch(1)).ok());
  ASSERT_TRUE(reporter.Add(Epoch(2)).ok());
  ASSERT_TRUE(reporter.Flush().ok());
  EXPECT_EQ(sink.calls(), (std::vector<std::vector<int32_t>>{{1, 2}}));
}

// SendNow: what is queued goes at once, and the caller does not wait for
// it (the sink holds the call here); Flush then waits for it.
TEST(WorkerEpochReporter, SendNowSendsWithoutWaiting) {
  FakeSink sink;
  EpochReporterOptions o = Quiet();
  o.report_every = milliseconds(600'000);  // never by the clock
  EpochReporter reporter(&sink, o);
  reporter.Start();
  sink.Hold();
  ASSERT_TRUE(reporter.Add(Epoch(1)).ok());
  ASSERT_TRUE(reporter.Add(Epoch(2)).ok());
  reporter.SendNow();
  ASSERT_TRUE(sink.WaitForCalls(1));
  EXPECT_EQ(sink.calls(), (std::vector<std::vector<int32_t>>{{1, 2}}));
  sink.Release();
  ASSERT_TRUE(reporter.Flush().ok());
  EXPECT_EQ(sink.calls().size(), 1u);
}

TEST(WorkerEpochReporter, AFailedReportIsFinal) {
  FakeSink sink;
  sink.FailWith(absl::UnavailableError("daemon gone"));
  EpochReporter reporter(&sink, Quiet());
  reporter.Start();
  ASSERT_TRUE(reporter.Add(Epoch(7)).ok());
  const absl::Status flushed = reporter.Flush();
  EXPECT_TRUE(absl::IsUnavailable(flushed)) << flushed;
  EXPECT_EQ(flushed.message(), "cannot report epoch 7 to traind: daemon gone");
  // Nothing is queued after it.
  EXPECT_EQ(reporter.Add(Epoch(8)), flushed);
  EXPECT_EQ(reporter.Flush(), flushed);
  EXPECT_EQ(sink.calls().size(), 1u);
}

TEST(WorkerEpochReporter, TheDestructorSendsWhatIsQueued) {
  FakeSink sink;
  {
    EpochReporterOptions o = Quiet();
    o.report_every = milliseconds(600'000);
    EpochReporter reporter(&sink, o);
    reporter.Start();
    ASSERT_TRUE(reporter.Add(Epoch(1)).ok());
  }
  EXPECT_EQ(sink.calls(), (std::vector<std::vector<int32_t>>{{1}}));
}

TEST(WorkerEpochReporter, HeartbeatsBeforeTrainingStarts) {
  FakeSink sink;
  EpochReporterOptions o;
  o.heartbeat_every = milliseconds(5);
  EpochReporter reporter(&sink, o);
  reporter.Start();
  EXPECT_TRUE(sink.WaitForHeartbeats(3));
}

// traind's TaskAssignment.heartbeat_interval_ms replaces the option.
TEST(WorkerEpochReporter, TheIntervalTraindAsksForReplacesTheOption) {
  FakeSink sink;
  EpochReporter reporter(&sink, Quiet());  // 10 minutes
  reporter.set_heartbeat_every(milliseconds(5));
  reporter.Start();
  EXPECT_TRUE(sink.WaitForHeartbeats(3));
}

TEST(WorkerEpochReporter, HeartbeatsFollowTrainingProgress) {
  FakeSink sink;
  EpochReporterOptions o;
  o.heartbeat_every = milliseconds(5);
  EpochReporter reporter(&sink, o);
  reporter.TrainingStarted();
  reporter.Start();
  // The first heartbeat goes; then a training loop that makes no progress
  // goes silent.
  ASSERT_TRUE(sink.WaitForHeartbeats(1));
  std::this_thread::sleep_for(milliseconds(100));
  EXPECT_EQ(sink.heartbeats(), 1);
  // Progress brings them back.
  for (int i = 0; i < 3; ++i) {
    const int before = sink.heartbeats();
    reporter.NotifyProgress();
    EXPECT_TRUE(sink.WaitForHeartbeats(before + 1));
  }
}

double ProcessCpuSeconds() {
  timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

TEST(WorkerEpochReporter, AStalledTrainingLoopCostsNoCpu) {
  FakeSink sink;
  EpochReporterOptions o;
  o.heartbeat_every = milliseconds(20);
  EpochReporter reporter(&sink, o);
  reporter.TrainingStarted();
  reporter.Start();
  ASSERT_TRUE(sink.WaitForHeartbeats(1));
  // A heartbeat is due but withheld (no progress): the reporter waits
  // rather than looks again at once.
  const double cpu0 = ProcessCpuSeconds();
  std::this_thread::sleep_for(milliseconds(300));
  EXPECT_LT(ProcessCpuSeconds() - cpu0, 0.05);
  EXPECT_EQ(sink.heartbeats(), 1);
}

}  // namespace
}  // namespace traind::worker
