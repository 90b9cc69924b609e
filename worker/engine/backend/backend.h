// The compute interface under layers, losses and optimizers.
//
// Layers, the network, losses, optimizers and the fit loop call only this
// interface; a backend (backend/cpu: oneDNN) owns its device, stream and
// memory. Every method reports failures as absl::Status (device errors →
// DeviceError, allocation failures → OutOfMemoryError); none throws.
//
// Ops are enqueued in order on the backend's stream; methods that return
// values to the host (SoftmaxCrossEntropy, CopyToHost) wait for them.
//
// Thread safety: a backend and its kernels are used by one thread at a time.
#ifndef TRAIND_WORKER_ENGINE_BACKEND_BACKEND_H_
#define TRAIND_WORKER_ENGINE_BACKEND_BACKEND_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "worker/engine/tensor.h"

namespace traind::engine {

enum class DenseActivation { kLinear, kRelu };

// A dense layer's ops for one shape (batch, in, out), planned once and run many
// times (oneDNN primitives, cuBLAS handles and workspaces live here).
class DenseKernel {
 public:
  virtual ~DenseKernel() = default;

  // y = act(x w + b).
  // x: [batch, in], w: [in, out], b: [out] -> y: [batch, out]
  virtual absl::Status Forward(const Tensor& x, const Tensor& w, const Tensor& b, Tensor* y) = 0;

  // Gradients from dy = dL/dy, given the forward pass's x and y.
  // dy: [batch, out] is overwritten with dL/d(x w + b) (the activation's mask
  // applied); dw: [in, out] = xᵀ dy; db: [out] = column sums of dy; dx:
  // [batch, in] = dy wᵀ unless dx is null. dw, db, dx are overwritten.
  virtual absl::Status Backward(const Tensor& x, const Tensor& w, const Tensor& y, Tensor* dy,
                                Tensor* dw, Tensor* db, Tensor* dx) = 0;
};

// Sums over a batch from SoftmaxCrossEntropy, on the host.
struct LossStats {
  double loss_sum = 0;  // sum over rows of -log softmax(logits)[label]
  int64_t correct = 0;  // rows whose first largest logit is the label
};

// Adam's constants for one step (PyTorch's formulation).
struct AdamStep {
  double learning_rate = 0;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double epsilon = 1e-8;
  int64_t step = 1;  // 1-based
};

class Backend {
 public:
  virtual ~Backend() = default;

  virtual std::string name() const = 0;

  // An uninitialized tensor of shape [n] (rank 1) or [rows, cols] (rank 2).
  virtual absl::StatusOr<Tensor> Allocate1d(DType dtype, int64_t n) = 0;
  virtual absl::StatusOr<Tensor> Allocate2d(DType dtype, int64_t rows, int64_t cols) = 0;

  // Host <-> tensor copies of dst->bytes() / src.bytes() bytes.
  virtual absl::Status CopyFromHost(const void* src, Tensor* dst) = 0;
  virtual absl::Status CopyToHost(const Tensor& src, void* dst) = 0;
  virtual absl::Status Fill(float value, Tensor* dst) = 0;

  // dst[i, :] = src[rows[i], :] for a host matrix src: [*, cols].
  // dst: [rows.size(), cols]
  virtual absl::Status GatherRows(const float* src, int64_t cols, absl::Span<const int64_t> rows,
                                  Tensor* dst) = 0;
  // dst[i] = src[rows[i]]. dst: [rows.size()] (s32)
  virtual absl::Status GatherLabels(const int32_t* src, absl::Span<const int64_t> rows,
                                    Tensor* dst) = 0;

  // Plans a dense layer's ops for one batch size.
  virtual absl::StatusOr<std::unique_ptr<DenseKernel>> CreateDenseKernel(
      int64_t batch, int64_t in, int64_t out, DenseActivation activation) = 0;

  // Softmax cross-entropy with integer labels, by log-sum-exp.
  // logits: [batch, classes], labels: [batch] (s32, in [0, classes))
  // -> *stats (sums over the batch); dlogits: [batch, classes] =
  // (softmax(logits) - onehot(labels)) / batch, the gradient of the batch mean,
  // unless dlogits is null.
  virtual absl::Status SoftmaxCrossEntropy(const Tensor& logits, const Tensor& labels,
                                           Tensor* dlogits, LossStats* stats) = 0;

  // PyTorch's SGD: v = momentum v + g; w -= lr v. With momentum == 0,
  // velocity may be null and w -= lr g. All tensors have one size.
  virtual absl::Status SgdUpdate(float learning_rate, float momentum, const Tensor& grad,
                                 Tensor* velocity, Tensor* param) = 0;

  // PyTorch's Adam: m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g²;
  // w -= (lr / (1 - b1^t)) m / (sqrt(v) / sqrt(1 - b2^t) + eps).
  virtual absl::Status AdamUpdate(const AdamStep& step, const Tensor& grad, Tensor* m, Tensor* v,
                                  Tensor* param) = 0;
};

}  // namespace traind::engine

#endif  // TRAIND_WORKER_ENGINE_BACKEND_BACKEND_H_
