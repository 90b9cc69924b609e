// Benchmarks of the daemon itself (DESIGN.md budgets), against a real traind
// started by this program on a temporary state directory:
//
//   1. GetJob latency under an open-loop load of 1,000 requests/s (p50, p99).
//   2. 500 concurrent WatchJob streams on one running job: the time from an
//      epoch event's creation to its arrival on every stream.
//   3. Dispatch: from a job's submission (its task becomes runnable) to its
//      worker's successful exec, over single-task jobs with a free slot.
//
//   daemon_bench [--seconds N] [--watchers N] [--jobs N]
//
// Prints the machine, then one table row per measurement with its budget.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "google/protobuf/util/time_util.h"
#include "grpcpp/grpcpp.h"
#include "spec/loader.h"
#include "traind/v1/training_service.grpc.pb.h"

namespace {

using Clock = std::chrono::steady_clock;
using google::protobuf::util::TimeUtil;
using traind::v1::Job;
using traind::v1::TrainingService;

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t i = std::min(v.size() - 1, static_cast<size_t>(p * (v.size() - 1) + 0.5));
  return v[i];
}

std::string CpuModel() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  }
  return "unknown";
}

int64_t NowUnixMicros() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

struct Daemon {
  pid_t pid = -1;
  std::string dir, address;
  ~Daemon() {
    if (pid > 0) {
      kill(pid, SIGTERM);
      waitpid(pid, nullptr, 0);
    }
    std::filesystem::remove_all(dir);
  }
};

bool StartDaemon(Daemon* d, const std::string& bin_dir, const std::string& data_root) {
  char tmpl[] = "/tmp/traind-bench-XXXXXX";
  d->dir = mkdtemp(tmpl);
  d->address = "unix:" + d->dir + "/traind.sock";
  d->pid = fork();
  if (d->pid == 0) {
    FILE* f = freopen((d->dir + "/traind.log").c_str(), "w", stderr);
    (void)f;
    std::string state = "--state-dir=" + d->dir;
    std::string listen = "--listen=" + d->address;
    std::string root = "--data-root=" + data_root;
    std::string bin = bin_dir + "/traind";
    execl(bin.c_str(), bin.c_str(), state.c_str(), listen.c_str(), "--cpu-slots=1", root.c_str(),
          static_cast<char*>(nullptr));
    _exit(127);
  }
  for (int i = 0; i < 500; ++i) {
    if (std::filesystem::exists(d->dir + "/traind.sock")) return true;
    usleep(10000);
  }
  return false;
}

std::unique_ptr<TrainingService::Stub> Connect(const std::string& address) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 50);
  // Each stub its own connection, as separate clients would have.
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  auto channel = grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
  channel->WaitForConnected(std::chrono::system_clock::now() + std::chrono::seconds(5));
  return TrainingService::NewStub(channel);
}

absl::StatusOr<Job> Submit(TrainingService::Stub* stub, const traind::v1::JobSpec& spec) {
  traind::v1::SubmitJobRequest req;
  *req.mutable_spec() = spec;
  Job job;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  grpc::Status s = stub->SubmitJob(&ctx, req, &job);
  if (!s.ok()) return absl::UnknownError(s.error_message());
  return job;
}

Job Wait(TrainingService::Stub* stub, const std::string& id) {
  traind::v1::WatchJobRequest req;
  req.set_job_id(id);
  grpc::ClientContext ctx;
  auto reader = stub->WatchJob(&ctx, req);
  traind::v1::JobEvent e;
  while (reader->Read(&e)) {
  }
  reader->Finish();
  traind::v1::GetJobRequest g;
  g.set_job_id(id);
  Job job;
  grpc::ClientContext gctx;
  stub->GetJob(&gctx, g, &job);
  return job;
}

