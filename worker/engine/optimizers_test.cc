#include "worker/engine/optimizers.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "base/random.h"
#include "base/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "spec/checks.h"
#include "worker/engine/backend/cpu/cpu_backend.h"
#include "worker/engine/backend/cpu/cpu_parallel.h"
#include "worker/engine/layers/dense.h"

namespace traind::engine {
namespace {

using ::testing::ElementsAre;
using ::testing::FloatNear;

// One parameter w = [1, -2] updated three times with gradients
// g1 = [0.5, -1], g2 = [0.25, 0.5], g3 = [-1, 2].
class OptimizerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<Backend>> backend = CreateCpuBackend();
    ASSERT_TRUE(backend.ok()) << backend.status();
    backend_ = std::move(*backend);
    w_ = std::move(backend_->Allocate1d(DType::kF32, 2)).value();
    g_ = std::move(backend_->Allocate1d(DType::kF32, 2)).value();
    w_.f32()[0] = 1.0f;
    w_.f32()[1] = -2.0f;
  }

  // Runs the three steps; returns w after each.
  std::vector<std::vector<float>> Run(const traind::v1::OptimizerSpec& spec) {
    absl::StatusOr<std::unique_ptr<Optimizer>> opt =
        CreateOptimizer(spec, backend_.get(), {Parameter{"w", &w_, &g_}});
    EXPECT_TRUE(opt.ok()) << opt.status();
    if (!opt.ok()) return {};
    const float grads[3][2] = {{0.5f, -1.0f}, {0.25f, 0.5f}, {-1.0f, 2.0f}};
    std::vector<std::vector<float>> history;
    for (const auto& g : grads) {
      g_.f32()[0] = g[0];
      g_.f32()[1] = g[1];
      EXPECT_TRUE((*opt)->Step().ok());
      history.push_back({w_.f32()[0], w_.f32()[1]});
    }
    EXPECT_EQ((*opt)->steps(), 3);
    return history;
  }

  std::unique_ptr<Backend> backend_;
  Tensor w_, g_;
};

TEST_F(OptimizerTest, SgdWithMomentum) {
  traind::v1::OptimizerSpec spec;
  spec.mutable_sgd()->set_learning_rate(0.1);
  spec.mutable_sgd()->set_momentum(0.9);
  // v = 0.9 v + g; w -= 0.1 v
  // 1: v = [0.5, -1];                                  w = [1 - 0.05, -2 + 0.1]       = [0.95,
  // -1.9] 2: v = [0.45 + 0.25, -0.9 + 0.5] = [0.7, -0.4];    w = [0.95 - 0.07, -1.9 + 0.04] =
  // [0.88, -1.86] 3: v = [0.63 - 1, -0.36 + 2] = [-0.37, 1.64];      w = [0.88 + 0.037, -1.86 -
  // 0.164] = [0.917, -2.024]
  auto w = Run(spec);
  ASSERT_EQ(w.size(), 3u);
  EXPECT_THAT(w[0], ElementsAre(FloatNear(0.95f, 1e-6), FloatNear(-1.9f, 1e-6)));
  EXPECT_THAT(w[1], ElementsAre(FloatNear(0.88f, 1e-6), FloatNear(-1.86f, 1e-6)));
  EXPECT_THAT(w[2], ElementsAre(FloatNear(0.917f, 1e-6), FloatNear(-2.024f, 1e-6)));
}

TEST_F(OptimizerTest, PlainSgd) {
  traind::v1::OptimizerSpec spec;
  spec.mutable_sgd()->set_learning_rate(0.1);
  // w -= 0.1 g: [1 - 0.05 - 0.025 + 0.1, -2 + 0.1 - 0.05 - 0.2] = [1.025, -2.15]
  auto w = Run(spec);
  ASSERT_EQ(w.size(), 3u);
  EXPECT_THAT(w[2], ElementsAre(FloatNear(1.025f, 1e-6), FloatNear(-2.15f, 1e-6)));
}

