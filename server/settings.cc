#include "server/settings.h"

#include <limits>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace traind::server {
namespace {

constexpr int64_t kIntMax = std::numeric_limits<int>::max();
constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();
constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();

// Rows, by type. `member` is a captureless lambda: [](ServerConfig& c) { return &c.x; }.
template <typename F>
Setting Str(std::string key, std::string flag, F member, std::string doc, std::string note = "") {
  return Setting{std::move(key), std::move(flag), SettingType::kString,
                 +member,        std::move(doc),  std::move(note)};
}
template <typename F>
Setting Int(std::string key, std::string flag, F member, int64_t min, int64_t max, std::string doc,
            std::string note = "") {
  Setting s{std::move(key), std::move(flag), SettingType::kInt,
            +member,        std::move(doc),  std::move(note)};
  s.min = min;
  s.max = max;
  return s;
}
template <typename F>
Setting Int64(std::string key, std::string flag, F member, int64_t min, int64_t max,
              std::string doc, std::string note = "") {
  Setting s{std::move(key), std::move(flag), SettingType::kInt64,
            +member,        std::move(doc),  std::move(note)};
  s.min = min;
  s.max = max;
  return s;
}
template <typename F>
Setting Bool(std::string key, std::string flag, F member, std::string doc) {
  return Setting{std::move(key), std::move(flag), SettingType::kBool, +member, std::move(doc), ""};
}
template <typename F>
Setting Dur(std::string key, std::string flag, F member, std::string doc, std::string note = "") {
  return Setting{std::move(key), std::move(flag), SettingType::kDuration,
                 +member,        std::move(doc),  std::move(note)};
}
template <typename F>
Setting List(std::string key, std::string flag, F member, std::string doc, std::string note = "") {
  return Setting{std::move(key), std::move(flag), SettingType::kStringList,
                 +member,        std::move(doc),  std::move(note)};
}

std::vector<Setting> MakeSettings() {
  using C = ServerConfig;
  std::vector<Setting> s = {
      Str(
          "state_dir", "--state-dir", [](C& c) { return &c.state_dir; },
          "job store (SQLite), worker socket, worker logs, artifacts",
          "`$TRAIND_STATE_DIR`, else `./.traind`"),
      Setting{"state_dir_mode", "--state-dir-mode", SettingType::kOctalMode,
              +[](C& c) { return &c.state_dir_mode; },
              "mode of the state directory and every directory traind and its workers create in "
              "it; files get the same bits without x (`0700`: files `0600`). traind sets its "
              "umask from it (workers inherit it) and closes a state directory, store, lock and "
              "`jobs/` that are more open on start. The owner needs `rwx`; others get nothing "
              "(`0750` lets a group read artifacts, `0710` lets it reach a socket inside)",
              ""},
      Bool(
          "store_check", "--store-check", [](C& c) { return &c.store_check; },
          "at start, check the job store with SQLite's `quick_check` and refuse to start on a "
          "damaged one (see \"The job store\" below); `false` skips the check"),
      List(
          "listen", "--listen", [](C& c) { return &c.listen; },
          "public API addresses: `unix:PATH` or `HOST:PORT` (`:0`: any free port, logged and "
          "shown by `trainctl info`)",
          "`unix:<state_dir>/traind.sock`, `127.0.0.1:7070`"),
      Int(
          "cpu_slots", "--cpu-slots", [](C& c) { return &c.cpu_slots; }, 0, kIntMax,
          "CPU tasks that run at once", "the number of cores"),
      Int(
          "worker_threads", "--worker-threads", [](C& c) { return &c.worker_threads; }, 1, kIntMax,
          "`OMP_NUM_THREADS` of each CPU worker"),
      Str(
          "worker", "--worker", [](C& c) { return &c.worker; }, "worker executable",
          "`traind-worker` beside `traind`"),
      Bool(
          "worker_zygote", "--worker-zygote", [](C& c) { return &c.worker_zygote; },
          "fork each worker from a `traind-worker --zygote` started once (see below) instead of "
          "exec'ing `traind-worker` per task"),
      Bool(
          "tensorboard", "--tensorboard", [](C& c) { return &c.tensorboard; },
          "every task writes TensorBoard scalars to `<state_dir>/jobs/<job>/tensorboard/task-<i>/` "
          "(see below); `false` (`--tensorboard=false`): none"),
      Dur(
          "cancel_grace", "--cancel-grace", [](C& c) { return &c.cancel_grace; },
          "a cancelled worker's time between SIGTERM and SIGKILL"),
      Dur(
          "stop_grace", "--stop-grace", [](C& c) { return &c.stop_grace; },
          "on SIGTERM, running workers' time to checkpoint and exit"),
      Dur(
          "heartbeat_timeout", "--heartbeat-timeout", [](C& c) { return &c.heartbeat_timeout; },
          "a silent worker is killed, its attempt fails with `TIMEOUT`; workers say they are "
          "alive every quarter of it (at most every 2 s) while training advances; at least `1s`"),
      Int(
          "max_restarts", "--max-restarts", [](C& c) { return &c.max_restarts; }, 0, kIntMax,
          "retries of a task whose worker crashed or hung"),
      Str(
          "gpu_probe", "--gpu-probe", [](C& c) { return &c.gpu_probe; },
          "GPU inventory: `nvml` (the driver's `libnvidia-ml.so.1`, loaded at run time; no "
          "driver: no GPUs), `none`, or `file:PATH` (GPU states read from a file: `UUID "
          "TOTAL_BYTES USED_BYTES [PID:BYTES ...]` per line, for rehearsals and tests)"),
      Dur(
          "gpu_drain_timeout", "--gpu-drain-timeout", [](C& c) { return &c.gpu_drain_timeout; },
          "after its worker exits, a GPU must show no process of that worker and its memory back "
          "near the idle baseline within this time, else it is `UNHEALTHY` and not used again"),
      List(
          "data_roots", "--data-root", [](C& c) { return &c.data_roots; },
          "directories job data must resolve into (realpath, symlinks followed)",
          "traind's working directory"),
      Str(
          "tls.cert", "--tls-cert", [](C& c) { return &c.tls.cert; },
          "PEM certificate chain: every TCP listener serves TLS (with `tls.key`)"),
      Str(
          "tls.key", "--tls-key", [](C& c) { return &c.tls.key; }, "PEM private key of `tls.cert`"),
      Str(
          "tls.client_ca", "--tls-client-ca", [](C& c) { return &c.tls.client_ca; },
          "PEM CA bundle: TCP clients must present a certificate it signed (mutual TLS)"),
      Str(
          "tokens_file", "--tokens-file", [](C& c) { return &c.tokens_file; },
          "bearer tokens (name, role, sha256), see below", "TCP refuses every call"),
      Setting{"insecure", "--insecure", SettingType::kBool, +[](C& c) { return &c.insecure; },
              "allow plaintext TCP on a non-loopback address", "", 0, 0,
              /*flag_is_switch=*/true},
      Setting{"http_listen", "--http-listen", SettingType::kOptionalString,
              +[](C& c) { return &c.http_listen; },
              "the HTTP side door (dashboard, JSON API, `/metrics`) at `HOST:PORT`; `off` turns "
              "it off. Unset, traind skips the default with a warning when the port is taken; an "
              "address that was set must be served",
              absl::StrCat("`", kDefaultHttpListen, "`")},
      Int(
          "http_max_connections", "--http-max-connections",
          [](C& c) { return &c.http_max_connections; }, 4, kIntMax,
          "HTTP connections open at once (at most half of the descriptors traind may open). "
          "Beyond, a new connection takes the place of the one that has waited longest for a "
          "request, else it is closed"),
      Int(
          "http_max_connections_per_address", "--http-max-connections-per-address",
          [](C& c) { return &c.http_max_connections_per_address; }, 1, kIntMax,
          "HTTP connections open at once from one client address (a proxy in front of traind "
          "counts as one)"),
      Dur(
          "http_request_timeout", "--http-request-timeout",
          [](C& c) { return &c.http_request_timeout; },
          "an HTTP request's whole header (and body), from when the connection is idle, "
          "arrives within this, else the connection is closed: a deadline per request, not per "
          "read; responses are written at the same pace per write; `1s` to `10m`"),
      Int(
          "http_max_streams_per_token", "--http-max-streams-per-token",
          [](C& c) { return &c.http_max_streams_per_token; }, 1, kIntMax,
          "HTTP event streams (`/api/v1/jobs/ID/events`) open at once per caller: `429` above; "
          "in all, half of `http_max_connections`"),
      Int64(
          "limits.max_request_bytes", "--max-request-bytes",
          [](C& c) { return &c.limits.max_request_bytes; }, 1024, kInt32Max,
          "larger requests: `RESOURCE_EXHAUSTED`", "4 MiB"),
      Int(
          "limits.max_queued_jobs_per_user", "--max-queued-jobs-per-user",
          [](C& c) { return &c.limits.max_queued_jobs_per_user; }, 0, kIntMax,
          "jobs of one owner not yet started: `RESOURCE_EXHAUSTED` above (`0`: no limit)"),
      Int(
          "limits.max_layers", "--max-layers", [](C& c) { return &c.limits.max_layers; }, 1,
          kIntMax, "`model.layers`: `INVALID_ARGUMENT` above"),
      Int(
          "limits.max_units", "--max-units", [](C& c) { return &c.limits.max_units; }, 1, kIntMax,
          "units of one dense layer"),
      Int(
          "limits.max_epochs", "--max-epochs", [](C& c) { return &c.limits.max_epochs; }, 1,
          kIntMax,
          "`training.epochs`, and the epochs `training.batches` amounts to (batches ÷ ⌈training "
          "rows ÷ batch_size⌉ on the task with the fewest training rows, known from the data at "
          "submit)"),
      Int64(
          "limits.max_batches", "--max-batches", [](C& c) { return &c.limits.max_batches; }, 1,
          kInt64Max, "`training.batches` (optimizer steps of one task)"),
      Int(
          "limits.max_tasks", "--max-tasks", [](C& c) { return &c.limits.max_tasks; }, 1, kIntMax,
          "tasks of a job: folds × repeats, +1 with `refit`"),
      Int64(
          "limits.max_rows", "--max-rows", [](C& c) { return &c.limits.max_rows; }, 1, kInt64Max,
          "data rows of `data.path`, and of `cross_validation.validation_path`"),
      Int(
          "limits.max_columns", "--max-columns", [](C& c) { return &c.limits.max_columns; }, 1,
          kIntMax, "columns of the data file's header"),
      Int64(
          "limits.max_predict_upload_bytes", "",
          [](C& c) { return &c.limits.max_predict_upload_bytes; }, 1024, kInt64Max,
          "a CSV uploaded to `Predict`: `RESOURCE_EXHAUSTED` above (a file inside the data "
          "roots can be named instead)",
          "1 GiB"),
      Int(
          "limits.max_uploads", "--max-uploads", [](C& c) { return &c.limits.max_uploads; }, 1,
          kIntMax,
          "uploads in flight at once (Predict's CSV, `UploadDataset`): `RESOURCE_EXHAUSTED` "
          "above"),
      Int(
          "limits.max_uploads_per_user", "--max-uploads-per-user",
          [](C& c) { return &c.limits.max_uploads_per_user; }, 1, kIntMax,
          "uploads in flight at once per owner: `RESOURCE_EXHAUSTED` above"),
      Dur(
          "limits.upload_idle_timeout", "--upload-idle-timeout",
          [](C& c) { return &c.limits.upload_idle_timeout; },
          "an upload that sends nothing for this long is ended (`DEADLINE_EXCEEDED`; a dataset "
          "upload's bytes are kept to be resumed); at least `1s`"),
      Int64(
          "datasets.max_bytes", "", [](C& c) { return &c.datasets.max_bytes; }, 0, kInt64Max,
          "one dataset's size: a larger upload is `RESOURCE_EXHAUSTED` naming this key (0: no "
          "limit)",
          "off"),
      Int64(
          "datasets.owner_quota_bytes", "", [](C& c) { return &c.datasets.owner_quota_bytes; }, 0,
          kInt64Max,
          "the bytes of one owner's datasets together (each file counted once): an upload past "
          "it is `RESOURCE_EXHAUSTED` naming the owner's use (0: no limit)",
          "off"),
      Dur(
          "datasets.abandoned_upload_age", "",
          [](C& c) { return &c.datasets.abandoned_upload_age; },
          "an interrupted upload not resumed within this time is removed"),
      Dur(
          "datasets.retention_age", "", [](C& c) { return &c.datasets.retention_age; },
          "datasets older than this that no stored job names are removed, one log line each",
          "off"),
      Dur(
          "retention.max_age", "", [](C& c) { return &c.retention.max_age; },
          "finished jobs that ended longer ago than this are deleted, with their events and "
          "artifacts (`30d`, `12h`)",
          "off"),
      Int(
          "retention.max_finished_jobs", "", [](C& c) { return &c.retention.max_finished_jobs; }, 0,
          kIntMax, "beyond this many finished jobs, the oldest (by end time) are deleted", "off"),
      Dur(
          "retention.interval", "", [](C& c) { return &c.retention.interval; },
          "how often retention runs (it also runs at start; at least 1s)"),
      Str(
          "scheduling.policy", "--scheduling-policy", [](C& c) { return &c.scheduling.policy; },
          "the order between owners' queued tasks of one priority: `fair_share` (the owner with "
          "the least recent use per unit of weight first; one owner's long search does not hold "
          "every slot while another's job waits) or `fifo` (submit order)"),
      List(
          "scheduling.weights", "--scheduling-weight", [](C& c) { return &c.scheduling.weights; },
          "`OWNER=WEIGHT` entries (`team-a=2`): an owner's share of the slots and GPUs grows with "
          "its weight; an owner not listed weighs 1",
          "all 1"),
      Dur(
          "scheduling.half_life", "--scheduling-half-life",
          [](C& c) { return &c.scheduling.half_life; },
          "an owner's past use (resource-seconds) counts half after this long; at least `1m`"),
      Int(
          "scheduling.max_tasks_per_owner", "--max-tasks-per-owner",
          [](C& c) { return &c.scheduling.max_tasks_per_owner; }, 0, kIntMax,
          "tasks one owner may run at once; the rest wait (`OWNER_LIMIT`) while other owners' "
          "tasks may start",
          "no limit"),
      Int(
          "scheduling.max_gpus_per_owner", "--max-gpus-per-owner",
          [](C& c) { return &c.scheduling.max_gpus_per_owner; }, 0, kIntMax,
          "GPUs one owner's tasks may hold at once; a GPU task that would go over waits "
          "(`OWNER_LIMIT`)",
          "no limit"),
      Str(
          "launcher", "--launcher", [](C& c) { return &c.launcher; },
          "where task attempts run: `local` (worker processes on this machine) or `slurm` (each "
          "attempt a Slurm job; see \"traind in front of a Slurm cluster\")"),
      Str(
          "slurm.shared_dir", "--slurm-shared-dir", [](C& c) { return &c.slurm.shared_dir; },
          "absolute directory every node sees at the same path: batch scripts, exit records and "
          "the jobs' files (`<shared_dir>/jobs`, which `<state_dir>/jobs` links to)",
          "required with `slurm`"),
      Str(
          "slurm.worker_address", "--slurm-worker-address",
          [](C& c) { return &c.slurm.worker_address; },
          "`HOST:PORT` workers call back on; traind's worker service listens there (TLS when "
          "`tls` is set)",
          "required with `slurm`"),
      Str(
          "slurm.worker_ca", "--slurm-worker-ca", [](C& c) { return &c.slurm.worker_ca; },
          "PEM bundle the workers trust for the worker address's certificate (the CA of a "
          "CA-signed `tls.cert`); read by the workers: the same path on every node",
          "`tls.cert`"),
      Str(
          "slurm.partition", "--slurm-partition", [](C& c) { return &c.slurm.partition; },
          "`sbatch --partition`", "the cluster's default"),
      Str(
          "slurm.account", "--slurm-account", [](C& c) { return &c.slurm.account; },
          "`sbatch --account`", "the cluster's default"),
      Str(
          "slurm.qos", "--slurm-qos", [](C& c) { return &c.slurm.qos; }, "`sbatch --qos`",
          "the cluster's default"),
      List(
          "slurm.extra_sbatch_args", "--slurm-sbatch-arg",
          [](C& c) { return &c.slurm.extra_sbatch_args; },
          "appended to every `sbatch` (`--time=04:00:00`, `--constraint=a100`, ...)"),
      Int(
          "slurm.gpus_per_node", "--slurm-gpus-per-node",
          [](C& c) { return &c.slurm.gpus_per_node; }, 0, 1024,
          "GPUs a node offers: the most one task may ask for (`0`: GPU jobs are refused)"),
      Dur(
          "slurm.signal_before_limit", "--slurm-signal-before-limit",
          [](C& c) { return &c.slurm.signal_before_limit; },
          "Slurm sends `SIGUSR2` this long before a job's time limit (`--signal=B:USR2@120`)"),
      Dur(
          "slurm.poll_interval", "--slurm-poll-interval",
          [](C& c) { return &c.slurm.poll_interval; },
          "the shortest spacing of the batched `squeue` (spaced at max(this, 5 × the last "
          "query's time); at least 1s)"),
  };
  return s;
}

template <typename T>
T* Member(const Setting& setting, ServerConfig& config) {
  return std::get<T* (*)(ServerConfig&)>(setting.member)(config);
}
template <typename T>
const T& Member(const Setting& setting, const ServerConfig& config) {
  return *std::get<T* (*)(ServerConfig&)>(setting.member)(const_cast<ServerConfig&>(config));
}

absl::StatusOr<bool> ParseBool(const std::string& text) {
  const std::string lower = absl::AsciiStrToLower(text);
  if (lower == "true" || lower == "yes" || lower == "on") return true;
  if (lower == "false" || lower == "no" || lower == "off") return false;
  return absl::InvalidArgumentError(absl::StrCat("\"", text, "\" is not true or false"));
}

absl::StatusOr<int64_t> ParseInt(const Setting& setting, const std::string& text) {
  int64_t v;
  if (!absl::SimpleAtoi(text, &v)) {
    return absl::InvalidArgumentError(absl::StrCat("\"", text, "\" is not an integer"));
  }
  if (v < setting.min || v > setting.max) {
    return absl::InvalidArgumentError(
        absl::StrCat(v, " is out of range [", setting.min, ", ", setting.max, "]"));
  }
  return v;
}

}  // namespace

