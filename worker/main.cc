// traind-worker: runs one task attempt of a traind job and exits.
//
// Started by traind (never through a shell):
//   traind-worker --server=unix:STATE/worker.sock --job=ID --task=N --attempt=K
// with the attempt's secret in TRAIND_WORKER_SECRET. It fetches its task,
// loads and splits the data (deterministically, from the job's seed),
// trains, reports every epoch, reports its outcome and exits; the process
// exit releases everything it held.
//
// A multi-GPU task runs one process per GPU, started with
// --rank=R --world-size=N (CUDA_VISIBLE_DEVICES names the rank's GPU).
//
// Standalone, without a daemon (every fold in this process, one after the
// other; metrics as JSON lines on stdout):
//   traind-worker --spec=FILE [--fold=K]
//
// GPU tasks (resources.device: gpu) train on the CUDA plugin
// (libtraind_cuda.so beside this executable, or ../lib/traind), loaded only
// for them: a CPU task never loads CUDA, cuBLAS or NCCL.
//
// Exit status: 0 succeeded, 1 failed (the failure was reported), 2 usage,
// 3 cancelled, 4 the daemon could not be reached.
#include <signal.h>
#include <sys/prctl.h>
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "CLI/CLI.hpp"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "google/protobuf/util/json_util.h"
#include "grpcpp/grpcpp.h"
#include "spec/loader.h"
#include "traind/v1/worker_service.grpc.pb.h"
#include "worker/cuda_plugin_loader.h"
#include "worker/engine/backend/backend.h"
#include "worker/engine/backend/cpu/cpu_backend.h"
#include "worker/engine/data/dataset.h"
#include "worker/engine/data/split.h"
#include "worker/engine/fit.h"
#include "worker/engine/parallel/communicator.h"
#include "spec/validation.h"
#include "worker/engine/data/task_rows.h"
#include "spec/task_plan.h"
#include "worker/engine/status.h"
#include "worker/zygote/zygote.h"

namespace traind::worker {
namespace {

using traind::v1::Failure;

enum ExitCode { kSucceeded = 0, kFailed = 1, kUsage = 2, kCancelled = 3, kUnreachable = 4 };

std::atomic<bool> g_stop_signal{false};  // set by SIGTERM/SIGINT (async-signal-safe)

extern "C" void OnStopSignal(int) { g_stop_signal.store(true, std::memory_order_relaxed); }

void Log(absl::string_view message) {
  std::string line = absl::StrCat(
      absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", absl::Now(), absl::UTCTimeZone()), " ", message,
      "\n");
  std::fwrite(line.data(), 1, line.size(), stderr);
}

Failure::Reason ReasonOf(const absl::Status& s) {
  switch (engine::FailureKindOf(s)) {
    case engine::FailureKind::kInvalidSpec:
      return Failure::INVALID_SPEC;
    case engine::FailureKind::kDataError:
      return Failure::DATA_ERROR;
    case engine::FailureKind::kDiverged:
      return Failure::DIVERGED;
    case engine::FailureKind::kOutOfMemory:
      return Failure::OUT_OF_MEMORY;
    case engine::FailureKind::kDeviceError:
      return Failure::DEVICE_ERROR;
    case engine::FailureKind::kCancelled:
      return Failure::CANCELLED;
    case engine::FailureKind::kNone:
      break;
  }
  return Failure::WORKER_CRASHED;
}

// --------------------------------------------------------------------------
// GPU tasks
// --------------------------------------------------------------------------

// How long ranks wait for each other: rank 0's NCCL id through the daemon,
// and the NCCL communicator's initialization (and every collective).
constexpr absl::Duration kRankTimeout = absl::Minutes(2);

// What a GPU task trains with: the plugin, a backend on this process's GPU
// (device 0: the daemon sets CUDA_VISIBLE_DEVICES to the task's GPU, or to
// the rank's with several ranks) and, with several ranks, the NCCL
// communicator. Release() (and the destructor) destroys the communicator
// first (NCCL finalize), then the backend (its memory, streams, cuBLAS
// handles); the plugin stays loaded until the process exits.
struct GpuContext {
  std::unique_ptr<CudaPlugin> plugin;
  std::unique_ptr<engine::Backend> backend;
  std::unique_ptr<engine::Communicator> communicator;

