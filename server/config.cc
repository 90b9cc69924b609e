#include "server/config.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "server/scheduler/fair_share.h"
#include "server/settings.h"
#include "yaml-cpp/yaml.h"

namespace traind::server {
namespace {

// Where a node is, for errors: "FILE:LINE".
std::string Where(const std::string& source, const YAML::Node& node) {
  const YAML::Mark mark = node.Mark();
  if (mark.line < 0) return source;
  return absl::StrCat(source, ":", mark.line + 1);
}

using Handler = std::function<absl::Status(const YAML::Node&, const std::string&)>;

class Reader {
 public:
  explicit Reader(std::string source) : source_(std::move(source)) {}

  absl::Status Error(const YAML::Node& node, const std::string& key,
                     const std::string& what) const {
    return absl::InvalidArgumentError(absl::StrCat(Where(source_, node), ": ", key, ": ", what));
  }

  absl::Status Scalar(const YAML::Node& node, const std::string& key, std::string* out) const {
    if (!node.IsScalar()) return Error(node, key, "expected a single value");
    *out = node.Scalar();
    return absl::OkStatus();
  }

  absl::Status StringList(const YAML::Node& node, const std::string& key,
                          std::vector<std::string>* out) const {
    out->clear();
    if (node.IsNull()) return absl::OkStatus();
    if (node.IsScalar()) {  // a single value is a list of one
      out->push_back(node.Scalar());
      return absl::OkStatus();
    }
    if (!node.IsSequence()) return Error(node, key, "expected a list");
    for (size_t i = 0; i < node.size(); ++i) {
      std::string v;
      if (absl::Status s = Scalar(node[i], absl::StrCat(key, "[", i, "]"), &v); !s.ok()) return s;
      out->push_back(v);
    }
    return absl::OkStatus();
  }

  // Calls `handlers[key]` for each key of the map `node`; an unknown key is
  // an error that lists the known ones.
  absl::Status Map(const YAML::Node& node, const std::string& prefix,
                   const std::map<std::string, Handler>& handlers) const {
    if (node.IsNull()) return absl::OkStatus();
    if (!node.IsMap()) {
      return Error(node, prefix.empty() ? "config" : prefix, "expected a mapping of keys");
    }
    std::map<std::string, int> seen;  // key -> its line (1-based)
    for (const auto& kv : node) {
      const std::string key = kv.first.Scalar();
      const std::string path = prefix.empty() ? key : absl::StrCat(prefix, ".", key);
      // YAML keeps the last of two equal keys: one of them would be
      // ignored without a word.
      if (auto [at, fresh] = seen.emplace(key, kv.first.Mark().line + 1); !fresh) {
        return Error(kv.first, path, absl::StrCat("given twice (also on line ", at->second, ")"));
      }
      auto it = handlers.find(key);
      if (it == handlers.end()) {
        std::vector<std::string> known;
        for (const auto& h : handlers) known.push_back(h.first);
        return Error(kv.first, path,
                     absl::StrCat("unknown key (known: ", absl::StrJoin(known, ", "), ")"));
      }
      if (absl::Status s = it->second(kv.second, path); !s.ok()) return s;
    }
    return absl::OkStatus();
  }

 private:
  std::string source_;
};

bool ValidHostPort(const std::string& address) {
  size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0) return false;
  int port;
  return absl::SimpleAtoi(address.substr(colon + 1), &port) && port >= 0 && port <= 65535;
}

}  // namespace

absl::StatusOr<absl::Duration> ParseDurationText(const std::string& text) {
  double seconds;
  if (absl::SimpleAtod(text, &seconds)) {
    if (!(seconds >= 0) || seconds > 1e9) {
      return absl::InvalidArgumentError(absl::StrCat("\"", text, "\" is not a duration >= 0"));
    }
    return absl::Seconds(seconds);
  }
  absl::Duration d;
  // Days, which absl's syntax lacks: "30d", "1d12h".
  absl::Duration days = absl::ZeroDuration();
  std::string rest = text;
  if (size_t pos = text.find('d'); pos != std::string::npos && pos > 0) {
    int64_t n = 0;
    if (absl::SimpleAtoi(text.substr(0, pos), &n) && n >= 0 && n <= 100000) {
      days = absl::Hours(24 * n);
      rest = text.substr(pos + 1);
    }
  }
  const bool only_days = rest.empty() && days > absl::ZeroDuration();
  if (only_days) return days;
  if (!absl::ParseDuration(rest, &d) || d < absl::ZeroDuration() || d == absl::InfiniteDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("\"", text, "\" is not a duration (e.g. 10s, 1m30s, 250ms, 30d, or seconds)"));
  }
  return days + d;
}

