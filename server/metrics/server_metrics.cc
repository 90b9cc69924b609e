#include "server/metrics/server_metrics.h"

#include <algorithm>
#include <cctype>
#include <tuple>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "google/protobuf/util/time_util.h"
#include "prometheus/metric_family.h"
#include "prometheus/text_serializer.h"
#include "server/scheduler/state_transitions.h"

namespace traind::server {
namespace {

using google::protobuf::util::TimeUtil;
using traind::v1::Job;
using traind::v1::Task;

absl::Time ToTime(const google::protobuf::Timestamp& t) {
  return absl::FromUnixMicros(TimeUtil::TimestampToMicroseconds(t));
}

// "WORKER_CRASHED" -> "worker_crashed": label values in Prometheus' style.
std::string LabelValue(const std::string& enum_name) { return absl::AsciiStrToLower(enum_name); }

// Powers of `factor` from `start`, `n` of them.
prometheus::Histogram::BucketBoundaries Exponential(double start, double factor, int n) {
  prometheus::Histogram::BucketBoundaries b;
  double v = start;
  for (int i = 0; i < n; ++i, v *= factor) b.push_back(v);
  return b;
}

prometheus::MetricFamily GaugeFamily(std::string name, std::string help) {
  prometheus::MetricFamily f;
  f.name = std::move(name);
  f.help = std::move(help);
  f.type = prometheus::MetricType::Gauge;
  return f;
}

void AddGauge(prometheus::MetricFamily* f, std::vector<prometheus::ClientMetric::Label> labels,
              double value) {
  prometheus::ClientMetric m;
  m.label = std::move(labels);
  m.gauge.value = value;
  f->metric.push_back(std::move(m));
}

}  // namespace

ServerMetrics::ServerMetrics(std::string version, int cpu_slots, absl::Time start_time)
    : version_(std::move(version)),
      cpu_slots_(cpu_slots),
      start_time_(start_time),
      registry_(std::make_shared<prometheus::Registry>()) {
  jobs_submitted_ = &prometheus::BuildCounter()
                         .Name("traind_jobs_submitted_total")
                         .Help("Jobs accepted by SubmitJob since traind started.")
                         .Register(*registry_)
                         .Add({});
  jobs_finished_ = &prometheus::BuildCounter()
                        .Name("traind_jobs_finished_total")
                        .Help("Jobs that ended since traind started, by their final state.")
                        .Register(*registry_);
  for (Job::State s : {Job::SUCCEEDED, Job::FAILED, Job::CANCELLED}) {
    jobs_finished_->Add({{"state", LabelValue(Job::State_Name(s))}});
  }
  attempts_started_ = &prometheus::BuildCounter()
                           .Name("traind_attempts_started_total")
                           .Help("Task attempts launched (worker processes started).")
                           .Register(*registry_)
                           .Add({});
  attempts_failed_ = &prometheus::BuildCounter()
                          .Name("traind_attempts_failed_total")
                          .Help("Task attempts that ended without success, by failure reason.")
                          .Register(*registry_);
  for (int r = traind::v1::Failure::Reason_MIN + 1; r <= traind::v1::Failure::Reason_MAX; ++r) {
    if (!traind::v1::Failure::Reason_IsValid(r)) continue;
    attempts_failed_->Add({{"reason", LabelValue(traind::v1::Failure::Reason_Name(
                                          static_cast<traind::v1::Failure::Reason>(r)))}});
  }
  retries_ = &prometheus::BuildCounter()
                  .Name("traind_task_retries_total")
                  .Help("Tasks queued again after a failed or lost attempt.")
                  .Register(*registry_)
                  .Add({});
  queue_wait_ = &prometheus::BuildHistogram()
                     .Name("traind_queue_wait_seconds")
                     .Help("Time a task waited in the queue before its attempt was launched.")
                     .Register(*registry_)
                     .Add({}, Exponential(0.001, 4, 12));
  worker_start_ = &prometheus::BuildHistogram()
                       .Name("traind_worker_start_seconds")
                       .Help("From an attempt's launch to its worker's first report (RUNNING).")
                       .Register(*registry_)
                       .Add({}, Exponential(0.002, 2, 14));
  epoch_seconds_ = &prometheus::BuildHistogram()
                        .Name("traind_epoch_seconds")
                        .Help("Wall time of one training epoch (with validation), as reported.")
                        .Register(*registry_)
                        .Add({}, Exponential(0.001, 4, 12));
  store_commit_ = &prometheus::BuildHistogram()
                       .Name("traind_store_commit_seconds")
                       .Help("Time of one job store transaction.")
                       .Register(*registry_)
                       .Add({}, Exponential(0.0001, 2, 16));
}

ServerMetrics::~ServerMetrics() { Detach(); }

void ServerMetrics::Attach(Scheduler* scheduler) {
  {
    absl::MutexLock lock(&mu_);
    scheduler_ = scheduler;
  }
  scheduler->hub()->SubscribeAll(this);
}

void ServerMetrics::Detach() {
  Scheduler* s;
  {
    absl::MutexLock lock(&mu_);
    s = scheduler_;
    scheduler_ = nullptr;
  }
  if (s != nullptr) s->hub()->UnsubscribeAll(this);
}

void ServerMetrics::StreamOpened(Stream s) {
  (s == Stream::kGrpc ? grpc_streams_ : sse_streams_).fetch_add(1);
}

void ServerMetrics::StreamClosed(Stream s) {
  (s == Stream::kGrpc ? grpc_streams_ : sse_streams_).fetch_sub(1);
}

void ServerMetrics::ObserveStoreCommit(absl::Duration d) {
  store_commit_->Observe(absl::ToDoubleSeconds(d));
}

void ServerMetrics::OnEvent(const SharedEvent& shared) {
  const traind::v1::JobEvent& event = shared->event();
  const absl::Time time = ToTime(event.time());
  if (event.has_epoch()) {
    epoch_seconds_->Observe(std::max(0.0, event.epoch().seconds()));
    return;
  }
  absl::MutexLock lock(&mu_);
  if (event.has_job_state()) {
    const Job::State s = event.job_state().state();
    if (s == Job::QUEUED) {
      jobs_submitted_->Increment();
      job_queued_[event.job_id()] = time;
    } else if (IsTerminal(s)) {
      jobs_finished_->Add({{"state", LabelValue(Job::State_Name(s))}}).Increment();
      job_queued_.erase(event.job_id());
      auto forget = [&](auto* m) {
        auto it = m->lower_bound({event.job_id(), 0});
        while (it != m->end() && it->first.first == event.job_id()) it = m->erase(it);
      };
      forget(&task_queued_);
      forget(&task_starting_);
    }
    return;
  }
  if (!event.has_task_state()) return;
  const traind::v1::TaskStateChange& t = event.task_state();
  const std::pair<std::string, int> key{event.job_id(), t.task()};
  if (t.has_failure() && t.failure().reason() != traind::v1::Failure::REASON_UNSPECIFIED &&
      t.state() != Task::SUCCEEDED) {
    attempts_failed_
        ->Add({{"reason", LabelValue(traind::v1::Failure::Reason_Name(t.failure().reason()))}})
        .Increment();
  }
  switch (t.state()) {
    case Task::QUEUED:
      if (t.has_failure()) retries_->Increment();
      task_queued_[key] = time;
      task_starting_.erase(key);
      break;
    case Task::STARTING: {
      attempts_started_->Increment();
      absl::Time queued = absl::InfinitePast();
      if (auto it = task_queued_.find(key); it != task_queued_.end()) {
        queued = it->second;
        task_queued_.erase(it);
      } else if (auto jt = job_queued_.find(event.job_id()); jt != job_queued_.end()) {
        queued = jt->second;
      }
      if (queued != absl::InfinitePast()) {
        queue_wait_->Observe(std::max(0.0, absl::ToDoubleSeconds(time - queued)));
      }
      task_starting_[key] = time;
      break;
    }
    case Task::RUNNING:
      if (auto it = task_starting_.find(key); it != task_starting_.end()) {
        worker_start_->Observe(std::max(0.0, absl::ToDoubleSeconds(time - it->second)));
        task_starting_.erase(it);
      }
      break;
    default:
      task_queued_.erase(key);
      task_starting_.erase(key);
      break;
  }
}

prometheus::MetricFamily SlurmCommandsFamily(const SlurmLauncher::CommandCounts& c) {
  prometheus::MetricFamily f;
  f.name = "traind_slurm_commands_total";
  f.help = "Slurm commands traind ran (sbatch, squeue, scancel), by outcome.";
  f.type = prometheus::MetricType::Counter;
  for (const auto& [command, runs, failed] :
       {std::tuple<const char*, int64_t, int64_t>{"sbatch", c.sbatch, c.sbatch_failed},
        {"squeue", c.squeue, c.squeue_failed},
        {"scancel", c.scancel, c.scancel_failed}}) {
    for (const auto& [outcome, n] :
         {std::pair<const char*, int64_t>{"ok", runs - failed}, {"error", failed}}) {
      prometheus::ClientMetric m;
      m.label = {{"command", command}, {"outcome", outcome}};
      m.counter.value = static_cast<double>(n);
      f.metric.push_back(std::move(m));
    }
  }
  return f;
}

void ServerMetrics::AddCollector(Collector collector) {
  absl::MutexLock lock(&collectors_mu_);
  collectors_.push_back(std::move(collector));
}

std::string ServerMetrics::Scrape() {
  std::vector<prometheus::MetricFamily> families = registry_->Collect();
  Scheduler* scheduler;
  {
    absl::MutexLock lock(&mu_);
    scheduler = scheduler_;
  }

  prometheus::MetricFamily info =
      GaugeFamily("traind_build_info", "traind's version (the value is always 1).");
  AddGauge(&info, {{"version", version_}}, 1);
  families.push_back(std::move(info));
  prometheus::MetricFamily start =
      GaugeFamily("traind_start_time_seconds", "When traind started, in seconds since the epoch.");
  AddGauge(&start, {}, absl::ToDoubleSeconds(start_time_ - absl::UnixEpoch()));
  families.push_back(std::move(start));

  prometheus::MetricFamily streams =
      GaugeFamily("traind_watch_streams", "Watch streams open, by transport.");
  AddGauge(&streams, {{"transport", "grpc"}}, static_cast<double>(grpc_streams_.load()));
  AddGauge(&streams, {{"transport", "sse"}}, static_cast<double>(sse_streams_.load()));
  families.push_back(std::move(streams));
  {
    absl::MutexLock lock(&collectors_mu_);
    for (const Collector& collect : collectors_) collect(&families);
  }

  if (scheduler == nullptr) return prometheus::TextSerializer().Serialize(families);

  if (absl::StatusOr<JobStore::StateCounts> counts = scheduler->store_as_is()->CountStates();
      counts.ok()) {
    prometheus::MetricFamily jobs = GaugeFamily("traind_jobs", "Jobs in the store, by state.");
    for (int s = Job::QUEUED; s <= Job::CANCELLED; ++s) {
      auto it = counts->jobs.find(s);
      AddGauge(&jobs, {{"state", LabelValue(Job::State_Name(static_cast<Job::State>(s)))}},
               it == counts->jobs.end() ? 0 : static_cast<double>(it->second));
    }
    families.push_back(std::move(jobs));
    prometheus::MetricFamily tasks = GaugeFamily("traind_tasks", "Tasks in the store, by state.");
    for (int s = Task::QUEUED; s <= Task::PRUNED; ++s) {
      auto it = counts->tasks.find(s);
      AddGauge(&tasks, {{"state", LabelValue(Task::State_Name(static_cast<Task::State>(s)))}},
               it == counts->tasks.end() ? 0 : static_cast<double>(it->second));
    }
    families.push_back(std::move(tasks));
  }

  prometheus::MetricFamily writable = GaugeFamily(
      "traind_store_writable",
      "1 while the job store takes writes; 0 while it cannot (a full disk): new jobs are "
      "refused and changes wait until there is space.");
  AddGauge(&writable, {}, scheduler->StoreStatus().ok() ? 1 : 0);
  families.push_back(std::move(writable));

  const SchedulerStats stats = scheduler->Stats();
  prometheus::MetricFamily slots = GaugeFamily("traind_cpu_slots", "CPU task slots.");
  AddGauge(&slots, {}, cpu_slots_);
  families.push_back(std::move(slots));
  prometheus::MetricFamily busy =
      GaugeFamily("traind_cpu_slots_busy", "Tasks running (each holds a CPU slot).");
  AddGauge(&busy, {}, stats.tasks_running);
  families.push_back(std::move(busy));

  std::string unavailable;
  const std::vector<GpuPool::Gpu> gpus = scheduler->Gpus(&unavailable);
  prometheus::MetricFamily used =
      GaugeFamily("traind_gpu_memory_used_bytes", "GPU memory in use, per GPU.");
  prometheus::MetricFamily total =
      GaugeFamily("traind_gpu_memory_total_bytes", "GPU memory in all, per GPU.");
  prometheus::MetricFamily state = GaugeFamily(
      "traind_gpu_state", "GPU state as traind schedules it (1 for the GPU's current state).");
  for (const GpuPool::Gpu& g : gpus) {
    const std::string id = absl::StrCat(g.index);
    AddGauge(&used, {{"gpu", id}}, static_cast<double>(g.last.used_bytes));
    AddGauge(&total, {{"gpu", id}}, static_cast<double>(g.last.total_bytes));
    for (auto [s, name] :
         {std::pair{GpuPool::State::kIdle, "idle"}, std::pair{GpuPool::State::kBusy, "busy"},
          std::pair{GpuPool::State::kDraining, "draining"},
          std::pair{GpuPool::State::kUnhealthy, "unhealthy"}}) {
      AddGauge(&state, {{"gpu", id}, {"state", name}}, g.state == s ? 1 : 0);
    }
  }
  families.push_back(std::move(used));
  families.push_back(std::move(total));
  families.push_back(std::move(state));
  return prometheus::TextSerializer().Serialize(families);
}

}  // namespace traind::server
