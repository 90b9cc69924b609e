// Server-side checks of a submitted spec that the engine's validation does
// not make: data confinement and spec-size limits.
//
// No gRPC here. Thread-safety: DataRoots is immutable after creation.
#ifndef TRAIND_SERVER_API_POLICY_H_
#define TRAIND_SERVER_API_POLICY_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/config.h"
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
// when the spec is larger than `limits` allow.
absl::Status CheckSpecLimits(const traind::v1::JobSpec& spec, const LimitsConfig& limits);

}  // namespace traind::server

#endif  // TRAIND_SERVER_API_POLICY_H_
