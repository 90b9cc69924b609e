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
#include "worker/engine/random.h"
#include "worker/engine/tensor.h"

namespace traind::engine {

// A trainable tensor and its gradient, both owned by a layer.
struct Parameter {
  std::string name;  // "layers[0].weight", "layers[0].bias"
  Tensor* value;
  Tensor* grad;
};

// Thread safety: not thread-safe.
class Network {
 public:
  // The layers of `model` for `inputs` input features, parameters
  // uninitialized. Errors: InvalidSpecError with a field path for a model
  // CheckTrainingSpec would reject.
  // REQUIRES: backend outlives the network.
  static absl::StatusOr<Network> Create(Backend* backend, int64_t inputs,
                                        const traind::v1::ModelSpec& model);

  Network(Network&&) = default;
  Network& operator=(Network&&) = default;

  // Weights by each layer's initializer, drawn in layer order from `rng`;
  // biases 0.
  absl::Status Initialize(Rng& rng);

  // x: [batch, inputs] -> logits: [batch, outputs]. The logits live in the
  // network's buffers for this batch size until its next Forward.
  absl::StatusOr<Tensor*> Forward(const Tensor& x);

  // dlogits: [batch, outputs] = dL/dlogits (overwritten) -> every parameter's
  // grad (overwritten, not accumulated).
  // REQUIRES: the last Forward with this batch size was Forward(x).
  absl::Status Backward(const Tensor& x, Tensor* dlogits);

  int64_t inputs() const { return inputs_; }
  int64_t outputs() const { return layers_.back().out(); }
  std::vector<Dense>& layers() { return layers_; }
  // Weight then bias of each layer, in layer order.
  std::vector<Parameter> parameters();

 private:
  // y[l]: [batch, units of layer l]; dy[l] = dL/dy[l] for all but the last
  // layer (whose gradient is the caller's dlogits).
  struct Workspace {
    int64_t batch = 0;
    std::vector<Tensor> y;
    std::vector<Tensor> dy;
  };

  Network(Backend* backend, int64_t inputs) : backend_(backend), inputs_(inputs) {}

  absl::StatusOr<Workspace*> WorkspaceFor(int64_t batch);

  Backend* backend_;
  int64_t inputs_;
  std::vector<Dense> layers_;
  std::vector<traind::v1::Initializer> inits_;
  std::vector<std::unique_ptr<Workspace>> workspaces_;
};

}  // namespace traind::engine

#endif  // TRAIND_WORKER_ENGINE_NETWORK_H_
