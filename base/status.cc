#include "base/status.h"

#include "absl/strings/cord.h"
#include "absl/strings/numbers.h"

namespace traind {
namespace {

constexpr absl::string_view kKindUrl = "type.traind.dev/traind.engine.FailureKind";

absl::Status WithKind(absl::Status status, FailureKind kind) {
  status.SetPayload(kKindUrl, absl::Cord(std::to_string(static_cast<int>(kind))));
  return status;
}

}  // namespace

absl::Status InvalidSpecError(absl::string_view message) {
  return WithKind(absl::InvalidArgumentError(message), FailureKind::kInvalidSpec);
}
absl::Status DataError(absl::string_view message) {
  return WithKind(absl::InvalidArgumentError(message), FailureKind::kDataError);
}
absl::Status DivergedError(absl::string_view message) {
  return WithKind(absl::OutOfRangeError(message), FailureKind::kDiverged);
}
absl::Status OutOfMemoryError(absl::string_view message) {
  return WithKind(absl::ResourceExhaustedError(message), FailureKind::kOutOfMemory);
}
absl::Status DeviceError(absl::string_view message) {
  return WithKind(absl::InternalError(message), FailureKind::kDeviceError);
}
absl::Status CancelledError(absl::string_view message) {
  return WithKind(absl::CancelledError(message), FailureKind::kCancelled);
}

FailureKind FailureKindOf(const absl::Status& status) {
  if (status.ok()) return FailureKind::kNone;
  absl::optional<absl::Cord> payload = status.GetPayload(kKindUrl);
  if (!payload.has_value()) return FailureKind::kNone;
  int kind = 0;
  if (!absl::SimpleAtoi(std::string(*payload), &kind)) return FailureKind::kNone;
  return static_cast<FailureKind>(kind);
}

}  // namespace traind
