// The CPU backend's ops against plain double-precision loops; batch norm's
// steps across ranks against hand-computed values and the fused ops; the bf16
// dense kernel against references on bf16-rounded and on fp32 inputs. (Its
// loss kernel: cpu_loss_test.cc.)
#include "worker/engine/backend/cpu/cpu_backend.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "base/random.h"
#include "base/status.h"
#include "gtest/gtest.h"
#include "spec/validation.h"
#include "worker/engine/testing/cpu_backend_fixture.h"
#include "worker/engine/testing/dense_reference.h"

namespace traind::engine {
namespace {

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

    testing::ExpectDenseMatchesReference(x, w, b.f32(), dy_in, ActivationFn{act, 0}, y, dw, &db, dx,
                                         1e-5, 1e-4);
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

// v rounded to the nearest bfloat16 (ties to even), as oneDNN's reorders
// (and the AVX512-BF16 conversion instructions) round. v is finite.
float RoundToBf16(float v) {
  uint32_t u;
  std::memcpy(&u, &v, sizeof(u));
  u += 0x7fffu + ((u >> 16) & 1u);
  u &= 0xffff0000u;
  std::memcpy(&v, &u, sizeof(u));
  return v;
}

std::vector<float> Values(const Tensor& t) {
  return std::vector<float>(t.f32(), t.f32() + t.size());
}

std::vector<float> RoundedToBf16(std::vector<float> v) {
  for (float& e : v) e = RoundToBf16(e);
  return v;
}

// |got - want| <= tolerance, and got finite (NaN never passes).
::testing::AssertionResult Close(float got, double want, double tolerance) {
  if (std::isfinite(got) && std::abs(got - want) <= tolerance) {
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure() << "got " << got << ", want " << want << " ± " << tolerance;
}

// One dense layer's forward and backward results, and the inputs they were
// computed from.
struct DenseRun {
  std::vector<float> x, w, b, dy;        // inputs
  std::vector<float> y, dz, dw, db, dx;  // dz: dy ⊙ f'(y), what Backward left in dy
};

DenseRun RunDense(Backend* backend, int64_t batch, int64_t in, int64_t out, DenseActivation act,
                  uint64_t seed) {
  Rng rng(seed);
  auto fill = [&](Tensor* t, double scale) {
    for (int64_t i = 0; i < t->size(); ++i) {
      t->f32()[i] = static_cast<float>(scale * (2 * rng.Uniform() - 1));
    }
  };
  Tensor x = std::move(backend->Allocate2d(DType::kF32, batch, in)).value();
  Tensor w = std::move(backend->Allocate2d(DType::kF32, in, out)).value();
  Tensor b = std::move(backend->Allocate1d(DType::kF32, out)).value();
  Tensor dy = std::move(backend->Allocate2d(DType::kF32, batch, out)).value();
  fill(&x, 1.0);
  fill(&w, 0.5);
  fill(&b, 0.5);
  fill(&dy, 1.0);
  Tensor y = std::move(backend->Allocate2d(DType::kF32, batch, out)).value();
  Tensor dw = std::move(backend->Allocate2d(DType::kF32, in, out)).value();
  Tensor db = std::move(backend->Allocate1d(DType::kF32, out)).value();
  Tensor dx = std::move(backend->Allocate2d(DType::kF32, batch, in)).value();
  DenseRun run;
  run.x = Values(x);
  run.w = Values(w);
  run.b = Values(b);
  run.dy = Values(dy);
  auto kernel = backend->CreateDenseKernel(batch, in, out, act);
  EXPECT_TRUE(kernel.ok()) << kernel.status();
  if (!kernel.ok()) return run;
  EXPECT_TRUE((*kernel)->Forward(x, w, b, &y).ok());
  EXPECT_TRUE((*kernel)->Backward(x, w, y, &dy, &dw, &db, &dx).ok());
  run.y = Values(y);
  run.dz = Values(dy);
  run.dw = Values(dw);
  run.db = Values(db);
  run.dx = Values(dx);
  return run;
}

double Apply(DenseActivation act, double z) {
  switch (act) {
    case DenseActivation::kRelu:
      return std::max(z, 0.0);
    case DenseActivation::kTanh:
      return std::tanh(z);
    case DenseActivation::kSigmoid:
      return 1 / (1 + std::exp(-z));
    default:
      return z;
  }
}

// f'(z) from y = f(z), in double.
double DerivativeFromY(DenseActivation act, double y) {
  switch (act) {
    case DenseActivation::kRelu:
      return y > 0 ? 1 : 0;
    case DenseActivation::kTanh:
      return 1 - y * y;
    case DenseActivation::kSigmoid:
      return y * (1 - y);
    default:
      return 1;
  }
}

// Checks a bf16 run against double-precision references computed from
// `x`, `w` and dz (each as given: rounded to bf16 or not): each result
// within `relative` × Σ|terms| (+ a floor for results near zero). Returns
// the largest error seen, relative to Σ|terms|.
double CheckDenseRun(const DenseRun& run, const std::vector<float>& x, const std::vector<float>& w,
                     const std::vector<float>& dz, DenseActivation act, int64_t batch, int64_t in,
                     int64_t out, double relative) {
  double worst = 0;
  auto check = [&](float got, double want, double magnitude, const std::string& where) {
    const double tolerance = relative * magnitude + 1e-6;
    EXPECT_TRUE(Close(got, want, tolerance)) << where;
    if (magnitude > 0) worst = std::max(worst, std::abs(got - want) / magnitude);
  };
  for (int64_t r = 0; r < batch; ++r) {
    for (int64_t j = 0; j < out; ++j) {
      double z = run.b[j], magnitude = std::abs(run.b[j]);
      for (int64_t k = 0; k < in; ++k) {
        z += double{x[r * in + k]} * w[k * out + j];
        magnitude += std::abs(double{x[r * in + k]} * w[k * out + j]);
      }
      // The activations here are 1-Lipschitz: the bound carries over.
      check(run.y[r * out + j], Apply(act, z), magnitude,
            "y " + std::to_string(r) + "," + std::to_string(j));
    }
  }
  for (int64_t k = 0; k < in; ++k) {
    for (int64_t j = 0; j < out; ++j) {
      double sum = 0, magnitude = 0;
      for (int64_t r = 0; r < batch; ++r) {
        sum += double{x[r * in + k]} * dz[r * out + j];
        magnitude += std::abs(double{x[r * in + k]} * dz[r * out + j]);
      }
      check(run.dw[k * out + j], sum, magnitude,
            "dw " + std::to_string(k) + "," + std::to_string(j));
    }
  }
  for (int64_t r = 0; r < batch; ++r) {
    for (int64_t k = 0; k < in; ++k) {
      double sum = 0, magnitude = 0;
      for (int64_t j = 0; j < out; ++j) {
        sum += double{dz[r * out + j]} * w[k * out + j];
        magnitude += std::abs(double{dz[r * out + j]} * w[k * out + j]);
      }
      check(run.dx[r * in + k], sum, magnitude,
            "dx " + std::to_string(r) + "," + std::to_string(k));
    }
  }
  return worst;
}

class CpuBf16Test : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!CpuSupportsBf16()) {
      GTEST_SKIP() << "this CPU has neither AVX512-BF16 nor AMX (as oneDNN sees it): "
                      "training.precision: bf16 is refused here";
    }
    absl::StatusOr<std::unique_ptr<Backend>> backend = CreateCpuBackend(traind::v1::BF16);
    ASSERT_TRUE(backend.ok()) << backend.status();
    backend_ = std::move(*backend);
  }