TEST_F(OptimizerTest, Adam) {
  traind::v1::OptimizerSpec spec;
  spec.mutable_adam()->set_learning_rate(0.1);  // beta1 0.9, beta2 0.999, eps 1e-8 by default
  // m = 0.9 m + 0.1 g; v = 0.999 v + 0.001 g²; w -= 0.1 (m / (1 - 0.9^t)) / (sqrt(v / (1 -
  // 0.999^t)) + 1e-8) Element 0 (g = 0.5, 0.25, -1):
  //  t=1: m = 0.05, v = 0.00025; m̂ = 0.05/0.1 = 0.5, v̂ = 0.00025/0.001 = 0.25;
  //       w = 1 - 0.1 · 0.5/0.5 = 0.9
  //  t=2: m = 0.045 + 0.025 = 0.07, v = 0.00024975 + 0.0000625 = 0.00031225;
  //       m̂ = 0.07/0.19 = 0.3684211, v̂ = 0.00031225/0.001999 = 0.1562031, sqrt = 0.3952254;
  //       w = 0.9 - 0.1 · 0.9321796 = 0.8067820
  //  t=3: m = 0.063 - 0.1 = -0.037, v = 0.00031193775 + 0.001 = 0.00131193775;
  //       m̂ = -0.037/0.271 = -0.1365314, v̂ = 0.00131193775/0.002997001 = 0.4377502,
  //       sqrt = 0.6616270; w = 0.8067820 + 0.1 · 0.2063570 = 0.8274177
  // Element 1 (g = -1, 0.5, 2):
  //  t=1: m̂ = -1, v̂ = 1; w = -2 + 0.1 = -1.9
  //  t=2: m = -0.09 + 0.05 = -0.04, v = 0.000999 + 0.00025 = 0.001249;
  //       m̂ = -0.2105263, v̂ = 0.6248124, sqrt = 0.7904507; w = -1.9 + 0.1 · 0.2663370 = -1.8733663
  //  t=3: m = -0.036 + 0.2 = 0.164, v = 0.001247751 + 0.004 = 0.005247751;
  //       m̂ = 0.6051661, v̂ = 1.7510008, sqrt = 1.3232539; w = -1.8733663 - 0.1 · 0.4573318 =
  //       -1.9190995
  auto w = Run(spec);
  ASSERT_EQ(w.size(), 3u);
  EXPECT_THAT(w[0], ElementsAre(FloatNear(0.9f, 1e-6), FloatNear(-1.9f, 1e-6)));
  EXPECT_THAT(w[1], ElementsAre(FloatNear(0.8067820f, 2e-6), FloatNear(-1.8733663f, 2e-6)));
  EXPECT_THAT(w[2], ElementsAre(FloatNear(0.8274177f, 2e-6), FloatNear(-1.9190995f, 2e-6)));
}

TEST_F(OptimizerTest, AdamCustomBetas) {
  traind::v1::OptimizerSpec spec;
  spec.mutable_adam()->set_learning_rate(0.5);
  spec.mutable_adam()->set_beta1(0.0);
  spec.mutable_adam()->set_beta2(0.0);
  spec.mutable_adam()->set_epsilon(1.0);
  // beta1 = beta2 = 0: m = g, v = g², no bias correction; w -= 0.5 g / (|g| + 1)
  // Element 0: 1 - 0.5·0.5/1.5 - 0.5·0.25/1.25 + 0.5·1/2 = 1 - 1/6 - 0.1 + 0.25 = 0.9833333
  // Element 1: -2 + 0.5·1/2 - 0.5·0.5/1.5 - 0.5·2/3 = -2 + 0.25 - 1/6 - 1/3 = -2.25
  auto w = Run(spec);
  ASSERT_EQ(w.size(), 3u);
  EXPECT_THAT(w[2], ElementsAre(FloatNear(0.9833333f, 1e-6), FloatNear(-2.25f, 1e-6)));
}