absl::Status ParseConfig(const std::string& text, const std::string& source, ServerConfig* config) {
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ":", e.mark.line + 1, ": not valid YAML: ", e.msg));
  }
  Reader r(source);
  ServerConfig c = *config;
  // One map of keys per section ("": the top level), from the settings table.
  std::map<std::string, std::map<std::string, Handler>> sections;
  sections[""];
  for (const Setting& setting : Settings()) {
    const size_t dot = setting.key.find('.');
    const std::string section = dot == std::string::npos ? "" : setting.key.substr(0, dot);
    const std::string name = dot == std::string::npos ? setting.key : setting.key.substr(dot + 1);
    sections[section][name] = [&r, &c, &setting](const YAML::Node& n,
                                                 const std::string& k) -> absl::Status {
      if (setting.type == SettingType::kStringList) {
        std::vector<std::string> values;
        if (absl::Status s = r.StringList(n, k, &values); !s.ok()) return s;
        SetSettingList(setting, std::move(values), &c);
        return absl::OkStatus();
      }
      std::string value;
      if (absl::Status s = r.Scalar(n, k, &value); !s.ok()) return s;
      if (absl::Status s = SetSettingText(setting, value, &c); !s.ok()) {
        return r.Error(n, k, std::string(s.message()));
      }
      return absl::OkStatus();
    };
  }
  std::map<std::string, Handler>& top = sections[""];
  for (const auto& [section, keys] : sections) {
    if (section.empty()) continue;
    top[section] = [&r, &keys = keys](const YAML::Node& n, const std::string& k) {
      return r.Map(n, k, keys);
    };
  }
  if (absl::Status s = r.Map(root, "", top); !s.ok()) return s;
  *config = std::move(c);
  return absl::OkStatus();
}

absl::StatusOr<int> ParseStateDirMode(const std::string& text) {
  int mode = 0;
  bool octal = !text.empty() && text.size() <= 4;
  for (char ch : text) {
    octal = octal && ch >= '0' && ch <= '7';
    mode = mode * 8 + (ch - '0');
  }
  if (!octal)
    return absl::InvalidArgumentError(absl::StrCat("\"", text, "\" is not an octal mode"));
  if ((mode & 0700) != 0700 || (mode & 07) != 0 || mode > 0777) {
    return absl::InvalidArgumentError(
        absl::StrCat("\"", text,
                     "\": traind needs rwx for its own user and gives others nothing (0700, "
                     "0710 or 0750, say)"));
  }
  return mode;
}

absl::Status LoadConfigFile(const std::string& path, ServerConfig* config) {
  std::ifstream in(path);
  if (!in) {
    return absl::InvalidArgumentError(
        absl::StrCat("config file ", path, ": ", std::strerror(errno)));
  }
  std::stringstream ss;
  ss << in.rdbuf();
  return ParseConfig(ss.str(), path, config);
}

bool IsUnixAddress(const std::string& address) {
  return absl::StartsWith(address, "unix:") || absl::StartsWith(address, "unix-abstract:");
}

bool IsLoopbackAddress(const std::string& address) {
  if (IsUnixAddress(address)) return false;
  std::string host = address;
  size_t colon = host.rfind(':');
  if (colon != std::string::npos) host = host.substr(0, colon);
  if (absl::StartsWith(host, "ipv4:")) host = host.substr(5);
  if (absl::StartsWith(host, "ipv6:")) host = host.substr(5);
  if (host == "localhost" || host == "[::1]" || host == "::1") return true;
  // 127.0.0.0/8
  if (!absl::StartsWith(host, "127.")) return false;
  int dots = 0;
  for (char ch : host) {
    if (ch == '.') {
      ++dots;
    } else if (!absl::ascii_isdigit(static_cast<unsigned char>(ch))) {
      return false;
    }
  }
  return dots == 3;
}