  std::unique_ptr<Backend> backend_;
};

// Against a reference whose inputs are rounded to bf16 as the kernel rounds
// them: the products are then exact, and only fp32 accumulation separates
// the two (a bf16 accumulation would miss by ~1e-3). Odd sizes, and one
// large enough for oneDNN's blocked kernels.
TEST_F(CpuBf16Test, DenseMatchesReferenceOnBf16RoundedInputs) {
  struct Shape {
    int64_t batch, in, out;
  };
  for (Shape shape : {Shape{37, 19, 23}, Shape{128, 300, 129}}) {
    for (DenseActivation act : {DenseActivation::kLinear, DenseActivation::kRelu}) {
      SCOPED_TRACE(::testing::Message() << "[" << shape.batch << ", " << shape.in << "] -> "
                                        << shape.out << ", activation " << static_cast<int>(act));
      const DenseRun run = RunDense(backend_.get(), shape.batch, shape.in, shape.out, act, 11);
      ASSERT_FALSE(run.y.empty());
      // dz = dy ⊙ f'(y) from the kernel's own y (linear, relu: exact in
      // fp32), then rounded as the kernel rounds it.
      std::vector<float> dz = run.dy;
      for (size_t i = 0; i < dz.size(); ++i) {
        dz[i] = static_cast<float>(dz[i] * DerivativeFromY(act, run.y[i]));
      }
      for (size_t i = 0; i < dz.size(); ++i) ASSERT_EQ(run.dz[i], dz[i]) << i;
      CheckDenseRun(run, RoundedToBf16(run.x), RoundedToBf16(run.w), RoundedToBf16(dz), act,
                    shape.batch, shape.in, shape.out, 1e-5);
      // db: fp32 column sums of the (unrounded) dz.
      for (int64_t j = 0; j < shape.out; ++j) {
        double sum = 0;
        for (int64_t r = 0; r < shape.batch; ++r) sum += dz[r * shape.out + j];
        EXPECT_TRUE(Close(run.db[j], sum, 1e-4)) << "db " << j;
      }
    }
  }
}

