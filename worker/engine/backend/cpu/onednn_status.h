// The one place where oneDNN's errors become engine statuses (for the CPU
// backend's units): out of memory -> OutOfMemoryError, anything else ->
// DeviceError, naming what was being done.
#ifndef TRAIND_WORKER_ENGINE_BACKEND_CPU_ONEDNN_STATUS_H_
#define TRAIND_WORKER_ENGINE_BACKEND_CPU_ONEDNN_STATUS_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "base/status.h"
#include "oneapi/dnnl/dnnl.hpp"

namespace traind::engine::cpu {

// A caught dnnl::error.
inline absl::Status FromDnnl(const dnnl::error& e, absl::string_view what) {
  const std::string message = absl::StrCat("oneDNN: ", what, ": ", e.what());
  if (e.status == dnnl_out_of_memory) return OutOfMemoryError(message);
  return DeviceError(message);
}

// A status of oneDNN's C API (OkStatus for dnnl_success).
inline absl::Status FromDnnlStatus(dnnl_status_t status, absl::string_view what) {
  if (status == dnnl_success) return absl::OkStatus();
  const std::string message = absl::StrFormat("oneDNN: %s: status %d", what, status);
  if (status == dnnl_out_of_memory) return OutOfMemoryError(message);
  return DeviceError(message);
}

}  // namespace traind::engine::cpu

#endif  // TRAIND_WORKER_ENGINE_BACKEND_CPU_ONEDNN_STATUS_H_
