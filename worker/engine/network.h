// A feed-forward network: the model's layers in order, with activation and
// gradient buffers for each batch size it runs.
#ifndef TRAIND_WORKER_ENGINE_NETWORK_H_
#define TRAIND_WORKER_ENGINE_NETWORK_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "traind/v1/job.pb.h"
#include "worker/engine/backend/backend.h"
#include "worker/engine/layers/dense.h"
#include "worker/engine/layers/layer.h"
#include "worker/engine/random.h"
#include "worker/engine/tensor.h"

namespace traind::engine {

// Thread safety: not thread-safe.
class Network {
 public:
  // The layers of `model` for `inputs` input features, parameters
  // uninitialized. Errors: InvalidSpecError with a field path for a model
  // CheckModelSpec would reject.
  // REQUIRES: backend outlives the network.
  static absl::StatusOr<Network> Create(Backend* backend, int64_t inputs,
                                        const traind::v1::ModelSpec& model);

  Network(Network&&) = default;
  Network& operator=(Network&&) = default;

  // Parameters by each layer's initializer, drawn in layer order from `rng`.
  absl::Status Initialize(Rng& rng);

  // x: [batch, inputs] -> outputs: [batch, outputs]. The outputs live in the
  // network's buffers for this batch size until its next Forward. Layer l's
  // randomness is seeded with DeriveSeed(mode.seed, l).
  absl::StatusOr<Tensor*> Forward(const Tensor& x, const ForwardMode& mode);
  absl::StatusOr<Tensor*> Forward(const Tensor& x) { return Forward(x, ForwardMode()); }

  // doutputs: [batch, outputs] = dL/doutputs (overwritten) -> every
  // parameter's grad (overwritten, not accumulated).
  // REQUIRES: the last Forward with this batch size was a training Forward(x).
  absl::Status Backward(const Tensor& x, Tensor* doutputs);

  int64_t inputs() const { return inputs_; }
  int64_t outputs() const { return layers_.back()->out(); }
  std::vector<std::unique_ptr<Layer>>& layers() { return layers_; }
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

  Backend* backend_;
  int64_t inputs_;
  std::vector<std::unique_ptr<Layer>> layers_;
  std::vector<std::unique_ptr<Workspace>> workspaces_;
};

// The activation function of a spec enum with its parameter (defaults:
// leaky_relu 0.01, elu 1).
ActivationFn ToActivationFn(traind::v1::Activation activation, bool has_alpha, double alpha);

}  // namespace traind::engine

#endif  // TRAIND_WORKER_ENGINE_NETWORK_H_