absl::Status ValidateConfig(const ServerConfig& c) {
  if (c.state_dir.empty()) return absl::InvalidArgumentError("state_dir: must not be empty");
  if (c.listen.empty()) return absl::InvalidArgumentError("listen: at least one address");
  if (c.retention.interval < absl::Seconds(1)) {
    return absl::InvalidArgumentError("retention.interval: at least 1s");
  }
  // A worker reports every quarter of it (at most every 2 s): below a
  // second every attempt would be killed as TIMEOUT before its first report.
  if (c.heartbeat_timeout < absl::Seconds(1)) {
    return absl::InvalidArgumentError(absl::StrCat("heartbeat_timeout: at least 1s, got ",
                                                   absl::FormatDuration(c.heartbeat_timeout)));
  }
  if (c.limits.upload_idle_timeout < absl::Seconds(1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("limits.upload_idle_timeout: at least 1s, got ",
                     absl::FormatDuration(c.limits.upload_idle_timeout)));
  }
  if (c.http_request_timeout < absl::Seconds(1) || c.http_request_timeout > absl::Minutes(10)) {
    return absl::InvalidArgumentError(absl::StrCat("http_request_timeout: from 1s to 10m, got ",
                                                   absl::FormatDuration(c.http_request_timeout)));
  }
  for (const std::string& a : c.listen) {
    if (IsUnixAddress(a)) {
      if (a == "unix:" || a == "unix-abstract:") {
        return absl::InvalidArgumentError(absl::StrCat("listen: \"", a, "\" has no path"));
      }
      continue;
    }
    if (!ValidHostPort(a)) {
      return absl::InvalidArgumentError(
          absl::StrCat("listen: \"", a, "\" is neither unix:PATH nor HOST:PORT"));
    }
    if (!IsLoopbackAddress(a) && !c.tls.enabled() && !c.insecure) {
      return absl::InvalidArgumentError(
          absl::StrCat("listen: ", a,
                       " is not a loopback address: serving it needs TLS (tls.cert and tls.key), "
                       "or an explicit insecure: true / --insecure"));
    }
  }
  if (c.http_listen.has_value() && !c.http_listen->empty() && *c.http_listen != "off") {
    const std::string& a = *c.http_listen;
    if (IsUnixAddress(a) || !ValidHostPort(a)) {
      return absl::InvalidArgumentError(
          absl::StrCat("http_listen: \"", a, "\" is not HOST:PORT (off turns HTTP off)"));
    }
    if (!IsLoopbackAddress(a) && !c.tls.enabled() && !c.insecure) {
      return absl::InvalidArgumentError(
          absl::StrCat("http_listen: ", a,
                       " is not a loopback address: serving it needs TLS (tls.cert and tls.key), "
                       "or an explicit insecure: true / --insecure"));
    }
  }
  if (c.scheduling.policy != "fair_share" && c.scheduling.policy != "fifo") {
    return absl::InvalidArgumentError(
        absl::StrCat("scheduling.policy: \"", c.scheduling.policy, "\" is not fair_share or fifo"));
  }
  if (absl::StatusOr<std::map<std::string, double>> w = ParseWeights(c.scheduling.weights);
      !w.ok()) {
    return w.status();
  }
  if (c.scheduling.half_life < absl::Minutes(1)) {
    return absl::InvalidArgumentError("scheduling.half_life: at least 1m");
  }
  if (c.launcher != "local" && c.launcher != "slurm") {
    return absl::InvalidArgumentError(
        absl::StrCat("launcher: \"", c.launcher, "\" is not local or slurm"));
  }
  if (c.launcher == "slurm") {
    if (c.slurm.shared_dir.empty() || c.slurm.shared_dir[0] != '/') {
      return absl::InvalidArgumentError(
          "slurm.shared_dir: launcher: slurm needs an absolute directory every node sees");
    }
    if (c.slurm.worker_address.empty() || IsUnixAddress(c.slurm.worker_address) ||
        c.slurm.worker_address.find(':') == std::string::npos) {
      return absl::InvalidArgumentError(
          "slurm.worker_address: launcher: slurm needs the HOST:PORT workers call back on");
    }
    if (!IsLoopbackAddress(c.slurm.worker_address) && !c.tls.enabled() && !c.insecure) {
      return absl::InvalidArgumentError(
          absl::StrCat("slurm.worker_address: ", c.slurm.worker_address,
                       " is not loopback: set tls (cert and key) or insecure: true"));
    }
    if (c.slurm.poll_interval < absl::Seconds(1)) {
      return absl::InvalidArgumentError("slurm.poll_interval: at least 1s");
    }
  }
  if (c.http_max_connections < 4) {
    return absl::InvalidArgumentError("http_max_connections: must be >= 4");
  }
  if (c.tls.cert.empty() != c.tls.key.empty()) {
    return absl::InvalidArgumentError("tls: cert and key go together (one is missing)");
  }
  if (!c.tls.client_ca.empty() && !c.tls.enabled()) {
    return absl::InvalidArgumentError("tls.client_ca: needs tls.cert and tls.key");
  }
  if (c.worker_threads < 1) return absl::InvalidArgumentError("worker_threads: must be >= 1");
  if (c.cpu_slots < 0) return absl::InvalidArgumentError("cpu_slots: must be >= 0");
  if (c.max_restarts < 0) return absl::InvalidArgumentError("max_restarts: must be >= 0");
  if (c.limits.max_request_bytes < 1024) {
    return absl::InvalidArgumentError("limits.max_request_bytes: must be >= 1024");
  }
  // Flags bypass the file's ranges: the same bounds here.
  for (const auto& [key, value] :
       std::vector<std::pair<const char*, int64_t>>{{"limits.max_layers", c.limits.max_layers},
                                                    {"limits.max_units", c.limits.max_units},
                                                    {"limits.max_epochs", c.limits.max_epochs},
                                                    {"limits.max_batches", c.limits.max_batches},
                                                    {"limits.max_tasks", c.limits.max_tasks},
                                                    {"limits.max_rows", c.limits.max_rows},
                                                    {"limits.max_columns", c.limits.max_columns}}) {
    if (value < 1) return absl::InvalidArgumentError(absl::StrCat(key, ": must be >= 1"));
  }
  if (c.limits.max_queued_jobs_per_user < 0) {
    return absl::InvalidArgumentError("limits.max_queued_jobs_per_user: must be >= 0");
  }
  return absl::OkStatus();
}

}  // namespace traind::server
