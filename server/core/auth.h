// Who may call what on the public API.
//
// Callers on a unix socket are trusted by the socket's file mode and owner:
// they act as the admin "local". Callers on TCP must send
// `authorization: Bearer <token>`; the token is looked up in a tokens file
// that holds only SHA-256 hashes:
//
//   tokens:
//     - name: alice                 # becomes Job.owner of alice's jobs
//       role: submitter             # viewer | submitter | admin
//       sha256: 9f86d081884c7d65... # hex SHA-256 of the token
//
// Roles: viewer (GetJob, ListJobs, WatchJob, GetJobResult, ListDevices,
// GetServerInfo, CreateDashboardLogin, HTTP reads and /metrics; the datasets it owns: none
// unless an admin made some in its name), submitter (+ SubmitJob, CancelJob of its own jobs,
// uploads and deletes of its own datasets), admin (everything, CancelJob of any job, every
// owner's datasets).
//
// No gRPC headers here (services.cc adapts a call's peer and metadata).
// Thread-safety: TokenStore and Authenticator are immutable after creation
// and safe to share between threads.
#ifndef TRAIND_SERVER_CORE_AUTH_H_
#define TRAIND_SERVER_CORE_AUTH_H_

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "server/secrets.h"

namespace traind::server {

enum class Role { kViewer = 1, kSubmitter = 2, kAdmin = 3 };

// "viewer", "submitter", "admin".
const char* RoleName(Role role);

std::optional<Role> ParseRole(absl::string_view name);

// The public RPCs, for authorization.
enum class Rpc {
  kSubmitJob,
  kGetJob,
  kListJobs,
  kCancelJob,
  kWatchJob,
  kGetJobResult,
  kListDevices,
  kGetServerInfo,
  kCreateDashboardLogin,
  kListArtifacts,
  kGetArtifact,
  kPredict,
  kDeleteJob,
  kPrepareDatasetUpload,
  kUploadDataset,
  kListDatasets,
  kGetDataset,
  kDeleteDataset,
  kDownloadDataset,
  // The HTTP side door's /metrics (Prometheus exposition).
  kReadMetrics,
};
const char* RpcName(Rpc rpc);
// The least role that may call `rpc`. CancelJob and DeleteJob additionally
// require a submitter to own the job (see MayCancel, MayDelete).
Role RequiredRole(Rpc rpc);

struct Caller {
  std::string name;  // Job.owner of the jobs it submits
  Role role = Role::kViewer;
  bool local = false;  // came in on a unix socket
};

// Lower-case hex SHA-256 of `data`.
std::string Sha256Hex(absl::string_view data);

class TokenStore final {
 public:
  struct Entry {
    std::string name;
    Role role;
    std::string sha256;  // 32 raw bytes
  };

  // An empty store: no token is valid.
  TokenStore() = default;
  // Loads a tokens file (format above). Errors name the file, line and key.
  // Names must be unique, and "local" is reserved for the unix socket.
  static absl::StatusOr<std::shared_ptr<const TokenStore>> Load(const std::string& path);
  static absl::StatusOr<std::shared_ptr<const TokenStore>> Parse(const std::string& text,
                                                                 const std::string& source);

  // The entry whose hash matches SHA-256(token), compared in constant time
  // against every entry; nullopt if none.
  std::optional<Caller> Lookup(absl::string_view token) const;
  size_t size() const { return entries_.size(); }

 private:
  std::vector<Entry> entries_;
};

class Authenticator final {
 public:
  explicit Authenticator(std::shared_ptr<const TokenStore> tokens) : tokens_(std::move(tokens)) {}

  // `peer` is the gRPC peer string ("unix:...", "ipv4:1.2.3.4:5", ...);
  // `authorization` the value of the authorization header, if sent.
  // UNAUTHENTICATED when a TCP caller sent no valid bearer token.
  absl::StatusOr<Caller> Authenticate(absl::string_view peer,
                                      std::optional<absl::string_view> authorization) const;

  // Authenticate, then PERMISSION_DENIED naming the caller, its role and the
  // RPC if the role is below RequiredRole(rpc).
  absl::StatusOr<Caller> Authorize(absl::string_view peer,
                                   std::optional<absl::string_view> authorization, Rpc rpc) const;

 private:
  std::shared_ptr<const TokenStore> tokens_;
};

// Whether `caller` may cancel a job owned by `owner`; PERMISSION_DENIED
// otherwise.
absl::Status MayCancel(const Caller& caller, const std::string& owner, const std::string& job_id);
// Whether `caller` may delete a job owned by `owner` (its owner, being a
// submitter, or an admin); PERMISSION_DENIED otherwise.
absl::Status MayDelete(const Caller& caller, const std::string& owner, const std::string& job_id);
// Whether `caller` may run Predict with a job owned by `owner` (its
// predictions become an artifact of that job): as MayDelete.
absl::Status MayPredict(const Caller& caller, const std::string& owner, const std::string& job_id);

}  // namespace traind::server

#endif  // TRAIND_SERVER_CORE_AUTH_H_
