// A dense layer's forward and backward pass in plain double-precision loops,
// for tests of the backends' dense kernels: z = x w + b, y = f(z),
// dz = dy ⊙ f'(y), dw = xᵀ dz, db = Σ_rows dz, dx = dz wᵀ.
#ifndef TRAIND_WORKER_ENGINE_TESTING_DENSE_REFERENCE_H_
#define TRAIND_WORKER_ENGINE_TESTING_DENSE_REFERENCE_H_

#include <cstdint>
#include <vector>

#include "gtest/gtest.h"
#include "worker/engine/backend/activation_math.h"
#include "worker/engine/backend/backend.h"
#include "worker/engine/tensor.h"

namespace traind::engine::testing {

// x: [batch, in], w: [in, out], b: [out] or null (no bias), dy: [batch, out]
// (the upstream gradient, as it was before a kernel overwrote it with dz);
// f: an activation whose derivative needs only y (DerivativeFromOutput).
// Checks y, dw, db (when b is given and db is not null) and dx of a kernel
// against the reference: y within y_tolerance, the gradients within
// grad_tolerance.
inline void ExpectDenseMatchesReference(const Tensor& x, const Tensor& w, const float* b,
                                        const std::vector<float>& dy, ActivationFn f,
                                        const Tensor& y, const Tensor& dw, const Tensor* db,
                                        const Tensor& dx, double y_tolerance,
                                        double grad_tolerance) {
  const int64_t batch = x.rows(), in = x.cols(), out = w.cols();
  std::vector<double> dz(static_cast<size_t>(batch * out));
  for (int64_t r = 0; r < batch; ++r) {
    for (int64_t j = 0; j < out; ++j) {
      double z = b != nullptr ? b[j] : 0.0;
      for (int64_t k = 0; k < in; ++k) z += double{x.f32()[r * in + k]} * w.f32()[k * out + j];
      const float expect = activation_math::Activate(f.kind, f.alpha, static_cast<float>(z));
      ASSERT_NEAR(y.f32()[r * out + j], expect, y_tolerance) << "y " << r << "," << j;
      dz[r * out + j] =
          dy[r * out + j] * activation_math::Derivative(f.kind, f.alpha, 0.0f, expect);
    }
  }
  for (int64_t k = 0; k < in; ++k) {
    for (int64_t j = 0; j < out; ++j) {
      double sum = 0;
      for (int64_t r = 0; r < batch; ++r) sum += double{x.f32()[r * in + k]} * dz[r * out + j];
      ASSERT_NEAR(dw.f32()[k * out + j], sum, grad_tolerance) << "dw " << k << "," << j;
    }
  }
  if (b != nullptr && db != nullptr) {
    for (int64_t j = 0; j < out; ++j) {
      double sum = 0;
      for (int64_t r = 0; r < batch; ++r) sum += dz[r * out + j];
      ASSERT_NEAR(db->f32()[j], sum, grad_tolerance) << "db " << j;
    }
  }
  for (int64_t r = 0; r < batch; ++r) {
    for (int64_t k = 0; k < in; ++k) {
      double sum = 0;
      for (int64_t j = 0; j < out; ++j) sum += dz[r * out + j] * w.f32()[k * out + j];
      ASSERT_NEAR(dx.f32()[r * in + k], sum, grad_tolerance) << "dx " << r << "," << k;
    }
  }
}

}  // namespace traind::engine::testing

#endif  // TRAIND_WORKER_ENGINE_TESTING_DENSE_REFERENCE_H_
