#include "server/daemon.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "base/log.h"
#include "server/devices/cpu_info.h"
#include "server/launch/worker_environment.h"
#include "server/scheduler/attempt_secrets.h"
#include "server/secrets.h"

#ifndef TRAIND_VERSION
#define TRAIND_VERSION "0.0.0"
#endif

namespace traind::server {
namespace {

// What keeps the daemon from starting (traind exits 1), as it is logged.
template <typename... Args>
absl::Status Fail(const absl::FormatSpec<Args...>& format, const Args&... args) {
  return absl::FailedPreconditionError(absl::StrFormat(format, args...));
}

namespace fs = std::filesystem;

std::string SelfDir() {
  std::error_code ec;
  fs::path self = fs::read_symlink("/proc/self/exe", ec);
  return ec ? std::string(".") : self.parent_path().string();
}

// Holds an exclusive lock on <state>/traind.lock for the daemon's lifetime.
absl::StatusOr<int> LockStateDir(const std::string& dir) {
  std::string path = (fs::path(dir) / "traind.lock").string();
  // The umask (from state_dir_mode) takes what the mode must not have.
  int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666);
  if (fd < 0) return Fail("cannot open %s: %s", path, strerror(errno));
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    char buf[32] = {0};
    (void)!pread(fd, buf, sizeof(buf) - 1, 0);
    close(fd);
    return Fail("state directory %s is in use by another traind (pid %s)", dir,
                absl::StripAsciiWhitespace(buf));
  }
  std::string pid = absl::StrCat(getpid(), "\n");
  (void)!ftruncate(fd, 0);
  (void)!pwrite(fd, pid.data(), pid.size(), 0);
  return fd;
}

// What to do about a store traind refuses to start on.
std::string StoreAdvice(const std::string& db_path, const std::string& state_dir) {
  return absl::StrCat(
      "; traind does not start on it. With traind stopped, restore ", db_path,
      " from a backup (and remove its -wal and -shm files), or move it aside with its -wal and "
      "-shm files (mv ",
      db_path, " ", db_path, ".damaged) and move ", (fs::path(state_dir) / "jobs").string(),
      " aside as well to start with an empty store");
}

// Opens the job store and, when `check`, refuses a damaged one (quick_check:
// a damaged page found now, not in the middle of a watch later).
absl::StatusOr<std::unique_ptr<JobStore>> OpenCheckedStore(const std::string& db_path, bool check) {
  const std::string state_dir = fs::path(db_path).parent_path().string();
  absl::StatusOr<std::unique_ptr<JobStore>> store = JobStore::Open(db_path);
  if (!store.ok()) {
    return absl::Status(store.status().code(),
                        absl::StrCat(store.status().message(), StoreAdvice(db_path, state_dir)));
  }
  if (!check) return store;
  const absl::Time start = absl::Now();
  if (absl::Status s = (*store)->CheckIntegrity(); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat(s.message(), StoreAdvice(db_path, state_dir)));
  }
  std::error_code ec;
  LogInfo("store checked path=%s bytes=%d took=%s", db_path, fs::file_size(db_path, ec),
          absl::FormatDuration(absl::Now() - start));
  return store;
}

// A store that knows no job beside <state>/jobs/ holding job directories was
// lost or replaced (truncated, deleted, restored from an older copy):
// starting would serve an empty list beside artifacts nobody can reach, and
// new jobs could collide with them. Refuses, naming them.
absl::Status CheckArtifactsKnown(JobStore* store, const std::string& db_path,
                                 const std::string& state_dir) {
  absl::StatusOr<JobStore::StateCounts> counts = store->CountStates();
  if (!counts.ok()) return counts.status();
  int64_t jobs = 0;
  for (const auto& [state, n] : counts->jobs) jobs += n;
  if (jobs > 0) return absl::OkStatus();
  const fs::path jobs_dir = fs::path(state_dir) / "jobs";
  std::error_code ec;
  std::vector<std::string> dirs;
  for (const auto& entry : fs::directory_iterator(jobs_dir, ec)) {
    // A .deleted-<job> is a delete a kill interrupted (store/job_files.h).
    if (entry.is_directory(ec) &&
        !absl::StartsWith(entry.path().filename().string(), ".deleted-")) {
      dirs.push_back(entry.path().filename().string());
    }
  }
  if (dirs.empty()) return absl::OkStatus();
  std::sort(dirs.begin(), dirs.end());
  const size_t shown = std::min<size_t>(dirs.size(), 10);
  std::string names = absl::StrJoin(dirs.begin(), dirs.begin() + shown, ", ");
  if (dirs.size() > shown) absl::StrAppend(&names, ", ...");
  return absl::FailedPreconditionError(absl::StrCat(
      db_path, " holds no jobs, but ", jobs_dir.string(), " holds the artifacts of ", dirs.size(),
      " (", names,
      "): the store was lost or replaced; traind does not start empty beside them. With traind "
      "stopped, restore ",
      db_path, " from a backup, or move ", jobs_dir.string(),
      " aside (mv jobs jobs.orphaned, keeping the artifacts) to start with an empty store"));
}