  GpuContext() = default;
  GpuContext(const GpuContext&) = delete;
  GpuContext& operator=(const GpuContext&) = delete;
  ~GpuContext() { Release(); }
  // Logs how long the release took (the teardown part of a GPU task's cost).
  void Release() {
    if (backend == nullptr && communicator == nullptr) return;
    const absl::Time start = absl::Now();
    communicator.reset();
    backend.reset();
    Log(absl::StrFormat("gpu released in %.0f ms",
                        absl::ToDoubleMilliseconds(absl::Now() - start)));
  }
};

// `s` with a failure kind: its own (OUT_OF_MEMORY, INVALID_SPEC, ...) or,
// when it has none, DEVICE_ERROR with `context` in front of its message.
absl::Status AsTaskFailure(const absl::Status& s, absl::string_view context) {
  if (engine::FailureKindOf(s) != engine::FailureKind::kNone) return s;
  return engine::DeviceError(absl::StrCat(context, ": ", s.message()));
}

// Like AsTaskFailure, for waiting on the other ranks: a peer that failed,
// went away or never came (Unavailable, Aborted, DeadlineExceeded with no
// failure kind: NCCL's remote errors, aborts and timeouts, a rendezvous that
// traind ended) is not this rank's device failing. Such a status keeps no
// kind, so it is reported as WORKER_CRASHED, which traind retries, and it
// does not pass for a DEVICE_ERROR (never retried) that could become the
// attempt's failure instead of the dead peer's crash.
absl::Status AsRankFailure(const absl::Status& s, absl::string_view context) {
  if (engine::FailureKindOf(s) == engine::FailureKind::kNone &&
      (absl::IsUnavailable(s) || absl::IsAborted(s) || absl::IsDeadlineExceeded(s))) {
    return absl::Status(s.code(), absl::StrCat(context, ": ", s.message()));
  }
  return AsTaskFailure(s, context);
}

// Loads the plugin and creates the backend for `spec` on visible device
// `device` (a multi-GPU task's ranks see the task's GPUs in rank order:
// rank r trains on device r). Logs how long each part took (the per-task
// cost of a GPU task).
absl::Status OpenGpu(const traind::v1::JobSpec& spec, int device, GpuContext* gpu) {
  const absl::Time start = absl::Now();
  absl::StatusOr<std::unique_ptr<CudaPlugin>> plugin = CudaPlugin::LoadDefault();
  if (!plugin.ok()) return AsTaskFailure(plugin.status(), "resources.device gpu");
  gpu->plugin = std::move(*plugin);
  const absl::Time loaded = absl::Now();
  std::string reason;
  const int count = gpu->plugin->DeviceCount(&reason);
  if (count <= device) {
    const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
    if (count > 0) reason = absl::StrCat(count, " visible, this rank needs device ", device);
    return engine::DeviceError(absl::StrCat("resources.device gpu: ", reason,
                                            " (CUDA_VISIBLE_DEVICES=",
                                            visible != nullptr ? visible : "unset", ")"));
  }
  absl::StatusOr<std::unique_ptr<engine::Backend>> backend =
      gpu->plugin->CreateBackend(device, spec.training().precision());
  if (!backend.ok()) return AsTaskFailure(backend.status(), "creating the CUDA backend");
  gpu->backend = std::move(*backend);
  const absl::Time ready = absl::Now();
  Log(absl::StrFormat(
      "gpu ready in %.0f ms (plugin load %.0f ms, CUDA context and cuBLAS %.0f ms): %s; %s",
      absl::ToDoubleMilliseconds(ready - start), absl::ToDoubleMilliseconds(loaded - start),
      absl::ToDoubleMilliseconds(ready - loaded), gpu->backend->name(),
      gpu->plugin->build_info()));
  return absl::OkStatus();
}

// --capabilities: what this worker can train on, one line of tokens: "cpu";
// "cpu-bf16" when oneDNN has bf16 matmuls on this CPU (under this process's
// ONEDNN_MAX_CPU_ISA); "cuda" when the plugin loads and sees a device. Why
// CUDA is absent goes to stderr (traind logs it). traind takes bf16 support
// from here, so submit and training agree on it.
int PrintCapabilities() {
  std::string tokens = "cpu";
  if (engine::CpuSupportsBf16()) tokens += " cpu-bf16";
  absl::StatusOr<std::unique_ptr<CudaPlugin>> plugin = CudaPlugin::LoadDefault();
  std::string reason;
  if (!plugin.ok()) {
    std::fprintf(stderr, "traind-worker: no cuda backend: %s\n",
                 std::string(plugin.status().message()).c_str());
  } else if ((*plugin)->DeviceCount(&reason) == 0) {
    std::fprintf(stderr, "traind-worker: no cuda backend: %s (plugin %s)\n", reason.c_str(),
                 (*plugin)->path().c_str());
  } else {
    tokens += " cuda";
  }
  std::printf("%s\n", tokens.c_str());
  return 0;
}

// --------------------------------------------------------------------------
// Under traind
// --------------------------------------------------------------------------

class DaemonSession final : public engine::FitObserver {
 public:
  static constexpr std::chrono::milliseconds kReportEvery{50};

