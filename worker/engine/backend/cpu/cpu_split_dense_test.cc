// The dense kernel of layers that the threads split in row slabs of w
// (cpu_parallel.h SplitsInRowSlabs): forward, backward and every activation
// it fuses against plain double-precision loops, for 2 and 3 threads, odd
// sizes (uneven slabs), with and without bias, and with a kernel planned for
// more threads than run it.
#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "worker/engine/backend/cpu/cpu_backend.h"
#include "worker/engine/backend/cpu/cpu_parallel.h"
#include "worker/engine/random.h"
#include "worker/engine/testing/dense_reference.h"

namespace traind::engine {
namespace {

constexpr int64_t kBatch = 37, kIn = 301, kOut = 157;

class CpuSplitDenseTest : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override {
    saved_threads_ = omp_get_max_threads();
    omp_set_num_threads(GetParam());
    absl::StatusOr<std::unique_ptr<Backend>> backend = CreateCpuBackend();
    ASSERT_TRUE(backend.ok()) << backend.status();
    backend_ = std::move(*backend);
  }
  void TearDown() override { omp_set_num_threads(saved_threads_); }

  Tensor Random(int64_t rows, int64_t cols, double scale, Rng& rng) {
    Tensor t = std::move(cols > 0 ? backend_->Allocate2d(DType::kF32, rows, cols)
                                  : backend_->Allocate1d(DType::kF32, rows))
                   .value();
    for (int64_t i = 0; i < t.size(); ++i) {
      t.f32()[i] = static_cast<float>(scale * (2 * rng.Uniform() - 1));
    }
    return t;
  }

  // One forward and backward pass of `kernel` against the reference
  // (testing/dense_reference.h).
  void Check(DenseKernel* kernel, ActivationFn f, bool bias) {
    Rng rng(17);
    Tensor x = Random(kBatch, kIn, 1.0, rng);
    Tensor w = Random(kIn, kOut, 0.2, rng);
    Tensor b = Random(kOut, 0, 0.5, rng);
    Tensor dy = Random(kBatch, kOut, 1.0, rng);
    Tensor y = std::move(backend_->Allocate2d(DType::kF32, kBatch, kOut)).value();
    Tensor dw = std::move(backend_->Allocate2d(DType::kF32, kIn, kOut)).value();
    Tensor db = std::move(backend_->Allocate1d(DType::kF32, kOut)).value();
    Tensor dx = std::move(backend_->Allocate2d(DType::kF32, kBatch, kIn)).value();
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
  ASSERT_TRUE(cpu::SplitsInRowSlabs(kIn, kOut, GetParam()));
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

// Planned for this many threads, run by fewer: each thread takes the parts
// left over.
TEST_P(CpuSplitDenseTest, AKernelRunByFewerThreadsThanItWasPlannedForStillMatches) {
  DenseKernelOptions options;
  options.activation = ActivationFn{DenseActivation::kRelu, 0};
  absl::StatusOr<std::unique_ptr<DenseKernel>> kernel =
      backend_->CreateDenseKernel(kBatch, kIn, kOut, options);
  ASSERT_TRUE(kernel.ok()) << kernel.status();
  omp_set_num_threads(GetParam() - 1);
  Check(kernel->get(), options.activation, true);
}

INSTANTIATE_TEST_SUITE_P(Threads, CpuSplitDenseTest, ::testing::Values(2, 3));

}  // namespace
}  // namespace traind::engine