// Makes `address` free to bind when it is a unix socket path: a socket file
// that nobody listens on (left by a traind that was killed) is removed; one
// that a live process listens on is never taken over (that would cut the
// other daemon off its clients), nor is a path that is not a socket.
absl::Status ClaimUnixSocket(const std::string& address) {
  if (!absl::StartsWith(address, "unix:")) return absl::OkStatus();
  std::string path = address.substr(5);
  if (absl::StartsWith(path, "//")) path = path.substr(2);
  struct stat st;
  if (lstat(path.c_str(), &st) != 0) return absl::OkStatus();  // free
  if (!S_ISSOCK(st.st_mode)) {
    return absl::FailedPreconditionError(absl::StrCat(
        address, ": ", path, " exists and is not a socket; remove it or listen elsewhere"));
  }
  sockaddr_un sa{};
  sa.sun_family = AF_UNIX;
  if (path.size() >= sizeof(sa.sun_path)) {
    return absl::InvalidArgumentError(
        absl::StrCat(address, ": the path is too long for a unix socket"));
  }
  std::memcpy(sa.sun_path, path.c_str(), path.size() + 1);
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return absl::InternalError(absl::StrCat("socket: ", strerror(errno)));
  const int rc = connect(fd, reinterpret_cast<const sockaddr*>(&sa), sizeof(sa));
  const int error = errno;
  close(fd);
  if (rc == 0 || error == EAGAIN) {
    return absl::FailedPreconditionError(
        absl::StrCat(address,
                     ": another process is listening on this socket (another traind?); stop it, or "
                     "give this traind another --listen address"));
  }
  if (error != ECONNREFUSED) {
    return absl::FailedPreconditionError(
        absl::StrCat(address, ": cannot tell whether the socket is in use: ", strerror(error)));
  }
  unlink(path.c_str());  // stale: nobody listens
  return absl::OkStatus();
}