// Against the plain fp32 computation: within bf16's precision (8-bit
// significand: each rounded operand is off by at most 2⁻⁹ relative, so a
// product by < 2⁻⁸), and measurably off it, so the bf16 path is the one
// that ran.
TEST_F(CpuBf16Test, DenseIsWithinBf16PrecisionOfFp32) {
  const int64_t batch = 64, in = 200, out = 96;
  for (DenseActivation act : {DenseActivation::kLinear, DenseActivation::kRelu,
                              DenseActivation::kTanh, DenseActivation::kSigmoid}) {
    SCOPED_TRACE(::testing::Message() << "activation " << static_cast<int>(act));
    const DenseRun run = RunDense(backend_.get(), batch, in, out, act, 5);
    ASSERT_FALSE(run.y.empty());
    std::vector<float> dz = run.dy;
    for (size_t i = 0; i < dz.size(); ++i) {
      dz[i] = static_cast<float>(dz[i] * DerivativeFromY(act, run.y[i]));
    }
    const double worst = CheckDenseRun(run, run.x, run.w, dz, act, batch, in, out, 1e-2);
    EXPECT_GT(worst, 1e-4) << "as close to fp32 as fp32 itself: were bf16 products used?";
  }
}

// Backward reuses the bf16 copies Forward made of the same x and w, and
// converts again when given other tensors.
TEST_F(CpuBf16Test, BackwardConvertsTensorsItWasNotGivenInForward) {
  const int64_t batch = 16, in = 24, out = 8;
  Rng rng(9);
  auto random = [&](int64_t rows, int64_t cols) {
    Tensor t = std::move(backend_->Allocate2d(DType::kF32, rows, cols)).value();
    for (int64_t i = 0; i < t.size(); ++i) t.f32()[i] = static_cast<float>(2 * rng.Uniform() - 1);
    return t;
  };
  Tensor x = random(batch, in), w = random(in, out);
  Tensor x2 = random(batch, in), w2 = random(in, out);
  Tensor b = std::move(backend_->Allocate1d(DType::kF32, out)).value();
  ASSERT_TRUE(backend_->Fill(0.0f, &b).ok());
  Tensor y = std::move(backend_->Allocate2d(DType::kF32, batch, out)).value();
  Tensor dy = random(batch, out);
  const std::vector<float> dz = RoundedToBf16(Values(dy));
  Tensor dw = std::move(backend_->Allocate2d(DType::kF32, in, out)).value();
  Tensor dx = std::move(backend_->Allocate2d(DType::kF32, batch, in)).value();
  auto kernel = backend_->CreateDenseKernel(batch, in, out, DenseActivation::kLinear);
  ASSERT_TRUE(kernel.ok()) << kernel.status();
  ASSERT_TRUE((*kernel)->Forward(x, w, b, &y).ok());
  ASSERT_TRUE((*kernel)->Backward(x2, w2, y, &dy, &dw, nullptr, &dx).ok());
  const std::vector<float> xr = RoundedToBf16(Values(x2)), wr = RoundedToBf16(Values(w2));
  for (int64_t k = 0; k < in; ++k) {
    for (int64_t j = 0; j < out; ++j) {
      double sum = 0;
      for (int64_t r = 0; r < batch; ++r) sum += double{xr[r * in + k]} * dz[r * out + j];
      EXPECT_TRUE(Close(dw.f32()[k * out + j], sum, 1e-5)) << "dw " << k << "," << j;
    }
  }
  for (int64_t r = 0; r < batch; ++r) {
    for (int64_t k = 0; k < in; ++k) {
      double sum = 0;
      for (int64_t j = 0; j < out; ++j) sum += double{dz[r * out + j]} * wr[k * out + j];
      EXPECT_TRUE(Close(dx.f32()[r * in + k], sum, 1e-5)) << "dx " << r << "," << k;
    }
  }
}