  // Ranks other than 0 of a multi-GPU task report failures, warnings and
  // heartbeats; their epochs, start and result are rank 0's (identical on
  // every rank: Fit reduces them), so they are not sent.
  DaemonSession(std::shared_ptr<grpc::Channel> channel, traind::v1::AttemptCredentials creds)
      : stub_(traind::v1::WorkerService::NewStub(channel)),
        creds_(std::move(creds)),
        reports_epochs_(creds_.rank() == 0) {}

  ~DaemonSession() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      done_ = true;
    }
    cv_.notify_all();
    if (reporter_.joinable()) reporter_.join();
  }

  grpc::Status GetTask(traind::v1::TaskAssignment* task) {
    traind::v1::GetTaskRequest req;
    *req.mutable_credentials() = creds_;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    ctx.set_wait_for_ready(true);
    return stub_->GetTask(&ctx, req, task);
  }

  // Starts the background thread that sends epoch reports in order (so
  // training never waits for the daemon's answer) and heartbeats when there
  // is nothing else to send.
  void StartReporter() {
    reporter_ = std::thread([this] {
      std::unique_lock<std::mutex> lock(mu_);
      auto last_sent = std::chrono::steady_clock::now();
      uint64_t last_progress = ~0ull;
      for (;;) {
        cv_.wait_until(lock, last_sent + std::chrono::seconds(2),
                       [this] { return done_ || !epochs_.empty(); });
        if (!epochs_.empty()) {
          // Coalesced: a small fold's epochs come faster than anyone reads
          // them, and each call costs the daemon a commit and the worker CPU
          // it trains with. At most one call per kReportEvery (the first
          // epoch after a pause goes at once, a flush immediately).
          cv_.wait_until(lock, last_sent + kReportEvery,
                         [this] { return done_ || flush_ || epochs_.size() >= 256; });
          // Everything queued goes in one call (at most 256 epochs).
          traind::v1::ReportEpochRequest req;
          *req.mutable_credentials() = creds_;
          *req.mutable_metrics() = epochs_.front();
          const size_t n = std::min<size_t>(epochs_.size(), 256);
          for (size_t i = 1; i < n; ++i) *req.add_more() = epochs_[i];
          lock.unlock();
          // Reports are idempotent (keyed by job, task, attempt, epoch):
          // retrying after a lost answer never duplicates a metric.
          grpc::Status s =
              CallWithRetry([&](grpc::ClientContext* ctx, traind::v1::ReportResponse* resp) {
                return stub_->ReportEpoch(ctx, req, resp);
              });
          lock.lock();
          last_sent = std::chrono::steady_clock::now();
          epochs_.erase(epochs_.begin(), epochs_.begin() + n);
          if (!s.ok() && report_error_.ok()) {
            report_error_ = absl::UnavailableError(absl::StrCat(
                "cannot report epoch ", req.metrics().epoch(), " to traind: ", s.error_message()));
            epochs_.clear();
          }
          cv_.notify_all();
          continue;
        }
        if (done_) return;
        // A heartbeat says the task is making progress: sent only while
        // training advances (a batch or an epoch since the last one), so a
        // training loop that hangs goes silent and is killed by traind.
        const uint64_t progress = progress_.load(std::memory_order_relaxed);
        if (std::chrono::steady_clock::now() - last_sent >= std::chrono::seconds(2) &&
            (progress != last_progress || !training_.load(std::memory_order_relaxed))) {
          last_progress = progress;
          lock.unlock();
          traind::v1::HeartbeatRequest req;
          *req.mutable_credentials() = creds_;
          traind::v1::ReportResponse resp;
          grpc::ClientContext ctx;
          ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
          if (stub_->Heartbeat(&ctx, req, &resp).ok() && resp.stop()) stop_.store(true);
          lock.lock();
          last_sent = std::chrono::steady_clock::now();
        }
      }
    });
  }

