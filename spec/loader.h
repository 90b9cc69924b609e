// Job spec files: YAML or JSON text mapped onto traind.v1.JobSpec.
//
// The text is parsed by yaml-cpp (JSON is YAML), the YAML tree is converted to
// JSON, and protobuf's JSON mapping does the rest. So a spec file accepts
// exactly what protobuf's JSON parser accepts: field names in snake_case or
// lowerCamelCase, enum values in any case ("relu", "RELU"), 64-bit integers as
// numbers or strings, "NaN"/"Infinity" for doubles.
//
// YAML -> JSON (YAML 1.2 core schema):
//   plain scalars: true/True/TRUE, false/... -> bool; null/Null/NULL/~/empty
//     -> null; integers (decimal, 0x hex, 0o octal) and floats -> numbers;
//     .inf/-.inf/.nan -> "Infinity"/"-Infinity"/"NaN"; anything else
//     (including yes/no/on/off) -> string.
//   quoted scalars and !!str -> always strings.
//   mappings -> objects (keys must be scalars, no duplicates);
//   sequences -> arrays.
//
// Errors are absl::InvalidArgumentError with a message that starts with the
// source name and says what is wrong, with the YAML line (1-based) where it is
// known, e.g.
//   iris-cv.yaml: model.layers[0].dense: unknown field "unit" (line 7, column
//   17) iris-cv.yaml: YAML syntax error: end of map not found (line 3, column
//   7)
//
// Thread-safety: all functions are reentrant; they share no state.
#ifndef TRAIND_SPEC_LOADER_H_
#define TRAIND_SPEC_LOADER_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "traind/v1/job.pb.h"

namespace traind::spec {

// Limits of a spec's text: its size, and what it expands to once YAML
// aliases are resolved (nodes written, JSON bytes). Past them, parsing stops
// with an InvalidArgumentError that says which limit.
inline constexpr size_t kMaxSpecBytes = 1 << 20;
inline constexpr int64_t kMaxSpecNodes = 100000;

// Parses a YAML or JSON spec. `source_name` (usually the file name) prefixes
// every error message. The spec is not validated beyond the JSON mapping
// (types, field names, enum values): the server validates the rest.
absl::StatusOr<traind::v1::JobSpec> ParseJobSpec(absl::string_view text,
                                                 absl::string_view source_name);

// Reads and parses the file at `path`; `path` (as given) is the source name.
// A file that cannot be read gives InvalidArgument "<path>: cannot open:
// <strerror>".
absl::StatusOr<traind::v1::JobSpec> LoadJobSpecFile(const std::string& path);

// Sets one field of `spec` (e.g. for `--set path=value` overrides).
//   path:  dotted field names (snake_case or lowerCamelCase) with [i] indexes
//          into repeated fields, e.g. "training.epochs",
//          "model.layers[0].dense.units". An index equal to the current size
//          appends an element. Setting a member of a oneof clears the others.
//   value: a YAML scalar or flow value: "16", "relu", "'42'", "{units: 8}",
//          "[loss, accuracy]"; an empty value (or null) clears the field.
// On error returns InvalidArgument "<path>: <what is wrong>" and leaves
// `spec` unchanged.
// REQUIRES: spec != nullptr.
absl::Status SetJobSpecField(traind::v1::JobSpec* spec, absl::string_view path,
                             absl::string_view value);

}  // namespace traind::spec

#endif  // TRAIND_SPEC_LOADER_H_
