// traind: the training daemon.
//
//   traind [--state-dir DIR] [--listen ADDR]... [--cpu-slots N] [--worker-threads N]
//
// Serves the public TrainingService (plus grpc.health.v1 and reflection) on
// every --listen address and the internal WorkerService on a unix socket in
// the state directory. SIGINT/SIGTERM stop it; unfinished tasks resume on
// the next start.
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"
#include "server/api/services.h"
#include "server/devices/cpu_info.h"
#include "server/launch/local_launcher.h"
#include "server/log.h"
#include "server/scheduler/scheduler.h"
#include "server/store/job_store.h"

#ifndef TRAIND_VERSION
#define TRAIND_VERSION "0.0.0"
#endif

namespace traind::server {
namespace {

namespace fs = std::filesystem;

struct Flags {
  std::string state_dir;
  std::vector<std::string> listen;
  int cpu_slots = 0;
  int worker_threads = 1;
  std::string worker;
  double cancel_grace_s = 10;
  double stop_grace_s = 10;
  double heartbeat_timeout_s = 30;
  int max_restarts = 2;
};

std::string SelfDir() {
  std::error_code ec;
  fs::path self = fs::read_symlink("/proc/self/exe", ec);
  return ec ? std::string(".") : self.parent_path().string();
}

// Holds an exclusive lock on <state>/traind.lock for the daemon's lifetime.
int LockStateDir(const std::string& dir) {
  std::string path = (fs::path(dir) / "traind.lock").string();
  int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0640);
  if (fd < 0) {
    LogError("cannot open %s: %s", path, strerror(errno));
    return -1;
  }
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    char buf[32] = {0};
    (void)!pread(fd, buf, sizeof(buf) - 1, 0);
    LogError("state directory %s is in use by another traind (pid %s)", dir, buf);
    close(fd);
    return -1;
  }
  std::string pid = absl::StrCat(getpid(), "\n");
  (void)!ftruncate(fd, 0);
  (void)!pwrite(fd, pid.data(), pid.size(), 0);
  return fd;
}

void RemoveStaleSocket(const std::string& address) {
  if (absl::StartsWith(address, "unix:")) {
    std::string path = address.substr(5);
    if (absl::StartsWith(path, "//")) path = path.substr(2);
    struct stat st;
    if (lstat(path.c_str(), &st) == 0 && S_ISSOCK(st.st_mode)) unlink(path.c_str());
  }
}