  // Waits until every queued epoch report has been delivered.
  absl::Status Flush() {
    std::unique_lock<std::mutex> lock(mu_);
    flush_ = true;
    cv_.notify_all();
    cv_.wait(lock, [this] { return epochs_.empty(); });
    flush_ = false;
    return report_error_;
  }

  grpc::Status Report(traind::v1::ReportEventRequest req) {
    *req.mutable_credentials() = creds_;
    return CallWithRetry([&](grpc::ClientContext* ctx, traind::v1::ReportResponse* resp) {
      return stub_->ReportEvent(ctx, req, resp);
    });
  }

  // Training has started: from now on heartbeats follow its progress.
  void TrainingStarted() { training_.store(true); }

  // Multi-GPU: rank 0 posts `posted` (its NCCL unique id); every rank gets
  // the id in *unique_id. Waits for rank 0 at most `timeout`.
  grpc::Status Rendezvous(int world_size, const std::string& posted, std::string* unique_id,
                          absl::Duration timeout) {
    traind::v1::RendezvousRequest req;
    *req.mutable_credentials() = creds_;
    req.set_world_size(world_size);
    req.set_unique_id(posted);
    const auto deadline = std::chrono::system_clock::now() + absl::ToChronoSeconds(timeout);
    grpc::Status s;
    for (int attempt = 0;; ++attempt) {
      grpc::ClientContext ctx;
      ctx.set_deadline(deadline);
      ctx.set_wait_for_ready(true);
      traind::v1::RendezvousResponse resp;
      s = stub_->Rendezvous(&ctx, req, &resp);
      if (s.ok()) {
        *unique_id = resp.unique_id();
        return s;
      }
      if (s.error_code() != grpc::StatusCode::UNAVAILABLE ||
          std::chrono::system_clock::now() >= deadline) {
        return s;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100 << std::min(attempt, 4)));
    }
  }

  absl::Status OnEpochEnd(const traind::v1::EpochMetrics& metrics) override {
    progress_.fetch_add(1, std::memory_order_relaxed);
    if (!reports_epochs_) return absl::OkStatus();
    std::unique_lock<std::mutex> lock(mu_);
    if (!report_error_.ok()) return report_error_;
    epochs_.push_back(metrics);
    cv_.notify_all();
    // Bounded: a daemon that cannot keep up slows training down rather than
    // let reports pile up.
    cv_.wait(lock, [this] { return epochs_.size() < 1024; });
    return report_error_;
  }

  bool StopRequested() override {
    progress_.fetch_add(1, std::memory_order_relaxed);  // polled after every batch
    return stop_.load(std::memory_order_relaxed) ||
           g_stop_signal.load(std::memory_order_relaxed);
  }

  void OnResume(int32_t completed_epochs) override {
    Log(absl::StrCat("resuming from the checkpoint after epoch ", completed_epochs));
    if (!reports_epochs_) return;
    traind::v1::ReportEventRequest req;
    req.mutable_resumed()->set_completed_epochs(completed_epochs);
    grpc::Status s = Report(req);
    if (!s.ok()) Log(absl::StrCat("error: cannot report the resume: ", s.error_message()));
  }

  void OnWarning(absl::string_view message) override {
    Log(absl::StrCat("warning: ", message));
    traind::v1::ReportEventRequest req;
    req.mutable_warning()->set_message(
        creds_.rank() == 0 ? std::string(message)
                           : absl::StrCat("rank ", creds_.rank(), ": ", message));
    (void)Report(req);  // best effort: the warning is in the log either way
  }

 private:
  // Calls `rpc` until it succeeds or fails with something other than the
  // daemon being briefly unreachable (5 tries, backing off from 100 ms);
  // honours the daemon's request to stop.
  template <typename Rpc>
  grpc::Status CallWithRetry(Rpc rpc) {
    grpc::Status s;
    for (int attempt = 0; attempt < 5; ++attempt) {
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
      ctx.set_wait_for_ready(true);
      traind::v1::ReportResponse resp;
      s = rpc(&ctx, &resp);
      if (s.ok()) {
        if (resp.stop()) stop_.store(true);
        return s;
      }
      if (s.error_code() != grpc::StatusCode::UNAVAILABLE &&
          s.error_code() != grpc::StatusCode::DEADLINE_EXCEEDED) {
        return s;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100 << attempt));
    }
    return s;
  }

  std::unique_ptr<traind::v1::WorkerService::Stub> stub_;
  const traind::v1::AttemptCredentials creds_;
  const bool reports_epochs_;  // rank 0
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  bool flush_ = false;  // Flush() is waiting: send now
  std::deque<traind::v1::EpochMetrics> epochs_;  // reports not yet delivered
  std::atomic<uint64_t> progress_{0};
  std::atomic<bool> training_{false};
  absl::Status report_error_;
  std::thread reporter_;
};

