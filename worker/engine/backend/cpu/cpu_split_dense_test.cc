// The dense kernel of layers that the threads split in row slabs of w
// (cpu_parallel.h SplitsInRowSlabs): forward, backward and every activation
// it fuses against plain double-precision loops, for 2 and 3 threads, odd
// sizes (uneven slabs), with and without bias, and with a kernel planned for
// more threads than run it; each with its products in oneDNN and in OpenBLAS
// (TRAIND_CPU_GEMM), and OpenBLAS on one thread (one slab); and the SGD
// update it can run in its backward pass. Also the rule that chooses the
// library (cpu_gemm.h).
#include <omp.h>
#include <stdlib.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "base/random.h"
#include "gtest/gtest.h"
#include "worker/engine/backend/cpu/cpu_backend.h"
#include "worker/engine/backend/cpu/cpu_gemm.h"
#include "worker/engine/backend/cpu/cpu_parallel.h"
#include "worker/engine/testing/cpu_backend_fixture.h"
#include "worker/engine/testing/dense_reference.h"

namespace traind::engine {
namespace {

constexpr int64_t kBatch = 37, kIn = 301, kOut = 157;

// Threads, and TRAIND_CPU_GEMM.
using Param = std::tuple<int, const char*>;

class CpuSplitDenseTest : public ::testing::TestWithParam<Param> {
 protected:
  void SetUp() override {
    if (std::string(Gemm()) == "openblas" && !cpu::LoadOpenBlas().ok()) {
      // tests/run.sh installs it (deploy/install-deps.sh) and requires it.
      if (std::getenv("TRAIND_REQUIRE_OPENBLAS") != nullptr) {
        FAIL() << "TRAIND_REQUIRE_OPENBLAS is set: " << cpu::LoadOpenBlas().status();
      }
      GTEST_SKIP() << cpu::LoadOpenBlas().status();
    }
    saved_threads_ = omp_get_max_threads();
    omp_set_num_threads(Threads());
    setenv("TRAIND_CPU_GEMM", Gemm(), 1);
    absl::StatusOr<std::unique_ptr<Backend>> backend = CreateCpuBackend();
    unsetenv("TRAIND_CPU_GEMM");
    ASSERT_TRUE(backend.ok()) << backend.status();
    backend_ = std::move(*backend);
  }
  void TearDown() override { omp_set_num_threads(saved_threads_); }

  static int Threads() { return std::get<0>(GetParam()); }
  static const char* Gemm() { return std::get<1>(GetParam()); }

  Tensor Random(int64_t rows, int64_t cols, double scale, Rng& rng) {
    return RandomTensor(backend_.get(), rows, cols, scale, rng);
  }

  // One forward and backward pass of `kernel` against the reference
  // (testing/dense_reference.h).
  void Check(DenseKernel* kernel, ActivationFn f, bool bias, int64_t in = kIn,
             int64_t batch = kBatch, int64_t out = kOut) {
    Rng rng(17);
    Tensor x = Random(batch, in, 1.0, rng);
    Tensor w = Random(in, out, 0.2, rng);
    Tensor b = Random(out, 0, 0.5, rng);
    Tensor dy = Random(batch, out, 1.0, rng);
    Tensor y = std::move(backend_->Allocate2d(DType::kF32, batch, out)).value();
    Tensor dw = std::move(backend_->Allocate2d(DType::kF32, in, out)).value();
    Tensor db = std::move(backend_->Allocate1d(DType::kF32, out)).value();
    Tensor dx = std::move(backend_->Allocate2d(DType::kF32, batch, in)).value();
    const std::vector<float> dy_in(dy.f32(), dy.f32() + dy.size());
    ASSERT_TRUE(kernel->Forward(x, w, b, &y).ok());
    ASSERT_TRUE(kernel->Backward(x, w, y, &dy, &dw, bias ? &db : nullptr, &dx).ok());
    testing::ExpectDenseMatchesReference(x, w, bias ? b.f32() : nullptr, dy_in, f, y, dw, &db, dx,
                                         2e-4, 2e-4);
  }

