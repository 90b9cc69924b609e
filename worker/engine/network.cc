#include "worker/engine/network.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "worker/engine/spec_check.h"
#include "worker/engine/status.h"

namespace traind::engine {

absl::StatusOr<Network> Network::Create(Backend* backend, int64_t inputs,
                                        const traind::v1::ModelSpec& model) {
  if (inputs <= 0) {
    return absl::InvalidArgumentError(absl::StrFormat("network: %d inputs", inputs));
  }
  TRAIND_RETURN_IF_ERROR(CheckModelSpec(model));
  Network network(backend, inputs);
  int64_t width = inputs;
  for (int i = 0; i < model.layers_size(); ++i) {
    const traind::v1::Dense& spec = model.layers(i).dense();
    DenseActivation activation;
    switch (spec.activation()) {
      case traind::v1::LINEAR:
        activation = DenseActivation::kLinear;
        break;
      case traind::v1::RELU:
        activation = DenseActivation::kRelu;
        break;
      default:  // rejected by CheckModelSpec
        return absl::InternalError("unhandled activation");
    }
    TRAIND_ASSIGN_OR_RETURN(Dense dense, Dense::Create(backend, width, spec.units(), activation));
    network.layers_.push_back(std::move(dense));
    network.inits_.push_back(spec.init());
    width = spec.units();
  }
  return network;
}

absl::Status Network::Initialize(Rng& rng) {
  for (size_t l = 0; l < layers_.size(); ++l) {
    TRAIND_RETURN_IF_ERROR(layers_[l].Initialize(inits_[l], rng));
  }
  return absl::OkStatus();
}

absl::StatusOr<Network::Workspace*> Network::WorkspaceFor(int64_t batch) {
  for (const std::unique_ptr<Workspace>& ws : workspaces_) {
    if (ws->batch == batch) return ws.get();
  }
  auto ws = std::make_unique<Workspace>();
  ws->batch = batch;
  for (size_t l = 0; l < layers_.size(); ++l) {
    TRAIND_ASSIGN_OR_RETURN(Tensor y, backend_->Allocate2d(DType::kF32, batch, layers_[l].out()));
    ws->y.push_back(std::move(y));
    if (l + 1 < layers_.size()) {
      TRAIND_ASSIGN_OR_RETURN(Tensor dy,
                              backend_->Allocate2d(DType::kF32, batch, layers_[l].out()));
      ws->dy.push_back(std::move(dy));
    }
  }
  workspaces_.push_back(std::move(ws));
  return workspaces_.back().get();
}

absl::StatusOr<Tensor*> Network::Forward(const Tensor& x) {
  if (x.cols() != inputs_) {
    return absl::InvalidArgumentError(
        absl::StrFormat("network forward: x has %d columns, the network %d inputs", x.cols(),
                        inputs_));
  }
  TRAIND_ASSIGN_OR_RETURN(Workspace * ws, WorkspaceFor(x.rows()));
  // x: [batch, inputs] -> y[0]: [batch, units0] -> ... -> y[L-1]: [batch, outputs]
  const Tensor* input = &x;
  for (size_t l = 0; l < layers_.size(); ++l) {
    TRAIND_RETURN_IF_ERROR(layers_[l].Forward(*input, &ws->y[l]));
    input = &ws->y[l];
  }
  return &ws->y.back();
}

absl::Status Network::Backward(const Tensor& x, Tensor* dlogits) {
  TRAIND_ASSIGN_OR_RETURN(Workspace * ws, WorkspaceFor(x.rows()));
  // dlogits: [batch, outputs] -> dy[L-2] -> ... -> dy[0]: [batch, units0].
  // The first layer's dx (the gradient w.r.t. the data) is never computed.
  for (size_t l = layers_.size(); l-- > 0;) {
    const Tensor& input = l == 0 ? x : ws->y[l - 1];
    Tensor* dy = l + 1 == layers_.size() ? dlogits : &ws->dy[l];
    Tensor* dx = l == 0 ? nullptr : &ws->dy[l - 1];
    TRAIND_RETURN_IF_ERROR(layers_[l].Backward(input, ws->y[l], dy, dx));
  }
  return absl::OkStatus();
}

std::vector<Parameter> Network::parameters() {
  std::vector<Parameter> params;
  for (size_t l = 0; l < layers_.size(); ++l) {
    params.push_back({absl::StrCat("layers[", l, "].weight"), &layers_[l].weight(),
                      &layers_[l].weight_grad()});
    params.push_back({absl::StrCat("layers[", l, "].bias"), &layers_[l].bias(),
                      &layers_[l].bias_grad()});
  }
  return params;
}

}  // namespace traind::engine
