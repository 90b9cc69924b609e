// The CPU backend's ops against plain double-precision loops, and the
// softmax cross-entropy gradient against finite differences.
#include "worker/engine/backend/cpu/cpu_backend.h"

#include <cmath>
#include <memory>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "worker/engine/random.h"

namespace traind::engine {
namespace {

class CpuBackendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<Backend>> backend = CreateCpuBackend();
    ASSERT_TRUE(backend.ok()) << backend.status();
    backend_ = std::move(*backend);
  }

  Tensor Random2d(int64_t rows, int64_t cols, double scale, Rng& rng) {
    Tensor t = std::move(backend_->Allocate2d(DType::kF32, rows, cols)).value();
    for (int64_t i = 0; i < t.size(); ++i) {
      t.f32()[i] = static_cast<float>(scale * (2 * rng.Uniform() - 1));
    }
    return t;
  }
  Tensor Random1d(int64_t n, double scale, Rng& rng) {
    Tensor t = std::move(backend_->Allocate1d(DType::kF32, n)).value();
    for (int64_t i = 0; i < n; ++i) t.f32()[i] = static_cast<float>(scale * (2 * rng.Uniform() - 1));
    return t;
  }

  std::unique_ptr<Backend> backend_;
};

// Odd sizes, so no kernel gets a convenient multiple of its vector width.
TEST_F(CpuBackendTest, DenseMatchesReference) {
  const int64_t batch = 37, in = 19, out = 23;
  for (DenseActivation act : {DenseActivation::kLinear, DenseActivation::kRelu}) {
    Rng rng(11);
    Tensor x = Random2d(batch, in, 1.0, rng);
    Tensor w = Random2d(in, out, 0.5, rng);
    Tensor b = Random1d(out, 0.5, rng);
    Tensor y = std::move(backend_->Allocate2d(DType::kF32, batch, out)).value();
    Tensor dy = Random2d(batch, out, 1.0, rng);
    Tensor dw = std::move(backend_->Allocate2d(DType::kF32, in, out)).value();
    Tensor db = std::move(backend_->Allocate1d(DType::kF32, out)).value();
    Tensor dx = std::move(backend_->Allocate2d(DType::kF32, batch, in)).value();
    std::vector<float> dy_in(dy.f32(), dy.f32() + dy.size());

    auto kernel = backend_->CreateDenseKernel(batch, in, out, act);
    ASSERT_TRUE(kernel.ok()) << kernel.status();
    ASSERT_TRUE((*kernel)->Forward(x, w, b, &y).ok());
    ASSERT_TRUE((*kernel)->Backward(x, w, y, &dy, &dw, &db, &dx).ok());

    // Reference: z = x w + b; y = act(z); dz = dy ⊙ act'(z); dw = xᵀ dz;
    // db = Σ_rows dz; dx = dz wᵀ.
    std::vector<double> dz(static_cast<size_t>(batch * out));
    for (int64_t r = 0; r < batch; ++r) {
      for (int64_t j = 0; j < out; ++j) {
        double z = b.f32()[j];
        for (int64_t k = 0; k < in; ++k) z += double{x.f32()[r * in + k]} * w.f32()[k * out + j];
        const bool relu = act == DenseActivation::kRelu;
        const double expect = relu ? std::max(z, 0.0) : z;
        ASSERT_NEAR(y.f32()[r * out + j], expect, 1e-5) << r << "," << j;
        dz[r * out + j] = relu && z <= 0 ? 0.0 : dy_in[r * out + j];
      }
    }
    for (int64_t k = 0; k < in; ++k) {
      for (int64_t j = 0; j < out; ++j) {
        double sum = 0;
        for (int64_t r = 0; r < batch; ++r) sum += double{x.f32()[r * in + k]} * dz[r * out + j];
        ASSERT_NEAR(dw.f32()[k * out + j], sum, 1e-4) << k << "," << j;
      }
    }
    for (int64_t j = 0; j < out; ++j) {
      double sum = 0;
      for (int64_t r = 0; r < batch; ++r) sum += dz[r * out + j];
      ASSERT_NEAR(db.f32()[j], sum, 1e-4) << j;
    }
    for (int64_t r = 0; r < batch; ++r) {
      for (int64_t k = 0; k < in; ++k) {
        double sum = 0;
        for (int64_t j = 0; j < out; ++j) sum += dz[r * out + j] * w.f32()[k * out + j];
        ASSERT_NEAR(dx.f32()[r * in + k], sum, 1e-4) << r << "," << k;
      }
    }
  }
}