const std::vector<Setting>& Settings() {
  static const std::vector<Setting>* settings = new std::vector<Setting>(MakeSettings());
  return *settings;
}

const Setting* FindSetting(const std::string& key) {
  for (const Setting& s : Settings()) {
    if (s.key == key) return &s;
  }
  return nullptr;
}

absl::Status SetSettingText(const Setting& setting, const std::string& text, ServerConfig* config) {
  switch (setting.type) {
    case SettingType::kString:
      *Member<std::string>(setting, *config) = text;
      return absl::OkStatus();
    case SettingType::kOptionalString:
      *Member<std::optional<std::string>>(setting, *config) = text;
      return absl::OkStatus();
    case SettingType::kStringList:
      *Member<std::vector<std::string>>(setting, *config) = {text};
      return absl::OkStatus();
    case SettingType::kInt: {
      absl::StatusOr<int64_t> v = ParseInt(setting, text);
      if (!v.ok()) return v.status();
      *Member<int>(setting, *config) = static_cast<int>(*v);
      return absl::OkStatus();
    }
    case SettingType::kInt64: {
      absl::StatusOr<int64_t> v = ParseInt(setting, text);
      if (!v.ok()) return v.status();
      *Member<int64_t>(setting, *config) = *v;
      return absl::OkStatus();
    }
    case SettingType::kBool: {
      absl::StatusOr<bool> v = ParseBool(text);
      if (!v.ok()) return v.status();
      *Member<bool>(setting, *config) = *v;
      return absl::OkStatus();
    }
    case SettingType::kDuration: {
      absl::StatusOr<absl::Duration> v = ParseDurationText(text);
      if (!v.ok()) return v.status();
      *Member<absl::Duration>(setting, *config) = *v;
      return absl::OkStatus();
    }
    case SettingType::kOctalMode: {
      absl::StatusOr<int> v = ParseStateDirMode(text);
      if (!v.ok()) return v.status();
      *Member<int>(setting, *config) = *v;
      return absl::OkStatus();
    }
  }
  return absl::InternalError("unknown setting type");
}