int RunUnderDaemon(const std::string& server, const std::string& job, int task, int attempt,
                   int rank, int world_size) {
  const char* secret = std::getenv("TRAIND_WORKER_SECRET");
  if (secret == nullptr || *secret == '\0') {
    Log("error: TRAIND_WORKER_SECRET is not set (traind-worker is started by traind)");
    return kUsage;
  }
  traind::v1::AttemptCredentials creds;
  creds.set_job_id(job);
  creds.set_task(task);
  creds.set_attempt(attempt);
  creds.set_secret(secret);
  creds.set_rank(rank);
  unsetenv("TRAIND_WORKER_SECRET");
  const std::string where =
      world_size > 1
          ? absl::StrFormat("job=%s task=%d attempt=%d rank=%d/%d", job, task, attempt, rank,
                            world_size)
          : absl::StrFormat("job=%s task=%d attempt=%d", job, task, attempt);

  // Never destroyed: the worker _exits right after this function returns
  // (WorkerMain), once everything after it here (the device, the
  // communicator) is released and every report has been acknowledged.
  // Joining its reporter thread and closing the channel took 4-100 ms per
  // fold for nothing.
  DaemonSession& session = *new DaemonSession(
      grpc::CreateChannel(server, grpc::InsecureChannelCredentials()), creds);
  traind::v1::TaskAssignment assignment;
  grpc::Status gs = session.GetTask(&assignment);
  if (!gs.ok()) {
    Log(absl::StrCat("error: cannot fetch the task from ", server, ": ", gs.error_message()));
    return gs.error_code() == grpc::StatusCode::UNAVAILABLE ||
                   gs.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED
               ? kUnreachable
               : kFailed;
  }
  Log(absl::StrCat("task fetched ", where, " fold=", assignment.fold(), " pid=", getpid()));
  session.StartReporter();

  auto fail = [&](const absl::Status& s) {
    (void)session.Flush();  // the epochs before the failure, then the failure
    traind::v1::ReportEventRequest req;
    Failure* f = req.mutable_failed()->mutable_failure();
    f->set_reason(ReasonOf(s));
    f->set_message(std::string(s.message()));
    Log(absl::StrCat("task failed ", where, " reason=", Failure::Reason_Name(f->reason()), ": ",
                     s.message()));
    grpc::Status rs = session.Report(req);
    if (!rs.ok()) Log(absl::StrCat("error: cannot report the failure: ", rs.error_message()));
    return f->reason() == Failure::CANCELLED ? kCancelled : kFailed;
  };

  if (assignment.rank() != rank || std::max(assignment.world_size(), 1) != world_size) {
    return fail(absl::InternalError(absl::StrFormat(
        "started as rank %d of %d, but traind assigned rank %d of %d", rank, world_size,
        assignment.rank(), assignment.world_size())));
  }
  const traind::v1::JobSpec& spec = assignment.spec();
  absl::StatusOr<engine::Dataset> data = engine::LoadDataset(spec);
  if (!data.ok()) return fail(data.status());
  absl::StatusOr<engine::FoldRows> split = engine::RowsForTask(spec, *data, task);
  if (!split.ok()) return fail(split.status());
  const engine::FoldRows& rows = *split;

  // Released (communicator, then backend) when this function returns, on
  // every path out of here: before the process exits.
  GpuContext gpu;
  if (spec.resources().device() == traind::v1::GPU) {
    if (absl::Status s = OpenGpu(spec, world_size > 1 ? rank : 0, &gpu); !s.ok()) return fail(s);
    if (world_size > 1) {
      // Rank 0 makes the NCCL id and posts it; the others get it.
      std::string posted, unique_id;
      if (rank == 0) {
        absl::StatusOr<std::string> id = gpu.plugin->NewNcclUniqueId();
        if (!id.ok()) return fail(AsTaskFailure(id.status(), "NCCL unique id"));
        posted = std::move(*id);
      }
      grpc::Status rs = session.Rendezvous(world_size, posted, &unique_id, kRankTimeout);
      if (!rs.ok()) {
        return fail(AsRankFailure(
            absl::Status(static_cast<absl::StatusCode>(rs.error_code()), rs.error_message()),
            absl::StrCat("NCCL rendezvous through traind failed",
                         rank == 0 ? "" : " (waiting for rank 0)")));
      }
      absl::StatusOr<std::unique_ptr<engine::Communicator>> communicator =
          gpu.plugin->CreateCommunicator(gpu.backend.get(), unique_id, rank, world_size,
                                         absl::ToDoubleSeconds(kRankTimeout));
      if (!communicator.ok()) {
        return fail(AsRankFailure(communicator.status(), "NCCL communicator"));
      }
      gpu.communicator = std::move(*communicator);
      Log(absl::StrCat("nccl ready: rank ", rank, " of ", world_size));
    }
  } else if (world_size > 1) {
    return fail(engine::InvalidSpecError(
        "resources: several ranks need resources.device: gpu (one rank per GPU)"));
  }
  if (rank == 0) {
    traind::v1::ReportEventRequest req;
    traind::v1::TaskStarted* st = req.mutable_started();
    st->set_train_rows(static_cast<int64_t>(rows.train.size()));
    st->set_val_rows(static_cast<int64_t>(rows.val.size()));
    for (const std::string& c : data->classes) st->add_classes(c);
    st->set_epochs_total(spec.training().epochs());
    grpc::Status rs = session.Report(req);
    if (!rs.ok()) {
      Log(absl::StrCat("error: cannot report the start: ", rs.error_message()));
      return kUnreachable;
    }
  }
  engine::FitOptions options;
  options.task = task;
  options.attempt = attempt;
  // Checkpoints outlive the attempt: a retry after a crash or a daemon
  // restart resumes from the latest one.
  options.artifacts_dir = assignment.artifacts_dir();
  options.checkpoint_dir = assignment.artifacts_dir() + "/checkpoints";
  options.backend = gpu.backend.get();            // null: the CPU backend
  options.communicator = gpu.communicator.get();  // null: one rank
  session.TrainingStarted();
  absl::StatusOr<traind::v1::FoldResult> result =
      engine::Fit(spec, *data, rows, task, options, &session);
  if (!result.ok()) return fail(result.status());
  if (rank != 0) {
    // Rank 0 reports the result; the attempt succeeds when every rank exits 0.
    Log(absl::StrCat("task succeeded ", where));
    return kSucceeded;
  }
  if (absl::Status flushed = session.Flush(); !flushed.ok()) {
    Log(absl::StrCat("error: ", flushed.message()));
    return kUnreachable;
  }
  traind::v1::ReportEventRequest req;
  *req.mutable_finished()->mutable_result() = *result;
  grpc::Status rs = session.Report(req);
  if (!rs.ok()) {
    Log(absl::StrCat("error: cannot report the result: ", rs.error_message()));
    return kUnreachable;
  }
  Log(absl::StrCat("task succeeded ", where, " best_epoch=", result->best_epoch()));
  return kSucceeded;
}

