// Gradient checks of every layer kind (and every activation) against central
// finite differences, and train/eval behaviour of dropout and batch norm.
#include <cmath>
#include <memory>
#include <utility>
#include <vector>

#include "base/random.h"
#include "gtest/gtest.h"
#include "worker/engine/backend/cpu/cpu_backend.h"
#include "worker/engine/layers/dense.h"
#include "worker/engine/layers/elementwise.h"
#include "worker/engine/layers/normalization.h"
#include "worker/engine/testing/gradient_check.h"

namespace traind::engine {
namespace {

using testing::CheckGradient;
using testing::GradientCheckResult;

void Fill(Tensor* t, double scale, Rng& rng, double away_from_zero = 0) {
  for (int64_t i = 0; i < t->size(); ++i) {
    double v = scale * (2 * rng.Uniform() - 1);
    if (std::abs(v) < away_from_zero) v = v < 0 ? v - away_from_zero : v + away_from_zero;
    t->f32()[i] = static_cast<float>(v);
  }
}

Tensor New(Backend* b, int64_t rows, int64_t cols) {
  return std::move(b->Allocate2d(DType::kF32, rows, cols)).value();
}

// L = Σ r ⊙ layer(x) for a fixed random r (dL/dy = r). Checks dL/dx and
// dL/d(every parameter). `kinked` layers skip coordinates whose perturbation
// changes which outputs are positive.
void CheckLayer(Backend* backend, Layer* layer, int64_t batch, bool kinked, uint64_t seed,
                double away_from_zero = 0.0, float eps = 1e-2f, double rtol = 1e-2) {
  Rng rng(seed);
  const int64_t in = layer->in(), out = layer->out();
  Tensor x = New(backend, batch, in), y = New(backend, batch, out), dy = New(backend, batch, out),
         dx = New(backend, batch, in);
  Fill(&x, 1.5, rng, away_from_zero);
  std::vector<double> r(static_cast<size_t>(batch * out));
  for (double& v : r) v = 2 * rng.Uniform() - 1;
  ForwardMode mode;
  mode.training = true;
  mode.seed = 99;
  ASSERT_TRUE(layer->Forward(x, mode, &y).ok());
  const std::vector<float> y0(y.f32(), y.f32() + y.size());
  for (int64_t i = 0; i < dy.size(); ++i) dy.f32()[i] = static_cast<float>(r[i]);
  ASSERT_TRUE(layer->Backward(x, y, &dy, &dx).ok());
  const std::vector<float> dxv(dx.f32(), dx.f32() + dx.size());
  std::vector<Parameter> params;
  layer->AppendParameters("p", &params);
  std::vector<std::vector<float>> grads;
  for (const Parameter& p : params)
    grads.emplace_back(p.grad->f32(), p.grad->f32() + p.grad->size());

  auto loss = [&]() {
    EXPECT_TRUE(layer->Forward(x, mode, &y).ok());
    double l = 0;
    for (int64_t i = 0; i < y.size(); ++i) l += r[i] * y.f32()[i];
    return l;
  };
  auto smooth = [&]() {
    if (!kinked) return true;
    for (int64_t i = 0; i < y.size(); ++i) {
      if ((y.f32()[i] > 0) != (y0[i] > 0)) return false;
    }
    return true;
  };
  GradientCheckResult rx = CheckGradient("dx", &x, dxv.data(), loss, smooth, eps, 2e-3, rtol);
  EXPECT_GT(rx.checked, rx.skipped);
  for (size_t i = 0; i < params.size(); ++i) {
    GradientCheckResult rp = CheckGradient(params[i].name, params[i].value, grads[i].data(), loss,
                                           smooth, eps, 2e-3, rtol);
    EXPECT_GT(rp.checked, rp.skipped) << params[i].name;
  }
}

struct ActivationCase {
  DenseActivation kind;
  float alpha;
  bool kinked;
};

const ActivationCase kActivations[] = {
    {DenseActivation::kLinear, 0, false},      {DenseActivation::kRelu, 0, true},
    {DenseActivation::kLeakyRelu, 0.1f, true}, {DenseActivation::kElu, 1.0f, true},
    {DenseActivation::kGelu, 0, false},        {DenseActivation::kSigmoid, 0, false},
    {DenseActivation::kTanh, 0, false},        {DenseActivation::kSoftplus, 0, false},
    {DenseActivation::kSwish, 0, false},
};

TEST(LayerGradientTest, EveryActivationLayer) {
  std::unique_ptr<Backend> backend = std::move(CreateCpuBackend()).value();
  for (const ActivationCase& c : kActivations) {
    SCOPED_TRACE(static_cast<int>(c.kind));
    ActivationLayer layer(backend.get(), 5, ActivationFn{c.kind, c.alpha});
    // Inputs at least 0.05 away from the kinks at 0 (eps is 1e-2).
    CheckLayer(backend.get(), &layer, 4, false, 11, 0.05);
  }
}

TEST(LayerGradientTest, DenseWithEveryActivationWithAndWithoutBias) {
  std::unique_ptr<Backend> backend = std::move(CreateCpuBackend()).value();
  for (const ActivationCase& c : kActivations) {
    for (bool bias : {true, false}) {
      SCOPED_TRACE(static_cast<int>(c.kind) * 2 + (bias ? 1 : 0));
      Dense layer = std::move(Dense::Create(backend.get(), 5, 4, ActivationFn{c.kind, c.alpha},
                                            bias, WeightInit()))
                        .value();
      Rng rng(3);
      ASSERT_TRUE(layer.Initialize(rng).ok());
      if (bias) Fill(&layer.bias(), 0.5, rng);
      std::vector<Parameter> params;
      layer.AppendParameters("d", &params);
      EXPECT_EQ(params.size(), bias ? 2u : 1u);
      CheckLayer(backend.get(), &layer, 6, c.kinked, 17, 0.0, 1e-2f);
    }
  }
}

// Evaluation passes fuse every activation into the matmul (oneDNN post-ops):
// the same outputs as the training pass.
TEST(DenseTest, FusedEvaluationMatchesTraining) {
  std::unique_ptr<Backend> backend = std::move(CreateCpuBackend()).value();
  for (const ActivationCase& c : kActivations) {
    SCOPED_TRACE(static_cast<int>(c.kind));
    Dense layer = std::move(Dense::Create(backend.get(), 6, 5, ActivationFn{c.kind, c.alpha}, true,
                                          WeightInit()))
                      .value();
    Rng rng(12);
    ASSERT_TRUE(layer.Initialize(rng).ok());
    Fill(&layer.bias(), 0.5, rng);
    Tensor x = New(backend.get(), 9, 6), a = New(backend.get(), 9, 5), b = New(backend.get(), 9, 5);
    Fill(&x, 3.0, rng);
    ForwardMode eval;
    eval.training = false;
    ASSERT_TRUE(layer.Forward(x, ForwardMode(), &a).ok());
    ASSERT_TRUE(layer.Forward(x, eval, &b).ok());
    for (int64_t i = 0; i < a.size(); ++i) {
      EXPECT_NEAR(a.f32()[i], b.f32()[i], 1e-5 + 1e-5 * std::abs(a.f32()[i])) << i;
    }
  }
}

TEST(LayerGradientTest, DropoutUsesItsMask) {
  std::unique_ptr<Backend> backend = std::move(CreateCpuBackend()).value();
  Dropout layer(backend.get(), 50, 0.4f);
  CheckLayer(backend.get(), &layer, 8, false, 5);
  // Training: about 40% zeros, the rest scaled by 1 / 0.6; evaluation: the identity.
  Tensor x = New(backend.get(), 8, 50), y = New(backend.get(), 8, 50);
  ASSERT_TRUE(backend->Fill(1.0f, &x).ok());
  ForwardMode train;
  train.seed = 7;
  ASSERT_TRUE(layer.Forward(x, train, &y).ok());
  int zeros = 0;
  for (int64_t i = 0; i < y.size(); ++i) {
    if (y.f32()[i] == 0.0f) {
      ++zeros;
    } else {
      EXPECT_FLOAT_EQ(y.f32()[i], 1.0f / 0.6f);
    }
  }
  EXPECT_GT(zeros, 120);
  EXPECT_LT(zeros, 200);
  std::vector<float> first(y.f32(), y.f32() + y.size());
  ASSERT_TRUE(layer.Forward(x, train, &y).ok());  // same seed, same mask
  EXPECT_EQ(first, std::vector<float>(y.f32(), y.f32() + y.size()));
  ForwardMode eval;
  eval.training = false;
  ASSERT_TRUE(layer.Forward(x, eval, &y).ok());
  for (int64_t i = 0; i < y.size(); ++i) EXPECT_EQ(y.f32()[i], 1.0f);
}

TEST(LayerGradientTest, BatchNormTrainingPass) {
  std::unique_ptr<Backend> backend = std::move(CreateCpuBackend()).value();
  std::unique_ptr<BatchNorm> layer =
      std::move(BatchNorm::Create(backend.get(), 4, 0.1f, 1e-5f)).value();
  std::vector<Parameter> params;
  layer->AppendParameters("bn", &params);
  Rng rng(8);
  for (const Parameter& p : params) Fill(p.value, 1.0, rng);
  CheckLayer(backend.get(), layer.get(), 7, false, 21, 0.0, 1e-2f, 2e-2);
}

TEST(LayerGradientTest, BatchNormRunningStatisticsAndEvaluation) {
  std::unique_ptr<Backend> backend = std::move(CreateCpuBackend()).value();
  std::unique_ptr<BatchNorm> layer =
      std::move(BatchNorm::Create(backend.get(), 1, 0.1f, 0.0f)).value();
  Tensor x = New(backend.get(), 4, 1), y = New(backend.get(), 4, 1);
  const float values[4] = {1, 2, 3, 6};  // mean 3, biased var 3.5, unbiased 14/3
  std::copy(values, values + 4, x.f32());
  ASSERT_TRUE(layer->Forward(x, ForwardMode(), &y).ok());
  EXPECT_NEAR(y.f32()[0], -2 / std::sqrt(3.5), 1e-6);
  EXPECT_NEAR(y.f32()[3], 3 / std::sqrt(3.5), 1e-6);
  std::vector<Parameter> buffers;
  layer->AppendBuffers("bn", &buffers);
  ASSERT_EQ(buffers.size(), 2u);
  EXPECT_NEAR(buffers[0].value->f32()[0], 0.1 * 3, 1e-6);               // 0.9 · 0 + 0.1 · 3
  EXPECT_NEAR(buffers[1].value->f32()[0], 0.9 + 0.1 * 14.0 / 3, 1e-6);  // 0.9 · 1 + 0.1 · 14/3
  ForwardMode eval;
  eval.training = false;
  ASSERT_TRUE(layer->Forward(x, eval, &y).ok());
  const double rm = 0.3, rv = 0.9 + 0.1 * 14.0 / 3;
  EXPECT_NEAR(y.f32()[3], (6 - rm) / std::sqrt(rv), 1e-5);
}

TEST(LayerGradientTest, BatchNorm2dTrainingPass) {
  std::unique_ptr<Backend> backend = std::move(CreateCpuBackend()).value();
  std::unique_ptr<BatchNorm2d> layer =
      std::move(BatchNorm2d::Create(backend.get(), 3, 4, 0.1f, 1e-5f)).value();
  std::vector<Parameter> params;
  layer->AppendParameters("bn", &params);
  ASSERT_EQ(params.size(), 2u);
  EXPECT_EQ(params[0].value->size(), 3);  // per channel
  Rng rng(8);
  for (const Parameter& p : params) Fill(p.value, 1.0, rng);
  CheckLayer(backend.get(), layer.get(), 3, false, 22, 0.0, 1e-2f, 2e-2);
}

// Per channel over the batch's pixels (PyTorch's BatchNorm2d): 2 images of
// 2 channels × 2 pixels, values by hand.
TEST(LayerGradientTest, BatchNorm2dNormalizesEachChannelOverBatchAndPixels) {
  std::unique_ptr<Backend> backend = std::move(CreateCpuBackend()).value();
  std::unique_ptr<BatchNorm2d> layer =
      std::move(BatchNorm2d::Create(backend.get(), 2, 2, 0.1f, 0.0f)).value();
  Tensor x = New(backend.get(), 2, 4), y = New(backend.get(), 2, 4);
  // Channel 0: {1, 2} and {3, 6} (mean 3, biased var 3.5, unbiased 14/3);
  // channel 1: {10, 10} and {10, 14} (mean 11, biased var 3).
  const float values[8] = {1, 2, 10, 10, 3, 6, 10, 14};
  std::copy(values, values + 8, x.f32());
  ASSERT_TRUE(layer->Forward(x, ForwardMode(), &y).ok());
  EXPECT_NEAR(y.f32()[0], -2 / std::sqrt(3.5), 1e-6);
  EXPECT_NEAR(y.f32()[5], 3 / std::sqrt(3.5), 1e-6);
  EXPECT_NEAR(y.f32()[2], -1 / std::sqrt(3.0), 1e-6);
  EXPECT_NEAR(y.f32()[7], 3 / std::sqrt(3.0), 1e-6);
  std::vector<Parameter> buffers;
  layer->AppendBuffers("bn", &buffers);
  ASSERT_EQ(buffers.size(), 2u);
  EXPECT_NEAR(buffers[0].value->f32()[0], 0.1 * 3, 1e-6);
  EXPECT_NEAR(buffers[0].value->f32()[1], 0.1 * 11, 1e-6);
  EXPECT_NEAR(buffers[1].value->f32()[0], 0.9 + 0.1 * 14.0 / 3, 1e-6);
  EXPECT_NEAR(buffers[1].value->f32()[1], 0.9 + 0.1 * 4.0, 1e-6);  // 12 / 3
  ForwardMode eval;
  eval.training = false;
  ASSERT_TRUE(layer->Forward(x, eval, &y).ok());
  EXPECT_NEAR(y.f32()[7], (14 - 1.1) / std::sqrt(1.3), 1e-5);
}

TEST(LayerGradientTest, LayerNorm) {
  std::unique_ptr<Backend> backend = std::move(CreateCpuBackend()).value();
  std::unique_ptr<LayerNorm> layer = std::move(LayerNorm::Create(backend.get(), 5, 1e-5f)).value();
  std::vector<Parameter> params;
  layer->AppendParameters("ln", &params);
  Rng rng(9);
  for (const Parameter& p : params) Fill(p.value, 1.0, rng);
  CheckLayer(backend.get(), layer.get(), 3, false, 31, 0.0, 1e-2f, 2e-2);
  // Each row is normalized: with gamma 1 and beta 0 the outputs have mean 0.
  ASSERT_TRUE(backend->Fill(1.0f, params[0].value).ok());
  ASSERT_TRUE(backend->Fill(0.0f, params[1].value).ok());
  Tensor x = New(backend.get(), 1, 5), y = New(backend.get(), 1, 5);
  const float v[5] = {1, 2, 3, 4, 5};  // mean 3, var 2
  std::copy(v, v + 5, x.f32());
  ASSERT_TRUE(layer->Forward(x, ForwardMode(), &y).ok());
  EXPECT_NEAR(y.f32()[0], -2 / std::sqrt(2.0 + 1e-5), 1e-5);
}

}  // namespace
}  // namespace traind::engine