std::optional<std::string> ReadFile(const std::string& path, std::string* error) {
  std::ifstream in(path);
  if (!in) {
    *error = absl::StrCat(path, ": ", strerror(errno));
    return std::nullopt;
  }
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// TLS credentials for TCP listeners (mutual TLS when client_ca is set).
// launcher: slurm: the jobs' files live in <shared_dir>/jobs, where every
// node sees them; <state_dir>/jobs links there.
absl::Status LinkSharedJobsDir(const std::string& state_dir, const std::string& shared_dir,
                               mode_t dir_mode) {
  const fs::path target = fs::path(shared_dir) / "jobs";
  const fs::path link = fs::path(state_dir) / "jobs";
  std::error_code ec;
  fs::create_directories(target, ec);
  if (ec) return absl::FailedPreconditionError(absl::StrCat(target.string(), ": ", ec.message()));
  chmod(shared_dir.c_str(), dir_mode);
  chmod(target.c_str(), dir_mode);
  if (fs::is_symlink(link, ec)) {
    const fs::path points = fs::read_symlink(link, ec);
    if (points == target) return absl::OkStatus();
    return absl::FailedPreconditionError(absl::StrCat(link.string(), " links to ", points.string(),
                                                      ", not to slurm.shared_dir's ",
                                                      target.string(), ": fix or remove the link"));
  }
  if (fs::is_directory(link, ec)) {
    if (!fs::is_empty(link, ec)) {
      return absl::FailedPreconditionError(
          absl::StrCat(link.string(), " holds jobs' files, but with launcher: slurm they live in ",
                       target.string(), ": move them there (mv ", link.string(), "/* ",
                       target.string(), "/) and remove ", link.string()));
    }
    fs::remove(link, ec);
  }
  fs::create_directory_symlink(target, link, ec);
  if (ec) return absl::FailedPreconditionError(absl::StrCat(link.string(), ": ", ec.message()));
  return absl::OkStatus();
}

// Predict uploads (<state_dir>/uploads/predict-*.csv) live only as long as
// their call: any found at start were left by a traind that was killed
// during one (up to limits.max_predict_upload_bytes each).
void RemoveLeftPredictUploads(const std::string& state_dir) {
  std::error_code ec;
  int removed = 0;
  for (const fs::directory_entry& e : fs::directory_iterator(fs::path(state_dir) / "uploads", ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("predict-", 0) == 0 && fs::remove(e.path(), ec)) ++removed;
  }
  if (removed > 0) LogInfo("predict uploads left by the last run removed=%d", removed);
}

// The key attempt secrets are derived from (<state_dir>/attempt.key, made
// once): a restarted traind knows the secrets of workers that outlived it.
absl::StatusOr<std::string> LoadAttemptKey(const std::string& state_dir) {
  const std::string path = (fs::path(state_dir) / "attempt.key").string();
  std::string error;
  if (access(path.c_str(), F_OK) == 0) {
    std::optional<std::string> key = ReadFile(path, &error);
    if (!key || key->size() < 32) {
      return absl::DataLossError(absl::StrCat(path, ": ", key ? "shorter than 32 bytes" : error,
                                              " (remove it: running Slurm jobs are then retried)"));
    }
    return *key;
  }
  const std::string key = RandomBytes(32);
  const std::string tmp = path + ".tmp";
  const int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0 || write(fd, key.data(), key.size()) != static_cast<ssize_t>(key.size()) ||
      fsync(fd) != 0) {
    if (fd >= 0) close(fd);
    return absl::InternalError(absl::StrCat(tmp, ": ", strerror(errno)));
  }
  close(fd);
  if (rename(tmp.c_str(), path.c_str()) != 0) {
    return absl::InternalError(absl::StrCat(path, ": ", strerror(errno)));
  }
  return key;
}

std::shared_ptr<grpc::ServerCredentials> TlsCredentials(const TlsConfig& tls, std::string* error) {
  std::optional<std::string> cert = ReadFile(tls.cert, error);
  if (!cert) return nullptr;
  std::optional<std::string> key = ReadFile(tls.key, error);
  if (!key) return nullptr;
  grpc::SslServerCredentialsOptions options;
  options.pem_key_cert_pairs.push_back({*key, *cert});
  if (!tls.client_ca.empty()) {
    std::optional<std::string> ca = ReadFile(tls.client_ca, error);
    if (!ca) return nullptr;
    options.pem_root_certs = *ca;
    options.client_certificate_request = GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY;
  } else {
    options.client_certificate_request = GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE;
  }
  return grpc::SslServerCredentials(options);
}

// "127.0.0.1:0" with the port the kernel chose.
std::string WithPort(const std::string& address, int port) {
  if (IsUnixAddress(address)) return address;
  size_t colon = address.rfind(':');
  return absl::StrCat(address.substr(0, colon), ":", port);
}

// Sets `path` (if it exists) to `mode` when it is more open than that; the
// state directory of an older traind, or one made under a loose umask, is
// closed on start.
void Tighten(const std::string& path, mode_t mode) {
  struct stat st;
  if (lstat(path.c_str(), &st) != 0 || S_ISLNK(st.st_mode)) return;
  const mode_t current = st.st_mode & 07777;
  if ((current & ~mode) == 0) return;
  if (chmod(path.c_str(), mode) != 0) {
    LogWarning("cannot set mode %04o of %s: %s", mode, path, strerror(errno));
    return;
  }
  LogInfo("mode of %s set from %04o to %04o (state_dir_mode)", path, current, mode);
}

}  // namespace

absl::StatusOr<std::unique_ptr<Daemon>> Daemon::Create(ServerConfig config) {
  std::unique_ptr<Daemon> daemon(new Daemon(std::move(config)));
  if (absl::Status s = daemon->Init(); !s.ok()) return s;
  return daemon;
}

Daemon::~Daemon() {
  if (lock_fd_ >= 0) close(lock_fd_);
}