// --------------------------------------------------------------------------
// Standalone
// --------------------------------------------------------------------------

class PrintingObserver final : public engine::FitObserver {
 public:
  absl::Status OnEpochEnd(const traind::v1::EpochMetrics& metrics) override {
    std::string json;
    google::protobuf::util::JsonPrintOptions o;
    o.preserve_proto_field_names = true;
    (void)google::protobuf::util::MessageToJsonString(metrics, &json, o);
    std::printf("%s\n", json.c_str());
    std::fflush(stdout);
    return absl::OkStatus();
  }
  bool StopRequested() override { return g_stop_signal.load(std::memory_order_relaxed); }
};

int RunStandalone(const std::string& spec_path, int only_fold, const std::string& artifacts) {
  absl::StatusOr<traind::v1::JobSpec> spec = LoadJobSpecFile(spec_path);
  if (!spec.ok()) {
    Log(absl::StrCat("error: ", spec.status().message()));
    return kUsage;
  }
  engine::ValidationContext vc;
  vc.cpu_bf16 = engine::CpuSupportsBf16();
  // A GPU spec trains on this process's first visible GPU (standalone runs
  // one rank).
  GpuContext gpu;
  if (spec->resources().device() == traind::v1::GPU) {
    if (absl::Status s = OpenGpu(*spec, /*device=*/0, &gpu); !s.ok()) {
      Log(absl::StrCat("error: ", s.message()));
      return kFailed;
    }
    vc.gpus = gpu.plugin->DeviceCount(nullptr);
    if (spec->resources().count() > 1) {
      Log(absl::StrCat("warning: resources.count is ", spec->resources().count(),
                       "; standalone runs on one GPU"));
      vc.gpus = std::max(vc.gpus, spec->resources().count());
    }
  }
  if (absl::Status s = engine::ValidateJobSpec(*spec, vc); !s.ok()) {
    Log(absl::StrCat("error: ", spec_path, ": ", s.message()));
    return kUsage;
  }
  absl::StatusOr<engine::Dataset> data = engine::LoadDataset(*spec);
  if (!data.ok()) {
    Log(absl::StrCat("error: ", data.status().message()));
    return kFailed;
  }
  const int tasks = engine::TaskCount(*spec);
  PrintingObserver observer;
  for (int task = 0; task < tasks; ++task) {
    if (only_fold >= 0 && task != only_fold) continue;
    engine::FitOptions options;
    options.task = task;
    options.backend = gpu.backend.get();  // null: the CPU backend
    if (!artifacts.empty()) {
      options.artifacts_dir = absl::StrCat(artifacts, "/task-", task);
      options.checkpoint_dir = options.artifacts_dir + "/checkpoints";
    }
    absl::StatusOr<engine::FoldRows> rows = engine::RowsForTask(*spec, *data, task);
    if (!rows.ok()) {
      Log(absl::StrCat("error: task ", task, ": ", rows.status().message()));
      return kFailed;
    }
    absl::StatusOr<traind::v1::FoldResult> result =
        engine::Fit(*spec, *data, *rows, task, options, &observer);
    if (!result.ok()) {
      Log(absl::StrCat("error: fold ", task, ": ", result.status().message()));
      return engine::FailureKindOf(result.status()) == engine::FailureKind::kCancelled
                 ? kCancelled
                 : kFailed;
    }
    std::string json;
    google::protobuf::util::JsonPrintOptions o;
    o.preserve_proto_field_names = true;
    (void)google::protobuf::util::MessageToJsonString(*result, &json, o);
    std::printf("{\"fold_result\": %s}\n", json.c_str());
    std::fflush(stdout);
  }
  return kSucceeded;
}

}  // namespace
}  // namespace traind::worker

