// traind's configuration: a YAML file (--config FILE) plus command-line flags
// that override it. The defaults below are the source of truth for the
// values; each setting's key, flag, type, range and doc line is a row of the
// settings table (settings.h), from which the loader, the flags, --help and
// docs/operations.md's key reference are derived. A new member here needs a
// row there (and a line in deploy/traind.yaml).
//
// No gRPC here: the config is plain data, unit-tested in config_test.cc.
#ifndef TRAIND_SERVER_CONFIG_H_
#define TRAIND_SERVER_CONFIG_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace traind::server {

struct TlsConfig {
  // PEM server certificate chain and private key. Both or neither; when set,
  // every TCP listen address serves TLS (unix sockets never do).
  std::string cert;
  std::string key;
  // PEM CA bundle. When set, clients on TCP must present a certificate signed
  // by it (mutual TLS). Requires cert and key.
  std::string client_ca;

  bool enabled() const { return !cert.empty(); }
};

struct LimitsConfig {
  // Largest request message the public API accepts (RESOURCE_EXHAUSTED above).
  int64_t max_request_bytes = 4 << 20;
  // Jobs one owner may have waiting for their first task to start
  // (RESOURCE_EXHAUSTED above; 0: no limit).
  int max_queued_jobs_per_user = 100;
  // Spec sizes (INVALID_ARGUMENT above). Every count a spec controls has
  // one, so no field walks around the others: the work of a job is at most
  // max_tasks × max_epochs epochs, each over at most max_rows rows of
  // max_columns columns, and its events at most max_tasks × (max_restarts +
  // 1) × (max_epochs + a few) (one per epoch, a few per attempt).
  int max_layers = 64;    // model.layers
  int max_units = 65536;  // units of one dense layer
  // training.epochs, and the epochs training.batches amounts to (batches /
  // batches per epoch, from the data's rows and batch_size at submit).
  int max_epochs = 100000;
  int64_t max_batches = 100000000;  // training.batches (optimizer steps of a task)
  int max_tasks = 1000;             // tasks: folds × repeats (+1 with refit)
  int64_t max_rows = 100000000;     // data rows of data.path, and of validation_path
  int max_columns = 100000;         // columns of a data file's header
  // A CSV uploaded to Predict (RESOURCE_EXHAUSTED above).
  int64_t max_predict_upload_bytes = int64_t{1} << 30;
  // Uploads in flight (Predict's CSV, UploadDataset's file), in all and per
  // owner (RESOURCE_EXHAUSTED above), and how long one may wait for its
  // next message before it is ended (DEADLINE_EXCEEDED).
  int max_uploads = 32;
  int max_uploads_per_user = 4;
  absl::Duration upload_idle_timeout = absl::Minutes(1);
};

// Which finished jobs traind deletes by itself (with their events and
// artifacts), at start and every `interval`. Both limits off by default.
// Datasets stored by traind (UploadDataset).
struct DatasetsConfig {
  int64_t max_bytes = 0;          // one dataset's size (0: no limit)
  int64_t owner_quota_bytes = 0;  // an owner's datasets together (0: no limit)
  // A partial upload not written for this long is removed.
  absl::Duration abandoned_upload_age = absl::Hours(24);
  // Datasets no stored job names, older than this, are removed (0: kept).
  absl::Duration retention_age = absl::ZeroDuration();
};

struct RetentionConfig {
  // Jobs that ended longer ago than this ("30d", "12h"; 0: no age limit).
  absl::Duration max_age = absl::ZeroDuration();
  // Beyond this many finished jobs the oldest go (0: no limit).
  int max_finished_jobs = 0;
  absl::Duration interval = absl::Minutes(10);
};

// The order between owners' queued tasks of the same priority
// (scheduler/fair_share.h).
struct SchedulingConfig {
  // fair_share: the owner with the least recent use per unit of weight
  // first; fifo: submit order, whoever submitted.
  std::string policy = "fair_share";
  // "OWNER=WEIGHT" entries (an owner not listed weighs 1).
  std::vector<std::string> weights;
  // Past use counts half after this long.
  absl::Duration half_life = absl::Hours(1);
  // What one owner's tasks may hold at once (0: no limit).
  int max_tasks_per_owner = 0;
  int max_gpus_per_owner = 0;
};

// launcher: slurm — every task attempt is a Slurm job (docs/operations.md
// "traind in front of a Slurm cluster").
struct SlurmConfig {
  std::string partition;                       // sbatch --partition (empty: the cluster's default)
  std::string account;                         // --account
  std::string qos;                             // --qos
  std::vector<std::string> extra_sbatch_args;  // appended to every sbatch
  // A directory every node sees at the same path (required): batch scripts,
  // exit records, and the jobs' logs, checkpoints and artifacts
  // (<shared_dir>/jobs, which <state_dir>/jobs links to).
  std::string shared_dir;
  // HOST:PORT workers call back on (required); traind's WorkerService
  // listens there, with TLS when tls is set.
  std::string worker_address;
  // PEM bundle workers trust for the worker address's TLS certificate
  // (empty: tls.cert itself, enough for a self-signed certificate or one
  // whose file holds its chain up to the root). Read by workers: the same
  // path on every node.
  std::string worker_ca;
  // GPUs a node offers: the most one task may ask for (0: no GPU jobs).
  int gpus_per_node = 0;
  // Slurm sends SIGUSR2 this long before a time limit (--signal=B:USR2@...).
  absl::Duration signal_before_limit = absl::Seconds(120);
  // The shortest spacing of the batched squeue (max(this, 5 × its last time)).
  absl::Duration poll_interval = absl::Seconds(5);
};

