// Central finite differences for gradient checks in tests.
#ifndef TRAIND_WORKER_ENGINE_TESTING_GRADIENT_CHECK_H_
#define TRAIND_WORKER_ENGINE_TESTING_GRADIENT_CHECK_H_

#include <cmath>
#include <functional>
#include <string>

#include "gtest/gtest.h"
#include "worker/engine/tensor.h"

namespace traind::engine::testing {

struct GradientCheckResult {
  int checked = 0;  // coordinates compared
  int skipped = 0;  // coordinates whose perturbation crossed a kink
};

// For every element v of `value` (a host tensor), compares analytic[i] with
// (f(v + eps) - f(v - eps)) / (actual float32 step), where `f` recomputes the
// scalar in double. `smooth()` is called after each perturbed evaluation and
// returns false when the perturbation crossed a non-differentiable point
// (e.g. a ReLU changed sign); such coordinates are skipped and counted.
// Passes when |analytic - numeric| <= atol + rtol |numeric|.
inline GradientCheckResult CheckGradient(const std::string& name, Tensor* value,
                                         const float* analytic, const std::function<double()>& f,
                                         const std::function<bool()>& smooth, float eps,
                                         double atol, double rtol) {
  GradientCheckResult result;
  for (int64_t i = 0; i < value->size(); ++i) {
    float& v = value->f32()[i];
    const float saved = v;
    v = saved + eps;
    const float hi = v;
    const double f_hi = f();
    bool ok = smooth();
    v = saved - eps;
    const float lo = v;
    const double f_lo = f();
    ok = ok && smooth();
    v = saved;
    if (!ok) {
      ++result.skipped;
      continue;
    }
    ++result.checked;
    const double numeric = (f_hi - f_lo) / (double{hi} - double{lo});
    EXPECT_NEAR(analytic[i], numeric, atol + rtol * std::abs(numeric)) << name << "[" << i << "]";
  }
  return result;
}

}  // namespace traind::engine::testing

#endif  // TRAIND_WORKER_ENGINE_TESTING_GRADIENT_CHECK_H_