int Run(const Flags& flags) {
  std::error_code ec;
  fs::create_directories(flags.state_dir, ec);
  if (ec) {
    LogError("cannot create state directory %s: %s", flags.state_dir, ec.message());
    return 1;
  }
  const std::string state_dir = fs::absolute(flags.state_dir).lexically_normal().string();
  int lock_fd = LockStateDir(state_dir);
  if (lock_fd < 0) return 1;

  const std::string worker_path =
      flags.worker.empty() ? (fs::path(SelfDir()) / "traind-worker").string() : flags.worker;
  if (access(worker_path.c_str(), X_OK) != 0) {
    LogError("worker executable %s: %s (set --worker)", worker_path, strerror(errno));
    return 1;
  }

  std::vector<std::string> listen = flags.listen;
  if (listen.empty()) {
    listen = {absl::StrCat("unix:", (fs::path(state_dir) / "traind.sock").string()),
              "127.0.0.1:7070"};
  }
  const std::string worker_address =
      absl::StrCat("unix:", (fs::path(state_dir) / "worker.sock").string());

  absl::StatusOr<std::unique_ptr<JobStore>> store =
      JobStore::Open((fs::path(state_dir) / "traind.db").string());
  if (!store.ok()) {
    LogError("%s", store.status().message());
    return 1;
  }

  CpuInfo cpu = ReadCpuInfo();
  SchedulerOptions so;
  so.state_dir = state_dir;
  so.worker_path = worker_path;
  so.worker_address = worker_address;
  so.cpu_slots = flags.cpu_slots > 0 ? flags.cpu_slots : std::max(1, cpu.cores);
  so.worker_threads = flags.worker_threads;
  so.max_restarts = flags.max_restarts;
  so.cancel_grace = absl::Seconds(flags.cancel_grace_s);
  so.stop_grace = absl::Seconds(flags.stop_grace_s);
  so.heartbeat_timeout = absl::Seconds(flags.heartbeat_timeout_s);

  LocalLauncher launcher;
  Scheduler scheduler(so, store->get(), &launcher);
  if (absl::Status s = scheduler.Recover(); !s.ok()) {
    LogError("cannot recover jobs from the store: %s", s.message());
    return 1;
  }

  // Internal service for workers.
  RemoveStaleSocket(worker_address);
  WorkerServiceImpl worker_service(&scheduler);
  grpc::ServerBuilder wb;
  wb.AddListeningPort(worker_address, grpc::InsecureServerCredentials());
  wb.RegisterService(&worker_service);
  std::unique_ptr<grpc::Server> worker_server = wb.BuildAndStart();
  if (!worker_server) {
    LogError("cannot listen on %s (internal worker service)", worker_address);
    return 1;
  }
  chmod(worker_address.substr(5).c_str(), 0600);

  // Public API.
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  ServerDescription desc;
  desc.version = TRAIND_VERSION;
  desc.state_dir = state_dir;
  desc.listen_addresses = listen;
  desc.cpu_slots = so.cpu_slots;
  desc.worker_threads = so.worker_threads;
  desc.start_time = absl::Now();
  TrainingServiceImpl training_service(&scheduler, desc);
  grpc::ServerBuilder pb;
  std::vector<int> ports(listen.size(), 0);
  for (size_t i = 0; i < listen.size(); ++i) {
    RemoveStaleSocket(listen[i]);
    pb.AddListeningPort(listen[i], grpc::InsecureServerCredentials(), &ports[i]);
  }
  pb.RegisterService(&training_service);
  std::unique_ptr<grpc::Server> public_server = pb.BuildAndStart();
  if (!public_server) {
    LogError("cannot listen on %s", absl::StrJoin(listen, ", "));
    return 1;
  }
  for (size_t i = 0; i < listen.size(); ++i) {
    if (ports[i] == 0) {
      LogError("cannot listen on %s", listen[i]);
      return 1;
    }
    if (absl::StartsWith(listen[i], "unix:")) {
      std::string path = listen[i].substr(5);
      if (absl::StartsWith(path, "//")) path = path.substr(2);
      chmod(path.c_str(), 0660);
    }
  }

  scheduler.Start();
  LogInfo("traind ready version=%s state_dir=%s listen=%s cpu_slots=%d worker_threads=%d",
          TRAIND_VERSION, state_dir, absl::StrJoin(listen, ","), so.cpu_slots,
          so.worker_threads);

  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  int sig = 0;
  sigwait(&set, &sig);
  LogInfo("traind stopping signal=%s", sigabbrev_np(sig) ? sigabbrev_np(sig) : "?");
  public_server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  scheduler.Stop();
  worker_server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
  LogInfo("traind stopped");
  close(lock_fd);
  return 0;
}

}  // namespace
}  // namespace traind::server

int main(int argc, char** argv) {
  // Block the stop signals in every thread; main waits for them with sigwait.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  signal(SIGPIPE, SIG_IGN);

  traind::server::Flags flags;
  const char* env_state = std::getenv("TRAIND_STATE_DIR");
  flags.state_dir = env_state && *env_state ? env_state : ".traind";
  CLI::App app{"traind: the training daemon"};
  app.add_option("--state-dir", flags.state_dir,
                 "directory for the job store, sockets, logs and artifacts "
                 "(env TRAIND_STATE_DIR; default ./.traind)");
  app.add_option("--listen", flags.listen,
                 "public API address, unix:PATH or HOST:PORT; repeatable "
                 "(default unix:<state-dir>/traind.sock and 127.0.0.1:7070)");
  app.add_option("--cpu-slots", flags.cpu_slots,
                 "tasks that may run at once on the CPU (default: the number of cores)");
  app.add_option("--worker-threads", flags.worker_threads,
                 "threads of each CPU worker (OMP_NUM_THREADS; default 1)")
      ->check(CLI::PositiveNumber);
  app.add_option("--worker", flags.worker,
                 "path of traind-worker (default: beside traind)");
  app.add_option("--cancel-grace", flags.cancel_grace_s,
                 "seconds a cancelled worker gets to stop before it is killed (default 10)");
  app.add_option("--stop-grace", flags.stop_grace_s,
                 "on SIGTERM, seconds running workers get to checkpoint and exit before they "
                 "are killed (default 10)");
  app.add_option("--heartbeat-timeout", flags.heartbeat_timeout_s,
                 "seconds of silence after which a worker is killed as hung (default 30)");
  app.add_option("--max-restarts", flags.max_restarts,
                 "retries of a task whose worker crashed (default 2)");
  app.set_version_flag("--version", TRAIND_VERSION);
  CLI11_PARSE(app, argc, argv);
  return traind::server::Run(flags);
}
