// The layer interface of the feed-forward network.
#ifndef TRAIND_WORKER_ENGINE_LAYERS_LAYER_H_
#define TRAIND_WORKER_ENGINE_LAYERS_LAYER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "base/random.h"
#include "worker/engine/backend/backend.h"
#include "worker/engine/tensor.h"

namespace traind::engine {

class Communicator;

// A parameter whose layer can run its optimizer's update inside the backward
// pass (Dense's weight, on kernels that can: DenseKernel::UpdatesInBackward),
// so that its gradient is never written and read back. The optimizer arms it
// before a step's backward pass (Optimizer::BeginStep: SGD with momentum,
// without Nesterov or clipping, on one rank); the layer then updates the
// parameter and its velocity instead of writing the gradient, and sets
// `done`; the optimizer's Step updates every parameter not done, from its
// gradient, and disarms them all.
struct InBackwardUpdate {
  bool armed = false;
  bool done = false;
  SgdStep sgd;
  Tensor* velocity = nullptr;  // the parameter's momentum buffer
};

// A tensor owned by a layer, with its gradient (null for state that is not
// trained, such as batch norm's running statistics).
struct Parameter {
  std::string name;  // "layers[0].weight", "layers[0].bias"
  Tensor* value;
  Tensor* grad;
  InBackwardUpdate* in_backward = nullptr;  // null: updated from grad only
};

// How a forward pass runs.
struct ForwardMode {
  bool training = true;
  // Seeds this pass's randomness (dropout masks); the network derives it
  // from the job's seed, the step and the layer, so a resumed run draws the
  // same masks as an uninterrupted one.
  uint64_t seed = 0;
  // Data parallelism, training passes only: the ranks that share the batch
  // (each passes its own rows), and the rows of the whole batch
  // (batch_rows > 0). With a communicator of size > 1, batch norm
  // normalizes with the statistics of the whole batch. Null: the pass sees
  // the whole batch.
  Communicator* communicator = nullptr;
  int64_t batch_rows = 0;
};

// A layer owns its parameters, their gradients and per-batch-size scratch
// buffers; after the first step with a batch size it allocates nothing.
//
// Thread safety: not thread-safe.
class Layer {
 public:
  virtual ~Layer() = default;

  virtual int64_t in() const = 0;
  virtual int64_t out() const = 0;

  // Parameters from their initializers, drawn from `rng`.
  virtual absl::Status Initialize(Rng& rng) = 0;

  // x: [batch, in] -> y: [batch, out]
  virtual absl::Status Forward(const Tensor& x, const ForwardMode& mode, Tensor* y) = 0;

  // dy: [batch, out] = dL/dy (may be overwritten) -> the parameters'
  // gradients (overwritten), dx: [batch, in] = dL/dx unless dx is null.
  // REQUIRES: the last Forward with this batch size was a training pass on x
  // giving y.
  virtual absl::Status Backward(const Tensor& x, const Tensor& y, Tensor* dy, Tensor* dx) = 0;

  // Data parallelism: on a rank with no rows of a training batch, instead
  // of Forward and Backward: joins the collectives they make on the other
  // ranks, contributing nothing, and updates the state they update. The
  // parameters' gradients are left zero (JoinBackward sets those it writes
  // to zero). Layers without collectives do nothing.
  virtual absl::Status JoinForward(const ForwardMode& mode) { return absl::OkStatus(); }
  virtual absl::Status JoinBackward() { return absl::OkStatus(); }

  // Trainable parameters (with gradients) named `prefix`.weight etc.
  virtual void AppendParameters(const std::string& prefix, std::vector<Parameter>* out) {}
  // State that is saved but not trained (grad null).
  virtual void AppendBuffers(const std::string& prefix, std::vector<Parameter>* out) {}
};

}  // namespace traind::engine

#endif  // TRAIND_WORKER_ENGINE_LAYERS_LAYER_H_
