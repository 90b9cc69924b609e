// Fully connected layer: y = activation(x w + b).
#ifndef TRAIND_WORKER_ENGINE_LAYERS_DENSE_H_
#define TRAIND_WORKER_ENGINE_LAYERS_DENSE_H_

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "traind/v1/job.pb.h"
#include "worker/engine/backend/backend.h"
#include "worker/engine/random.h"
#include "worker/engine/tensor.h"

namespace traind::engine {

// Owns its parameters and their gradients (on the backend) and one planned
// kernel per batch size seen, so a steady-state step plans and allocates
// nothing. Knows nothing of the backend's kind.
//
// Thread safety: not thread-safe.
class Dense {
 public:
  // w: [in, out], b: [out], uninitialized until Initialize.
  // REQUIRES: backend outlives the layer; in, out > 0.
  static absl::StatusOr<Dense> Create(Backend* backend, int64_t in, int64_t out,
                                      DenseActivation activation);

  Dense(Dense&&) = default;
  Dense& operator=(Dense&&) = default;

  // w from `init` (drawn from `rng`), b = 0.
  absl::Status Initialize(traind::v1::Initializer init, Rng& rng);

  // x: [batch, in] -> y: [batch, out]
  absl::Status Forward(const Tensor& x, Tensor* y);

  // dy: [batch, out] = dL/dy (overwritten) -> weight_grad(), bias_grad()
  // (overwritten), dx: [batch, in] = dL/dx unless dx is null.
  // REQUIRES: x and y are the inputs and outputs of the forward pass.
  absl::Status Backward(const Tensor& x, const Tensor& y, Tensor* dy, Tensor* dx);

  int64_t in() const { return in_; }
  int64_t out() const { return out_; }
  DenseActivation activation() const { return activation_; }
  Tensor& weight() { return w_; }
  Tensor& bias() { return b_; }
  Tensor& weight_grad() { return dw_; }
  Tensor& bias_grad() { return db_; }

 private:
  Dense(Backend* backend, int64_t in, int64_t out, DenseActivation activation)
      : backend_(backend), in_(in), out_(out), activation_(activation) {}

  absl::StatusOr<DenseKernel*> KernelFor(int64_t batch);

  Backend* backend_;
  int64_t in_, out_;
  DenseActivation activation_;
  Tensor w_, b_, dw_, db_;
  // A handful of batch sizes at most (full batch, last train batch, last
  // validation batch): a linear search beats a map.
  std::vector<std::pair<int64_t, std::unique_ptr<DenseKernel>>> kernels_;
};

}  // namespace traind::engine

#endif  // TRAIND_WORKER_ENGINE_LAYERS_DENSE_H_
