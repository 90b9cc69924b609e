// Layers over images (backend.h: each row of a batch one image, NCHW):
// 2-D convolution, max and average pooling, flatten.
#ifndef TRAIND_WORKER_ENGINE_LAYERS_IMAGE_H_
#define TRAIND_WORKER_ENGINE_LAYERS_IMAGE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "base/random.h"
#include "worker/engine/backend/backend.h"
#include "worker/engine/layers/dense.h"
#include "worker/engine/layers/layer.h"
#include "worker/engine/tensor.h"

namespace traind::engine {

// y = activation(conv(x, w) + b): w [filters, (channels / groups)·kh·kw]
// (PyTorch's OIHW), b [filters]. As Dense: one planned kernel per batch
// size; an activation whose derivative needs only y is fused into the
// convolution, gelu, softplus and swish run after it while training.
//
// Thread safety: not thread-safe.
class Conv2d final : public Layer {
 public:
  // `geometry`'s batch is ignored (each batch size gets its kernel).
  // REQUIRES: backend outlives the layer.
  static absl::StatusOr<Conv2d> Create(Backend* backend, const Conv2dGeometry& geometry,
                                       ActivationFn activation, bool bias, WeightInit init);
  Conv2d(Conv2d&&) = default;
  Conv2d& operator=(Conv2d&&) = default;

  // w from the initializer with PyTorch's fans (fan_in = (C/G)·kh·kw,
  // fan_out = F·kh·kw), b = 0.
  absl::Status Initialize(Rng& rng) override;
  absl::Status Forward(const Tensor& x, const ForwardMode& mode, Tensor* y) override;
  absl::Status Backward(const Tensor& x, const Tensor& y, Tensor* dy, Tensor* dx) override;
  void AppendParameters(const std::string& prefix, std::vector<Parameter>* out) override;

  int64_t in() const override { return g_.in_size(); }
  int64_t out() const override { return g_.out_size(); }
  const Conv2dGeometry& geometry() const { return g_; }
  const ActivationFn& activation() const { return activation_; }
  bool has_bias() const { return bias_; }
  // Images NHWC in and out (backend.h, "Image tensors"). Set before the
  // first Forward (the network does).
  void set_channels_last(bool on) { channels_last_ = on; }
  bool channels_last() const { return channels_last_; }
  Tensor& weight() { return w_; }
  Tensor& bias() { return b_; }
  Tensor& weight_grad() { return dw_; }
  Tensor& bias_grad() { return db_; }

 private:
  struct PerBatch {
    int64_t batch = 0;
    std::unique_ptr<Conv2dKernel> kernel;
    Tensor z;                                   // pre-activation (unfused activations only)
    std::unique_ptr<Conv2dKernel> eval_kernel;  // fused, for evaluation (unfused only)
  };
  Conv2d(Backend* backend, const Conv2dGeometry& g, ActivationFn activation, bool bias,
         WeightInit init)
      : backend_(backend), g_(g), activation_(activation), bias_(bias), init_(init) {}
  bool fused() const { return DerivativeFromOutput(activation_.kind); }
  absl::StatusOr<PerBatch*> For(int64_t batch);

  Backend* backend_;
  Conv2dGeometry g_;
  ActivationFn activation_;
  bool bias_;
  WeightInit init_;
  bool channels_last_ = false;
  Tensor w_, b_, dw_, db_;
  std::vector<std::unique_ptr<PerBatch>> per_batch_;
};

// Max or average pooling (backend.h's PoolKind); a global average pooling
// is an average over the whole image.
class Pool2d final : public Layer {
 public:
  // REQUIRES: backend outlives the layer.
  Pool2d(Backend* backend, const Pool2dGeometry& geometry, PoolKind kind)
      : backend_(backend), g_(geometry), kind_(kind) {}
  Pool2d(Pool2d&&) = default;
  Pool2d& operator=(Pool2d&&) = default;

  absl::Status Initialize(Rng&) override { return absl::OkStatus(); }
  absl::Status Forward(const Tensor& x, const ForwardMode& mode, Tensor* y) override;
  absl::Status Backward(const Tensor& x, const Tensor& y, Tensor* dy, Tensor* dx) override;
  int64_t in() const override { return g_.in_size(); }
  int64_t out() const override { return g_.out_size(); }
  const Pool2dGeometry& geometry() const { return g_; }
  PoolKind kind() const { return kind_; }
  // As Conv2d's.
  void set_channels_last(bool on) { channels_last_ = on; }
  bool channels_last() const { return channels_last_; }

 private:
  absl::StatusOr<Pool2dKernel*> For(int64_t batch);

  Backend* backend_;
  Pool2dGeometry g_;
  PoolKind kind_;
  bool channels_last_ = false;
  std::vector<std::pair<int64_t, std::unique_ptr<Pool2dKernel>>> per_batch_;
};

// An image as its row of C·H·W values: the values stay as they are (the
// rows are NCHW already); y = x, dx = dy.
class Flatten final : public Layer {
 public:
  Flatten(Backend* backend, int64_t n) : backend_(backend), n_(n) {}
  absl::Status Initialize(Rng&) override { return absl::OkStatus(); }
  absl::Status Forward(const Tensor& x, const ForwardMode&, Tensor* y) override {
    return backend_->Copy(x, y);
  }
  absl::Status Backward(const Tensor&, const Tensor&, Tensor* dy, Tensor* dx) override {
    return dx == nullptr ? absl::OkStatus() : backend_->Copy(*dy, dx);
  }
  int64_t in() const override { return n_; }
  int64_t out() const override { return n_; }

 private:
  Backend* backend_;
  int64_t n_;
};

}  // namespace traind::engine

#endif  // TRAIND_WORKER_ENGINE_LAYERS_IMAGE_H_