inline constexpr char kDefaultHttpListen[] = "127.0.0.1:7071";

struct ServerConfig {
  // Directory for the job store, sockets, logs and artifacts. Empty: the
  // caller fills in $TRAIND_STATE_DIR, else ./.traind.
  std::string state_dir;
  // Public API addresses, unix:PATH or HOST:PORT. Empty: the caller fills in
  // unix:<state_dir>/traind.sock and 127.0.0.1:7070.
  std::vector<std::string> listen;
  // CPU tasks that run at once (0: the number of cores).
  int cpu_slots = 0;
  // OMP_NUM_THREADS of each CPU worker.
  int worker_threads = 1;
  // Path of traind-worker (empty: beside traind).
  std::string worker;
  // Fork workers from a pre-started `traind-worker --zygote` (a fresh
  // process per task without exec + dynamic linking each time); false: exec
  // traind-worker for every task.
  bool worker_zygote = true;
  // Every task writes TensorBoard scalars (train/*, val/*, learning_rate per
  // epoch) under <state_dir>/jobs/<job>/tensorboard/; false: none.
  bool tensorboard = true;
  // Mode of the state directory and of every directory traind and its
  // workers create in it; files get the same bits without x (0700: 0600).
  // traind's umask is set from it, so nothing it or a worker creates there
  // is more open. The owner must have rwx; others nothing (0700, 0710, 0750).
  int state_dir_mode = 0700;
  // At start, check the job store with SQLite's quick_check (it reads the
  // whole file once: O(size), about the time to read it from disk) and
  // refuse to start on a damaged one; false skips the check.
  bool store_check = true;
  absl::Duration cancel_grace = absl::Seconds(10);
  absl::Duration stop_grace = absl::Seconds(10);
  absl::Duration heartbeat_timeout = absl::Seconds(30);
  int max_restarts = 2;
  // Where the GPU inventory comes from: "nvml" (the driver's library, loaded
  // at run time; no driver means no GPUs), "none", or "file:PATH" (GPU
  // states read from a file, for rehearsals and tests).
  std::string gpu_probe = "nvml";
  // Time a GPU gets after its worker exits to show its memory released
  // before it is marked UNHEALTHY.
  absl::Duration gpu_drain_timeout = absl::Seconds(60);
  // Directories a job's data paths must resolve into (realpath, symlinks
  // followed). Empty: the daemon's working directory.
  std::vector<std::string> data_roots;
  TlsConfig tls;
  // YAML file of bearer tokens (name, role, sha256). Empty: no tokens, so
  // every TCP request is refused as UNAUTHENTICATED; the unix socket works.
  std::string tokens_file;
  // Allow plaintext TCP on a non-loopback address.
  bool insecure = false;
  // The HTTP side door (dashboard, JSON API, /metrics) at HOST:PORT, with
  // the security of the TCP listeners (tokens, tls); "off" (or "") turns it
  // off. Unset:
  // the default, kDefaultHttpListen, which traind skips with a warning when
  // the port is taken (an address that was set must be served).
  std::optional<std::string> http_listen;
  // HTTP connections served at once (each open event stream holds one).
  int http_max_connections = 512;
  int http_max_connections_per_address = 128;
  int http_max_streams_per_token = 32;
  absl::Duration http_request_timeout = absl::Seconds(10);
  LimitsConfig limits;
  RetentionConfig retention;
  SchedulingConfig scheduling;
  DatasetsConfig datasets;
  // Where task attempts run: "local" (worker processes on this machine) or
  // "slurm" (each attempt a Slurm job; `slurm` says how).
  std::string launcher = "local";
  SlurmConfig slurm;
};

// Reads the YAML file at `path` and sets every key it holds in `*config`
// (keys it does not hold keep their values). An unknown key, a wrong type or
// a bad value is an error naming the key and `path:line`.
absl::Status LoadConfigFile(const std::string& path, ServerConfig* config);

// Same, from text; `source` names it in errors.
absl::Status ParseConfig(const std::string& text, const std::string& source, ServerConfig* config);

// Checks values and combinations that no single key can: ranges, TLS files
// given in pairs, and that a TCP address off loopback has TLS unless
// `insecure`. Call after flags were applied and defaults filled in.
absl::Status ValidateConfig(const ServerConfig& config);

// An octal state_dir_mode ("0700", "750"): the owner has rwx, others
// nothing; group bits are the operator's choice.
absl::StatusOr<int> ParseStateDirMode(const std::string& text);

// True for unix: addresses (unix:PATH, unix-abstract:NAME).
bool IsUnixAddress(const std::string& address);
// True for a TCP address on loopback: 127.0.0.0/8, [::1], localhost.
bool IsLoopbackAddress(const std::string& address);

// "10s", "1m30s", "250ms" (absl durations), days first ("30d", "1d12h"),
// or a number of seconds.
absl::StatusOr<absl::Duration> ParseDurationText(const std::string& text);

}  // namespace traind::server

#endif  // TRAIND_SERVER_CONFIG_H_