absl::Status Daemon::Init() {
  ServerConfig& flags = config_;
  // Everything traind and its workers (they inherit the umask) create in the
  // state directory: directories state_dir_mode, files the same without x.
  dir_mode_ = static_cast<mode_t>(flags.state_dir_mode);
  const mode_t dir_mode = dir_mode_;
  const mode_t file_mode = dir_mode & 0666;
  umask(~dir_mode & 0777);
  std::error_code ec;
  fs::create_directories(flags.state_dir, ec);
  if (ec) return Fail("cannot create state directory %s: %s", flags.state_dir, ec.message());
  state_dir_ = fs::absolute(flags.state_dir).lexically_normal().string();
  const std::string& state_dir = state_dir_;
  Tighten(state_dir, dir_mode);
  absl::StatusOr<int> lock_fd = LockStateDir(state_dir);
  if (!lock_fd.ok()) return lock_fd.status();
  lock_fd_ = *lock_fd;
  Tighten((fs::path(state_dir) / "traind.lock").string(), file_mode);
  for (const char* name : {"traind.db", "traind.db-wal", "traind.db-shm"}) {
    Tighten((fs::path(state_dir) / name).string(), file_mode);
  }
  Tighten((fs::path(state_dir) / "jobs").string(), dir_mode);

  std::error_code cwd_ec;
  if (flags.data_roots.empty()) flags.data_roots = {fs::current_path(cwd_ec).string()};
  absl::StatusOr<DataRoots> data_roots = DataRoots::Create(flags.data_roots);
  if (!data_roots.ok()) return Fail("%s", data_roots.status().message());
  data_roots_ = *std::move(data_roots);
  for (const std::string& root : data_roots_->roots()) {
    if (root == "/") LogWarning("data root / lets jobs read any file traind can read");
  }
  tokens_ = std::make_shared<TokenStore>();
  if (!flags.tokens_file.empty()) {
    absl::StatusOr<std::shared_ptr<const TokenStore>> loaded = TokenStore::Load(flags.tokens_file);
    if (!loaded.ok()) return Fail("%s", loaded.status().message());
    tokens_ = *loaded;
  }
  tcp_credentials_ = grpc::InsecureServerCredentials();
  if (flags.tls.enabled()) {
    if (absl::Status s = CheckTlsFiles(flags.tls.cert, flags.tls.key, flags.tls.client_ca);
        !s.ok()) {
      return Fail("%s", s.message());
    }
    std::string error;
    tcp_credentials_ = TlsCredentials(flags.tls, &error);
    if (!tcp_credentials_) return Fail("tls: %s", error);
  }

  worker_path_ =
      flags.worker.empty() ? (fs::path(SelfDir()) / "traind-worker").string() : flags.worker;
  const std::string& worker_path = worker_path_;
  if (access(worker_path.c_str(), X_OK) != 0) {
    return Fail("worker executable %s: %s (set --worker)", worker_path, strerror(errno));
  }

  listen_ = flags.listen;
  slurm_ = flags.launcher == "slurm";
  const bool slurm = slurm_;
  worker_address_ = slurm ? flags.slurm.worker_address
                          : absl::StrCat("unix:", (fs::path(state_dir) / "worker.sock").string());
  if (slurm) {
    if (absl::Status s = LinkSharedJobsDir(state_dir, flags.slurm.shared_dir, dir_mode); !s.ok()) {
      return Fail("slurm.shared_dir: %s", s.message());
    }
  }
  RemoveLeftPredictUploads(state_dir);
  absl::StatusOr<std::string> attempt_key = LoadAttemptKey(state_dir);
  if (!attempt_key.ok()) return Fail("%s", attempt_key.status().message());

  const std::string db_path = (fs::path(state_dir) / "traind.db").string();
  absl::StatusOr<std::unique_ptr<JobStore>> store = OpenCheckedStore(db_path, flags.store_check);
  if (!store.ok()) return Fail("%s", store.status().message());
  store_ = *std::move(store);
  if (absl::Status s = CheckArtifactsKnown(store_.get(), db_path, state_dir); !s.ok()) {
    return Fail("%s", s.message());
  }
  absl::StatusOr<DatasetFiles> dataset_files = DatasetFiles::Open(state_dir);
  if (!dataset_files.ok()) return Fail("%s", dataset_files.status().message());
  DatasetLimits dataset_limits;
  dataset_limits.max_dataset_bytes = flags.datasets.max_bytes;
  dataset_limits.owner_quota_bytes = flags.datasets.owner_quota_bytes;
  dataset_limits.abandoned_upload_age = flags.datasets.abandoned_upload_age;
  dataset_limits.retention_age = flags.datasets.retention_age;
  datasets_ =
      std::make_unique<DatasetCatalog>(store_.get(), *std::move(dataset_files), dataset_limits);

  CpuInfo cpu = ReadCpuInfo();
  start_time_ = absl::Now();
  SchedulerOptions& scheduler_options = scheduler_options_;
  scheduler_options.state_dir = state_dir;
  scheduler_options.worker_path = worker_path;
  scheduler_options.worker_address = worker_address_;
  scheduler_options.attempt_key = *attempt_key;
  // With Slurm the cluster places tasks: cpu_slots (default 1000) bounds the
  // attempts handed to it at once.
  scheduler_options.cpu_slots = flags.cpu_slots > 0 ? flags.cpu_slots
                                : slurm             ? 1000
                                                    : std::max(1, cpu.cores);
  if (slurm) {
    scheduler_options.worker_jobs_dir = (fs::path(flags.slurm.shared_dir) / "jobs").string();
    scheduler_options.cluster_gpus_per_task = flags.slurm.gpus_per_node;
  }
  scheduler_options.worker_threads = flags.worker_threads;
  scheduler_options.fair_share.enabled = flags.scheduling.policy == "fair_share";
  scheduler_options.fair_share.weights = *ParseWeights(flags.scheduling.weights);  // checked
  scheduler_options.fair_share.half_life = flags.scheduling.half_life;
  scheduler_options.fair_share.max_tasks_per_owner = flags.scheduling.max_tasks_per_owner;
  scheduler_options.fair_share.max_gpus_per_owner = flags.scheduling.max_gpus_per_owner;
  scheduler_options.max_restarts = flags.max_restarts;
  scheduler_options.cancel_grace = flags.cancel_grace;
  scheduler_options.stop_grace = flags.stop_grace;
  scheduler_options.heartbeat_timeout = flags.heartbeat_timeout;
  scheduler_options.tensorboard = flags.tensorboard;
  // Metrics count from the first event on (recovery's included).
  metrics_ =
      std::make_unique<ServerMetrics>(TRAIND_VERSION, scheduler_options.cpu_slots, start_time_);
  scheduler_options.on_store_commit = [metrics = metrics_.get()](absl::Duration d) {
    metrics->ObserveStoreCommit(d);
  };

  // What the worker can train on, and which GPUs there are.
  scheduler_options.worker_env = BaseWorkerEnvironment(environ);
  std::string probe_notes;
  absl::StatusOr<std::vector<std::string>> backends =
      ProbeWorkerBackends(worker_path, scheduler_options.worker_env, &probe_notes);
  if (!backends.ok()) return Fail("%s", backends.status().message());
  backends_ = *std::move(backends);
  for (absl::string_view line : absl::StrSplit(probe_notes, '\n', absl::SkipWhitespace())) {
    absl::ConsumePrefix(&line, "traind-worker: ");
    LogInfo("worker probe: %s", line);
  }
  scheduler_options.worker_has_gpu_backend =
      std::find(backends_.begin(), backends_.end(), "cuda") != backends_.end();
  // "cpu-bf16" is a feature of the cpu backend, not a backend of its own.
  const auto bf16 = std::find(backends_.begin(), backends_.end(), "cpu-bf16");
  scheduler_options.worker_cpu_bf16 = bf16 != backends_.end();
  if (scheduler_options.worker_cpu_bf16) backends_.erase(bf16);
  if (flags.gpu_probe == "nvml") {
    gpu_probe_ = NewNvmlProbe();
  } else if (absl::StartsWith(flags.gpu_probe, "file:")) {
    gpu_probe_ = NewFileProbe(flags.gpu_probe.substr(5));
  } else if (flags.gpu_probe != "none") {
    return absl::InvalidArgumentError(
        absl::StrFormat("gpu_probe: \"%s\" is not nvml, none or file:PATH", flags.gpu_probe));
  }
  scheduler_options.gpu_probe = gpu_probe_.get();
  scheduler_options.gpu.drain_timeout = flags.gpu_drain_timeout;
  LogInfo("worker backends=%s cpu_bf16=%s", absl::StrJoin(backends_, ","),
          scheduler_options.worker_cpu_bf16 ? "true" : "false");

  if (slurm && flags.tls.enabled()) {
    // Workers trust the daemon's certificate on the worker address.
    const std::string ca = flags.slurm.worker_ca.empty() ? flags.tls.cert : flags.slurm.worker_ca;
    scheduler_options.worker_env.push_back(
        absl::StrCat("TRAIND_SERVER_CA=", fs::absolute(ca).string()));
  }
  LocalLauncherOptions local_options;
  // With Slurm, the local launcher runs only side processes (predict): no
  // zygote, and it collects only its own children.
  if (flags.worker_zygote && !slurm) {
    local_options.zygote_worker = worker_path;
    // The OpenMP runtime reads its settings once, when the zygote loads it:
    // the workers' thread count is set here (and again by each worker).
    local_options.zygote_env = scheduler_options.worker_env;
    local_options.zygote_env.push_back(
        absl::StrCat("OMP_NUM_THREADS=", scheduler_options.worker_threads));
  }
  launcher_ = std::make_unique<LocalLauncher>(local_options);
  if (flags.worker_zygote && !slurm) {
    if (absl::Status s = launcher_->StartZygote(); !s.ok()) {
      LogWarning("worker zygote not started (workers are spawned one by one): %s", s.message());
    } else if (launcher_->zygote_pid() > 0) {
      LogInfo("worker zygote started pid=%d", launcher_->zygote_pid());
    }
  }
  if (slurm) {
    SlurmOptions slurm_options;
    slurm_options.partition = flags.slurm.partition;
    slurm_options.account = flags.slurm.account;
    slurm_options.qos = flags.slurm.qos;
    slurm_options.extra_sbatch_args = flags.slurm.extra_sbatch_args;
    slurm_options.shared_dir = flags.slurm.shared_dir;
    slurm_options.worker_address = flags.slurm.worker_address;
    slurm_options.signal_before_limit = flags.slurm.signal_before_limit;
    slurm_options.poll_interval = flags.slurm.poll_interval;
    slurm_launcher_ = std::make_unique<SlurmLauncher>(slurm_options);
    if (absl::Status s = slurm_launcher_->Init(); !s.ok()) return Fail("%s", s.message());
    metrics_->AddCollector(
        [launcher = slurm_launcher_.get()](std::vector<prometheus::MetricFamily>* families) {
          families->push_back(SlurmCommandsFamily(launcher->command_counts()));
        });
    LogInfo("launcher slurm shared_dir=%s worker_address=%s partition=%s", slurm_options.shared_dir,
            slurm_options.worker_address,
            slurm_options.partition.empty() ? "(default)" : slurm_options.partition);
  }
  scheduler_ = std::make_unique<Scheduler>(scheduler_options, store_.get(),
                                           slurm ? static_cast<Launcher*>(slurm_launcher_.get())
                                                 : static_cast<Launcher*>(launcher_.get()),
                                           launcher_.get());
  metrics_->Attach(scheduler_.get());
  metrics_attachment_.metrics = metrics_.get();
  if (absl::Status s = scheduler_->Recover(); !s.ok()) {
    return Fail("cannot recover jobs from the store: %s", s.message());
  }
  scheduler_->RecoverDeletions();
  scheduler_->MeasureStateDir();
  return absl::OkStatus();
}

