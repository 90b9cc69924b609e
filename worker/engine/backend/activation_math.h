// The elementwise activations' arithmetic, one value at a time, shared by
// the CPU backend (backend/cpu) and the CUDA kernels (backend/cuda): the
// functions are __host__ __device__ under nvcc, so both backends compute
// every activation and every derivative with the same formula, in float.
//
// Self-contained: no abseil, no standard library beyond <math.h>, so that
// nvcc compiles it into device code (as loss_math.h).
#ifndef TRAIND_WORKER_ENGINE_BACKEND_ACTIVATION_MATH_H_
#define TRAIND_WORKER_ENGINE_BACKEND_ACTIVATION_MATH_H_

#include <math.h>

#if defined(__CUDACC__)
#define TRAIND_ACTIVATION_FN __host__ __device__ __forceinline__
#else
#define TRAIND_ACTIVATION_FN inline
#endif

namespace traind::engine {

// Elementwise activations. Those for which DerivativeFromOutput is true are
// fused into the dense matmul (oneDNN post-ops, cuBLASLt epilogues): their
// derivative needs only y; the others are applied by the dense layer after a
// linear kernel.
enum class DenseActivation {
  kLinear,
  kRelu,
  kLeakyRelu,  // alpha: slope for x < 0
  kElu,        // alpha (exp(x) - 1) for x < 0
  kGelu,       // x Φ(x), erf form
  kSigmoid,
  kTanh,
  kSoftplus,  // log(1 + exp(x))
  kSwish,     // x sigmoid(x)
};

// True when f'(z) can be computed from y = f(z) alone.
TRAIND_ACTIVATION_FN constexpr bool DerivativeFromOutput(DenseActivation kind) {
  return kind != DenseActivation::kGelu && kind != DenseActivation::kSoftplus &&
         kind != DenseActivation::kSwish;
}

namespace activation_math {

// 1/√2 and 1/√(2π).
inline constexpr float kSqrtHalf = 0.70710678118654752f;
inline constexpr float kInvSqrt2Pi = 0.3989422804014327f;

// f(z) of each activation.
TRAIND_ACTIVATION_FN float Relu(float z) { return z > 0.0f ? z : 0.0f; }
TRAIND_ACTIVATION_FN float LeakyRelu(float alpha, float z) { return z > 0.0f ? z : alpha * z; }
TRAIND_ACTIVATION_FN float Elu(float alpha, float z) { return z > 0.0f ? z : alpha * expm1f(z); }
TRAIND_ACTIVATION_FN float Gelu(float z) { return 0.5f * z * (1.0f + erff(z * kSqrtHalf)); }
TRAIND_ACTIVATION_FN float Sigmoid(float z) { return 1.0f / (1.0f + expf(-z)); }
TRAIND_ACTIVATION_FN float Tanh(float z) { return tanhf(z); }
// log(1 + e^z) = max(z, 0) + log1p(e^-|z|): no overflow. NaN in, NaN out.
TRAIND_ACTIVATION_FN float Softplus(float z) {
  return (z < 0.0f ? 0.0f : z) + log1pf(expf(-fabsf(z)));
}
TRAIND_ACTIVATION_FN float Swish(float z) { return z / (1.0f + expf(-z)); }

// f' of the activations whose derivative follows from y = f(z) alone.
TRAIND_ACTIVATION_FN float ReluGradFromOutput(float y) { return y > 0.0f ? 1.0f : 0.0f; }
TRAIND_ACTIVATION_FN float LeakyReluGradFromOutput(float alpha, float y) {
  return y > 0.0f ? 1.0f : alpha;
}
// e^z α = y + α for z ≤ 0.
TRAIND_ACTIVATION_FN float EluGradFromOutput(float alpha, float y) {
  return y > 0.0f ? 1.0f : y + alpha;
}
TRAIND_ACTIVATION_FN float SigmoidGradFromOutput(float y) { return y * (1.0f - y); }
TRAIND_ACTIVATION_FN float TanhGradFromOutput(float y) { return 1.0f - y * y; }

// f' of the others, from z.
// Φ(z) + z φ(z)
TRAIND_ACTIVATION_FN float GeluGrad(float z) {
  const float cdf = 0.5f * (1.0f + erff(z * kSqrtHalf));
  const float pdf = kInvSqrt2Pi * expf(-0.5f * z * z);
  return cdf + z * pdf;
}
// σ(z)
TRAIND_ACTIVATION_FN float SoftplusGrad(float z) { return 1.0f / (1.0f + expf(-z)); }
// σ(z) + z σ(z)(1 - σ(z))
TRAIND_ACTIVATION_FN float SwishGrad(float z) {
  const float s = 1.0f / (1.0f + expf(-z));
  return s + z * s * (1.0f - s);
}

// y = f(z) of `kind` (alpha: its parameter, where it has one).
TRAIND_ACTIVATION_FN float Activate(DenseActivation kind, float alpha, float z) {
  switch (kind) {
    case DenseActivation::kLinear:
      return z;
    case DenseActivation::kRelu:
      return Relu(z);
    case DenseActivation::kLeakyRelu:
      return LeakyRelu(alpha, z);
    case DenseActivation::kElu:
      return Elu(alpha, z);
    case DenseActivation::kGelu:
      return Gelu(z);
    case DenseActivation::kSigmoid:
      return Sigmoid(z);
    case DenseActivation::kTanh:
      return Tanh(z);
    case DenseActivation::kSoftplus:
      return Softplus(z);
    case DenseActivation::kSwish:
      return Swish(z);
  }
  return z;
}

// f'(z) of `kind`, given z and y = f(z). Where DerivativeFromOutput(kind),
// only y is read (z may be anything, e.g. 0); otherwise only z.
TRAIND_ACTIVATION_FN float Derivative(DenseActivation kind, float alpha, float z, float y) {
  switch (kind) {
    case DenseActivation::kLinear:
      return 1.0f;
    case DenseActivation::kRelu:
      return ReluGradFromOutput(y);
    case DenseActivation::kLeakyRelu:
      return LeakyReluGradFromOutput(alpha, y);
    case DenseActivation::kElu:
      return EluGradFromOutput(alpha, y);
    case DenseActivation::kGelu:
      return GeluGrad(z);
    case DenseActivation::kSigmoid:
      return SigmoidGradFromOutput(y);
    case DenseActivation::kTanh:
      return TanhGradFromOutput(y);
    case DenseActivation::kSoftplus:
      return SoftplusGrad(z);
    case DenseActivation::kSwish:
      return SwishGrad(z);
  }
  return 1.0f;
}

}  // namespace activation_math
}  // namespace traind::engine

#endif  // TRAIND_WORKER_ENGINE_BACKEND_ACTIVATION_MATH_H_