void SetSettingList(const Setting& setting, std::vector<std::string> values, ServerConfig* config) {
  *Member<std::vector<std::string>>(setting, *config) = std::move(values);
}

std::string SettingValueText(const Setting& setting, const ServerConfig& config) {
  switch (setting.type) {
    case SettingType::kString:
      return Member<std::string>(setting, config);
    case SettingType::kOptionalString:
      return Member<std::optional<std::string>>(setting, config).value_or("");
    case SettingType::kStringList:
      return absl::StrJoin(Member<std::vector<std::string>>(setting, config), ", ");
    case SettingType::kInt:
      return absl::StrCat(Member<int>(setting, config));
    case SettingType::kInt64:
      return absl::StrCat(Member<int64_t>(setting, config));
    case SettingType::kBool:
      return Member<bool>(setting, config) ? "true" : "false";
    case SettingType::kDuration:
      return absl::FormatDuration(Member<absl::Duration>(setting, config));
    case SettingType::kOctalMode:
      return absl::StrFormat("%04o", Member<int>(setting, config));
  }
  return "";
}

bool SettingEquals(const Setting& setting, const ServerConfig& a, const ServerConfig& b) {
  return std::visit(
      [&](auto member) {
        return *member(const_cast<ServerConfig&>(a)) == *member(const_cast<ServerConfig&>(b));
      },
      setting.member);
}