// 1. GetJob at a fixed arrival rate, latencies from each request's scheduled
// send time (so a stall counts against every request it delays).
void BenchGetJob(const std::string& address, const std::string& job_id, int rate, int seconds) {
  auto stub = Connect(address);
  traind::v1::GetJobRequest req;
  req.set_job_id(job_id);
  const int total = rate * seconds;
  std::vector<double> latency_ms(total, 0);
  std::atomic<int> done{0}, errors{0};
  std::mutex mu;
  std::condition_variable cv;
  struct Call {
    grpc::ClientContext ctx;
    Job resp;
  };
  const auto start = Clock::now();
  for (int i = 0; i < total; ++i) {
    const auto scheduled = start + std::chrono::microseconds(static_cast<int64_t>(1e6 * i / rate));
    std::this_thread::sleep_until(scheduled);
    auto* call = new Call;
    call->ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    stub->async()->GetJob(&call->ctx, &req, &call->resp, [&, call, i, scheduled](grpc::Status s) {
      latency_ms[i] = std::chrono::duration<double, std::milli>(Clock::now() - scheduled).count();
      if (!s.ok()) errors++;
      delete call;
      if (++done == total) cv.notify_all();
    });
  }
  std::unique_lock<std::mutex> lock(mu);
  cv.wait(lock, [&] { return done.load() == total; });
  const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  std::printf(
      "| GetJob, %d req/s for %d s (%d requests, %d errors, achieved %.0f req/s) | p50 %.3f ms, "
      "p99 %.3f ms, max %.3f ms | p99 <= 2 ms |\n",
      rate, seconds, total, errors.load(), total / elapsed, Percentile(latency_ms, 0.5),
      Percentile(latency_ms, 0.99), Percentile(latency_ms, 1.0));
}

// 2. N watchers on one job; for every epoch event, the time from its creation
// (its server timestamp) to its arrival, on every stream.
void BenchWatchers(const std::string& address, TrainingService::Stub* stub,
                   const traind::v1::JobSpec& spec, int watchers) {
  // A long job holds the only slot while the watchers attach to the target
  // job, so every epoch event they measure is live, not replayed history.
  traind::v1::JobSpec blocker_spec = spec;
  blocker_spec.mutable_training()->set_epochs(100000);  // the default limits.max_epochs
  absl::StatusOr<Job> blocker = Submit(stub, blocker_spec);
  // The watched job: digits, so an epoch takes a few milliseconds as real
  // epochs do (iris epochs take microseconds and arrive in bursts).
  traind::v1::JobSpec s = spec;
  s.mutable_data()->set_path(std::string(TRAIND_SOURCE_DIR) + "/examples/data/digits.csv");
  s.mutable_data()->set_label("digit");
  s.mutable_model()->mutable_layers(0)->mutable_dense()->set_units(256);
  s.mutable_model()->mutable_layers(1)->mutable_dense()->set_units(10);
  s.mutable_cross_validation()->set_folds(2);
  s.mutable_training()->set_epochs(40);
  absl::StatusOr<Job> job = Submit(stub, s);
  if (!job.ok() || !blocker.ok()) {
    std::printf("submit failed: %s\n",
                std::string((job.ok() ? blocker.status() : job.status()).message()).c_str());
    return;
  }
  // Several connections, as many clients would open.
  std::vector<std::unique_ptr<TrainingService::Stub>> stubs;
  for (int i = 0; i < 16; ++i) stubs.push_back(Connect(address));
  std::mutex mu;
  std::vector<double> delays_ms;
  std::vector<int> counts(watchers, 0);
  std::vector<int64_t> max_seq(watchers, 0);
  struct Reader : grpc::ClientReadReactor<traind::v1::JobEvent> {
    grpc::ClientContext ctx;
    traind::v1::WatchJobRequest req;
    traind::v1::JobEvent event;
    std::function<void(const traind::v1::JobEvent&)> on_event;
    std::function<void()> on_done;
    void OnReadDone(bool ok) override {
      if (!ok) return;
      on_event(event);
      StartRead(&event);
    }
    void OnDone(const grpc::Status&) override { on_done(); }
  };
  std::atomic<int> finished{0};
  std::vector<std::unique_ptr<Reader>> readers;
  for (int i = 0; i < watchers; ++i) {
    auto r = std::make_unique<Reader>();
    r->req.set_job_id(job->id());
    r->on_event = [&, i](const traind::v1::JobEvent& e) {
      const int64_t now = NowUnixMicros();
      std::lock_guard<std::mutex> lock(mu);
      ++counts[i];
      max_seq[i] = std::max(max_seq[i], e.sequence());
      // Only live events: replayed history is not a delivery delay.
      if (e.has_epoch()) {
        delays_ms.push_back((now - TimeUtil::TimestampToMicroseconds(e.time())) / 1000.0);
      }
    };
    r->on_done = [&] { finished++; };
    stubs[i % stubs.size()]->async()->WatchJob(&r->ctx, &r->req, r.get());
    r->StartRead(&r->event);
    r->StartCall();
    readers.push_back(std::move(r));
  }
  // Every watcher has its stream (it got the QUEUED event); then free the slot.
  for (;;) {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (std::all_of(counts.begin(), counts.end(), [](int c) { return c > 0; })) break;
    }
    usleep(10000);
  }
  traind::v1::CancelJobRequest cancel;
  cancel.set_job_id(blocker->id());
  cancel.set_force(true);
  Job cancelled;
  grpc::ClientContext cctx;
  stub->CancelJob(&cctx, cancel, &cancelled);
  while (finished.load() < watchers) usleep(10000);
  int64_t last = 0;
  for (int64_t s : max_seq) last = std::max(last, s);
  int complete = 0;
  for (int i = 0; i < watchers; ++i) complete += counts[i] == last && max_seq[i] == last;
  std::printf(
      "| %d WatchJob streams on one job (digits, 2 folds x 40 epochs: %d events; %d of %d streams "
      "got all) | epoch event creation -> arrival: p50 %.2f ms, p99 %.2f ms, max %.2f ms | every "
      "stream within 100 ms |\n",
      watchers, static_cast<int>(last), complete, watchers, Percentile(delays_ms, 0.5),
      Percentile(delays_ms, 0.99), Percentile(delays_ms, 1.0));
}

