#include "server/core/auth.h"

#include <fcntl.h>
#include <openssl/crypto.h>
#include <openssl/sha.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "yaml-cpp/yaml.h"

namespace traind::server {
namespace {

std::string Sha256Raw(absl::string_view data) {
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(data.data()), data.size(), digest);
  return std::string(reinterpret_cast<const char*>(digest), sizeof(digest));
}

std::string Where(const std::string& source, const YAML::Node& node) {
  const YAML::Mark mark = node.Mark();
  if (mark.line < 0) return source;
  return absl::StrCat(source, ":", mark.line + 1);
}

}  // namespace

const char* RoleName(Role role) {
  switch (role) {
    case Role::kViewer:
      return "viewer";
    case Role::kSubmitter:
      return "submitter";
    case Role::kAdmin:
      return "admin";
  }
  return "?";
}

std::optional<Role> ParseRole(absl::string_view name) {
  if (name == "viewer") return Role::kViewer;
  if (name == "submitter") return Role::kSubmitter;
  if (name == "admin") return Role::kAdmin;
  return std::nullopt;
}

const char* RpcName(Rpc rpc) {
  switch (rpc) {
    case Rpc::kSubmitJob:
      return "SubmitJob";
    case Rpc::kGetJob:
      return "GetJob";
    case Rpc::kListJobs:
      return "ListJobs";
    case Rpc::kCancelJob:
      return "CancelJob";
    case Rpc::kWatchJob:
      return "WatchJob";
    case Rpc::kGetJobResult:
      return "GetJobResult";
    case Rpc::kListDevices:
      return "ListDevices";
    case Rpc::kGetServerInfo:
      return "GetServerInfo";
    case Rpc::kCreateDashboardLogin:
      return "CreateDashboardLogin";
    case Rpc::kListArtifacts:
      return "ListArtifacts";
    case Rpc::kPrepareDatasetUpload:
      return "PrepareDatasetUpload";
    case Rpc::kUploadDataset:
      return "UploadDataset";
    case Rpc::kListDatasets:
      return "ListDatasets";
    case Rpc::kGetDataset:
      return "GetDataset";
    case Rpc::kDeleteDataset:
      return "DeleteDataset";
    case Rpc::kDownloadDataset:
      return "DownloadDataset";
    case Rpc::kGetArtifact:
      return "GetArtifact";
    case Rpc::kPredict:
      return "Predict";
    case Rpc::kDeleteJob:
      return "DeleteJob";
    case Rpc::kReadMetrics:
      return "GET /metrics";
  }
  return "?";
}

Role RequiredRole(Rpc rpc) {
  switch (rpc) {
    case Rpc::kSubmitJob:
    case Rpc::kCancelJob:
    case Rpc::kPredict:
    case Rpc::kDeleteJob:
    case Rpc::kPrepareDatasetUpload:
    case Rpc::kUploadDataset:
    case Rpc::kDeleteDataset:
      return Role::kSubmitter;
    case Rpc::kListDatasets:
    case Rpc::kGetDataset:
    case Rpc::kDownloadDataset:
    case Rpc::kListArtifacts:
    case Rpc::kGetArtifact:
    case Rpc::kGetJob:
    case Rpc::kListJobs:
    case Rpc::kWatchJob:
    case Rpc::kGetJobResult:
    case Rpc::kListDevices:
    case Rpc::kGetServerInfo:
    case Rpc::kCreateDashboardLogin:
    case Rpc::kReadMetrics:
      return Role::kViewer;
  }
  return Role::kAdmin;
}

std::string Sha256Hex(absl::string_view data) { return absl::BytesToHexString(Sha256Raw(data)); }