std::string SettingTypeName(const Setting& setting) {
  auto range = [&](const char* name) {
    if (setting.max == kIntMax || setting.max == kInt64Max) {
      return absl::StrCat(name, " ≥ ", setting.min);
    }
    return absl::StrCat(name, " ", setting.min, "–", setting.max);
  };
  switch (setting.type) {
    case SettingType::kString:
      return "string";
    case SettingType::kOptionalString:
      return "string";
    case SettingType::kStringList:
      return "string list";
    case SettingType::kInt:
      return range("int");
    case SettingType::kInt64:
      return range("int64");
    case SettingType::kBool:
      return "bool";
    case SettingType::kDuration:
      return "duration";
    case SettingType::kOctalMode:
      return "octal mode";
  }
  return "";
}

std::string SettingDefaultText(const Setting& setting) {
  const std::string value = SettingValueText(setting, ServerConfig{});
  if (value.empty()) return setting.default_note.empty() ? "none" : setting.default_note;
  std::string text = absl::StrCat("`", value, "`");
  if (!setting.default_note.empty()) absl::StrAppend(&text, " (", setting.default_note, ")");
  return text;
}

std::string SettingsMarkdown() {
  std::string out =
      "| key | flag | type | default | meaning |\n"
      "| --- | --- | --- | --- | --- |\n";
  for (const Setting& s : Settings()) {
    std::string flag = "—";
    if (!s.flag.empty()) {
      flag = absl::StrCat("`", s.flag, "`");
      if (s.type == SettingType::kStringList)
        absl::StrAppend(&flag, " (repeatable; replaces the list)");
    }
    absl::StrAppend(&out, "| `", s.key, "` | ", flag, " | ", SettingTypeName(s), " | ",
                    SettingDefaultText(s), " | ", s.doc, " |\n");
  }
  return out;
}

}  // namespace traind::server
