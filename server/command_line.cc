// traind's command line: flags over the config file over the defaults.
#include "server/command_line.h"

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "server/log.h"

namespace traind::server {

std::optional<int> ParseCommandLine(int argc, char** argv, ServerConfig* out) {
  ServerConfig defaults;
  std::string config_file;
  // Flag values; applied over the config file only when given.
  ServerConfig f;
  std::string cancel_grace, stop_grace, heartbeat_timeout, gpu_drain_timeout;
  CLI::App app{
      "traind: the training daemon. Settings: defaults < --config FILE < flags "
      "(docs/operations.md lists every key with its default)."};
  app.add_option("--config", config_file, "YAML config file (keys as in deploy/traind.yaml)");
  auto opt = [&](const std::string& name, auto& var, const std::string& help) {
    CLI::Option* o = app.add_option(name, var, help);
    return o;
  };
  opt("--state-dir", f.state_dir,
      "state_dir: job store, sockets, logs and artifacts (default $TRAIND_STATE_DIR, else "
      "./.traind)");
  opt("--listen", f.listen,
      "listen: public API address, unix:PATH or HOST:PORT; repeatable; replaces the config's "
      "list (default unix:<state-dir>/traind.sock and 127.0.0.1:7070)");
  opt("--cpu-slots", f.cpu_slots, "cpu_slots: CPU tasks at once (default 0: the number of cores)")
      ->check(CLI::Range(0, std::numeric_limits<int>::max()));
  opt("--worker-threads", f.worker_threads,
      "worker_threads: OMP_NUM_THREADS of each CPU worker (default 1)")
      ->check(CLI::Range(1, std::numeric_limits<int>::max()));
  opt("--worker", f.worker, "worker: path of traind-worker (default: beside traind)");
  opt("--worker-zygote", f.worker_zygote,
      "worker_zygote: fork workers from a pre-started traind-worker --zygote instead of "
      "exec'ing one per task (default true)");
  std::string state_dir_mode;
  opt("--state-dir-mode", state_dir_mode,
      "state_dir_mode: octal mode of the state directory and the directories in it; files get "
      "it without x (default 0700: files 0600)");
  opt("--store-check", f.store_check,
      "store_check: check the job store (SQLite quick_check, reads the whole file once) at "
      "start and refuse a damaged one (default true)");
  opt("--tensorboard", f.tensorboard,
      "tensorboard: every task writes TensorBoard scalars under "
      "<state-dir>/jobs/<job>/tensorboard/ (default true)");
  opt("--cancel-grace", cancel_grace,
      "cancel_grace: time a cancelled worker gets before SIGKILL (default 10s)");
  opt("--stop-grace", stop_grace,
      "stop_grace: on SIGTERM, time running workers get to checkpoint and exit (default 10s)");
  opt("--heartbeat-timeout", heartbeat_timeout,
      "heartbeat_timeout: silence after which a worker is killed as hung (default 30s)");
  opt("--max-restarts", f.max_restarts,
      "max_restarts: retries of a task whose worker crashed (default 2)")
      ->check(CLI::Range(0, std::numeric_limits<int>::max()));
  opt("--gpu-probe", f.gpu_probe,
      "gpu_probe: GPU inventory from nvml (default), none, or file:PATH (rehearsals, tests)");
  opt("--gpu-drain-timeout", gpu_drain_timeout,
      "gpu_drain_timeout: time a GPU gets after its worker exits to show its memory released "
      "before it is marked UNHEALTHY (default 60s)");
  opt("--data-root", f.data_roots,
      "data_roots: directory job data must resolve into; repeatable; replaces the config's "
      "list (default: traind's working directory)");
  opt("--tls-cert", f.tls.cert, "tls.cert: PEM certificate chain for TCP listeners");
  opt("--tls-key", f.tls.key, "tls.key: PEM private key for TCP listeners");
  opt("--tls-client-ca", f.tls.client_ca,
      "tls.client_ca: PEM CA bundle; TCP clients must present a certificate it signed (mTLS)");
  opt("--tokens-file", f.tokens_file, "tokens_file: bearer tokens (name, role, sha256)");
  app.add_flag("--insecure", f.insecure, "insecure: allow plaintext TCP on a non-loopback address");
  std::string http_listen;
  opt("--http-listen", http_listen,
      "http_listen: HOST:PORT of the HTTP side door (dashboard, JSON API, /metrics), or off "
      "(default 127.0.0.1:7071)");
  opt("--http-max-connections", f.http_max_connections,
      "http_max_connections: HTTP connections at once; each open event stream holds one "
      "(default 512)");
  opt("--max-request-bytes", f.limits.max_request_bytes,
      "limits.max_request_bytes (default 4194304)");
  opt("--max-queued-jobs-per-user", f.limits.max_queued_jobs_per_user,
      "limits.max_queued_jobs_per_user (default 100; 0: none)");
  opt("--max-layers", f.limits.max_layers, "limits.max_layers (default 64)");
  opt("--max-units", f.limits.max_units, "limits.max_units (default 65536)");
  opt("--max-epochs", f.limits.max_epochs,
      "limits.max_epochs: training.epochs, and the epochs training.batches amounts to (default "
      "100000)");
  opt("--max-batches", f.limits.max_batches, "limits.max_batches (default 100000000)");
  opt("--max-tasks", f.limits.max_tasks,
      "limits.max_tasks: tasks of a job, folds x repeats (+1 with refit) (default 1000)");
  opt("--max-rows", f.limits.max_rows, "limits.max_rows: rows of a data file (default 100000000)");
  opt("--max-columns", f.limits.max_columns,
      "limits.max_columns: columns of a data file (default 100000)");
  opt("--launcher", f.launcher,
      "launcher: where task attempts run, local (default) or slurm (each attempt a Slurm job)");
  opt("--slurm-partition", f.slurm.partition, "slurm.partition: sbatch --partition");
  opt("--slurm-account", f.slurm.account, "slurm.account: sbatch --account");
  opt("--slurm-qos", f.slurm.qos, "slurm.qos: sbatch --qos");
  opt("--slurm-sbatch-arg", f.slurm.extra_sbatch_args,
      "slurm.extra_sbatch_args: appended to every sbatch; repeatable; replaces the config's list");
  opt("--slurm-shared-dir", f.slurm.shared_dir,
      "slurm.shared_dir: a directory every node sees (scripts, exit records, the jobs' files)");
  opt("--slurm-worker-address", f.slurm.worker_address,
      "slurm.worker_address: HOST:PORT workers call back on (traind listens there)");
  opt("--slurm-worker-ca", f.slurm.worker_ca,
      "slurm.worker_ca: PEM bundle workers trust for the worker address's certificate (default: "
      "tls.cert)");
  opt("--slurm-gpus-per-node", f.slurm.gpus_per_node,
      "slurm.gpus_per_node: GPUs a node offers, the most a task may ask for (default 0)")
      ->check(CLI::Range(0, 1024));
  std::string slurm_poll_interval, slurm_signal_before_limit;
  opt("--slurm-poll-interval", slurm_poll_interval,
      "slurm.poll_interval: shortest spacing of the batched squeue (default 5s)");
  opt("--slurm-signal-before-limit", slurm_signal_before_limit,
      "slurm.signal_before_limit: SIGUSR2 this long before a time limit (default 120s)");
  app.set_version_flag("--version", TRAIND_VERSION);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help, --version
    // A typo in a flag is a usage error, like a bad config value.
    std::fprintf(stderr, "traind: %s (see traind --help)\n", e.what());
    return 2;
  }

