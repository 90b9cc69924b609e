#include "worker/task_failure.h"

#include "absl/strings/str_cat.h"
#include "worker/engine/status.h"

namespace traind::worker {

using traind::v1::Failure;

Failure::Reason ReasonOf(const absl::Status& s) {
  switch (engine::FailureKindOf(s)) {
    case engine::FailureKind::kInvalidSpec:
      return Failure::INVALID_SPEC;
    case engine::FailureKind::kDataError:
      return Failure::DATA_ERROR;
    case engine::FailureKind::kDiverged:
      return Failure::DIVERGED;
    case engine::FailureKind::kOutOfMemory:
      return Failure::OUT_OF_MEMORY;
    case engine::FailureKind::kDeviceError:
      return Failure::DEVICE_ERROR;
    case engine::FailureKind::kCancelled:
      return Failure::CANCELLED;
    case engine::FailureKind::kNone:
      break;
  }
  return Failure::WORKER_CRASHED;
}

absl::Status AsTaskFailure(const absl::Status& s, absl::string_view context) {
  if (engine::FailureKindOf(s) != engine::FailureKind::kNone) return s;
  return engine::DeviceError(absl::StrCat(context, ": ", s.message()));
}

absl::Status AsRankFailure(const absl::Status& s, absl::string_view context) {
  if (engine::FailureKindOf(s) == engine::FailureKind::kNone &&
      (absl::IsUnavailable(s) || absl::IsAborted(s) || absl::IsDeadlineExceeded(s))) {
    return absl::Status(s.code(), absl::StrCat(context, ": ", s.message()));
  }
  return AsTaskFailure(s, context);
}

}  // namespace traind::worker