absl::StatusOr<std::shared_ptr<const TokenStore>> TokenStore::Load(const std::string& path) {
  // A regular file only: a directory would read as no tokens (every caller
  // refused), a FIFO would block start-up. O_NONBLOCK: opening a FIFO does
  // not wait for a writer.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    return absl::InvalidArgumentError(absl::StrCat("tokens file ", path, ": ", strerror(errno)));
  }
  struct stat st;
  const bool regular = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
  if (!regular) {
    ::close(fd);
    return absl::InvalidArgumentError(absl::StrCat(
        "tokens file ", path, ": is ",
        S_ISDIR(st.st_mode) ? "a directory" : (S_ISFIFO(st.st_mode) ? "a FIFO" : "not a file"),
        ", not a regular file"));
  }
  std::string text;
  char buffer[65536];
  for (;;) {
    const ssize_t n = ::read(fd, buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      return absl::InvalidArgumentError(absl::StrCat("tokens file ", path, ": ", strerror(err)));
    }
    if (n == 0) break;
    text.append(buffer, static_cast<size_t>(n));
    if (text.size() > (size_t{16} << 20)) {
      ::close(fd);
      return absl::InvalidArgumentError(absl::StrCat("tokens file ", path, ": larger than 16 MiB"));
    }
  }
  ::close(fd);
  return Parse(text, path);
}

absl::StatusOr<std::shared_ptr<const TokenStore>> TokenStore::Parse(const std::string& text,
                                                                    const std::string& source) {
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ":", e.mark.line + 1, ": not valid YAML: ", e.msg));
  }
  auto error = [&](const YAML::Node& n, const std::string& what) {
    return absl::InvalidArgumentError(absl::StrCat(Where(source, n), ": ", what));
  };
  auto store = std::make_shared<TokenStore>();
  if (root.IsNull()) return std::shared_ptr<const TokenStore>(store);
  if (!root.IsMap()) return error(root, "expected a mapping with the key tokens");
  for (const auto& kv : root) {
    if (kv.first.Scalar() != "tokens") {
      return error(kv.first, absl::StrCat(kv.first.Scalar(), ": unknown key (known: tokens)"));
    }
  }
  YAML::Node tokens = root["tokens"];
  if (tokens.IsNull()) return std::shared_ptr<const TokenStore>(store);
  if (!tokens.IsSequence()) return error(tokens, "tokens: expected a list");
  std::set<std::string> names;
  for (size_t i = 0; i < tokens.size(); ++i) {
    const YAML::Node t = tokens[i];
    const std::string at = absl::StrCat("tokens[", i, "]");
    if (!t.IsMap()) return error(t, absl::StrCat(at, ": expected name, role and sha256"));
    Entry e;
    std::string role, hex;
    for (const auto& kv : t) {
      const std::string key = kv.first.Scalar();
      if (!kv.second.IsScalar())
        return error(kv.second, absl::StrCat(at, ".", key, ": expected a value"));
      if (key == "name") {
        e.name = kv.second.Scalar();
      } else if (key == "role") {
        role = kv.second.Scalar();
      } else if (key == "sha256") {
        hex = absl::AsciiStrToLower(kv.second.Scalar());
      } else {
        return error(kv.first,
                     absl::StrCat(at, ".", key, ": unknown key (known: name, role, sha256)"));
      }
    }
    if (e.name.empty()) return error(t, absl::StrCat(at, ".name: required"));
    if (e.name == "local") {
      return error(t, absl::StrCat(at, ".name: \"local\" is reserved for the unix socket"));
    }
    if (!names.insert(e.name).second) {
      return error(t, absl::StrCat(at, ".name: \"", e.name, "\" appears twice"));
    }
    std::optional<Role> r = ParseRole(role);
    if (!r) {
      return error(
          t, absl::StrCat(at, ".role: \"", role, "\" is not one of viewer, submitter, admin"));
    }
    e.role = *r;
    bool is_hex = hex.size() == 64;
    for (char ch : hex) is_hex = is_hex && absl::ascii_isxdigit(static_cast<unsigned char>(ch));
    if (!is_hex) {
      return error(t, absl::StrCat(at,
                                   ".sha256: expected 64 hex digits (the SHA-256 of the "
                                   "token, e.g. printf %s \"$TOKEN\" | sha256sum)"));
    }
    e.sha256 = absl::HexStringToBytes(hex);
    // One token, one role: a second entry with the same hash would decide
    // the token's role by order.
    for (const Entry& other : store->entries_) {
      if (other.sha256 == e.sha256) {
        return error(t, absl::StrCat(at, ".sha256: the same token as \"", other.name,
                                     "\"'s (one entry per token)"));
      }
    }
    store->entries_.push_back(std::move(e));
  }
  return std::shared_ptr<const TokenStore>(store);
}