absl::Status Daemon::Start() {
  const ServerConfig& flags = config_;
  const bool slurm = slurm_;
  const std::string& worker_address = worker_address_;
  Scheduler& scheduler = *scheduler_;
  std::vector<std::string>& listen = listen_;
  // Internal service for workers: a unix socket, or (Slurm) the TCP address
  // workers on other nodes call back on, with TLS when configured (no client
  // certificate: each attempt's secret authenticates it).
  if (absl::Status s = ClaimUnixSocket(worker_address); !s.ok()) return Fail("%s", s.message());
  std::shared_ptr<grpc::ServerCredentials> worker_credentials = grpc::InsecureServerCredentials();
  if (slurm && flags.tls.enabled()) {
    TlsConfig server_only = flags.tls;
    server_only.client_ca.clear();
    std::string error;
    worker_credentials = TlsCredentials(server_only, &error);
    if (!worker_credentials) return Fail("tls: %s", error);
  }
  worker_service_ = std::make_unique<WorkerServiceImpl>(&scheduler);
  grpc::ServerBuilder worker_builder;
  worker_builder.AddListeningPort(worker_address, worker_credentials);
  worker_builder.RegisterService(worker_service_.get());
  worker_server_ = worker_builder.BuildAndStart();
  if (!worker_server_) {
    return Fail("cannot listen on %s (internal worker service)", worker_address);
  }
  if (!slurm) chmod(worker_address.substr(5).c_str(), 0600);

  // Public API.
  grpc::EnableDefaultHealthCheckService(true);
  ServerDescription desc;
  desc.version = TRAIND_VERSION;
  desc.state_dir = state_dir_;
  desc.listen_addresses = listen;
  desc.cpu_slots = scheduler_options_.cpu_slots;
  desc.worker_threads = scheduler_options_.worker_threads;
  desc.start_time = start_time_;
  desc.data_roots = data_roots_->roots();
  desc.max_dataset_bytes = flags.datasets.max_bytes;
  desc.dataset_quota_bytes = flags.datasets.owner_quota_bytes;
  http_listen_ = flags.http_listen.value_or(kDefaultHttpListen);
  const std::string& http_listen = http_listen_;
  desc.http_pending = !http_listen.empty() && http_listen != "off";
  if (slurm) {
    desc.launcher = absl::StrCat("slurm (shared_dir ", flags.slurm.shared_dir,
                                 ", workers call back on ", flags.slurm.worker_address, ")");
  }
  reads_ = std::make_unique<ReadApi>(&scheduler, desc);
  sessions_ = std::make_unique<SessionStore>();
  policy_.authenticator = std::make_shared<Authenticator>(tokens_);
  policy_.data_roots = *data_roots_;
  policy_.limits = flags.limits;
  policy_.host_memory_bytes = HostMemoryLimitBytes(ReadCpuInfo());
  grpc::ServerBuilder public_builder;
  std::vector<int> ports(listen.size(), 0);
  for (size_t i = 0; i < listen.size(); ++i) {
    if (absl::Status s = ClaimUnixSocket(listen[i]); !s.ok()) return Fail("%s", s.message());
    public_builder.AddListeningPort(
        listen[i], IsUnixAddress(listen[i]) ? grpc::InsecureServerCredentials() : tcp_credentials_,
        &ports[i]);
  }
  public_builder.SetMaxReceiveMessageSize(static_cast<int>(flags.limits.max_request_bytes));
  // A fixed receive window per stream: gRPC's bandwidth-delay probe grows it
  // without bound while a reader (an upload written to disk) is slower than
  // the sender, and the window is memory traind holds. 8 MiB keeps loopback
  // and LAN uploads fast and an upload's buffers bounded.
  public_builder.AddChannelArgument(GRPC_ARG_HTTP2_BDP_PROBE, 0);
  public_builder.AddChannelArgument(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, 8 << 20);
  training_service_ = std::make_unique<TrainingServiceImpl>(
      &scheduler, reads_.get(), policy_, sessions_.get(), metrics_.get(), datasets_.get());
  public_builder.RegisterService(training_service_.get());
  // Reflection describes the public services only (never WorkerService).
  schema_ = TraindPublicSchema();
  reflection_v1_ = std::make_unique<ReflectionV1>(schema_);
  reflection_v1alpha_ = std::make_unique<ReflectionV1Alpha>(schema_);
  public_builder.RegisterService(reflection_v1_.get());
  public_builder.RegisterService(reflection_v1alpha_.get());
  // The HTTP side door, bound before the gRPC server answers (its health is
  // SERVING from BuildAndStart): a traind that cannot serve an address it
  // was asked for exits before any client sees it up. The default address
  // is skipped (with a warning) when its port is taken.
  if (!http_listen.empty() && http_listen != "off") {
    HttpOptions http_options;
    http_options.listen = http_listen;
    http_options.tls = flags.tls;
    http_options.limits.max_connections = flags.http_max_connections;
    http_options.limits.max_connections_per_address = flags.http_max_connections_per_address;
    http_options.max_streams_per_caller = flags.http_max_streams_per_token;
    http_options.limits.request_timeout = flags.http_request_timeout;
    http_options.limits.write_timeout = flags.http_request_timeout;
    http_ = std::make_unique<HttpServer>(
        http_options, reads_.get(), policy_.authenticator, sessions_.get(), metrics_.get(),
        [this]() -> absl::Status {
          if (draining_.load()) {
            return absl::UnavailableError("stopping");
          }
          absl::Status store = scheduler_->StoreStatus();
          if (store.ok()) return store;
          return absl::UnavailableError(absl::StrCat("store degraded: ", store.message()));
        });
    http_->set_datasets(datasets_.get());
    absl::StatusOr<std::string> url = http_->Start();
    if (!url.ok() && !flags.http_listen.has_value()) {
      LogWarning("%s; the HTTP side door is off (set http_listen / --http-listen)",
                 url.status().message());
      http_.reset();
    } else if (!url.ok()) {
      return Fail("%s", url.status().message());
    } else {
      reads_->SetHttpUrl(*url);
      scheduler.AddDeletionListener([h = http_.get()](const std::string& id) { h->ForgetJob(id); });
      LogInfo("http listening on %s (dashboard, JSON API, /metrics; %s)", *url,
              flags.tls.enabled() ? "TLS, bearer tokens" : "plaintext, bearer tokens");
    }
  }
  public_server_ = public_builder.BuildAndStart();
  if (!public_server_) return Fail("cannot listen on %s", absl::StrJoin(listen, ", "));
  // grpc.health.v1 answers for the whole server ("") and for the public
  // service by name, from the moment the server answers at all (the name
  // is NOT_FOUND until set, while "" is SERVING from BuildAndStart); both
  // turn NOT_SERVING when traind starts to stop.
  health_ = public_server_->GetHealthCheckService();
  health_->SetServingStatus(traind::v1::TrainingService::service_full_name(), true);
  for (size_t i = 0; i < listen.size(); ++i) {
    if (ports[i] == 0) return Fail("cannot listen on %s", listen[i]);
    if (absl::StartsWith(listen[i], "unix:")) {
      std::string path = listen[i].substr(5);
      if (absl::StartsWith(path, "//")) path = path.substr(2);
      chmod(path.c_str(), 0660);
    }
    const std::string actual = WithPort(listen[i], ports[i]);
    LogInfo("listening on %s%s", actual,
            IsUnixAddress(listen[i]) ? " (unix socket: trusted, mode 0660)"
            : flags.tls.enabled()    ? (flags.tls.client_ca.empty() ? " (TLS, bearer tokens)"
                                                                    : " (mutual TLS, bearer tokens)")
                                     : " (plaintext, bearer tokens)");
    listen[i] = actual;
  }

  // GetServerInfo answers from here on (with http_url, when served).
  reads_->SetListenAddresses(listen);
  scheduler.Start();
  LogInfo(
      "traind ready version=%s state_dir=%s listen=%s cpu_slots=%d worker_threads=%d "
      "data_roots=%s tokens=%d http=%s",
      TRAIND_VERSION, state_dir_, absl::StrJoin(listen, ","), scheduler_options_.cpu_slots,
      scheduler_options_.worker_threads, absl::StrJoin(data_roots_->roots(), ","), tokens_->size(),
      reads_->http_url().empty() ? "off" : reads_->http_url());
  sd_notifyf(0, "READY=1\nSTATUS=serving on %s\nMAINPID=%d", absl::StrJoin(listen, ", ").c_str(),
             static_cast<int>(getpid()));
  watchdog_ = std::make_unique<Watchdog>(&scheduler);
  RetentionPolicy retention;
  retention.max_age = flags.retention.max_age;
  retention.max_finished_jobs = flags.retention.max_finished_jobs;
  sweeper_ = std::make_unique<RetentionSweeper>(&scheduler, retention, flags.retention.interval);
  dataset_sweeper_ = std::make_unique<DatasetSweeper>(datasets_.get(), flags.retention.interval);
  return absl::OkStatus();
}

void Daemon::GracefulStop() {
  sd_notify(0, "STOPPING=1\nSTATUS=stopping: draining workers");
  // While the workers drain, the public API still answers: health checks say
  // NOT_SERVING, SubmitJob UNAVAILABLE, watchers see the last events. Then
  // it stops (streams get 2 s), then the workers' service. New work is
  // refused before NOT_SERVING can be heard.
  scheduler_->RefuseNewWork();
  draining_ = true;
  health_->SetServingStatus(false);
  sweeper_.reset();
  scheduler_->Stop();
  if (http_) http_->Stop();
  public_server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  training_service_->FinishPendingWork();
  worker_server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
  watchdog_.reset();
  LogInfo("traind stopped");
  close(lock_fd_);
  lock_fd_ = -1;
}

}  // namespace traind::server
