// The job spec a SubmitJob request describes, before the server validates it.
//
// A request carries either a structured JobSpec or the text of a spec file
// (YAML or JSON, parsed by ParseJobSpec exactly as trainctl parses a file),
// then `path=value` overrides (trainctl's --set), then a base directory that
// relative file paths are resolved against. This turns those pieces into one
// JobSpec, with errors that name the request field and the spec field path:
//
//   spec_text: model.layers[0].dense: unknown field "unit" (line 7, column 17)
//   overrides[1]: training.epochs=ten: training.epochs: invalid value "ten" ...
//   spec.data.path: data/iris.csv is relative: give base_dir (...) or an
//     absolute path
//
// Every error is InvalidArgument. Nothing here touches the file system: a
// relative path is joined to base_dir as written ("..", symlinks and all are
// left to the server's data-root confinement, which resolves them as the
// kernel does).
//
// Thread-safety: all functions are reentrant; they share no state.
#ifndef TRAIND_SPEC_SUBMITTED_SPEC_H_
#define TRAIND_SPEC_SUBMITTED_SPEC_H_

#include <cstddef>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "traind/v1/job.pb.h"

namespace traind::spec {

// The longest spec_text accepted, and the most overrides.
inline constexpr size_t kMaxSpecTextBytes = 1 << 20;
inline constexpr size_t kMaxSpecOverrides = 256;

struct SpecSubmission {
  // Exactly one of these is non-null (the request's `spec_source` oneof);
  // both null is an error ("spec or spec_text: required"). Not owned; they
  // must outlive the call.
  const traind::v1::JobSpec* spec = nullptr;
  const std::string* spec_text = nullptr;
  // Applied in order, after parsing: "PATH=VALUE" as SetJobSpecField takes.
  std::vector<std::string> overrides;
  // Empty, or an absolute directory.
  std::string base_dir;
};

// Parses or copies the spec, applies the overrides, and resolves relative
// file paths (data.path, cross_validation.validation_path) against
// base_dir. A relative path without a base_dir is an error naming the field
// ("spec.data.path: ..."); traind never resolves it against its own working
// directory.
absl::StatusOr<traind::v1::JobSpec> BuildSubmittedSpec(const SpecSubmission& submission);

// The pieces, for callers that need one of them.
//
// Applies "PATH=VALUE" overrides in order; the first bad one is an error
// "overrides[i]: ..." and leaves `spec` partly updated.
// REQUIRES: spec != nullptr.
absl::Status ApplySpecOverrides(traind::v1::JobSpec* spec,
                                const std::vector<std::string>& overrides);

// Replaces each relative file path of `spec` by base_dir/path. Absolute
// paths are left as they are. An empty base_dir is allowed when no path is
// relative.
// REQUIRES: spec != nullptr.
absl::Status ResolveSpecPaths(traind::v1::JobSpec* spec, absl::string_view base_dir);

}  // namespace traind::spec

#endif  // TRAIND_SPEC_SUBMITTED_SPEC_H_