TEST_F(OptimizerTest, BadSpecs) {
  traind::v1::OptimizerSpec spec;
  absl::StatusOr<std::unique_ptr<Optimizer>> opt = CreateOptimizer(spec, backend_.get(), {});
  EXPECT_EQ(FailureKindOf(opt.status()), FailureKind::kInvalidSpec);
  EXPECT_EQ(opt.status().message(), "optimizer: required (one of: sgd, adam, adamw, rmsprop)");
  spec.mutable_sgd()->set_learning_rate(0);
  opt = CreateOptimizer(spec, backend_.get(), {});
  EXPECT_EQ(opt.status().message(),
            "optimizer.sgd.learning_rate: must be a positive number, got 0");
  spec.mutable_adam()->set_learning_rate(0.1);
  spec.mutable_adam()->set_beta2(1.0);
  opt = CreateOptimizer(spec, backend_.get(), {});
  EXPECT_EQ(opt.status().message(), "optimizer.adam.beta2: must be in [0, 1), got 1");
}

}  // namespace
}  // namespace traind::engine

namespace traind::engine {
namespace {

TEST_F(OptimizerTest, SgdNesterovWithWeightDecay) {
  traind::v1::OptimizerSpec spec;
  spec.mutable_sgd()->set_learning_rate(0.1);
  spec.mutable_sgd()->set_momentum(0.5);
  spec.mutable_sgd()->set_nesterov(true);
  spec.mutable_sgd()->set_weight_decay(0.1);
  // g' = g + 0.1 w; v = 0.5 v + g'; w -= 0.1 (g' + 0.5 v)
  // 1: g' = [0.6, -1.2], v = [0.6, -1.2], w = [1 - 0.09, -2 + 0.18] = [0.91, -1.82]
  // 2: g' = [0.25 + 0.091, 0.5 - 0.182] = [0.341, 0.318]; v = [0.641, -0.282];
  //    w = [0.91 - 0.1 (0.341 + 0.3205), -1.82 - 0.1 (0.318 - 0.141)] = [0.84385, -1.8377]
  const auto h = Run(spec);
  ASSERT_EQ(h.size(), 3u);
  EXPECT_THAT(h[0], ElementsAre(FloatNear(0.91f, 1e-6f), FloatNear(-1.82f, 1e-6f)));
  EXPECT_THAT(h[1], ElementsAre(FloatNear(0.84385f, 1e-6f), FloatNear(-1.8377f, 1e-6f)));
}

TEST_F(OptimizerTest, AdamWDecouplesWeightDecay) {
  traind::v1::OptimizerSpec spec;
  spec.mutable_adamw()->set_learning_rate(0.1);
  spec.mutable_adamw()->set_weight_decay(0.1);
  // 1: w *= 1 - 0.1 * 0.1 -> [0.99, -1.98]; Adam's first step moves each
  //    weight by lr against the gradient's sign: [0.89, -1.88].
  const auto h = Run(spec);
  ASSERT_EQ(h.size(), 3u);
  EXPECT_THAT(h[0], ElementsAre(FloatNear(0.89f, 1e-6f), FloatNear(-1.88f, 1e-6f)));
  // Plain Adam with the same weight_decay adds it to the gradient instead:
  // g' = [0.6, -1.2]: the first step is still lr against the sign, without
  // the decay factor.
  spec.Clear();
  spec.mutable_adam()->set_learning_rate(0.1);
  spec.mutable_adam()->set_weight_decay(0.1);
  w_.f32()[0] = 1.0f;
  w_.f32()[1] = -2.0f;
  const auto a = Run(spec);
  EXPECT_THAT(a[0], ElementsAre(FloatNear(0.9f, 1e-6f), FloatNear(-1.9f, 1e-6f)));
}

TEST_F(OptimizerTest, RmsPropWithMomentum) {
  traind::v1::OptimizerSpec spec;
  spec.mutable_rmsprop()->set_learning_rate(0.01);
  spec.mutable_rmsprop()->set_momentum(0.9);
  // s = 0.99 s + 0.01 g²; b = 0.9 b + g / (sqrt(s) + 1e-8); w -= 0.01 b
  const double s1[2] = {0.01 * 0.25, 0.01 * 1.0};
  const double b1[2] = {0.5 / (std::sqrt(s1[0]) + 1e-8), -1.0 / (std::sqrt(s1[1]) + 1e-8)};
  const double s2[2] = {0.99 * s1[0] + 0.01 * 0.0625, 0.99 * s1[1] + 0.01 * 0.25};
  const double b2[2] = {0.9 * b1[0] + 0.25 / (std::sqrt(s2[0]) + 1e-8),
                        0.9 * b1[1] + 0.5 / (std::sqrt(s2[1]) + 1e-8)};
  const auto h = Run(spec);
  ASSERT_EQ(h.size(), 3u);
  EXPECT_THAT(h[0],
              ElementsAre(FloatNear(1 - 0.01 * b1[0], 1e-5f), FloatNear(-2 - 0.01 * b1[1], 1e-5f)));
  EXPECT_THAT(h[1], ElementsAre(FloatNear(1 - 0.01 * (b1[0] + b2[0]), 1e-5f),
                                FloatNear(-2 - 0.01 * (b1[1] + b2[1]), 1e-5f)));
  EXPECT_NEAR(h[0][0], 0.9, 1e-5);  // g / sqrt(0.01 g²) = 10 sign(g) on the first step
}

TEST_F(OptimizerTest, GradientClipping) {
  traind::v1::GradientClipping clip;
  clip.set_max_norm(1.0);
  g_.f32()[0] = 3.0f;
  g_.f32()[1] = 4.0f;  // norm 5
  ASSERT_TRUE(ClipGradients(clip, backend_.get(), {Parameter{"w", &w_, &g_}}).ok());
  EXPECT_THAT(std::vector<float>(g_.f32(), g_.f32() + 2),
              ElementsAre(FloatNear(0.6f, 1e-6f), FloatNear(0.8f, 1e-6f)));
  // A norm under the limit is left alone.
  ASSERT_TRUE(ClipGradients(clip, backend_.get(), {Parameter{"w", &w_, &g_}}).ok());
  EXPECT_THAT(std::vector<float>(g_.f32(), g_.f32() + 2),
              ElementsAre(FloatNear(0.6f, 1e-6f), FloatNear(0.8f, 1e-6f)));
  clip.set_max_value(0.5);
  g_.f32()[0] = -1.0f;
  g_.f32()[1] = 0.2f;
  ASSERT_TRUE(ClipGradients(clip, backend_.get(), {Parameter{"w", &w_, &g_}}).ok());
  EXPECT_THAT(std::vector<float>(g_.f32(), g_.f32() + 2), ElementsAre(-0.5f, 0.2f));
}

// A Dense layer that the CPU backend splits in row slabs takes SGD's update
// of its weight into its backward pass once the optimizer arms it
// (BeginStep): three steps give the weights of the update from the
// gradient, the weight's gradient is never written, the bias is still
// updated by Step. Under clipping or Nesterov nothing is armed: the same
// steps give the same bits as without BeginStep.
TEST(InBackwardUpdateTest, SgdWithMomentumInTheBackwardPassMatchesTheUpdateFromTheGradient) {
  const int saved_threads = omp_get_max_threads();
  omp_set_num_threads(2);
  constexpr int64_t kBatch = 32, kIn = 64, kOut = 640;
  ASSERT_TRUE(cpu::SplitsInRowSlabs(kIn, kOut, 2));
  absl::StatusOr<std::unique_ptr<Backend>> made = CreateCpuBackend();
  ASSERT_TRUE(made.ok()) << made.status();
  Backend* backend = made->get();
  traind::v1::OptimizerSpec fuses;
  fuses.mutable_sgd()->set_learning_rate(0.05);
  fuses.mutable_sgd()->set_momentum(0.9);
  fuses.mutable_sgd()->set_weight_decay(0.001);
  traind::v1::OptimizerSpec clipped = fuses;
  clipped.mutable_clipping()->set_max_norm(1e30);
  traind::v1::OptimizerSpec nesterov = fuses;
  nesterov.mutable_sgd()->set_nesterov(true);
  for (const auto& [name, spec, in_backward] :
       {std::tuple{"momentum", fuses, true}, std::tuple{"clipped", clipped, false},
        std::tuple{"nesterov", nesterov, false}}) {
    SCOPED_TRACE(name);
    // a: armed before each backward pass; b: not.
    std::vector<Dense> layers;
    std::vector<std::unique_ptr<Optimizer>> optimizers;
    for (int i = 0; i < 2; ++i) {
      absl::StatusOr<Dense> layer = Dense::Create(backend, kIn, kOut, DenseActivation::kRelu);
      ASSERT_TRUE(layer.ok()) << layer.status();
      layers.push_back(std::move(*layer));
      Rng rng(5);
      ASSERT_TRUE(layers.back().Initialize(rng).ok());
    }
    for (Dense& layer : layers) {
      std::vector<Parameter> params;
      layer.AppendParameters("dense", &params);
      absl::StatusOr<std::unique_ptr<Optimizer>> opt =
          CreateOptimizer(spec, backend, std::move(params));
      ASSERT_TRUE(opt.ok()) << opt.status();
      optimizers.push_back(std::move(*opt));
    }
    Tensor x = std::move(backend->Allocate2d(DType::kF32, kBatch, kIn)).value();
    Tensor dy = std::move(backend->Allocate2d(DType::kF32, kBatch, kOut)).value();
    Tensor y = std::move(backend->Allocate2d(DType::kF32, kBatch, kOut)).value();
    Rng data(9);
    for (int step = 0; step < 3; ++step) {
      std::vector<float> xs(static_cast<size_t>(x.size())), dys(static_cast<size_t>(dy.size()));
      for (float& v : xs) v = static_cast<float>(2 * data.Uniform() - 1);
      for (float& v : dys) v = static_cast<float>(2 * data.Uniform() - 1);
      for (int i = 0; i < 2; ++i) {
        std::copy(xs.begin(), xs.end(), x.f32());
        std::copy(dys.begin(), dys.end(), dy.f32());
        if (i == 0) optimizers[0]->BeginStep(0.05);
        ASSERT_TRUE(layers[i].Forward(x, &y).ok());
        ASSERT_TRUE(layers[i].Backward(x, y, &dy, nullptr).ok());
        ASSERT_TRUE(optimizers[i]->Step(0.05).ok());
      }
    }
    const Tensor& wa = layers[0].weight();
    const Tensor& wb = layers[1].weight();
    const Tensor& ga = layers[0].weight_grad();
    const bool grad_written =
        std::any_of(ga.f32(), ga.f32() + ga.size(), [](float g) { return g != 0; });
    EXPECT_EQ(grad_written, !in_backward);
    bool moved = false;
    for (int64_t i = 0; i < wa.size(); ++i) {
      if (in_backward) {
        ASSERT_NEAR(wa.f32()[i], wb.f32()[i], 1e-6 + 1e-5 * std::fabs(wb.f32()[i])) << i;
      } else {
        ASSERT_EQ(wa.f32()[i], wb.f32()[i]) << i;
      }
    }
    for (int64_t j = 0; j < kOut; ++j) {
      ASSERT_NEAR(layers[0].bias().f32()[j], layers[1].bias().f32()[j], 1e-6) << j;
      moved = moved || layers[1].bias().f32()[j] != 0;
    }
    EXPECT_TRUE(moved);  // the bias was updated, from its gradient
  }
  omp_set_num_threads(saved_threads);
}

TEST(OptimizerSpecTest, NesterovNeedsMomentum) {
  traind::v1::OptimizerSpec spec;
  spec.mutable_sgd()->set_learning_rate(0.1);
  spec.mutable_sgd()->set_nesterov(true);
  EXPECT_EQ(spec::CheckOptimizerSpec(spec).message(),
            "optimizer.sgd.nesterov: needs a momentum > 0");
}

}  // namespace
}  // namespace traind::engine
