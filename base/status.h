// Typed failures, for every layer of traind (data, spec, engine, worker).
//
// Every failure is an absl::Status. A failure that the
// daemon must classify (its failure reasons, docs/architecture.md) carries its kind as a
// status payload, so the worker can map it without parsing messages.
#ifndef TRAIND_BASE_STATUS_H_
#define TRAIND_BASE_STATUS_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace traind {

enum class FailureKind {
  kNone = 0,     // ok, or an error of no particular kind
  kInvalidSpec,  // the spec cannot be run (field path in the message)
  kDataError,    // the data cannot be used (file, line, column in the message)
  kDiverged,     // the loss became NaN or infinite
  kOutOfMemory,
  kDeviceError,
  kCancelled,  // stopped on request
};

absl::Status InvalidSpecError(absl::string_view message);
absl::Status DataError(absl::string_view message);
absl::Status DivergedError(absl::string_view message);
absl::Status OutOfMemoryError(absl::string_view message);
absl::Status DeviceError(absl::string_view message);
absl::Status CancelledError(absl::string_view message);

// The kind attached by one of the constructors above; kNone otherwise.
FailureKind FailureKindOf(const absl::Status& status);

}  // namespace traind

// Returns from the enclosing function when `expr` (an absl::Status) is not ok.
#define TRAIND_RETURN_IF_ERROR(expr)                 \
  do {                                               \
    ::absl::Status _traind_status = (expr);          \
    if (!_traind_status.ok()) return _traind_status; \
  } while (0)

#define TRAIND_STATUS_CONCAT_INNER_(a, b) a##b
#define TRAIND_STATUS_CONCAT_(a, b) TRAIND_STATUS_CONCAT_INNER_(a, b)

// `lhs = value of rexpr` (an absl::StatusOr<T>), or returns its error.
#define TRAIND_ASSIGN_OR_RETURN(lhs, rexpr) \
  TRAIND_ASSIGN_OR_RETURN_IMPL_(TRAIND_STATUS_CONCAT_(_traind_statusor_, __LINE__), lhs, rexpr)
#define TRAIND_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, rexpr) \
  auto statusor = (rexpr);                                  \
  if (!statusor.ok()) return std::move(statusor).status();  \
  lhs = std::move(statusor).value()

#endif  // TRAIND_BASE_STATUS_H_
