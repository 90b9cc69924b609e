// Normalization layers: batch norm (PyTorch's BatchNorm1d) and layer norm.
#ifndef TRAIND_WORKER_ENGINE_LAYERS_NORMALIZATION_H_
#define TRAIND_WORKER_ENGINE_LAYERS_NORMALIZATION_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/engine/backend/backend.h"
#include "worker/engine/layers/layer.h"

namespace traind::engine {

// x: [batch, n] -> y: [batch, n]. Training: batch statistics, running
// statistics updated; evaluation: running statistics. gamma = 1, beta = 0 at
// initialization; running mean 0, running variance 1.
//
// Synchronized across the ranks of a training pass whose ForwardMode has a
// communicator of size > 1: the statistics (and the backward pass's column
// sums) are those of the whole batch, summed across ranks, so every rank
// normalizes, updates its running statistics and computes dx as one rank
// with the whole batch would (within float rounding). dgamma and dbeta are
// this rank's rows' share (the caller sums the gradients across ranks).
class BatchNorm final : public Layer {
 public:
  static absl::StatusOr<std::unique_ptr<BatchNorm>> Create(Backend* backend, int64_t n,
                                                           float momentum, float epsilon);
  int64_t in() const override { return n_; }
  int64_t out() const override { return n_; }
  absl::Status Initialize(Rng&) override;
  absl::Status Forward(const Tensor& x, const ForwardMode& mode, Tensor* y) override;
  absl::Status Backward(const Tensor& x, const Tensor& y, Tensor* dy, Tensor* dx) override;
  absl::Status JoinForward(const ForwardMode& mode) override;
  absl::Status JoinBackward() override;
  void AppendParameters(const std::string& prefix, std::vector<Parameter>* out) override;
  void AppendBuffers(const std::string& prefix, std::vector<Parameter>* out) override;

 private:
  BatchNorm(Backend* backend, int64_t n, float momentum, float epsilon)
      : backend_(backend), n_(n), momentum_(momentum), epsilon_(epsilon) {}

  // The synchronized training passes (comm_ set).
  absl::Status SetCommunicator(const ForwardMode& mode);
  absl::Status SyncForward(const Tensor& x, Tensor* y);
  absl::Status SyncBackward(const Tensor& x, const Tensor& dy, Tensor* dx);
  // A [0, n] view (no rows) for a rank without rows.
  Tensor NoRows();

  Backend* backend_;
  int64_t n_;
  float momentum_, epsilon_;
  Tensor gamma_, beta_, dgamma_, dbeta_;  // [n]
  Tensor running_mean_, running_var_;     // [n]
  Tensor mean_, rstd_;                    // [n], of the last forward pass
  // Statistics of the last training pass (an evaluation pass in between
  // overwrites mean_/rstd_).
  Tensor train_mean_, train_rstd_;
  // Synchronization of the last training pass: the ranks (null: none) and
  // the rows of the whole batch; the statistics summed across ranks:
  // sum_, sq_: [n]; grad_sums_: [2n].
  Communicator* comm_ = nullptr;
  int64_t count_ = 0;
  Tensor sum_, sq_, grad_sums_;
};

// Batch normalization of images per channel (PyTorch's BatchNorm2d):
// x: [batch, C·H·W] in C, H, W order; each channel's statistics over the
// batch's H·W pixels of it. The images are transposed to [batch·H·W, C]
// and normalized per column by a BatchNorm of C columns (its parameters and
// running statistics are this layer's: gamma, beta, running_mean,
// running_var of [C]); the running variance's unbiased correction counts
// batch·H·W values. One rank only (image layers do not run data-parallel).
class BatchNorm2d final : public Layer {
 public:
  static absl::StatusOr<std::unique_ptr<BatchNorm2d>> Create(Backend* backend, int64_t channels,
                                                             int64_t pixels, float momentum,
                                                             float epsilon);
  int64_t in() const override { return channels_ * pixels_; }
  int64_t out() const override { return channels_ * pixels_; }
  absl::Status Initialize(Rng& rng) override { return inner_->Initialize(rng); }
  absl::Status Forward(const Tensor& x, const ForwardMode& mode, Tensor* y) override;
  absl::Status Backward(const Tensor& x, const Tensor& y, Tensor* dy, Tensor* dx) override;
  void AppendParameters(const std::string& prefix, std::vector<Parameter>* out) override {
    inner_->AppendParameters(prefix, out);
  }
  void AppendBuffers(const std::string& prefix, std::vector<Parameter>* out) override {
    inner_->AppendBuffers(prefix, out);
  }
  // Images NHWC in and out (backend.h, "Image tensors"): the rows are
  // [batch·H·W, C] already, nothing is transposed. Set before the first
  // Forward (the network does).
  void set_channels_last(bool on) { channels_last_ = on; }
  bool channels_last() const { return channels_last_; }

 private:
  struct Buffers {
    int64_t batch = 0;
    Tensor x, y, d;  // [batch·H·W, C]: x and y transposed; a gradient
  };
  BatchNorm2d(Backend* backend, int64_t channels, int64_t pixels, std::unique_ptr<BatchNorm> inner)
      : backend_(backend), channels_(channels), pixels_(pixels), inner_(std::move(inner)) {}
  absl::StatusOr<Buffers*> BuffersFor(int64_t batch);

  Backend* backend_;
  int64_t channels_, pixels_;
  bool channels_last_ = false;
  std::unique_ptr<BatchNorm> inner_;
  std::vector<Buffers> buffers_;
};

// Normalizes each row of x: [batch, n] over its n values.
class LayerNorm final : public Layer {
 public:
  static absl::StatusOr<std::unique_ptr<LayerNorm>> Create(Backend* backend, int64_t n,
                                                           float epsilon);
  int64_t in() const override { return n_; }
  int64_t out() const override { return n_; }
  absl::Status Initialize(Rng&) override;
  absl::Status Forward(const Tensor& x, const ForwardMode& mode, Tensor* y) override;
  absl::Status Backward(const Tensor& x, const Tensor& y, Tensor* dy, Tensor* dx) override;
  void AppendParameters(const std::string& prefix, std::vector<Parameter>* out) override;

 private:
  struct Stats {
    int64_t batch;
    Tensor mean, rstd;  // [batch]
  };
  LayerNorm(Backend* backend, int64_t n, float epsilon)
      : backend_(backend), n_(n), epsilon_(epsilon) {}
  absl::StatusOr<Stats*> StatsFor(int64_t batch);

  Backend* backend_;
  int64_t n_;
  float epsilon_;
  Tensor gamma_, beta_, dgamma_, dbeta_;
  std::vector<Stats> stats_;
};

}  // namespace traind::engine

#endif  // TRAIND_WORKER_ENGINE_LAYERS_NORMALIZATION_H_