TEST_F(CpuBackendTest, DenseKernelRejectsWrongShapes) {
  auto kernel = backend_->CreateDenseKernel(4, 3, 2, DenseActivation::kLinear);
  ASSERT_TRUE(kernel.ok());
  Rng rng(1);
  Tensor x = Random2d(5, 3, 1, rng), w = Random2d(3, 2, 1, rng), b = Random1d(2, 1, rng);
  Tensor y = std::move(backend_->Allocate2d(DType::kF32, 5, 2)).value();
  EXPECT_EQ((*kernel)->Forward(x, w, b, &y).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(backend_->CreateDenseKernel(0, 3, 2, DenseActivation::kLinear).ok());
}

TEST_F(CpuBackendTest, SoftmaxCrossEntropyValues) {
  Tensor logits = std::move(backend_->Allocate2d(DType::kF32, 3, 3)).value();
  Tensor labels = std::move(backend_->Allocate1d(DType::kS32, 3)).value();
  Tensor grad = std::move(backend_->Allocate2d(DType::kF32, 3, 3)).value();
  const float z[9] = {1, 2, 3,  //
                      1000, 0, -1000,  //
                      1000, 0, -1000};
  const int32_t y[3] = {2, 0, 1};
  ASSERT_TRUE(backend_->CopyFromHost(z, &logits).ok());
  ASSERT_TRUE(backend_->CopyFromHost(y, &labels).ok());
  LossStats stats;
  ASSERT_TRUE(backend_->SoftmaxCrossEntropy(logits, labels, &grad, &stats).ok());
  // Row 0: log(e + e² + e³) - 3 = log(1 + e⁻¹ + e⁻²) = 0.4076059644.
  // Row 1: log(1 + e⁻¹⁰⁰⁰ + e⁻²⁰⁰⁰) ≈ 0, no overflow. Row 2: 1000 - 0 = 1000.
  EXPECT_NEAR(stats.loss_sum, 0.4076059644443804 + 0.0 + 1000.0, 1e-6);
  EXPECT_EQ(stats.correct, 2);  // rows 0 and 1
  // dL/dz = (softmax - onehot) / batch. Row 0: softmax = e^(z-3) / (1 + e⁻¹ + e⁻²).
  const double s = 1 + std::exp(-1.0) + std::exp(-2.0);
  EXPECT_NEAR(grad.f32()[0], std::exp(-2.0) / s / 3, 1e-7);
  EXPECT_NEAR(grad.f32()[1], std::exp(-1.0) / s / 3, 1e-7);
  EXPECT_NEAR(grad.f32()[2], (1 / s - 1) / 3, 1e-7);
  EXPECT_NEAR(grad.f32()[3], 0.0, 1e-7);
  EXPECT_NEAR(grad.f32()[7], -1.0 / 3, 1e-7);
  EXPECT_NEAR(grad.f32()[6], 1.0 / 3, 1e-7);

  // A label outside [0, classes) is the caller's bug.
  const int32_t bad[3] = {0, 3, 0};
  ASSERT_TRUE(backend_->CopyFromHost(bad, &labels).ok());
  EXPECT_EQ(backend_->SoftmaxCrossEntropy(logits, labels, nullptr, &stats).code(),
            absl::StatusCode::kInvalidArgument);
}

// Central differences of the batch-mean loss w.r.t. every logit, using the
// perturbation float32 actually applied.
TEST_F(CpuBackendTest, SoftmaxCrossEntropyGradientMatchesFiniteDifferences) {
  const int64_t batch = 5, classes = 4;
  Rng rng(3);
  Tensor logits = Random2d(batch, classes, 3.0, rng);
  Tensor labels = std::move(backend_->Allocate1d(DType::kS32, batch)).value();
  for (int64_t r = 0; r < batch; ++r) labels.s32()[r] = static_cast<int32_t>(r % classes);
  Tensor grad = std::move(backend_->Allocate2d(DType::kF32, batch, classes)).value();
  LossStats stats;
  ASSERT_TRUE(backend_->SoftmaxCrossEntropy(logits, labels, &grad, &stats).ok());
  auto mean_loss = [&]() {
    LossStats s;
    EXPECT_TRUE(backend_->SoftmaxCrossEntropy(logits, labels, nullptr, &s).ok());
    return s.loss_sum / batch;
  };
  const float eps = 1e-2f;
  for (int64_t i = 0; i < logits.size(); ++i) {
    float& z = logits.f32()[i];
    const float saved = z;
    z = saved + eps;
    const float hi = z;
    const double loss_hi = mean_loss();
    z = saved - eps;
    const float lo = z;
    const double loss_lo = mean_loss();
    z = saved;
    const double numeric = (loss_hi - loss_lo) / (double{hi} - lo);
    EXPECT_NEAR(grad.f32()[i], numeric, 2e-5) << "logit " << i;
  }
}

TEST_F(CpuBackendTest, GatherRows) {
  const float src[4 * 3] = {0, 1, 2, 10, 11, 12, 20, 21, 22, 30, 31, 32};
  const int32_t labels[4] = {7, 8, 9, 6};
  const int64_t rows[2] = {3, 1};
  Tensor x = std::move(backend_->Allocate2d(DType::kF32, 2, 3)).value();
  Tensor y = std::move(backend_->Allocate1d(DType::kS32, 2)).value();
  ASSERT_TRUE(backend_->GatherRows(src, 3, rows, &x).ok());
  ASSERT_TRUE(backend_->GatherLabels(labels, rows, &y).ok());
  EXPECT_EQ(std::vector<float>(x.f32(), x.f32() + 6), (std::vector<float>{30, 31, 32, 10, 11, 12}));
  EXPECT_EQ(y.s32()[0], 6);
  EXPECT_EQ(y.s32()[1], 8);
}

}  // namespace
}  // namespace traind::engine
