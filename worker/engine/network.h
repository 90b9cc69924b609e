// A feed-forward network: the model's layers in order, with activation and
// gradient buffers for each batch size it runs.
#ifndef TRAIND_WORKER_ENGINE_NETWORK_H_
#define TRAIND_WORKER_ENGINE_NETWORK_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "base/random.h"
#include "spec/model_shapes.h"
#include "traind/v1/job.pb.h"
#include "worker/engine/backend/backend.h"
#include "worker/engine/layers/dense.h"
#include "worker/engine/layers/layer.h"
#include "worker/engine/tensor.h"

namespace traind::engine {

// Every trainable parameter's gradient lives in one flat buffer,
// gradients(), allocated once by Create: the layers' gradient tensors are
// views into it, in parameters() order, each starting at a multiple of
// kGradientAlignment floats (the gaps hold zeros). A data-parallel step
// sums it across ranks in a few large pieces instead of one call per tensor.
//
// Thread safety: not thread-safe.
class Network {
 public:
  // Floats between the starts of consecutive gradients in gradients() are a
  // multiple of this (256 bytes, the alignment of a device allocation).
  static constexpr int64_t kGradientAlignment = 64;

  // The layers of `model` for `inputs` input features, parameters
  // uninitialized, gradients zero. Errors: InvalidSpecError with a field
  // path for a model CheckModelSpec would reject.
  // REQUIRES: backend outlives the network.
  static absl::StatusOr<Network> Create(Backend* backend, int64_t inputs,
                                        const traind::v1::ModelSpec& model);
  // For an input of `input`'s shape: an image (data.shape) may feed image
  // layers (conv2d, pooling), each row of x one image, NCHW. Errors:
  // spec::LayerShapes's for a model that does not fit the input.
  static absl::StatusOr<Network> Create(Backend* backend, const spec::ValueShape& input,
                                        const traind::v1::ModelSpec& model) {
    return Create(backend, input, model, /*channels_last=*/true);
  }
  // channels_last false: images stay C, H, W between layers even where the
  // backend has channels-last kernels (layers/channels_last.h); for tests.
  static absl::StatusOr<Network> Create(Backend* backend, const spec::ValueShape& input,
                                        const traind::v1::ModelSpec& model, bool channels_last);

  Network(Network&&) = default;
  Network& operator=(Network&&) = default;

  // Parameters by each layer's initializer, drawn in layer order from `rng`.
  absl::Status Initialize(Rng& rng);

  // x: [batch, inputs] -> outputs: [batch, outputs]. The outputs live in the
  // network's buffers for this batch size until its next Forward. Layer l's
  // randomness is seeded with DeriveSeed(mode.seed, l).
  absl::StatusOr<Tensor*> Forward(const Tensor& x, const ForwardMode& mode) {
    return Forward(x, mode, 0);
  }
  absl::StatusOr<Tensor*> Forward(const Tensor& x) { return Forward(x, ForwardMode()); }
  // As Forward(x, mode), for rows first_row, first_row + 1, ... of a larger
  // batch (one rank's share of a global batch): each layer's randomness
  // continues its stream at the share's first element, so the rows draw the
  // dropout masks they draw in a pass over the whole batch. (The backends
  // draw element i of a mask from the i-th output of Rng(seed).)
  absl::StatusOr<Tensor*> Forward(const Tensor& x, const ForwardMode& mode, int64_t first_row);

  // doutputs: [batch, outputs] = dL/doutputs (overwritten) -> every
  // parameter's grad (overwritten, not accumulated).
  // REQUIRES: the last Forward with this batch size was a training Forward(x).
  absl::Status Backward(const Tensor& x, Tensor* doutputs);
  // As Backward; calls layer_done(l) after layer l's backward pass (from the
  // last layer to the first), when the gradients from
  // gradients_ready_from(l) to the end of gradients() are final. An error
  // from layer_done stops the pass and is returned.
  absl::Status Backward(const Tensor& x, Tensor* doutputs,
                        absl::FunctionRef<absl::Status(size_t layer)> layer_done);

  // The gradients of all trainable parameters: [count] (see the class
  // comment). Empty when the network has no trainable parameters.
  Tensor& gradients() { return gradients_; }
  // The offset in gradients() of the first gradient of layers l, l + 1, ...
  // (gradients().size() when none of them has parameters).
  int64_t gradients_ready_from(size_t layer) const { return gradient_starts_[layer]; }

  int64_t inputs() const { return inputs_; }
  int64_t outputs() const { return layers_.back()->out(); }
  std::vector<std::unique_ptr<Layer>>& layers() { return layers_; }
  // Data parallelism: on a rank with no rows of a training batch, in place
  // of Forward and Backward (with the same mode and layer_done as the other
  // ranks): takes part in the collectives the layers make (batch norm's
  // statistics) and updates their state as the other ranks do. The
  // gradients are left as they are, but for those of layers with
  // collectives, which are set to zero; layer_done is called as Backward
  // calls it.
  absl::Status JoinForward(const ForwardMode& mode);
  absl::Status JoinBackward(absl::FunctionRef<absl::Status(size_t layer)> layer_done);

  // Trainable parameters in layer order (weight then bias, gamma then beta).
  std::vector<Parameter> parameters();
  // Parameters and untrained state (batch norm's running statistics): all
  // that a checkpoint must hold.
  std::vector<Parameter> state();

 private:
  // y[l]: [batch, width of layer l]; dy[l] = dL/dy[l] for all but the last
  // layer (whose gradient is the caller's doutputs).
  struct Workspace {
    int64_t batch = 0;
    std::vector<Tensor> y;
    std::vector<Tensor> dy;
  };

  Network(Backend* backend, int64_t inputs) : backend_(backend), inputs_(inputs) {}

  absl::StatusOr<Workspace*> WorkspaceFor(int64_t batch);
  // Allocates gradients_ and makes every layer's gradient a view into it.
  absl::Status FlattenGradients();

  Backend* backend_;
  int64_t inputs_;
  // Declared before the layers, whose gradient tensors are views into it.
  Tensor gradients_;
  std::vector<int64_t> gradient_starts_;  // [layers]
  std::vector<std::unique_ptr<Layer>> layers_;
  std::vector<std::unique_ptr<Workspace>> workspaces_;
};

// The activation function of a spec enum with its parameter (defaults:
// leaky_relu 0.01, elu 1).
ActivationFn ToActivationFn(traind::v1::Activation activation, bool has_alpha, double alpha);

}  // namespace traind::engine

#endif  // TRAIND_WORKER_ENGINE_NETWORK_H_