// precision: fp32 is the default path, bit for bit.
TEST(CpuBackendPrecisionTest, Fp32IsTheDefaultPathBitForBit) {
  std::unique_ptr<Backend> plain = std::move(CreateCpuBackend()).value();
  absl::StatusOr<std::unique_ptr<Backend>> fp32 = CreateCpuBackend(traind::v1::FP32);
  ASSERT_TRUE(fp32.ok()) << fp32.status();
  EXPECT_EQ(plain->name(), (*fp32)->name());
  for (DenseActivation act : {DenseActivation::kLinear, DenseActivation::kRelu}) {
    const DenseRun a = RunDense(plain.get(), 128, 300, 129, act, 3);
    const DenseRun b = RunDense(fp32->get(), 128, 300, 129, act, 3);
    ASSERT_FALSE(a.y.empty());
    auto bits = [](const std::vector<float>& v) {
      return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
    };
    EXPECT_EQ(bits(a.y), bits(b.y));
    EXPECT_EQ(bits(a.dw), bits(b.dw));
    EXPECT_EQ(bits(a.db), bits(b.db));
    EXPECT_EQ(bits(a.dx), bits(b.dx));
  }
}

TEST(CpuBackendPrecisionTest, Tf32IsRefused) {
  absl::StatusOr<std::unique_ptr<Backend>> backend = CreateCpuBackend(traind::v1::TF32);
  ASSERT_FALSE(backend.ok());
  EXPECT_EQ(FailureKindOf(backend.status()), FailureKind::kInvalidSpec);
  EXPECT_EQ(backend.status().message(),
            "training.precision: tf32 is a GPU mode (resources.device: gpu); CPU jobs train in "
            "fp32 or bf16");
}