  ServerConfig config = defaults;
  if (!config_file.empty()) {
    if (absl::Status s = LoadConfigFile(config_file, &config); !s.ok()) {
      LogError("%s", s.message());
      return 2;
    }
  }
  auto given_flag = [&](const char* name) { return app.count(name) > 0; };
  if (given_flag("--state-dir")) config.state_dir = f.state_dir;
  if (given_flag("--listen")) config.listen = f.listen;
  if (given_flag("--cpu-slots")) config.cpu_slots = f.cpu_slots;
  if (given_flag("--worker-threads")) config.worker_threads = f.worker_threads;
  if (given_flag("--worker")) config.worker = f.worker;
  if (given_flag("--worker-zygote")) config.worker_zygote = f.worker_zygote;
  if (given_flag("--tensorboard")) config.tensorboard = f.tensorboard;
  if (given_flag("--store-check")) config.store_check = f.store_check;
  if (given_flag("--state-dir-mode")) {
    absl::StatusOr<int> mode = ParseStateDirMode(state_dir_mode);
    if (!mode.ok()) {
      LogError("--state-dir-mode: %s", mode.status().message());
      return 2;
    }
    config.state_dir_mode = *mode;
  }
  if (given_flag("--max-restarts")) config.max_restarts = f.max_restarts;
  if (given_flag("--data-root")) config.data_roots = f.data_roots;
  if (given_flag("--gpu-probe")) config.gpu_probe = f.gpu_probe;
  if (given_flag("--tls-cert")) config.tls.cert = f.tls.cert;
  if (given_flag("--tls-key")) config.tls.key = f.tls.key;
  if (given_flag("--tls-client-ca")) config.tls.client_ca = f.tls.client_ca;
  if (given_flag("--tokens-file")) config.tokens_file = f.tokens_file;
  if (given_flag("--insecure")) config.insecure = f.insecure;
  if (given_flag("--http-listen")) config.http_listen = http_listen;
  if (given_flag("--launcher")) config.launcher = f.launcher;
  if (given_flag("--slurm-partition")) config.slurm.partition = f.slurm.partition;
  if (given_flag("--slurm-account")) config.slurm.account = f.slurm.account;
  if (given_flag("--slurm-qos")) config.slurm.qos = f.slurm.qos;
  if (given_flag("--slurm-sbatch-arg")) config.slurm.extra_sbatch_args = f.slurm.extra_sbatch_args;
  if (given_flag("--slurm-shared-dir")) config.slurm.shared_dir = f.slurm.shared_dir;
  if (given_flag("--slurm-worker-address")) config.slurm.worker_address = f.slurm.worker_address;
  if (given_flag("--slurm-gpus-per-node")) config.slurm.gpus_per_node = f.slurm.gpus_per_node;
  if (given_flag("--slurm-worker-ca")) config.slurm.worker_ca = f.slurm.worker_ca;
  if (given_flag("--http-max-connections")) {
    config.http_max_connections = f.http_max_connections;
  }
  if (given_flag("--max-request-bytes"))
    config.limits.max_request_bytes = f.limits.max_request_bytes;
  if (given_flag("--max-queued-jobs-per-user")) {
    config.limits.max_queued_jobs_per_user = f.limits.max_queued_jobs_per_user;
  }
  if (given_flag("--max-layers")) config.limits.max_layers = f.limits.max_layers;
  if (given_flag("--max-units")) config.limits.max_units = f.limits.max_units;
  if (given_flag("--max-epochs")) config.limits.max_epochs = f.limits.max_epochs;
  if (given_flag("--max-batches")) config.limits.max_batches = f.limits.max_batches;
  if (given_flag("--max-tasks")) config.limits.max_tasks = f.limits.max_tasks;
  if (given_flag("--max-rows")) config.limits.max_rows = f.limits.max_rows;
  if (given_flag("--max-columns")) config.limits.max_columns = f.limits.max_columns;
  for (auto [name, text, out] :
       {std::tuple{"--cancel-grace", &cancel_grace, &config.cancel_grace},
        std::tuple{"--stop-grace", &stop_grace, &config.stop_grace},
        std::tuple{"--heartbeat-timeout", &heartbeat_timeout, &config.heartbeat_timeout},
        std::tuple{"--gpu-drain-timeout", &gpu_drain_timeout, &config.gpu_drain_timeout},
        std::tuple{"--slurm-poll-interval", &slurm_poll_interval, &config.slurm.poll_interval},
        std::tuple{"--slurm-signal-before-limit", &slurm_signal_before_limit,
                   &config.slurm.signal_before_limit}}) {
    if (!given_flag(name)) continue;
    absl::StatusOr<absl::Duration> d = ParseDurationText(*text);
    if (!d.ok()) {
      LogError("%s: %s", name, d.status().message());
      return 2;
    }
    *out = *d;
  }
  if (config.state_dir.empty()) {
    const char* env_state = std::getenv("TRAIND_STATE_DIR");
    config.state_dir = env_state && *env_state ? env_state : ".traind";
  }
  if (config.listen.empty()) {
    const std::filesystem::path dir =
        std::filesystem::absolute(config.state_dir).lexically_normal();
    config.listen = {absl::StrCat("unix:", (dir / "traind.sock").string()), "127.0.0.1:7070"};
  }
  if (absl::Status s = ValidateConfig(config); !s.ok()) {
    LogError("%s%s", config_file.empty() ? "" : config_file + ": ", s.message());
    return 2;
  }
  *out = std::move(config);
  return std::nullopt;
}

}  // namespace traind::server