namespace traind::worker {
namespace {

// Under traind: die with it. Armed before anything else; if traind is
// already gone (it died between starting us and this call), false.
bool ArmParentDeathSignal() {
  if (const char* parent = std::getenv("TRAIND_PARENT_PID"); parent != nullptr) {
    const int expected = std::atoi(parent);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != expected) return false;
    unsetenv("TRAIND_PARENT_PID");
  }
  return true;
}

int WorkerMain(int argc, char** argv);

// The zygote's one-time work that every fold would otherwise repeat:
// oneDNN's CPU engine and JIT machinery (ISA detection, code buffers, the
// primitive cache), brought up by creating — never running — a small dense
// kernel, and the protobuf descriptors of the job spec. Creates no thread:
// nothing here executes a primitive.
void PrewarmZygote() {
  engine::DisableOneDnnProfilerHooks();
  (void)traind::v1::JobSpec::descriptor();
  (void)traind::v1::TaskAssignment::descriptor();
  absl::StatusOr<std::unique_ptr<engine::Backend>> cpu = engine::CreateCpuBackend();
  if (!cpu.ok()) return;
  for (engine::DenseActivation a : {engine::DenseActivation::kRelu, engine::DenseActivation::kLinear}) {
    (void)(*cpu)->CreateDenseKernel(16, 16, 16, a);
  }
}

// A worker forked by the zygote: the OpenMP runtime read its settings when
// the zygote loaded it, so this task's thread count is applied here.
int ForkedWorkerMain(int argc, char** argv) {
  if (const char* threads = std::getenv("OMP_NUM_THREADS"); threads != nullptr) {
    if (const int n = std::atoi(threads); n > 0) omp_set_num_threads(n);
  }
  return WorkerMain(argc, argv);
}

}  // namespace
}  // namespace traind::worker

