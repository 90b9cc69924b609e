// Server-side checks of a submitted spec that the spec's own validation
// does not make: data confinement and spec-size limits; and the policy the
// front ends enforce (AccessPolicy).
//
// No gRPC here. Thread-safety: DataRoots is immutable after creation.
#ifndef TRAIND_SERVER_CORE_POLICY_H_
#define TRAIND_SERVER_CORE_POLICY_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/config.h"
#include "server/core/auth.h"
#include "spec/validation.h"
#include "traind/v1/job.pb.h"

namespace traind::server {

class DataRoots final {
 public:
  // Resolves every root (realpath); an error names a root that does not
  // exist or is not a directory.
  static absl::StatusOr<DataRoots> Create(const std::vector<std::string>& roots);

  // Resolves `path` (symlinks followed; SubmitJob passes absolute paths
  // only, having joined relative ones to the client's base_dir) and returns
  // the resolved path if it lies inside a root. PERMISSION_DENIED naming the path (and `field`) if
  // it resolves outside every root; INVALID_ARGUMENT if it does not exist.
  absl::StatusOr<std::string> Confine(const std::string& field, const std::string& path) const;

  // Confines every file path of `spec` (data.path,
  // cross_validation.validation_path) and replaces each with its resolved
  // form, so the worker opens exactly what was checked.
  absl::Status ConfineSpec(traind::v1::JobSpec* spec) const;

  const std::vector<std::string>& roots() const { return roots_; }

 private:
  std::vector<std::string> roots_;  // resolved
};

// INVALID_ARGUMENT naming the field ("spec.model.layers: ...") and the limit
// (its config key) when the spec is larger than `limits` allow: layers,
// units, epochs, batches and tasks (folds × repeats, +1 with refit). Needs
// no data; runs before the spec's validation.
absl::Status CheckSpecLimits(const traind::v1::JobSpec& spec, const LimitsConfig& limits);

// The limits that depend on the data, once validation has read it: rows
// and columns of data.path and cross_validation.validation_path, and the
// epochs training.batches amounts to on the task that trains on the fewest
// rows (limits.max_epochs bounds those as it bounds training.epochs, and
// with them the epoch events a task writes). INVALID_ARGUMENT naming the
// field and the limit. `shape` all zero (the rows could not be read; the
// task fails with DATA_ERROR): nothing to check.
absl::Status CheckDataLimits(const traind::v1::JobSpec& spec, const spec::ValidatedShape& shape,
                             const LimitsConfig& limits);

// What the public API enforces besides the spec's own validation, over
// either front end.
struct AccessPolicy {
  // Who may call what (unix-socket callers are the admin "local").
  std::shared_ptr<const Authenticator> authenticator =
      std::make_shared<Authenticator>(std::make_shared<TokenStore>());
  // Data paths of a spec must resolve inside these.
  DataRoots data_roots;
  LimitsConfig limits;
  // The host memory a task may have (devices/cpu_info.h
  // HostMemoryLimitBytes): a task estimated above it is refused at submit.
  // 0: not checked.
  int64_t host_memory_bytes = 0;
};

}  // namespace traind::server

#endif  // TRAIND_SERVER_CORE_POLICY_H_