// 3. Dispatch latency over single-task jobs, one at a time (a slot is free).
void BenchDispatch(TrainingService::Stub* stub, const traind::v1::JobSpec& spec, int jobs) {
  traind::v1::JobSpec s = spec;
  s.clear_cross_validation();
  s.mutable_training()->set_epochs(1);
  std::vector<double> ms;
  for (int i = 0; i < jobs; ++i) {
    absl::StatusOr<Job> job = Submit(stub, s);
    if (!job.ok()) continue;
    Job done = Wait(stub, job->id());
    if (done.tasks_size() == 0 || done.tasks(0).attempts_size() == 0) continue;
    ms.push_back((TimeUtil::TimestampToMicroseconds(done.tasks(0).attempts(0).start_time()) -
                  TimeUtil::TimestampToMicroseconds(done.create_time())) /
                 1000.0);
  }
  std::printf(
      "| dispatch: job submitted (task runnable) -> worker exec'd, %d jobs | p50 %.2f ms, p99 %.2f "
      "ms, max %.2f ms | <= 5 ms |\n",
      static_cast<int>(ms.size()), Percentile(ms, 0.5), Percentile(ms, 0.99), Percentile(ms, 1.0));
}

}  // namespace

int main(int argc, char** argv) {
  int seconds = 10, watchers = 500, jobs = 200;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    if (a == "--seconds") seconds = std::atoi(argv[i + 1]);
    if (a == "--watchers") watchers = std::atoi(argv[i + 1]);
    if (a == "--jobs") jobs = std::atoi(argv[i + 1]);
  }
  const std::string bin_dir = TRAIND_BIN_DIR, source_dir = TRAIND_SOURCE_DIR;
  std::printf("machine: %s, %u cores; traind on a unix socket, 1 CPU slot\n\n", CpuModel().c_str(),
              std::thread::hardware_concurrency());
  Daemon d;
  if (!StartDaemon(&d, bin_dir, source_dir)) {
    std::fprintf(stderr, "traind did not start; see %s/traind.log\n", d.dir.c_str());
    return 1;
  }
  auto stub = Connect(d.address);
  auto spec = traind::LoadJobSpecFile(source_dir + "/examples/iris-cv.yaml");
  if (!spec.ok()) {
    std::fprintf(stderr, "%s\n", std::string(spec.status().message()).c_str());
    return 1;
  }
  spec->mutable_data()->set_path(source_dir + "/examples/data/iris.csv");
  // A finished job to read with GetJob: 5 tasks with their attempts and result.
  absl::StatusOr<Job> job = Submit(stub.get(), *spec);
  if (!job.ok()) return 1;
  Wait(stub.get(), job->id());

  std::printf("| measurement | result | budget |\n| --- | --- | --- |\n");
  BenchGetJob(d.address, job->id(), 1000, seconds);
  BenchWatchers(d.address, stub.get(), *spec, watchers);
  BenchDispatch(stub.get(), *spec, jobs);
  return 0;
}
