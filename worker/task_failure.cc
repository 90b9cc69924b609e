#include "worker/task_failure.h"

#include "absl/strings/str_cat.h"
#include "base/status.h"

namespace traind::worker {

using traind::v1::Failure;

Failure::Reason ReasonOf(const absl::Status& s) {
  switch (traind::FailureKindOf(s)) {
    case traind::FailureKind::kInvalidSpec:
      return Failure::INVALID_SPEC;
    case traind::FailureKind::kDataError:
      return Failure::DATA_ERROR;
    case traind::FailureKind::kDiverged:
      return Failure::DIVERGED;
    case traind::FailureKind::kOutOfMemory:
      return Failure::OUT_OF_MEMORY;
    case traind::FailureKind::kDeviceError:
      return Failure::DEVICE_ERROR;
    case traind::FailureKind::kCancelled:
      return Failure::CANCELLED;
    case traind::FailureKind::kNone:
      break;
  }
  return Failure::WORKER_CRASHED;
}

absl::Status AsTaskFailure(const absl::Status& s, absl::string_view context) {
  if (traind::FailureKindOf(s) != traind::FailureKind::kNone) return s;
  return traind::DeviceError(absl::StrCat(context, ": ", s.message()));
}

absl::Status AsRankFailure(const absl::Status& s, absl::string_view context) {
  if (traind::FailureKindOf(s) == traind::FailureKind::kNone &&
      (absl::IsUnavailable(s) || absl::IsAborted(s) || absl::IsDeadlineExceeded(s))) {
    return absl::Status(s.code(), absl::StrCat(context, ": ", s.message()));
  }
  return AsTaskFailure(s, context);
}

}  // namespace traind::worker
