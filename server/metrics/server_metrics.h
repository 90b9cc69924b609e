// ServerMetrics: traind's Prometheus metrics, served as text by the HTTP
// side door's /metrics.
//
// Two kinds, after Prometheus' naming guide (one `traind_` prefix, base
// units, `_total` counters, label sets bounded: no job ids as labels):
//   - counted as things happen, from the job events of every job (an
//     EventHub subscriber): jobs submitted and finished by state, attempts
//     started and failed by reason, retries, queue wait, worker start and
//     epoch seconds; store commit seconds from the store writer;
//   - read at scrape time: jobs and tasks by state (the store), CPU slots,
//     GPU memory and state, watch streams open, build info.
// Counters start at zero with each start of traind (as Prometheus expects
// of a process).
//
// Thread-safety: thread-safe. OnEvent runs on the store writer's thread
// with the hub's lock held, and only updates counters and a small map of
// live tasks' times.
#ifndef TRAIND_SERVER_METRICS_SERVER_METRICS_H_
#define TRAIND_SERVER_METRICS_SERVER_METRICS_H_

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/metric_family.h"
#include "prometheus/registry.h"
#include "server/launch/slurm_launcher.h"
#include "server/scheduler/event_hub.h"
#include "server/scheduler/scheduler.h"

namespace traind::server {

// traind_slurm_commands_total{command, outcome}: the Slurm commands the
// Slurm launcher ran (sbatch, squeue, scancel), ok or error.
prometheus::MetricFamily SlurmCommandsFamily(const SlurmLauncher::CommandCounts& counts);

class ServerMetrics final : public EventSubscriber {
 public:
  enum class Stream { kGrpc, kSse };

  // Call before the scheduler recovers or starts (so that every event is
  // counted), then Attach(scheduler).
  ServerMetrics(std::string version, int cpu_slots, absl::Time start_time);
  ~ServerMetrics() override;
  ServerMetrics(const ServerMetrics&) = delete;
  ServerMetrics& operator=(const ServerMetrics&) = delete;

  // Subscribes to every job's events and reads `scheduler` at scrape time.
  // Detach before the scheduler is destroyed.
  void Attach(Scheduler* scheduler);
  void Detach();

  // The exposition (text format 0.0.4) of every metric now. Reads the store.
  std::string Scrape();

  // Adds families a part of traind collects itself (the Slurm launcher's
  // command counts) to every scrape. A collector must stay callable for
  // the life of the metrics.
  using Collector = std::function<void(std::vector<prometheus::MetricFamily>*)>;
  void AddCollector(Collector collector);

  // A watch stream opened / closed (WatchJob, server-sent events).
  void StreamOpened(Stream s);
  void StreamClosed(Stream s);
  // One store transaction took `d` (SchedulerOptions::on_store_commit).
  void ObserveStoreCommit(absl::Duration d);

  void OnEvent(const SharedEvent& event) override;

 private:
  const std::string version_;
  const int cpu_slots_;
  const absl::Time start_time_;
  std::shared_ptr<prometheus::Registry> registry_;
  absl::Mutex collectors_mu_;
  std::vector<Collector> collectors_ ABSL_GUARDED_BY(collectors_mu_);
  prometheus::Counter* jobs_submitted_;
  prometheus::Family<prometheus::Counter>* jobs_finished_;
  prometheus::Counter* attempts_started_;
  prometheus::Family<prometheus::Counter>* attempts_failed_;
  prometheus::Counter* retries_;
  prometheus::Histogram* queue_wait_;
  prometheus::Histogram* worker_start_;
  prometheus::Histogram* epoch_seconds_;
  prometheus::Histogram* store_commit_;
  std::atomic<int64_t> grpc_streams_{0};
  std::atomic<int64_t> sse_streams_{0};

  absl::Mutex mu_;
  Scheduler* scheduler_ ABSL_GUARDED_BY(mu_) = nullptr;
  // Live jobs' submit times and live tasks' queued / started times, for the
  // wait histograms; forgotten when the job ends.
  std::map<std::string, absl::Time> job_queued_ ABSL_GUARDED_BY(mu_);
  std::map<std::pair<std::string, int>, absl::Time> task_queued_ ABSL_GUARDED_BY(mu_);
  std::map<std::pair<std::string, int>, absl::Time> task_starting_ ABSL_GUARDED_BY(mu_);
};

}  // namespace traind::server

#endif  // TRAIND_SERVER_METRICS_SERVER_METRICS_H_