int main(int argc, char** argv) {
  if (argc == 2 && std::strcmp(argv[1], traind::zygote::kZygoteFlag) == 0) {
    // Started by traind once: fork a fresh worker per task attempt (see
    // worker/zygote/zygote.h). No threads, channels or devices here.
    if (!traind::worker::ArmParentDeathSignal()) return traind::worker::kUnreachable;
    traind::worker::PrewarmZygote();
    return traind::zygote::RunZygote(traind::zygote::kZygoteControlFd,
                                     traind::worker::ForkedWorkerMain);
  }
  return traind::worker::WorkerMain(argc, argv);
}

namespace traind::worker {
namespace {

int WorkerMain(int argc, char** argv) {
  if (!ArmParentDeathSignal()) return kUnreachable;
  engine::DisableOneDnnProfilerHooks();  // before any thread exists
  struct sigaction sa = {};
  sa.sa_handler = traind::worker::OnStopSignal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);

  std::string server, job, spec;
  int task = -1, attempt = 0, fold = -1, rank = 0, world_size = 1;
  CLI::App app{"traind-worker: runs one task of a traind job (started by traind), or a spec "
               "file's folds in this process (--spec)"};
  app.add_option("--server", server, "traind's WorkerService address");
  app.add_option("--job", job, "job id");
  app.add_option("--task", task, "task index");
  app.add_option("--attempt", attempt, "attempt number");
  app.add_option("--rank", rank, "multi-GPU task: this process's rank, 0 .. world-size - 1");
  app.add_option("--world-size", world_size, "multi-GPU task: its number of ranks (one per GPU)");
  app.add_option("--spec", spec, "standalone: a job spec file (YAML or JSON)");
  app.add_option("--fold", fold, "standalone: run only this task (fold)");
  std::string artifacts;
  app.add_option("--artifacts", artifacts,
                 "standalone: write predictions, checkpoints and models under DIR/task-N");
  bool capabilities = false;
  app.add_flag("--capabilities", capabilities,
               "print the training backends this worker has (\"cpu\", \"cuda\") and exit");
  CLI11_PARSE(app, argc, argv);
  if (capabilities) return PrintCapabilities();
  if (!spec.empty()) return traind::worker::RunStandalone(spec, fold, artifacts);
  if (server.empty() || job.empty() || task < 0 || attempt < 1) {
    std::fprintf(stderr, "traind-worker: --server, --job, --task and --attempt are required "
                         "(or --spec FILE)\n");
    return traind::worker::kUsage;
  }
  if (world_size < 1 || rank < 0 || rank >= world_size) {
    std::fprintf(stderr, "traind-worker: --rank must be in [0, --world-size) (got %d of %d)\n",
                 rank, world_size);
    return traind::worker::kUsage;
  }
  const int status = traind::worker::RunUnderDaemon(server, job, task, attempt, rank, world_size);
  // What the task held (backend, communicator, channel, data) was released
  // when RunUnderDaemon returned. Skip static destructors and the gRPC
  // library's shutdown (milliseconds per fold): the process exit frees the
  // rest.
  std::fflush(nullptr);
  _exit(status);
}

}  // namespace
}  // namespace traind::worker
