// Benchmarks of the daemon itself (the budgets of docs/benchmarks.md), against a real traind
// started by this program on a temporary state directory:
//
//   1. GetJob latency under an open-loop load of 1,000 requests/s (p50, p99).
//   2. 500 concurrent WatchJob streams on one running job: the time from an
//      epoch event's creation to its arrival on every stream.
//   3. Dispatch: from a job's submission (its task becomes runnable) to its
//      worker's successful exec, over single-task jobs with a free slot.
//
// Then the HTTP side door of the same traind (127.0.0.1, a viewer's bearer
// token), beside its gRPC peer:
//
//   4. /metrics with --metrics-jobs jobs in the store (filled with small
//      single-task iris jobs over the unix socket): sequential scrapes.
//   5. GET /api/v1/jobs/{id} under the same open-loop load as (1), over
//      keep-alive connections from several client threads.
//   6. gRPC GetJob as in (1) while (5) runs: its p99 beside (1)'s.
//   7. --sse-streams server-sent event streams (/api/v1/jobs/{id}/events) on
//      one running job, as (2).
//
//   daemon_bench [--seconds N] [--watchers N] [--jobs N] [--sse-streams N]
//                [--metrics-jobs N] [--scrapes N] [--http-clients N]
//                [--sse-parse-on-arrival 0|1]
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
#include <memory>
#include <mutex>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "google/protobuf/util/json_util.h"
#include "google/protobuf/util/time_util.h"
#include "grpcpp/grpcpp.h"
#include "httplib.h"
#include "server/core/auth.h"
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

// The instruction-set flags that matter to traind's engine, of those the CPU
// has.
std::string CpuFlags() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("flags", 0) != 0) continue;
    std::vector<std::string> have = absl::StrSplit(line.substr(line.find(':') + 1), ' ');
    std::string out;
    for (const char* f : {"sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl",
                          "avx512_vnni", "avx512_bf16", "amx_tile", "amx_bf16"}) {
      if (std::find(have.begin(), have.end(), f) != have.end()) absl::StrAppend(&out, " ", f);
    }
    return out.empty() ? "none" : out.substr(1);
  }
  return "unknown";
}

std::string LoadAverage() {
  std::ifstream in("/proc/loadavg");
  std::string a, b, c;
  in >> a >> b >> c;
  return absl::StrCat(a, " ", b, " ", c);
}

// CPU seconds (user + system) that process `pid` has used so far.
double ProcessCpuSeconds(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/stat"));
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t close = text.rfind(')');
  if (close == std::string::npos) return 0;
  std::vector<std::string> f = absl::StrSplit(text.substr(close + 2), ' ');
  // After "pid (comm) ": state is field 3, utime 14, stime 15.
  if (f.size() < 13) return 0;
  return (std::atof(f[11].c_str()) + std::atof(f[12].c_str())) / sysconf(_SC_CLK_TCK);
}

int64_t NowUnixMicros() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

