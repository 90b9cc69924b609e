// The training losses' arithmetic, one row or element at a time, shared by
// the host (losses.h), the CPU backend and the CUDA kernels (the functions
// are __host__ __device__ under nvcc). All of it in double from float
// outputs; results are rounded to float only when stored.
//
// Self-contained: no abseil, no standard library beyond <math.h>, so that
// nvcc compiles it into device code.
#ifndef TRAIND_WORKER_ENGINE_BACKEND_LOSS_MATH_H_
#define TRAIND_WORKER_ENGINE_BACKEND_LOSS_MATH_H_

#include <math.h>
#include <stdint.h>

#if defined(__CUDACC__)
#define TRAIND_HOST_DEVICE __host__ __device__
#else
#define TRAIND_HOST_DEVICE
#endif

namespace traind::engine {

// The losses (PyTorch's formulations):
//   kSoftmaxCrossEntropy: CrossEntropyLoss(weight, label_smoothing), class
//     codes as targets;
//   kSigmoidBinaryCrossEntropy: BCEWithLogitsLoss(pos_weight), 0/1 targets;
//   kMse, kL1, kHuber(delta): elementwise regression losses.
enum class LossKind : int32_t {
  kSoftmaxCrossEntropy,
  kSigmoidBinaryCrossEntropy,
  kMse,
  kL1,
  kHuber,
};

// A loss and its parameters, where the arithmetic runs (pointers are host
// or device pointers, as the caller computes).
struct LossParams {
  LossKind kind = LossKind::kSoftmaxCrossEntropy;
  int64_t width = 1;  // outputs per row; classes for softmax cross-entropy
  // Softmax cross-entropy: class weights; sigmoid BCE: pos_weight. [width],
  // or null for all 1.
  const double* weights = nullptr;
  double weight_total = 0;  // Σ weights (width when null)
  double label_smoothing = 0;
  double huber_delta = 1;
};

namespace loss_math {

// log(1 + e^z) without overflow.
TRAIND_HOST_DEVICE inline double Softplus(double z) {
  return (z > 0 ? z : 0.0) + log1p(exp(-fabs(z)));
}

TRAIND_HOST_DEVICE inline double Sigmoid(double z) {
  if (z >= 0) return 1.0 / (1.0 + exp(-z));
  const double e = exp(z);
  return e / (1.0 + e);
}

TRAIND_HOST_DEVICE inline double WeightOf(const LossParams& p, int64_t j) {
  return p.weights != nullptr ? p.weights[j] : 1.0;
}

// One row z: [C] of softmax cross-entropy with label y, class weights w and
// smoothing s, by log-sum-exp (lse) shifted by the row maximum:
//   returns (1 - s) w[y] (lse - z[y]) + (s / C) Σ_c w[c] (lse - z[c]);
//   grad[j] = scale ((1 - s) w[y] (p_j - [j = y]) + (s / C)(W p_j - w[j]))
//   unless grad is null, W = Σ w; pred[j] = p_j unless pred is null.
// A NaN in z gives a NaN value.
TRAIND_HOST_DEVICE inline double SoftmaxCrossEntropyRow(const LossParams& p, const float* z,
                                                        int32_t y, double scale, float* grad,
                                                        float* pred) {
  const int64_t c = p.width;
  float max = z[0];
  for (int64_t j = 1; j < c; ++j) max = z[j] > max ? z[j] : max;
  double sum = 0;
  for (int64_t j = 0; j < c; ++j) sum += exp(static_cast<double>(z[j]) - max);
  const double lse = log(sum) + max;
  const double s = p.label_smoothing;
  const double wy = WeightOf(p, y);
  double smooth = 0;
  if (s > 0) {
    for (int64_t j = 0; j < c; ++j) smooth += WeightOf(p, j) * (lse - z[j]);
  }
  const double value = (1 - s) * wy * (lse - z[y]) + s / static_cast<double>(c) * smooth;
  if (grad != nullptr) {
    for (int64_t j = 0; j < c; ++j) {
      const double pj = exp(static_cast<double>(z[j]) - lse);
      const double d = (1 - s) * wy * (pj - (j == y ? 1.0 : 0.0)) +
                       s / static_cast<double>(c) * (p.weight_total * pj - WeightOf(p, j));
      grad[j] = static_cast<float>(d * scale);
    }
  }
  if (pred != nullptr) {
    for (int64_t j = 0; j < c; ++j) {
      pred[j] = static_cast<float>(exp(static_cast<double>(z[j]) - max) / sum);
    }
  }
  return value;
}

// One element (output z of column `col`, target y) of an elementwise loss:
// returns its value; *grad = scale d value / dz unless grad is null;
// *pred = sigmoid(z) (BCE) or z (regression) unless pred is null.
TRAIND_HOST_DEVICE inline double ElementLoss(const LossParams& p, int64_t col, float zf, float yf,
                                             double scale, float* grad, float* pred) {
  const double z = zf, y = yf;
  double v = 0, g = 0;
  switch (p.kind) {
    case LossKind::kSigmoidBinaryCrossEntropy: {
      const double pw = WeightOf(p, col);
      // -(pw y log σ(z) + (1 - y) log(1 - σ(z)))
      v = pw * y * Softplus(-z) + (1 - y) * Softplus(z);
      const double sig = Sigmoid(z);
      g = pw * y * (sig - 1) + (1 - y) * sig;
      if (pred != nullptr) *pred = static_cast<float>(sig);
      break;
    }
    case LossKind::kL1: {
      const double d = z - y;
      v = fabs(d);
      g = d > 0 ? 1.0 : (d < 0 ? -1.0 : 0.0);
      if (pred != nullptr) *pred = zf;
      break;
    }
    case LossKind::kHuber: {
      const double d = z - y, delta = p.huber_delta;
      if (fabs(d) < delta) {
        v = 0.5 * d * d;
        g = d;
      } else {
        v = delta * (fabs(d) - 0.5 * delta);
        g = d > 0 ? delta : -delta;
      }
      if (pred != nullptr) *pred = zf;
      break;
    }
    case LossKind::kMse:
    default: {
      const double d = z - y;
      v = d * d;
      g = 2 * d;
      if (pred != nullptr) *pred = zf;
      break;
    }
  }
  if (grad != nullptr) *grad = static_cast<float>(g * scale);
  return v;
}

// The loss of `batch` rows on the host, summed in row order: outputs, grad,
// pred: [batch, width]; classes: [batch] (softmax cross-entropy, each in
// [0, width)) or values: [batch, width] (the others). grad and pred may be
// null.
inline double SumOnHost(const LossParams& p, const float* outputs, int64_t batch,
                        const int32_t* classes, const float* values, double scale, float* grad,
                        float* pred) {
  const int64_t w = p.width;
  double value = 0;
  if (p.kind == LossKind::kSoftmaxCrossEntropy) {
    for (int64_t r = 0; r < batch; ++r) {
      value += SoftmaxCrossEntropyRow(p, outputs + r * w, classes[r], scale,
                                      grad != nullptr ? grad + r * w : nullptr,
                                      pred != nullptr ? pred + r * w : nullptr);
    }
    return value;
  }
  for (int64_t i = 0; i < batch * w; ++i) {
    value +=
        ElementLoss(p, i % w, outputs[i], values[i], scale, grad != nullptr ? grad + i : nullptr,
                    pred != nullptr ? pred + i : nullptr);
  }
  return value;
}

}  // namespace loss_math
}  // namespace traind::engine

#endif  // TRAIND_WORKER_ENGINE_BACKEND_LOSS_MATH_H_
