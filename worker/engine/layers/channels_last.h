// Channels-last images between image layers (backend.h, "Image tensors").
//
// On a backend whose ChannelsLastImages() is true, a network keeps a run of
// image layers (conv2d, pooling, batch_norm on images, and the activations
// and dropouts between them) channels-last: each row of an image tensor in
// H, W, C order, which the backend's primitives read and write without
// reordering. Everything else sees C, H, W order as ever (the input batch,
// dense, flatten, layer_norm, the network's output): the run's first image
// layer converts its input from C, H, W order, its last one converts its
// output back, by wrapping the layer in a ChannelsLastBoundary. A conversion
// of an image with one channel or one pixel is no conversion (the two orders
// are the same) and is skipped.
//
// Dropout between channels-last layers draws its mask over the H, W, C
// order: deterministic (and resumed exactly) as ever, but not the mask a
// backend without channels-last images draws for the same seed.
//
// Thread safety: as Layer.
#ifndef TRAIND_WORKER_ENGINE_LAYERS_CHANNELS_LAST_H_
#define TRAIND_WORKER_ENGINE_LAYERS_CHANNELS_LAST_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/engine/backend/backend.h"
#include "worker/engine/layers/layer.h"

namespace traind::engine {

// A channels-last image layer with a C, H, W boundary on one or both sides.
// The inner layer runs channels-last; `in` / `out` are its input / output
// images (channels, pixels); convert_in / convert_out say which side meets C,
// H, W order.
class ChannelsLastBoundary final : public Layer {
 public:
  struct Side {
    int64_t channels = 0, pixels = 0;
    bool convert = false;
  };
  // REQUIRES: backend outlives the layer; inner's in() / out() are
  // in.channels · in.pixels / out.channels · out.pixels.
  ChannelsLastBoundary(Backend* backend, std::unique_ptr<Layer> inner, Side in, Side out);

  int64_t in() const override { return inner_->in(); }
  int64_t out() const override { return inner_->out(); }
  absl::Status Initialize(Rng& rng) override { return inner_->Initialize(rng); }
  absl::Status Forward(const Tensor& x, const ForwardMode& mode, Tensor* y) override;
  absl::Status Backward(const Tensor& x, const Tensor& y, Tensor* dy, Tensor* dx) override;
  void AppendParameters(const std::string& prefix, std::vector<Parameter>* out) override {
    inner_->AppendParameters(prefix, out);
  }
  void AppendBuffers(const std::string& prefix, std::vector<Parameter>* out) override {
    inner_->AppendBuffers(prefix, out);
  }
  Layer* inner() { return inner_.get(); }

 private:
  // Per batch size: x and y channels-last (what the inner layer read and
  // wrote in the last forward pass), and the gradients' channels-last forms.
  struct Buffers {
    int64_t batch = 0;
    Tensor x, y, dy, dx;
  };
  absl::StatusOr<Buffers*> BuffersFor(int64_t batch);

  Backend* backend_;
  std::unique_ptr<Layer> inner_;
  Side in_, out_;
  std::vector<std::unique_ptr<Buffers>> buffers_;
};

}  // namespace traind::engine

#endif  // TRAIND_WORKER_ENGINE_LAYERS_CHANNELS_LAST_H_