struct Daemon {
  pid_t pid = -1;
  std::string dir, address;
  std::string token;  // a viewer's bearer token for the HTTP side door
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
  std::random_device rd;
  d->token = absl::StrFormat("%08x%08x%08x%08x", rd(), rd(), rd(), rd());
  std::ofstream(d->dir + "/tokens.yaml")
      << "tokens:\n  - name: bench\n    role: viewer\n    sha256: "
      << traind::server::Sha256Hex(d->token) << "\n";
  d->pid = fork();
  if (d->pid == 0) {
    FILE* f = freopen((d->dir + "/traind.log").c_str(), "w", stderr);
    (void)f;
    std::string state = "--state-dir=" + d->dir;
    std::string listen = "--listen=" + d->address;
    std::string root = "--data-root=" + data_root;
    std::string tokens = "--tokens-file=" + d->dir + "/tokens.yaml";
    std::string bin = bin_dir + "/traind";
    // The HTTP side door on a port the kernel chooses (GetServerInfo names
    // it); no limit on queued jobs, for filling the store quickly; every
    // SSE stream from one address and one token (the defaults cap both).
    execl(bin.c_str(), bin.c_str(), state.c_str(), listen.c_str(), "--cpu-slots=1", root.c_str(),
          tokens.c_str(), "--http-listen=127.0.0.1:0", "--max-queued-jobs-per-user=0",
          "--http-max-connections=4096", "--http-max-connections-per-address=4096",
          "--http-max-streams-per-token=4096", static_cast<char*>(nullptr));
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

struct Latencies {
  int total = 0, errors = 0;
  double achieved = 0;  // requests/s
  double p50 = 0, p99 = 0, max = 0;
  double cpu_us = 0;  // traind's CPU time per request (set by the caller)
};

Latencies Summarize(const std::vector<double>& latency_ms, int errors, double elapsed_s) {
  Latencies l;
  l.total = static_cast<int>(latency_ms.size());
  l.errors = errors;
  l.achieved = elapsed_s > 0 ? l.total / elapsed_s : 0;
  l.p50 = Percentile(latency_ms, 0.5);
  l.p99 = Percentile(latency_ms, 0.99);
  l.max = Percentile(latency_ms, 1.0);
  return l;
}

// 1. GetJob at a fixed arrival rate, latencies from each request's scheduled
// send time (so a stall counts against every request it delays).
Latencies GrpcGetJob(const std::string& address, const std::string& job_id, int rate, int seconds) {
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
  return Summarize(latency_ms, errors.load(), elapsed);
}

Latencies BenchGetJob(const std::string& address, pid_t daemon, const std::string& job_id, int rate,
                      int seconds) {
  const double cpu0 = ProcessCpuSeconds(daemon);
  Latencies l = GrpcGetJob(address, job_id, rate, seconds);
  l.cpu_us = 1e6 * (ProcessCpuSeconds(daemon) - cpu0) / std::max(1, l.total);
  std::printf(
      "| GetJob, %d req/s for %d s (%d requests, %d errors, achieved %.0f req/s) | p50 %.3f ms, "
      "p99 %.3f ms, max %.3f ms | p99 <= 2 ms |\n",
      rate, seconds, l.total, l.errors, l.achieved, l.p50, l.p99, l.max);
  return l;
}

// A job whose epochs take milliseconds, queued behind a long job that holds
// the only slot; cancel the blocker once the watchers are attached, so that
// every epoch event they measure is live, not replayed history.
bool SubmitWatchedJob(TrainingService::Stub* stub, const traind::v1::JobSpec& spec, Job* blocker,
                      Job* watched) {
  traind::v1::JobSpec blocker_spec = spec;
  blocker_spec.mutable_training()->set_epochs(100000);  // the default limits.max_epochs
  absl::StatusOr<Job> b = Submit(stub, blocker_spec);
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
  if (!job.ok() || !b.ok()) {
    std::printf("submit failed: %s\n",
                std::string((job.ok() ? b.status() : job.status()).message()).c_str());
    return false;
  }
  *blocker = *b;
  *watched = *job;
  return true;
}

void CancelNow(TrainingService::Stub* stub, const std::string& id) {
  traind::v1::CancelJobRequest cancel;
  cancel.set_job_id(id);
  cancel.set_force(true);
  Job cancelled;
  grpc::ClientContext cctx;
  stub->CancelJob(&cctx, cancel, &cancelled);
}

// One WatchJob stream, its events handed to on_event on gRPC's threads.
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

// 2. N watchers on one job; for every epoch event, the time from its creation
// (its server timestamp) to its arrival, on every stream.
void BenchWatchers(const std::string& address, TrainingService::Stub* stub,
                   const traind::v1::JobSpec& spec, int watchers) {
  Job blocker_job, watched;
  if (!SubmitWatchedJob(stub, spec, &blocker_job, &watched)) return;
  const Job* blocker = &blocker_job;
  const Job* job = &watched;
  // Several connections, as many clients would open.
  std::vector<std::unique_ptr<TrainingService::Stub>> stubs;
  for (int i = 0; i < 16; ++i) stubs.push_back(Connect(address));
  std::mutex mu;
  std::vector<double> delays_ms;
  std::vector<int> counts(watchers, 0);
  std::vector<int64_t> max_seq(watchers, 0);
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
  CancelNow(stub, blocker->id());
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

// The HTTP side door.

std::unique_ptr<httplib::Client> HttpClient(const std::string& url, const std::string& token) {
  auto c = std::make_unique<httplib::Client>(url);
  c->set_keep_alive(true);
  c->set_tcp_nodelay(true);
  c->set_connection_timeout(5, 0);
  c->set_read_timeout(60, 0);
  c->set_default_headers({{"Authorization", "Bearer " + token}});
  return c;
}

// The jobs in the store, from /metrics (the sum of traind_jobs).
int64_t JobsInStore(const std::string& body) {
  double sum = 0;
  for (absl::string_view line : absl::StrSplit(body, '\n')) {
    if (!absl::StartsWith(line, "traind_jobs{")) continue;
    double v = 0;
    if (absl::SimpleAtod(line.substr(line.rfind(' ') + 1), &v)) sum += v;
  }
  return static_cast<int64_t>(sum);
}

// Fills the store up to `target` jobs with small finished jobs: single-task
// iris jobs of one epoch, submitted over the unix socket from a few
// connections and run on the daemon's slot.
void FillStore(const std::string& address, const traind::v1::JobSpec& spec, httplib::Client* http,
               int target) {
  auto res = http->Get("/metrics");
  const int64_t before = res && res->status == 200 ? JobsInStore(res->body) : 0;
  const int n = std::max<int>(0, target - static_cast<int>(before));
  traind::v1::JobSpec s = spec;
  s.clear_cross_validation();
  s.mutable_training()->set_epochs(1);
  const int kThreads = 4;
  std::atomic<int> next{0}, failed{0};
  std::vector<std::string> ids(n);
  const auto start = Clock::now();
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      auto stub = Connect(address);
      for (int i; (i = next++) < n;) {
        absl::StatusOr<Job> job = Submit(stub.get(), s);
        if (job.ok()) {
          ids[i] = job->id();
        } else {
          failed++;
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  const double submitted_s = std::chrono::duration<double>(Clock::now() - start).count();
  auto stub = Connect(address);
  int succeeded = 0;
  for (const std::string& id : ids) {
    if (!id.empty()) succeeded += Wait(stub.get(), id).state() == Job::SUCCEEDED;
  }
  const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  res = http->Get("/metrics");
  const int64_t after = res && res->status == 200 ? JobsInStore(res->body) : 0;
  std::printf(
      "| filling the store: %d single-task iris jobs (1 epoch) submitted over the unix socket "
      "(%d connections), run on the 1 slot (%d succeeded, %d not submitted) | %.1f s (%.0f jobs/s; "
      "all submitted after %.1f s); %lld jobs in the store | (setup) |\n",
      n, kThreads, succeeded, failed.load(), elapsed, n / elapsed, submitted_s,
      static_cast<long long>(after));
}

// 4. Sequential /metrics scrapes, each timed from send to the whole body.
void BenchMetrics(httplib::Client* http, int scrapes) {
  auto res = http->Get("/metrics");  // the connection
  const int64_t jobs = res && res->status == 200 ? JobsInStore(res->body) : 0;
  std::vector<double> ms;
  int errors = 0;
  size_t bytes = 0;
  for (int i = 0; i < scrapes; ++i) {
    const auto t0 = Clock::now();
    res = http->Get("/metrics");
    ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    if (!res || res->status != 200) {
      ++errors;
    } else {
      bytes = res->body.size();
    }
  }
  std::printf(
      "| GET /metrics with %lld jobs in the store, %d sequential scrapes (%.1f KiB each, %d "
      "errors) | p50 %.3f ms, p99 %.3f ms, max %.3f ms | p99 <= 5 ms |\n",
      static_cast<long long>(jobs), scrapes, bytes / 1024.0, errors, Percentile(ms, 0.5),
      Percentile(ms, 0.99), Percentile(ms, 1.0));
}

// 5. GET /api/v1/jobs/{id} at a fixed arrival rate, as GrpcGetJob: request i
// is scheduled at i / rate and goes out on client thread i % clients (each
// its own keep-alive connection); its latency counts from its scheduled
// time, so a request that waits for its thread's previous one counts that
// wait.
Latencies HttpGetJob(const std::string& url, const std::string& token, const std::string& job_id,
                     int rate, int seconds, int clients) {
  const int total = rate * seconds;
  const std::string path = "/api/v1/jobs/" + job_id;
  std::vector<double> latency_ms(total, 0);
  std::atomic<int> errors{0};
  std::vector<std::unique_ptr<httplib::Client>> conns;
  for (int c = 0; c < clients; ++c) {
    conns.push_back(HttpClient(url, token));
    conns.back()->set_read_timeout(5, 0);
    conns.back()->Get(path);  // the connection, before the clock starts
  }
  const auto start = Clock::now() + std::chrono::milliseconds(10);
  std::vector<std::thread> threads;
  for (int c = 0; c < clients; ++c) {
    threads.emplace_back([&, c] {
      for (int i = c; i < total; i += clients) {
        const auto scheduled =
            start + std::chrono::microseconds(static_cast<int64_t>(1e6 * i / rate));
        std::this_thread::sleep_until(scheduled);
        auto res = conns[c]->Get(path);
        latency_ms[i] = std::chrono::duration<double, std::milli>(Clock::now() - scheduled).count();
        if (!res || res->status != 200 || res->body.size() < 100) errors++;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  return Summarize(latency_ms, errors.load(), elapsed);
}

// 6. Both at once: gRPC GetJob as in (1) while HTTP GetJob runs as in (5).
void BenchGetJobBoth(const std::string& address, pid_t daemon, const std::string& url,
                     const std::string& token, const std::string& job_id, int rate, int seconds,
                     int clients, const Latencies& grpc_alone) {
  const double cpu0 = ProcessCpuSeconds(daemon);
  Latencies h;
  std::thread http([&] { h = HttpGetJob(url, token, job_id, rate, seconds, clients); });
  const Latencies g = GrpcGetJob(address, job_id, rate, seconds);
  http.join();
  const double cpu_us = 1e6 * (ProcessCpuSeconds(daemon) - cpu0) / std::max(1, g.total + h.total);
  std::printf(
      "| gRPC GetJob, %d req/s for %d s while HTTP GetJob runs at %d req/s (%d requests, %d "
      "errors, achieved %.0f req/s; HTTP meanwhile: p50 %.3f ms, p99 %.3f ms, max %.3f ms, %d "
      "errors; traind CPU %.0f us per request of either, %.0f%% of a core) | p50 %.3f ms, p99 "
      "%.3f ms (%.2fx its p99 alone, %.3f ms), max %.3f ms | p99 unchanged |\n",
      rate, seconds, rate, g.total, g.errors, g.achieved, h.p50, h.p99, h.max, h.errors, cpu_us,
      cpu_us * 2 * rate / 1e4, g.p50, g.p99, grpc_alone.p99 > 0 ? g.p99 / grpc_alone.p99 : 0,
      grpc_alone.p99, g.max);
}

// 7. N server-sent event streams on one job, one client thread and
// connection each; for every epoch event, the time from its creation (its
// `time`) to its arrival, on every stream. A stream's client only stamps
// each event's arrival and keeps its text; the JSON is parsed once every
// stream has ended, so that the load generator's own parsing (N streams on
// the daemon's cores) does not delay the deliveries it measures;
// `parse_on_arrival` parses each event as it arrives as well.
void BenchSse(const std::string& address, TrainingService::Stub* stub,
              const traind::v1::JobSpec& spec, const std::string& url, const std::string& token,
              int streams, bool parse_on_arrival) {
  Job blocker, job;
  if (!SubmitWatchedJob(stub, spec, &blocker, &job)) return;
  std::mutex mu;
  struct Arrival {
    int64_t micros;
    std::string data;  // the event's `data:` line
  };
  std::vector<std::vector<Arrival>> arrivals(streams);
  std::vector<int> statuses(streams, 0);
  std::atomic<int> attached{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < streams; ++i) {
    threads.emplace_back([&, i] {
      auto client = HttpClient(url, token);
      client->set_keep_alive(false);
      std::string buffer;
      bool first = true;
      std::vector<Arrival>& mine = arrivals[i];
      mine.reserve(128);
      auto res = client->Get(
          "/api/v1/jobs/" + job.id() + "/events", httplib::Headers{},
          [&](const char* data, size_t size) {
            const int64_t now = NowUnixMicros();
            buffer.append(data, size);
            for (size_t end; (end = buffer.find("\n\n")) != std::string::npos;) {
              absl::string_view block(buffer.data(), end);
              const size_t at = block.find("data: ");
              if (at != absl::string_view::npos) {
                block.remove_prefix(at + 6);
                mine.push_back({now, std::string(block.substr(0, block.find('\n')))});
                if (parse_on_arrival) {  // as a dashboard on this machine would
                  traind::v1::JobEvent e;
                  google::protobuf::util::JsonParseOptions o;
                  o.ignore_unknown_fields = true;
                  (void)google::protobuf::util::JsonStringToMessage(mine.back().data, &e, o);
                }
              }
              buffer.erase(0, end + 2);
            }
            if (first) {
              first = false;
              attached++;
            }
            return true;
          });
      statuses[i] = res ? res->status : -1;
      if (first) attached++;  // failed before any data: do not wait for it
    });
  }
  // The peer in the same run: one gRPC WatchJob stream on the same job, on
  // its own connection.
  auto control_stub = Connect(address);
  std::vector<double> control_ms;
  std::atomic<bool> control_done{false};
  Reader control;
  control.req.set_job_id(job.id());
  control.on_event = [&](const traind::v1::JobEvent& e) {
    const int64_t now = NowUnixMicros();
    std::lock_guard<std::mutex> lock(mu);
    if (e.has_epoch()) {
      control_ms.push_back((now - TimeUtil::TimestampToMicroseconds(e.time())) / 1000.0);
    }
  };
  control.on_done = [&] { control_done = true; };
  control_stub->async()->WatchJob(&control.ctx, &control.req, &control);
  control.StartRead(&control.event);
  control.StartCall();
  // Every stream has its first event (QUEUED); then free the slot.
  while (attached.load() < streams) usleep(10000);
  usleep(100000);  // the gRPC stream's first event
  CancelNow(stub, blocker.id());
  for (std::thread& t : threads) t.join();
  while (!control_done.load()) usleep(10000);
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = true;
  std::vector<double> delays_ms;
  std::vector<int> counts(streams, 0);
  std::vector<int64_t> max_seq(streams, 0);
  for (int i = 0; i < streams; ++i) {
    for (const Arrival& a : arrivals[i]) {
      traind::v1::JobEvent e;
      if (!google::protobuf::util::JsonStringToMessage(a.data, &e, options).ok()) continue;
      ++counts[i];
      max_seq[i] = std::max(max_seq[i], e.sequence());
      // Only live events: replayed history is not a delivery delay.
      if (e.has_epoch()) {
        delays_ms.push_back((a.micros - TimeUtil::TimestampToMicroseconds(e.time())) / 1000.0);
      }
    }
  }
  int64_t last = 0;
  for (int64_t s : max_seq) last = std::max(last, s);
  int complete = 0, failed = 0;
  for (int i = 0; i < streams; ++i) {
    complete += counts[i] == last && max_seq[i] == last;
    failed += statuses[i] != 200;
  }
  std::printf(
      "| %d SSE streams (GET /api/v1/jobs/{id}/events, one connection each) on one job (digits, 2 "
      "folds x 40 epochs: %d events; %d of %d streams got all, %d failed) | epoch event creation "
      "-> arrival: p50 %.2f ms, p99 %.2f ms, max %.2f ms (one gRPC WatchJob stream on the same job "
      "meanwhile: p50 %.2f ms, p99 %.2f ms, max %.2f ms) | every stream within 100 ms |\n",
      streams, static_cast<int>(last), complete, streams, failed, Percentile(delays_ms, 0.5),
      Percentile(delays_ms, 0.99), Percentile(delays_ms, 1.0), Percentile(control_ms, 0.5),
      Percentile(control_ms, 0.99), Percentile(control_ms, 1.0));
}

}  // namespace

int main(int argc, char** argv) {
  int seconds = 10, watchers = 500, jobs = 200, sse_streams = 200, metrics_jobs = 1000,
      scrapes = 1000, http_clients = 8, sse_parse_on_arrival = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    if (a == "--seconds") seconds = std::atoi(argv[i + 1]);
    if (a == "--watchers") watchers = std::atoi(argv[i + 1]);
    if (a == "--jobs") jobs = std::atoi(argv[i + 1]);
    if (a == "--sse-streams") sse_streams = std::atoi(argv[i + 1]);
    if (a == "--metrics-jobs") metrics_jobs = std::atoi(argv[i + 1]);
    if (a == "--scrapes") scrapes = std::atoi(argv[i + 1]);
    if (a == "--http-clients") http_clients = std::atoi(argv[i + 1]);
    if (a == "--sse-parse-on-arrival") sse_parse_on_arrival = std::atoi(argv[i + 1]);
  }
  const std::string bin_dir = TRAIND_BIN_DIR, source_dir = TRAIND_SOURCE_DIR;
  std::printf("machine: %s, %u cores; traind on a unix socket, 1 CPU slot\n", CpuModel().c_str(),
              std::thread::hardware_concurrency());
  std::printf(
      "cpu flags: %s\nload average at start: %s\nflags: --seconds %d --watchers %d --jobs %d "
      "--sse-streams %d --metrics-jobs %d --scrapes %d --http-clients %d --sse-parse-on-arrival "
      "%d\n\n",
      CpuFlags().c_str(), LoadAverage().c_str(), seconds, watchers, jobs, sse_streams, metrics_jobs,
      scrapes, http_clients, sse_parse_on_arrival);
  const auto bench_start = Clock::now();
  Daemon d;
  if (!StartDaemon(&d, bin_dir, source_dir)) {
    std::fprintf(stderr, "traind did not start; see %s/traind.log\n", d.dir.c_str());
    return 1;
  }
  auto stub = Connect(d.address);
  auto spec = traind::spec::LoadJobSpecFile(source_dir + "/examples/iris-cv.yaml");
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
  const Latencies grpc_alone = BenchGetJob(d.address, d.pid, job->id(), 1000, seconds);
  BenchWatchers(d.address, stub.get(), *spec, watchers);
  BenchDispatch(stub.get(), *spec, jobs);

  // The HTTP side door of the same daemon.
  traind::v1::ServerInfo info;
  {
    grpc::ClientContext ctx;
    stub->GetServerInfo(&ctx, traind::v1::GetServerInfoRequest(), &info);
  }
  if (info.http_url().empty()) {
    std::fprintf(stderr, "traind serves no HTTP; see %s/traind.log\n", d.dir.c_str());
    return 1;
  }
  auto http = HttpClient(info.http_url(), d.token);
  FillStore(d.address, *spec, http.get(), metrics_jobs);
  BenchMetrics(http.get(), scrapes);
  auto one = http->Get("/api/v1/jobs/" + job->id());
  const double job_kib = one ? one->body.size() / 1024.0 : 0;
  const double cpu0 = ProcessCpuSeconds(d.pid);
  Latencies h = HttpGetJob(info.http_url(), d.token, job->id(), 1000, seconds, http_clients);
  h.cpu_us = 1e6 * (ProcessCpuSeconds(d.pid) - cpu0) / std::max(1, h.total);
  std::printf(
      "| HTTP GetJob (GET /api/v1/jobs/{id}, bearer token; %.1f KiB of JSON), %d req/s for %d s "
      "over %d keep-alive connections (%d requests, %d errors, achieved %.0f req/s; traind CPU "
      "%.0f us per request, "
      "gRPC GetJob alone: %.0f us) | p50 %.3f ms, p99 %.3f ms, max %.3f ms | p99 <= 2 ms |\n",
      job_kib, 1000, seconds, http_clients, h.total, h.errors, h.achieved, h.cpu_us,
      grpc_alone.cpu_us, h.p50, h.p99, h.max);
  BenchGetJobBoth(d.address, d.pid, info.http_url(), d.token, job->id(), 1000, seconds,
                  http_clients, grpc_alone);
  BenchSse(d.address, stub.get(), *spec, info.http_url(), d.token, sse_streams,
           sse_parse_on_arrival != 0);
  std::printf("\nwhole benchmark: %.0f s; load average at the end: %s\n",
              std::chrono::duration<double>(Clock::now() - bench_start).count(),
              LoadAverage().c_str());
  return 0;
}
