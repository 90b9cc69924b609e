// Argument checks every backend makes on the tensors it is given.
#ifndef TRAIND_WORKER_ENGINE_BACKEND_TENSOR_CHECKS_H_
#define TRAIND_WORKER_ENGINE_BACKEND_TENSOR_CHECKS_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "worker/engine/tensor.h"

namespace traind::engine {

// `t` is a non-empty [rows, cols] tensor of `dtype`; `name` goes in the error.
inline absl::Status CheckShape(const Tensor& t, DType dtype, int64_t rows, int64_t cols,
                               absl::string_view name) {
  if (t.empty() || t.dtype() != dtype || t.rows() != rows || t.cols() != cols) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: expected a [%d, %d] tensor, got [%d, %d]%s", name, rows, cols,
                        t.rows(), t.cols(), t.empty() ? " (empty)" : ""));
  }
  return absl::OkStatus();
}

// `a` and `b` are float tensors of the same number of elements.
inline absl::Status CheckSameSize(const Tensor& a, const Tensor& b, absl::string_view what) {
  if (a.size() != b.size() || a.dtype() != DType::kF32 || b.dtype() != DType::kF32) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: tensor sizes differ (%d vs %d)", what, a.size(), b.size()));
  }
  return absl::OkStatus();
}

}  // namespace traind::engine

#endif  // TRAIND_WORKER_ENGINE_BACKEND_TENSOR_CHECKS_H_