TEST(CpuBackendPrecisionTest, Bf16NeedsTheCpuFeature) {
  absl::StatusOr<std::unique_ptr<Backend>> backend = CreateCpuBackend(traind::v1::BF16);
  if (CpuSupportsBf16()) {
    ASSERT_TRUE(backend.ok()) << backend.status();
    EXPECT_EQ((*backend)->name(), "cpu (oneDNN, bf16 matmuls and convolutions)");
    return;
  }
  ASSERT_FALSE(backend.ok());
  EXPECT_EQ(FailureKindOf(backend.status()), FailureKind::kInvalidSpec);
  EXPECT_EQ(backend.status().message(),
            "training.precision: bf16 needs a CPU with AVX512-BF16 or AMX, as oneDNN sees it "
            "(the workers' CPU has neither, or ONEDNN_MAX_CPU_ISA caps it below them); use fp32");
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

TEST_F(CpuBackendTest, BatchNormAcrossRanksHandComputed) {
  // Columns: 1, 3, 5 (mean 3, Σ(x - mean)² = 8) and 2, 6, 10 (mean 6, 32).
  const float xs[6] = {1, 2, 3, 6, 5, 10};
  Tensor x = std::move(backend_->Allocate2d(DType::kF32, 3, 2)).value();
  ASSERT_TRUE(backend_->CopyFromHost(xs, &x).ok());
  auto vec = [&](std::vector<float> v) {
    Tensor t = std::move(backend_->Allocate1d(DType::kF32, static_cast<int64_t>(v.size()))).value();
    EXPECT_TRUE(backend_->CopyFromHost(v.data(), &t).ok());
    return t;
  };
  Tensor sum = vec({0, 0}), mean = vec({0, 0}), sq = vec({0, 0}), rstd = vec({0, 0});
  Tensor gamma = vec({2, 1}), beta = vec({0.5f, 0});
  Tensor running_mean = vec({0, 0}), running_var = vec({1, 1});
  Tensor y = std::move(backend_->Allocate2d(DType::kF32, 3, 2)).value();
  ASSERT_TRUE(backend_->BatchNormColumnSums(x, &sum).ok());
  EXPECT_EQ(Values(sum), (std::vector<float>{9, 18}));
  ASSERT_TRUE(backend_->BatchNormSquaredDeviations(x, sum, 3, &mean, &sq).ok());
  EXPECT_EQ(Values(mean), (std::vector<float>{3, 6}));
  EXPECT_EQ(Values(sq), (std::vector<float>{8, 32}));
  ASSERT_TRUE(backend_
                  ->BatchNormForwardFromMoments(0.1f, 1e-5f, 3, x, gamma, beta, mean, sq,
                                                &running_mean, &running_var, &rstd, &y)
                  .ok());
  // Biased variances 8/3 and 32/3 normalize; unbiased 4 and 16 go into the
  // running variance.
  const double rs0 = 1 / std::sqrt(8.0 / 3 + 1e-5), rs1 = 1 / std::sqrt(32.0 / 3 + 1e-5);
  EXPECT_NEAR(rstd.f32()[0], rs0, 1e-6);
  EXPECT_NEAR(rstd.f32()[1], rs1, 1e-6);
  EXPECT_NEAR(running_mean.f32()[0], 0.3, 1e-7);
  EXPECT_NEAR(running_mean.f32()[1], 0.6, 1e-7);
  EXPECT_NEAR(running_var.f32()[0], 0.9 + 0.1 * 4, 1e-6);
  EXPECT_NEAR(running_var.f32()[1], 0.9 + 0.1 * 16, 1e-6);
  for (int r = 0; r < 3; ++r) {
    EXPECT_NEAR(y.f32()[r * 2], 2 * (xs[r * 2] - 3) * rs0 + 0.5, 1e-5);
    EXPECT_NEAR(y.f32()[r * 2 + 1], (xs[r * 2 + 1] - 6) * rs1, 1e-5);
  }

  // Backward with dy = 1 in column 0 and x̂ in column 1:
  // Σ dy = 3, 0; Σ dy x̂ = 0, Σ x̂² = 3 (var / (var + eps)).
  const float dys[6] = {1, static_cast<float>(-4 * rs1), 1, 0, 1, static_cast<float>(4 * rs1)};
  Tensor dy = std::move(backend_->Allocate2d(DType::kF32, 3, 2)).value();
  ASSERT_TRUE(backend_->CopyFromHost(dys, &dy).ok());
  Tensor dgamma = vec({0, 0}), dbeta = vec({0, 0}), sums = vec({0, 0, 0, 0});
  ASSERT_TRUE(backend_->BatchNormBackwardSums(x, mean, rstd, dy, &dgamma, &dbeta, &sums).ok());
  const double xhat_sq = 3 * (32.0 / 3) / (32.0 / 3 + 1e-5);
  EXPECT_NEAR(sums.f32()[0], 3, 1e-6);
  EXPECT_NEAR(sums.f32()[1], 0, 1e-6);
  EXPECT_NEAR(sums.f32()[2], 0, 1e-6);
  EXPECT_NEAR(sums.f32()[3], xhat_sq, 1e-5);
  EXPECT_EQ(Values(dbeta), std::vector<float>(sums.f32(), sums.f32() + 2));
  EXPECT_EQ(Values(dgamma), std::vector<float>(sums.f32() + 2, sums.f32() + 4));
  Tensor dx = std::move(backend_->Allocate2d(DType::kF32, 3, 2)).value();
  ASSERT_TRUE(backend_->BatchNormBackwardData(x, gamma, mean, rstd, dy, sums, 3, &dx).ok());
  // A constant dy and dy ∝ x̂ are both removed by normalization: dx ≈ 0
  // (up to the epsilon in the variance).
  for (int i = 0; i < 6; ++i) EXPECT_NEAR(dx.f32()[i], 0, 1e-5) << i;

  // A count below this rank's rows is the caller's bug.
  EXPECT_EQ(backend_->BatchNormSquaredDeviations(x, sum, 2, &mean, &sq).code(),
            absl::StatusCode::kInvalidArgument);
}

// The batch split in shares of 4, 3, 0 and 2 rows, the partial sums added
// as a communicator would: the results equal the fused ops' on the whole
// batch within float rounding.
TEST_F(CpuBackendTest, BatchNormAcrossRanksEqualsTheFusedOps) {
  const int64_t batch = 9, n = 5;
  const std::vector<std::pair<int64_t, int64_t>> shares = {{0, 4}, {4, 3}, {7, 0}, {7, 2}};
  Rng rng(17);
  Tensor x = Random2d(batch, n, 3.0, rng);
  for (int64_t i = 0; i < x.size(); ++i) x.f32()[i] += 10.0f;  // a mean far from 0
  Tensor dy = Random2d(batch, n, 1.0, rng);
  Tensor gamma = Random1d(n, 2.0, rng), beta = Random1d(n, 1.0, rng);
  auto zeros = [&](int64_t size) {
    Tensor t = std::move(backend_->Allocate1d(DType::kF32, size)).value();
    EXPECT_TRUE(backend_->Fill(0.0f, &t).ok());
    return t;
  };
  auto ones = [&](int64_t size) {
    Tensor t = zeros(size);
    EXPECT_TRUE(backend_->Fill(1.0f, &t).ok());
    return t;
  };

  // The fused ops on the whole batch.
  Tensor rm = zeros(n), rv = ones(n), mean = zeros(n), rstd = zeros(n);
  Tensor y = std::move(backend_->Allocate2d(DType::kF32, batch, n)).value();
  Tensor dx = std::move(backend_->Allocate2d(DType::kF32, batch, n)).value();
  Tensor dgamma = zeros(n), dbeta = zeros(n);
  ASSERT_TRUE(
      backend_->BatchNormForward(true, 0.1f, 1e-5f, x, gamma, beta, &rm, &rv, &mean, &rstd, &y)
          .ok());
  ASSERT_TRUE(backend_->BatchNormBackward(x, gamma, mean, rstd, dy, &dgamma, &dbeta, &dx).ok());

  // The split ops, one share at a time, every "rank" with its own state.
  const size_t ranks = shares.size();
  std::vector<Tensor> sum(ranks), sq(ranks), rmean(ranks), rrstd(ranks), rrm(ranks), rrv(ranks),
      grad_sums(ranks), rdgamma(ranks), rdbeta(ranks);
  for (size_t k = 0; k < ranks; ++k) {
    for (std::vector<Tensor>* v : {&sum, &sq, &rmean, &rrstd, &rrm, &rdgamma, &rdbeta}) {
      (*v)[k] = zeros(n);
    }
    rrv[k] = ones(n);
    grad_sums[k] = zeros(2 * n);
  }
  // Sums the partial results of every rank into each (an all-reduce).
  auto all_reduce = [&](std::vector<Tensor>& parts) {
    std::vector<float> total(static_cast<size_t>(parts[0].size()), 0.0f);
    for (const Tensor& p : parts) {
      for (size_t i = 0; i < total.size(); ++i) total[i] += p.f32()[i];
    }
    for (Tensor& p : parts) std::copy(total.begin(), total.end(), p.f32());
  };
  Tensor y_split = std::move(backend_->Allocate2d(DType::kF32, batch, n)).value();
  Tensor dx_split = std::move(backend_->Allocate2d(DType::kF32, batch, n)).value();
  for (size_t k = 0; k < ranks; ++k) {
    ASSERT_TRUE(
        backend_->BatchNormColumnSums(x.Rows(shares[k].first, shares[k].second), &sum[k]).ok());
  }
  all_reduce(sum);
  for (size_t k = 0; k < ranks; ++k) {
    ASSERT_TRUE(backend_
                    ->BatchNormSquaredDeviations(x.Rows(shares[k].first, shares[k].second), sum[k],
                                                 batch, &rmean[k], &sq[k])
                    .ok());
  }
  all_reduce(sq);
  for (size_t k = 0; k < ranks; ++k) {
    Tensor yk = y_split.Rows(shares[k].first, shares[k].second);
    ASSERT_TRUE(backend_
                    ->BatchNormForwardFromMoments(
                        0.1f, 1e-5f, batch, x.Rows(shares[k].first, shares[k].second), gamma, beta,
                        rmean[k], sq[k], &rrm[k], &rrv[k], &rrstd[k], &yk)
                    .ok());
    ASSERT_TRUE(backend_
                    ->BatchNormBackwardSums(x.Rows(shares[k].first, shares[k].second), rmean[k],
                                            rrstd[k], dy.Rows(shares[k].first, shares[k].second),
                                            &rdgamma[k], &rdbeta[k], &grad_sums[k])
                    .ok());
  }
  std::vector<float> dgamma_total(n, 0.0f), dbeta_total(n, 0.0f);
  for (size_t k = 0; k < ranks; ++k) {
    for (int64_t j = 0; j < n; ++j) {
      dgamma_total[j] += rdgamma[k].f32()[j];
      dbeta_total[j] += rdbeta[k].f32()[j];
    }
  }
  all_reduce(grad_sums);
  for (size_t k = 0; k < ranks; ++k) {
    Tensor dxk = dx_split.Rows(shares[k].first, shares[k].second);
    ASSERT_TRUE(backend_
                    ->BatchNormBackwardData(
                        x.Rows(shares[k].first, shares[k].second), gamma, rmean[k], rrstd[k],
                        dy.Rows(shares[k].first, shares[k].second), grad_sums[k], batch, &dxk)
                    .ok());
  }

  auto near = [](const std::vector<float>& expected, const std::vector<float>& actual,
                 const char* what) {
    ASSERT_EQ(expected.size(), actual.size()) << what;
    for (size_t i = 0; i < expected.size(); ++i) {
      EXPECT_NEAR(actual[i], expected[i], 2e-6 * (1 + std::fabs(expected[i]))) << what << " " << i;
    }
  };
  for (size_t k = 0; k < ranks; ++k) {
    SCOPED_TRACE(k);
    near(Values(mean), Values(rmean[k]), "mean");
    near(Values(rstd), Values(rrstd[k]), "rstd");
    near(Values(rm), Values(rrm[k]), "running mean");
    near(Values(rv), Values(rrv[k]), "running var");
    // Every rank holds the same statistics.
    EXPECT_EQ(Values(rrm[k]), Values(rrm[0]));
    EXPECT_EQ(Values(rrv[k]), Values(rrv[0]));
  }
  near(Values(y), Values(y_split), "y");
  near(Values(dx), Values(dx_split), "dx");
  near(Values(dgamma), dgamma_total, "dgamma");
  near(Values(dbeta), dbeta_total, "dbeta");
  // The rank without rows contributes zeros.
  EXPECT_EQ(Values(rdgamma[2]), std::vector<float>(n, 0.0f));
  EXPECT_EQ(Values(rdbeta[2]), std::vector<float>(n, 0.0f));
}

}  // namespace
}  // namespace traind::engine
