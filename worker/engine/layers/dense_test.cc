// Gradient checks of the dense layer: backward against central differences.
#include "worker/engine/layers/dense.h"

#include <memory>
#include <utility>
#include <vector>

#include "base/random.h"
#include "gtest/gtest.h"
#include "worker/engine/backend/cpu/cpu_backend.h"
#include "worker/engine/testing/gradient_check.h"

namespace traind::engine {
namespace {

using testing::CheckGradient;
using testing::GradientCheckResult;

void FillUniform(Tensor* t, double scale, Rng& rng) {
  for (int64_t i = 0; i < t->size(); ++i) {
    t->f32()[i] = static_cast<float>(scale * (2 * rng.Uniform() - 1));
  }
}

// L = Σ r ⊙ dense(x) for a fixed random r, so dL/dy = r.
void CheckDense(DenseActivation activation) {
  const int64_t batch = 6, in = 5, out = 4;
  std::unique_ptr<Backend> backend = std::move(CreateCpuBackend()).value();
  Dense layer = std::move(Dense::Create(backend.get(), in, out, activation)).value();
  Rng rng(activation == DenseActivation::kRelu ? 17 : 5);
  ASSERT_TRUE(layer.Initialize(traind::v1::XAVIER_UNIFORM, rng).ok());
  FillUniform(&layer.bias(), 0.5, rng);  // nonzero, so db is exercised
  Tensor x = std::move(backend->Allocate2d(DType::kF32, batch, in)).value();
  FillUniform(&x, 1.0, rng);
  Tensor y = std::move(backend->Allocate2d(DType::kF32, batch, out)).value();
  Tensor dy = std::move(backend->Allocate2d(DType::kF32, batch, out)).value();
  Tensor dx = std::move(backend->Allocate2d(DType::kF32, batch, in)).value();
  std::vector<double> r(static_cast<size_t>(batch * out));
  for (double& v : r) v = 2 * rng.Uniform() - 1;

  ASSERT_TRUE(layer.Forward(x, &y).ok());
  const std::vector<float> y0(y.f32(), y.f32() + y.size());
  for (int64_t i = 0; i < dy.size(); ++i) dy.f32()[i] = static_cast<float>(r[i]);
  ASSERT_TRUE(layer.Backward(x, y, &dy, &dx).ok());
  const std::vector<float> dw(layer.weight_grad().f32(), layer.weight_grad().f32() + in * out);
  const std::vector<float> db(layer.bias_grad().f32(), layer.bias_grad().f32() + out);
  const std::vector<float> dxv(dx.f32(), dx.f32() + dx.size());

  auto loss = [&]() {
    EXPECT_TRUE(layer.Forward(x, &y).ok());
    double l = 0;
    for (int64_t i = 0; i < y.size(); ++i) l += r[i] * y.f32()[i];
    return l;
  };
  // A coordinate is smooth when no ReLU changed between on and off.
  auto smooth = [&]() {
    for (int64_t i = 0; i < y.size(); ++i) {
      if ((y.f32()[i] > 0) != (y0[i] > 0)) return false;
    }
    return true;
  };
  const float eps = 1e-2f;
  GradientCheckResult w_result =
      CheckGradient("dw", &layer.weight(), dw.data(), loss, smooth, eps, 1e-3, 1e-3);
  GradientCheckResult b_result =
      CheckGradient("db", &layer.bias(), db.data(), loss, smooth, eps, 1e-3, 1e-3);
  GradientCheckResult x_result = CheckGradient("dx", &x, dxv.data(), loss, smooth, eps, 1e-3, 1e-3);
  EXPECT_EQ(w_result.checked + w_result.skipped, in * out);
  EXPECT_GE(w_result.checked, in * out * 3 / 4);
  EXPECT_GE(b_result.checked, out / 2);
  EXPECT_GE(x_result.checked, batch * in * 3 / 4);
  if (activation == DenseActivation::kRelu) {
    // The test means something only if some units are off.
    int off = 0;
    for (float v : y0) off += v == 0.0f ? 1 : 0;
    EXPECT_GT(off, 0);
    EXPECT_LT(off, static_cast<int>(y0.size()));
  }
}

TEST(DenseTest, LinearGradientMatchesFiniteDifferences) { CheckDense(DenseActivation::kLinear); }

TEST(DenseTest, ReluGradientMatchesFiniteDifferences) { CheckDense(DenseActivation::kRelu); }

TEST(DenseTest, BiasStartsAtZeroAndBatchSizesShareParameters) {
  std::unique_ptr<Backend> backend = std::move(CreateCpuBackend()).value();
  Dense layer = std::move(Dense::Create(backend.get(), 3, 2, DenseActivation::kLinear)).value();
  Rng rng(1);
  ASSERT_TRUE(layer.Initialize(traind::v1::XAVIER_NORMAL, rng).ok());
  EXPECT_EQ(layer.bias().f32()[0], 0.0f);
  EXPECT_EQ(layer.bias().f32()[1], 0.0f);
  // One row through a batch-1 kernel equals the same row in a batch-3 kernel.
  Tensor x3 = std::move(backend->Allocate2d(DType::kF32, 3, 3)).value();
  Tensor x1 = std::move(backend->Allocate2d(DType::kF32, 1, 3)).value();
  FillUniform(&x3, 1.0, rng);
  for (int i = 0; i < 3; ++i) x1.f32()[i] = x3.f32()[3 + i];
  Tensor y3 = std::move(backend->Allocate2d(DType::kF32, 3, 2)).value();
  Tensor y1 = std::move(backend->Allocate2d(DType::kF32, 1, 2)).value();
  ASSERT_TRUE(layer.Forward(x3, &y3).ok());
  ASSERT_TRUE(layer.Forward(x1, &y1).ok());
  EXPECT_NEAR(y1.f32()[0], y3.f32()[2], 1e-6);
  EXPECT_NEAR(y1.f32()[1], y3.f32()[3], 1e-6);
}

}  // namespace
}  // namespace traind::engine