  int saved_threads_ = 1;
  std::unique_ptr<Backend> backend_;
};

TEST_P(CpuSplitDenseTest, EveryFusedActivationMatchesTheReference) {
  ASSERT_TRUE(Threads() == 1 || cpu::SplitsInRowSlabs(kIn, kOut, Threads()));
  for (ActivationFn f :
       {ActivationFn{DenseActivation::kLinear, 0}, ActivationFn{DenseActivation::kRelu, 0},
        ActivationFn{DenseActivation::kLeakyRelu, 0.1f}, ActivationFn{DenseActivation::kElu, 1.0f},
        ActivationFn{DenseActivation::kSigmoid, 0}, ActivationFn{DenseActivation::kTanh, 0}}) {
    for (bool bias : {true, false}) {
      SCOPED_TRACE(::testing::Message()
                   << "activation " << static_cast<int>(f.kind) << " bias " << bias);
      DenseKernelOptions options;
      options.activation = f;
      options.bias = bias;
      absl::StatusOr<std::unique_ptr<DenseKernel>> kernel =
          backend_->CreateDenseKernel(kBatch, kIn, kOut, options);
      ASSERT_TRUE(kernel.ok()) << kernel.status();
      Check(kernel->get(), f, bias);
    }
  }
}

// A layer with more outputs than one thread takes for its activation
// gradient (2^16): the threads split dz's columns and db.
TEST_P(CpuSplitDenseTest, AWideLayersActivationGradientSplitByColumnsMatches) {
  const int64_t batch = 67, in = 40, out = 1111;
  for (ActivationFn f :
       {ActivationFn{DenseActivation::kRelu, 0}, ActivationFn{DenseActivation::kTanh, 0}}) {
    SCOPED_TRACE(::testing::Message() << "activation " << static_cast<int>(f.kind));
    DenseKernelOptions options;
    options.activation = f;
    absl::StatusOr<std::unique_ptr<DenseKernel>> kernel =
        backend_->CreateDenseKernel(batch, in, out, options);
    ASSERT_TRUE(kernel.ok()) << kernel.status();
    Check(kernel->get(), f, /*bias=*/true, in, batch, out);
  }
}

// Planned for this many threads, run by fewer: each thread takes the parts
// left over.
TEST_P(CpuSplitDenseTest, AKernelRunByFewerThreadsThanItWasPlannedForStillMatches) {
  DenseKernelOptions options;
  options.activation = ActivationFn{DenseActivation::kRelu, 0};
  absl::StatusOr<std::unique_ptr<DenseKernel>> kernel =
      backend_->CreateDenseKernel(kBatch, kIn, kOut, options);
  ASSERT_TRUE(kernel.ok()) << kernel.status();
  omp_set_num_threads(std::max(1, Threads() - 1));
  Check(kernel->get(), options.activation, true);
}

// Too few rows of w to split: with its products in OpenBLAS the kernel is
// one part, run on the calling thread with every thread at its disposal.
TEST_P(CpuSplitDenseTest, ALayerTooNarrowToSplitStillMatches) {
  constexpr int64_t kNarrow = 20;
  ASSERT_FALSE(cpu::SplitsInRowSlabs(kNarrow, kOut, Threads()));
  DenseKernelOptions options;
  options.activation = ActivationFn{DenseActivation::kRelu, 0};
  absl::StatusOr<std::unique_ptr<DenseKernel>> kernel =
      backend_->CreateDenseKernel(kBatch, kNarrow, kOut, options);
  ASSERT_TRUE(kernel.ok()) << kernel.status();
  Check(kernel->get(), options.activation, true, kNarrow);
}

// SGD with momentum inside the backward pass (DenseKernel::BackwardUpdate):
// v' = μ·v + dw + wd·w and w' = w - lr·v', with y, db and dx as Backward's.
// The gradient it never writes is read back from v' - μ·v - wd·w and checked
// against the reference with the rest; the momentum changes once (a new
// product planned), and without dx the update is the same.
TEST_P(CpuSplitDenseTest, BackwardUpdateIsSgdWithMomentumOnTheReferenceGradient) {
  const ActivationFn f{DenseActivation::kRelu, 0};
  DenseKernelOptions options;
  options.activation = f;
  absl::StatusOr<std::unique_ptr<DenseKernel>> made =
      backend_->CreateDenseKernel(kBatch, kIn, kOut, options);
  ASSERT_TRUE(made.ok()) << made.status();
  DenseKernel* kernel = made->get();
  Rng rng(23);
  Tensor x = Random(kBatch, kIn, 1.0, rng);
  Tensor w0 = Random(kIn, kOut, 0.2, rng);
  Tensor b = Random(kOut, 0, 0.5, rng);
  Tensor dy0 = Random(kBatch, kOut, 1.0, rng);
  Tensor v0 = Random(kIn, kOut, 0.5, rng);
  const auto copy = [&](const Tensor& t) {
    Tensor c = std::move(backend_->Allocate2d(DType::kF32, t.rows(), t.cols())).value();
    std::copy(t.f32(), t.f32() + t.size(), c.f32());
    return c;
  };
  Tensor y = std::move(backend_->Allocate2d(DType::kF32, kBatch, kOut)).value();
  Tensor db = std::move(backend_->Allocate1d(DType::kF32, kOut)).value();
  Tensor dx = std::move(backend_->Allocate2d(DType::kF32, kBatch, kIn)).value();
  ASSERT_TRUE(kernel->Forward(x, w0, b, &y).ok());
  if (Threads() == 1) {  // one slab: OpenBLAS's own threads, no rows of its own
    EXPECT_FALSE(kernel->UpdatesInBackward());
    Tensor w = copy(w0), v = copy(v0), dy = copy(dy0);
    SgdStep sgd;
    sgd.learning_rate = 0.1;
    sgd.momentum = 0.9;
    EXPECT_EQ(kernel->BackwardUpdate(x, &w, y, &dy, &db, &dx, sgd, &v).code(),
              absl::StatusCode::kUnimplemented);
    return;
  }
  ASSERT_TRUE(kernel->UpdatesInBackward());
  const std::vector<float> dy_in(dy0.f32(), dy0.f32() + dy0.size());
  for (const auto& [momentum, decay] :
       {std::pair{0.9, 0.0}, std::pair{0.9, 0.01}, std::pair{0.5, 0.01}}) {
    SCOPED_TRACE(::testing::Message() << "momentum " << momentum << " weight decay " << decay);
    SgdStep sgd;
    sgd.learning_rate = 0.1;
    sgd.momentum = momentum;
    sgd.weight_decay = decay;
    Tensor w = copy(w0), v = copy(v0), dy = copy(dy0);
    ASSERT_TRUE(kernel->BackwardUpdate(x, &w, y, &dy, &db, &dx, sgd, &v).ok());
    Tensor dw = std::move(backend_->Allocate2d(DType::kF32, kIn, kOut)).value();
    for (int64_t i = 0; i < w.size(); ++i) {
      dw.f32()[i] =
          static_cast<float>(double{v.f32()[i]} - momentum * v0.f32()[i] - decay * w0.f32()[i]);
      ASSERT_NEAR(w.f32()[i], double{w0.f32()[i]} - 0.1 * v.f32()[i], 1e-6) << "w " << i;
    }
    testing::ExpectDenseMatchesReference(x, w0, b.f32(), dy_in, f, y, dw, &db, dx, 2e-4, 2e-4);
    // Without dx: the same v and w, bit for bit.
    Tensor w2 = copy(w0), v2 = copy(v0), dy2 = copy(dy0);
    ASSERT_TRUE(kernel->BackwardUpdate(x, &w2, y, &dy2, nullptr, nullptr, sgd, &v2).ok());
    EXPECT_TRUE(std::equal(v.f32(), v.f32() + v.size(), v2.f32()));
    EXPECT_TRUE(std::equal(w.f32(), w.f32() + w.size(), w2.f32()));
  }
  // Nesterov needs the gradient itself; no momentum has no velocity.
  SgdStep nesterov;
  nesterov.momentum = 0.9;
  nesterov.nesterov = true;
  SgdStep plain;
  for (const SgdStep& sgd : {nesterov, plain}) {
    Tensor w = copy(w0), v = copy(v0), dy = copy(dy0);
    EXPECT_EQ(kernel->BackwardUpdate(x, &w, y, &dy, &db, &dx, sgd, &v).code(),
              absl::StatusCode::kInvalidArgument);
  }
}

INSTANTIATE_TEST_SUITE_P(ThreadsAndGemm, CpuSplitDenseTest,
                         ::testing::Values(Param{2, "onednn"}, Param{3, "onednn"},
                                           Param{1, "openblas"}, Param{2, "openblas"},
                                           Param{3, "openblas"}),
                         [](const ::testing::TestParamInfo<Param>& info) {
                           return std::string(std::get<1>(info.param)) +
                                  std::to_string(std::get<0>(info.param));
                         });

TEST(CpuGemmRule, OpenBlasOnlyWithoutAvx512ForLargeForwardAndDataProducts) {
  using cpu::ChooseGemmLibraries;
  using cpu::GemmLibraries;
  using cpu::GemmPolicy;
  const auto rule = [](int64_t batch, int64_t rows, int64_t out) {
    return ChooseGemmLibraries(GemmPolicy::kAuto, /*has_avx512=*/false, /*openblas_loaded=*/true,
                               batch, rows, out);
  };
  // Case 1's largest slab (128 × 392 × 512): oneDNN for both.
  EXPECT_FALSE(rule(128, 392, 512).any());
  // 256 × 512 × 1024 and case 3's first layer (256 × 512 × 4096): the
  // forward product only; its other layers' slabs (256 × 2048 × 4096 and
  // 256 × 2048 × 1024): both.
  for (const GemmLibraries l : {rule(256, 512, 1024), rule(256, 512, 4096)}) {
    EXPECT_TRUE(l.forward_openblas);
    EXPECT_FALSE(l.data_openblas);
  }
  for (const GemmLibraries l : {rule(256, 2048, 4096), rule(256, 2048, 1024)}) {
    EXPECT_TRUE(l.forward_openblas);
    EXPECT_TRUE(l.data_openblas);
  }
  // The thresholds: 2^26 multiply-adds for both, and 2048 rows of w in the
  // slab for the input gradient.
  EXPECT_TRUE(rule(1, 1, int64_t{1} << 26).forward_openblas);
  EXPECT_FALSE(rule(1, 1, (int64_t{1} << 26) - 1).forward_openblas);
  EXPECT_TRUE(rule(1, 2048, int64_t{1} << 15).data_openblas);
  EXPECT_FALSE(rule(1, 2047, int64_t{1} << 16).data_openblas);
  EXPECT_FALSE(rule(1, 2048, (int64_t{1} << 15) - 1).data_openblas);
  // AVX-512, OpenBLAS missing, or TRAIND_CPU_GEMM=onednn: oneDNN.
  EXPECT_FALSE(ChooseGemmLibraries(GemmPolicy::kAuto, true, true, 256, 2048, 4096).any());
  EXPECT_FALSE(ChooseGemmLibraries(GemmPolicy::kAuto, false, false, 256, 2048, 4096).any());
  EXPECT_FALSE(ChooseGemmLibraries(GemmPolicy::kOneDnn, false, true, 256, 2048, 4096).any());
  // TRAIND_CPU_GEMM=openblas: both, at any size and ISA, where it is loaded.
  const GemmLibraries forced = ChooseGemmLibraries(GemmPolicy::kOpenBlas, true, true, 1, 1, 1);
  EXPECT_TRUE(forced.forward_openblas);
  EXPECT_TRUE(forced.data_openblas);
  EXPECT_FALSE(ChooseGemmLibraries(GemmPolicy::kOpenBlas, true, false, 1, 1, 1).any());
}

TEST(CpuGemmRule, TheEnvironmentNamesThePolicyOrIsAnError) {
  unsetenv("TRAIND_CPU_GEMM");
  EXPECT_EQ(cpu::GemmPolicyFromEnvironment().value(), cpu::GemmPolicy::kAuto);
  setenv("TRAIND_CPU_GEMM", "onednn", 1);
  EXPECT_EQ(cpu::GemmPolicyFromEnvironment().value(), cpu::GemmPolicy::kOneDnn);
  setenv("TRAIND_CPU_GEMM", "openblas", 1);
  EXPECT_EQ(cpu::GemmPolicyFromEnvironment().value(), cpu::GemmPolicy::kOpenBlas);
  setenv("TRAIND_CPU_GEMM", "mkl", 1);
  absl::StatusOr<cpu::GemmPolicy> bad = cpu::GemmPolicyFromEnvironment();
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.status().message(), "TRAIND_CPU_GEMM=mkl: expected auto, onednn or openblas");
  // The backend refuses it too, with the same words.
  absl::StatusOr<std::unique_ptr<Backend>> backend = CreateCpuBackend();
  EXPECT_EQ(backend.status().message(), bad.status().message());
  unsetenv("TRAIND_CPU_GEMM");
}

}  // namespace
}  // namespace traind::engine
