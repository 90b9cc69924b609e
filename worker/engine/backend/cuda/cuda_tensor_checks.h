// The CUDA backend's own argument check (beside backend/tensor_checks.h):
// its tensors live in device memory.
#ifndef TRAIND_WORKER_ENGINE_BACKEND_CUDA_CUDA_TENSOR_CHECKS_H_
#define TRAIND_WORKER_ENGINE_BACKEND_CUDA_CUDA_TENSOR_CHECKS_H_

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "worker/engine/tensor.h"

namespace traind::engine::cuda {

// InvalidArgument naming `what` when `t` is a (non-empty) host tensor.
inline absl::Status CheckDevice(const Tensor& t, absl::string_view what) {
  if (!t.empty() && t.space() != MemorySpace::kDevice) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": a host tensor was passed to the CUDA backend"));
  }
  return absl::OkStatus();
}

}  // namespace traind::engine::cuda

#endif  // TRAIND_WORKER_ENGINE_BACKEND_CUDA_CUDA_TENSOR_CHECKS_H_