std::optional<Caller> TokenStore::Lookup(absl::string_view token) const {
  if (token.empty()) return std::nullopt;
  const std::string digest = Sha256Raw(token);
  const Entry* found = nullptr;
  // Compare against every entry, in constant time each, so the time taken
  // says nothing about which entry (or how much of a hash) matched.
  for (const Entry& e : entries_) {
    if (ConstantTimeEquals(e.sha256, digest)) found = &e;
  }
  if (found == nullptr) return std::nullopt;
  return Caller{found->name, found->role, false};
}

absl::StatusOr<Caller> Authenticator::Authenticate(
    absl::string_view peer, std::optional<absl::string_view> authorization) const {
  if (absl::StartsWith(peer, "unix:") || absl::StartsWith(peer, "unix-abstract:")) {
    return Caller{"local", Role::kAdmin, true};
  }
  if (!authorization.has_value()) {
    return absl::UnauthenticatedError(
        "this address needs a bearer token (authorization: Bearer TOKEN; trainctl --token-file)");
  }
  absl::string_view value = absl::StripAsciiWhitespace(*authorization);
  if (value.size() < 7 || !absl::EqualsIgnoreCase(value.substr(0, 7), "bearer ")) {
    return absl::UnauthenticatedError("authorization: expected \"Bearer TOKEN\"");
  }
  absl::string_view token = absl::StripAsciiWhitespace(value.substr(7));
  std::optional<Caller> caller = tokens_ ? tokens_->Lookup(token) : std::nullopt;
  if (!caller) return absl::UnauthenticatedError("invalid token");
  return *caller;
}

absl::StatusOr<Caller> Authenticator::Authorize(absl::string_view peer,
                                                std::optional<absl::string_view> authorization,
                                                Rpc rpc) const {
  absl::StatusOr<Caller> caller = Authenticate(peer, authorization);
  if (!caller.ok()) return caller;
  if (static_cast<int>(caller->role) < static_cast<int>(RequiredRole(rpc))) {
    return absl::PermissionDeniedError(absl::StrCat(caller->name, " (", RoleName(caller->role),
                                                    ") may not call ", RpcName(rpc), ": needs ",
                                                    RoleName(RequiredRole(rpc))));
  }
  return caller;
}

namespace {
absl::Status MayChange(const Caller& caller, const std::string& owner, const std::string& job_id,
                       absl::string_view verb, absl::string_view verbs) {
  if (caller.role == Role::kAdmin) return absl::OkStatus();
  if (caller.role == Role::kSubmitter && caller.name == owner) return absl::OkStatus();
  return absl::PermissionDeniedError(
      absl::StrCat(caller.name, " (", RoleName(caller.role), ") may not ", verb, " job ", job_id,
                   " of ", owner, ": a submitter ", verbs, " only its own jobs"));
}
}  // namespace

absl::Status MayCancel(const Caller& caller, const std::string& owner, const std::string& job_id) {
  return MayChange(caller, owner, job_id, "cancel", "cancels");
}

absl::Status MayDelete(const Caller& caller, const std::string& owner, const std::string& job_id) {
  return MayChange(caller, owner, job_id, "delete", "deletes");
}

absl::Status MayPredict(const Caller& caller, const std::string& owner, const std::string& job_id) {
  return MayChange(caller, owner, job_id, "predict with", "predicts with");
}

}  // namespace traind::server
