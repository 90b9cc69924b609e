// The CUDA backend op by op against the CPU backend on fresh random inputs
// (ggml's test-backend-ops pattern), plus the error layer. Tests that need a
// device skip with the reason when none is found (no driver in CI).
#include "worker/engine/backend/cuda/cuda_backend.h"

#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "base/random.h"
#include "base/status.h"
#include "gtest/gtest.h"
#include "worker/engine/backend/cpu/cpu_backend.h"
#include "worker/engine/backend/cuda/cuda_raii.h"
#include "worker/engine/backend/cuda/cuda_status.h"
#include "worker/engine/backend/cuda/testing/cuda_vs_cpu_fixture.h"

namespace traind::engine {
namespace {

// ---------------------------------------------------------------------------
// Without a device
// ---------------------------------------------------------------------------

TEST(CudaStatusTest, AllocationFailureIsOutOfMemoryWithNeededBytes) {
  const absl::Status s = cuda::CudaStatus(cudaErrorMemoryAllocation, "cudaMalloc", 12345);
  EXPECT_EQ(FailureKindOf(s), FailureKind::kOutOfMemory) << s;
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(s.message().find("cudaMalloc"), std::string::npos) << s;
  EXPECT_NE(s.message().find("needed 12345 bytes"), std::string::npos) << s;
  // Free bytes are reported where the driver can tell them, "unknown" otherwise.
  EXPECT_NE(s.message().find("free"), std::string::npos) << s;
}

TEST(CudaStatusTest, CublasAllocFailedIsOutOfMemory) {
  const absl::Status s = cuda::CublasStatus(CUBLAS_STATUS_ALLOC_FAILED, "cublasCreate");
  EXPECT_EQ(FailureKindOf(s), FailureKind::kOutOfMemory) << s;
}

TEST(CudaStatusTest, OtherFailuresAreDeviceErrorsNamingTheCall) {
  const absl::Status s = cuda::CudaStatus(cudaErrorIllegalAddress, "cudaMemcpyAsync(x)");
  EXPECT_EQ(FailureKindOf(s), FailureKind::kDeviceError) << s;
  EXPECT_NE(s.message().find("cudaMemcpyAsync(x)"), std::string::npos) << s;
  EXPECT_NE(s.message().find("cudaErrorIllegalAddress"), std::string::npos) << s;
  const absl::Status b = cuda::CublasStatus(CUBLAS_STATUS_EXECUTION_FAILED, "cublasSgemm");
  EXPECT_EQ(FailureKindOf(b), FailureKind::kDeviceError) << b;
  EXPECT_NE(b.message().find("cublasSgemm"), std::string::npos) << b;
  EXPECT_TRUE(cuda::CudaStatus(cudaSuccess, "x").ok());
}

TEST(CudaDeviceTest, DeviceCountNeverFailsAndExplainsZero) {
  std::string reason;
  const int count = cuda::DeviceCount(&reason);
  EXPECT_GE(count, 0);
  if (count == 0) {
    EXPECT_FALSE(reason.empty());
  }
}

TEST(CudaDeviceTest, CreateWithoutDeviceIsFailedPrecondition) {
  std::string reason;
  if (cuda::DeviceCount(&reason) > 0) GTEST_SKIP() << "a CUDA device is present";
  const absl::StatusOr<std::unique_ptr<Backend>> backend = CreateCudaBackend();
  ASSERT_FALSE(backend.ok());
  EXPECT_EQ(backend.status().code(), absl::StatusCode::kFailedPrecondition) << backend.status();
}

// ---------------------------------------------------------------------------
// With a device: CUDA vs CPU (loss kernels, optimizers and memory in
// cuda_loss_optimizer_test.cc)
// ---------------------------------------------------------------------------

TEST_F(CudaVsCpuTest, Fill) {
  Pair t = Zeros(7, 13);
  ASSERT_TRUE(cpu_->Fill(2.5f, &t.cpu).ok());
  ASSERT_TRUE(gpu_->Fill(2.5f, &t.gpu).ok());
  ExpectClose(t, 0, 0, "fill");
}

TEST_F(CudaVsCpuTest, GatherRowsAndLabels) {
  std::vector<float> src(50 * 9);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<float>(i) * 0.5f;
  std::vector<int32_t> labels(50);
  for (size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<int32_t>(i % 7);
  const std::vector<int64_t> rows = {3, 49, 0, 17, 17, 8};
  for (int round = 0; round < 2; ++round) {  // the second reuses the staging buffers
    Pair t = Zeros(6, 9);
    ASSERT_TRUE(cpu_->GatherRows(src.data(), 9, rows, &t.cpu).ok());
    ASSERT_TRUE(gpu_->GatherRows(src.data(), 9, rows, &t.gpu).ok());
    ExpectClose(t, 0, 0, "gather rows");
    Tensor lc = std::move(cpu_->Allocate1d(DType::kS32, 6)).value();
    Tensor lg = std::move(gpu_->Allocate1d(DType::kS32, 6)).value();
    ASSERT_TRUE(cpu_->GatherLabels(labels.data(), rows, &lc).ok());
    ASSERT_TRUE(gpu_->GatherLabels(labels.data(), rows, &lg).ok());
    std::vector<int32_t> got(6);
    ASSERT_TRUE(gpu_->CopyToHost(lg, got.data()).ok());
    for (int i = 0; i < 6; ++i) EXPECT_EQ(got[i], lc.s32()[i]);
  }
}

TEST_F(CudaVsCpuTest, DenseForwardBackwardEveryActivation) {
  // The default backend: the forward pass through cuBLASLt's epilogues.
  CheckDenseEveryActivation(*gpu_, kGemmRtol, kGemmAtol);
}

TEST_F(CudaVsCpuTest, DenseWithoutCublasLtMatchesToo) {
  CudaBackendOptions options;
  options.use_cublaslt = false;
  auto gpu = CreateCudaBackend(options);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  CheckDenseEveryActivation(**gpu, kGemmRtol, kGemmAtol);
}

TEST_F(CudaVsCpuTest, Tf32AndBf16GemmsAreCloseToFp32) {
  // TF32 rounds products' inputs to 10 mantissa bits, bf16 to 7: compared
  // with the CPU's fp32 within what that rounding allows (K = 19 here).
  for (GemmPrecision precision : {GemmPrecision::kTf32, GemmPrecision::kBf16}) {
    const bool bf16 = precision == GemmPrecision::kBf16;
    SCOPED_TRACE(bf16 ? "bf16" : "tf32");
    CudaBackendOptions options;
    options.precision = precision;
    auto gpu = CreateCudaBackend(options);
    ASSERT_TRUE(gpu.ok()) << gpu.status();
    EXPECT_NE((*gpu)->name().find(bf16 ? "bf16" : "tf32"), std::string::npos) << (*gpu)->name();
    CheckDenseEveryActivation(**gpu, bf16 ? 3e-2 : 5e-3, bf16 ? 3e-2 : 5e-3);
    // The benchmark MLP's first layer: K = 784.
    auto kc = cpu_->CreateDenseKernel(256, 784, 512, DenseActivation::kRelu);
    auto kg = (*gpu)->CreateDenseKernel(256, 784, 512, DenseActivation::kRelu);
    ASSERT_TRUE(kc.ok() && kg.ok());
    Pair x = Random(256, 784, 0, 1), w = Random(784, 512, -0.05, 0.05);
    Pair b = Random1d(512, -0.1, 0.1), y = Zeros(256, 512);
    ASSERT_TRUE((*kc)->Forward(x.cpu, w.cpu, b.cpu, &y.cpu).ok());
    ASSERT_TRUE((*kg)->Forward(x.gpu, w.gpu, b.gpu, &y.gpu).ok());
    ExpectClose(y, 2e-2, bf16 ? 2e-2 : 5e-3, "dense y (K = 784)", gpu->get());
  }
}

TEST_F(CudaVsCpuTest, DenseLargeShapes) {
  // The benchmark MLP's first layer at batch 128 and 4096.
  for (int64_t batch : {128, 4096}) {
    auto kc = cpu_->CreateDenseKernel(batch, 784, 512, DenseActivation::kRelu);
    auto kg = gpu_->CreateDenseKernel(batch, 784, 512, DenseActivation::kRelu);
    ASSERT_TRUE(kc.ok() && kg.ok());
    Pair x = Random(batch, 784, 0, 1), w = Random(784, 512, -0.05, 0.05);
    Pair b = Random1d(512, -0.1, 0.1), y = Zeros(batch, 512);
    ASSERT_TRUE((*kc)->Forward(x.cpu, w.cpu, b.cpu, &y.cpu).ok());
    ASSERT_TRUE((*kg)->Forward(x.gpu, w.gpu, b.gpu, &y.gpu).ok());
    ExpectClose(y, 1e-3, 1e-4, "dense y (large)");
    Pair dy = Random(batch, 512, -1, 1), dw = Zeros(784, 512), db = Zeros(1, 512, 1);
    ASSERT_TRUE((*kc)->Backward(x.cpu, w.cpu, y.cpu, &dy.cpu, &dw.cpu, &db.cpu, nullptr).ok());
    ASSERT_TRUE((*kg)->Backward(x.gpu, w.gpu, y.gpu, &dy.gpu, &dw.gpu, &db.gpu, nullptr).ok());
    ExpectClose(dw, 1e-3, 1e-3, "dense dw (large)");
    ExpectClose(db, 1e-4, 1e-4, "dense db (large)");
  }
}

TEST_F(CudaVsCpuTest, ActivationsForwardBackward) {
  for (int k = 0; k <= static_cast<int>(DenseActivation::kSwish); ++k) {
    const ActivationFn f{static_cast<DenseActivation>(k), 0.2f};
    SCOPED_TRACE(testing::Message() << "activation " << k);
    Pair x = Random(31, 17, -4, 4), y = Zeros(31, 17);
    ASSERT_TRUE(cpu_->ActivationForward(f, x.cpu, &y.cpu).ok());
    ASSERT_TRUE(gpu_->ActivationForward(f, x.gpu, &y.gpu).ok());
    ExpectClose(y, kRtol, kAtol, "activation y");
    Pair dy = Random(31, 17, -1, 1), dx = Zeros(31, 17);
    ASSERT_TRUE(cpu_->ActivationBackward(f, x.cpu, y.cpu, dy.cpu, &dx.cpu).ok());
    ASSERT_TRUE(gpu_->ActivationBackward(f, x.gpu, y.gpu, dy.gpu, &dx.gpu).ok());
    ExpectClose(dx, kRtol, kAtol, "activation dx");
  }
}

TEST_F(CudaVsCpuTest, DropoutMaskIsBitIdentical) {
  for (float rate : {0.1f, 0.5f, 0.9f}) {
    Pair x = Random(129, 65, -1, 1), mask = Zeros(129, 65), y = Zeros(129, 65);
    ASSERT_TRUE(cpu_->DropoutForward(rate, 987654321, x.cpu, &mask.cpu, &y.cpu).ok());
    ASSERT_TRUE(gpu_->DropoutForward(rate, 987654321, x.gpu, &mask.gpu, &y.gpu).ok());
    ExpectClose(mask, 0, 0, "dropout mask");
    ExpectClose(y, 0, 0, "dropout y");
  }
}

TEST_F(CudaVsCpuTest, MultiplyScaleClip) {
  Pair a = Random(33, 9, -3, 3), b = Random(33, 9, -3, 3), out = Zeros(33, 9);
  ASSERT_TRUE(cpu_->Multiply(a.cpu, b.cpu, &out.cpu).ok());
  ASSERT_TRUE(gpu_->Multiply(a.gpu, b.gpu, &out.gpu).ok());
  ExpectClose(out, 0, 0, "multiply");
  ASSERT_TRUE(cpu_->Scale(0.37f, &out.cpu).ok());
  ASSERT_TRUE(gpu_->Scale(0.37f, &out.gpu).ok());
  ExpectClose(out, 0, 0, "scale");
  ASSERT_TRUE(cpu_->ClipByValue(1.1f, &out.cpu).ok());
  ASSERT_TRUE(gpu_->ClipByValue(1.1f, &out.gpu).ok());
  ExpectClose(out, 0, 0, "clip");
}

TEST_F(CudaVsCpuTest, BatchNorm) {
  const int64_t batch = 70, n = 45;
  Pair x = Random(batch, n, -2, 3), gamma = Random1d(n, 0.5, 1.5), beta = Random1d(n, -1, 1);
  Pair rm = Random1d(n, -0.1, 0.1), rv = Random1d(n, 0.9, 1.1);
  Pair mean = Zeros(1, n, 1), rstd = Zeros(1, n, 1), y = Zeros(batch, n);
  for (bool training : {true, false}) {
    ASSERT_TRUE(cpu_->BatchNormForward(training, 0.1f, 1e-5f, x.cpu, gamma.cpu, beta.cpu, &rm.cpu,
                                       &rv.cpu, &mean.cpu, &rstd.cpu, &y.cpu)
                    .ok());
    ASSERT_TRUE(gpu_->BatchNormForward(training, 0.1f, 1e-5f, x.gpu, gamma.gpu, beta.gpu, &rm.gpu,
                                       &rv.gpu, &mean.gpu, &rstd.gpu, &y.gpu)
                    .ok());
    ExpectClose(y, kRtol, 1e-5, "batch norm y");
    ExpectClose(mean, kRtol, kAtol, "batch norm mean");
    ExpectClose(rstd, kRtol, kAtol, "batch norm rstd");
    ExpectClose(rm, kRtol, kAtol, "batch norm running mean");
    ExpectClose(rv, kRtol, kAtol, "batch norm running var");
  }
  ASSERT_TRUE(cpu_->BatchNormForward(true, 0.1f, 1e-5f, x.cpu, gamma.cpu, beta.cpu, &rm.cpu,
                                     &rv.cpu, &mean.cpu, &rstd.cpu, &y.cpu)
                  .ok());
  ASSERT_TRUE(gpu_->BatchNormForward(true, 0.1f, 1e-5f, x.gpu, gamma.gpu, beta.gpu, &rm.gpu,
                                     &rv.gpu, &mean.gpu, &rstd.gpu, &y.gpu)
                  .ok());
  Pair dy = Random(batch, n, -1, 1), dg = Zeros(1, n, 1), dbt = Zeros(1, n, 1);
  Pair dx = Zeros(batch, n);
  ASSERT_TRUE(cpu_->BatchNormBackward(x.cpu, gamma.cpu, mean.cpu, rstd.cpu, dy.cpu, &dg.cpu,
                                      &dbt.cpu, &dx.cpu)
                  .ok());
  ASSERT_TRUE(gpu_->BatchNormBackward(x.gpu, gamma.gpu, mean.gpu, rstd.gpu, dy.gpu, &dg.gpu,
                                      &dbt.gpu, &dx.gpu)
                  .ok());
  ExpectClose(dg, 1e-5, 1e-5, "batch norm dgamma");
  ExpectClose(dbt, 1e-5, 1e-5, "batch norm dbeta");
  ExpectClose(dx, 1e-4, 1e-5, "batch norm dx");
}

void KeepMemory(void*) {}

// A [0, cols] view of t: a rank without rows.
Tensor NoRows(Tensor& t) {
  return Tensor(t.raw(), &KeepMemory, DType::kF32, 0, t.cols(), 2, t.space());
}

// The steps of batch norm across ranks, one rank's sums standing for the
// sums over all ranks, and a rank without rows.
TEST_F(CudaVsCpuTest, BatchNormAcrossRanks) {
  const int64_t batch = 70, n = 45;
  Pair x = Random(batch, n, 8, 13), gamma = Random1d(n, 0.5, 1.5), beta = Random1d(n, -1, 1);
  Pair rm = Random1d(n, -0.1, 0.1), rv = Random1d(n, 0.9, 1.1);
  Pair sum = Zeros(1, n, 1), mean = Zeros(1, n, 1), sq = Zeros(1, n, 1), rstd = Zeros(1, n, 1);
  Pair y = Zeros(batch, n);
  ASSERT_TRUE(cpu_->BatchNormColumnSums(x.cpu, &sum.cpu).ok());
  ASSERT_TRUE(gpu_->BatchNormColumnSums(x.gpu, &sum.gpu).ok());
  ExpectClose(sum, kRtol, kAtol, "batch norm sum");
  // The CPU's sums on both, so the next steps compare on the same input.
  const std::vector<float> sums_cpu = Host(sum.cpu, *cpu_);
  sum = FromHost(sums_cpu, 1, n, 1);
  ASSERT_TRUE(
      cpu_->BatchNormSquaredDeviations(x.cpu, sum.cpu, batch + 30, &mean.cpu, &sq.cpu).ok());
  ASSERT_TRUE(
      gpu_->BatchNormSquaredDeviations(x.gpu, sum.gpu, batch + 30, &mean.gpu, &sq.gpu).ok());
  ExpectClose(mean, 0, 0, "batch norm mean");
  ExpectClose(sq, kRtol, kAtol, "batch norm sq");
  sq = FromHost(Host(sq.cpu, *cpu_), 1, n, 1);
  ASSERT_TRUE(cpu_->BatchNormForwardFromMoments(0.1f, 1e-5f, batch + 30, x.cpu, gamma.cpu, beta.cpu,
                                                mean.cpu, sq.cpu, &rm.cpu, &rv.cpu, &rstd.cpu,
                                                &y.cpu)
                  .ok());
  ASSERT_TRUE(gpu_->BatchNormForwardFromMoments(0.1f, 1e-5f, batch + 30, x.gpu, gamma.gpu, beta.gpu,
                                                mean.gpu, sq.gpu, &rm.gpu, &rv.gpu, &rstd.gpu,
                                                &y.gpu)
                  .ok());
  ExpectClose(rstd, kRtol, kAtol, "batch norm rstd");
  ExpectClose(rm, kRtol, kAtol, "batch norm running mean");
  ExpectClose(rv, kRtol, kAtol, "batch norm running var");
  ExpectClose(y, kRtol, 1e-5, "batch norm y");

  Pair dy = Random(batch, n, -1, 1), dg = Zeros(1, n, 1), dbt = Zeros(1, n, 1);
  Pair grad_sums = Zeros(1, 2 * n, 1), dx = Zeros(batch, n);
  ASSERT_TRUE(cpu_->BatchNormBackwardSums(x.cpu, mean.cpu, rstd.cpu, dy.cpu, &dg.cpu, &dbt.cpu,
                                          &grad_sums.cpu)
                  .ok());
  ASSERT_TRUE(gpu_->BatchNormBackwardSums(x.gpu, mean.gpu, rstd.gpu, dy.gpu, &dg.gpu, &dbt.gpu,
                                          &grad_sums.gpu)
                  .ok());
  ExpectClose(dg, 1e-5, 1e-5, "batch norm dgamma");
  ExpectClose(dbt, 1e-5, 1e-5, "batch norm dbeta");
  ExpectClose(grad_sums, 1e-5, 1e-5, "batch norm sums");
  grad_sums = FromHost(Host(grad_sums.cpu, *cpu_), 1, 2 * n, 1);
  ASSERT_TRUE(cpu_->BatchNormBackwardData(x.cpu, gamma.cpu, mean.cpu, rstd.cpu, dy.cpu,
                                          grad_sums.cpu, batch + 30, &dx.cpu)
                  .ok());
  ASSERT_TRUE(gpu_->BatchNormBackwardData(x.gpu, gamma.gpu, mean.gpu, rstd.gpu, dy.gpu,
                                          grad_sums.gpu, batch + 30, &dx.gpu)
                  .ok());
  ExpectClose(dx, 1e-4, 1e-5, "batch norm dx");

  // No rows: zero sums, running statistics updated all the same.
  const Tensor none_cpu = NoRows(x.cpu), none_gpu = NoRows(x.gpu);
  Tensor out_cpu = NoRows(y.cpu), out_gpu = NoRows(y.gpu);
  ASSERT_TRUE(cpu_->BatchNormColumnSums(none_cpu, &sum.cpu).ok());
  ASSERT_TRUE(gpu_->BatchNormColumnSums(none_gpu, &sum.gpu).ok());
  ExpectClose(sum, 0, 0, "batch norm sum of no rows");
  EXPECT_EQ(Host(sum.gpu, *gpu_), std::vector<float>(n, 0.0f));
  ASSERT_TRUE(cpu_->BatchNormForwardFromMoments(0.1f, 1e-5f, batch + 30, none_cpu, gamma.cpu,
                                                beta.cpu, mean.cpu, sq.cpu, &rm.cpu, &rv.cpu,
                                                &rstd.cpu, &out_cpu)
                  .ok());
  ASSERT_TRUE(gpu_->BatchNormForwardFromMoments(0.1f, 1e-5f, batch + 30, none_gpu, gamma.gpu,
                                                beta.gpu, mean.gpu, sq.gpu, &rm.gpu, &rv.gpu,
                                                &rstd.gpu, &out_gpu)
                  .ok());
  ExpectClose(rm, kRtol, kAtol, "batch norm running mean, no rows");
  ExpectClose(rv, kRtol, kAtol, "batch norm running var, no rows");
  ASSERT_TRUE(gpu_->BatchNormBackwardSums(none_gpu, mean.gpu, rstd.gpu, NoRows(dy.gpu), &dg.gpu,
                                          &dbt.gpu, &grad_sums.gpu)
                  .ok());
  EXPECT_EQ(Host(grad_sums.gpu, *gpu_), std::vector<float>(2 * n, 0.0f));
  EXPECT_EQ(Host(dg.gpu, *gpu_), std::vector<float>(n, 0.0f));
}

TEST_F(CudaVsCpuTest, LayerNorm) {
  const int64_t batch = 29, n = 77;
  Pair x = Random(batch, n, -2, 3), gamma = Random1d(n, 0.5, 1.5), beta = Random1d(n, -1, 1);
  Pair mean = Zeros(1, batch, 1), rstd = Zeros(1, batch, 1), y = Zeros(batch, n);
  ASSERT_TRUE(
      cpu_->LayerNormForward(1e-5f, x.cpu, gamma.cpu, beta.cpu, &mean.cpu, &rstd.cpu, &y.cpu).ok());
  ASSERT_TRUE(
      gpu_->LayerNormForward(1e-5f, x.gpu, gamma.gpu, beta.gpu, &mean.gpu, &rstd.gpu, &y.gpu).ok());
  ExpectClose(y, kRtol, 1e-5, "layer norm y");
  ExpectClose(mean, kRtol, kAtol, "layer norm mean");
  ExpectClose(rstd, kRtol, kAtol, "layer norm rstd");
  Pair dy = Random(batch, n, -1, 1), dg = Zeros(1, n, 1), dbt = Zeros(1, n, 1);
  Pair dx = Zeros(batch, n);
  ASSERT_TRUE(cpu_->LayerNormBackward(x.cpu, gamma.cpu, mean.cpu, rstd.cpu, dy.cpu, &dg.cpu,
                                      &dbt.cpu, &dx.cpu)
                  .ok());
  ASSERT_TRUE(gpu_->LayerNormBackward(x.gpu, gamma.gpu, mean.gpu, rstd.gpu, dy.gpu, &dg.gpu,
                                      &dbt.gpu, &dx.gpu)
                  .ok());
  ExpectClose(dg, 1e-4, 1e-5, "layer norm dgamma");
  ExpectClose(dbt, 1e-4, 1e-5, "layer norm dbeta");
  ExpectClose(dx, 1e-4, 1e-5, "layer norm dx");
}

TEST_F(CudaVsCpuTest, SumOfSquares) {
  for (int64_t n : {1, 1000, 300001}) {
    Pair t = Random(1, n, -2, 2, 1);
    auto c = cpu_->SumOfSquares(t.cpu);
    auto g = gpu_->SumOfSquares(t.gpu);
    ASSERT_TRUE(c.ok() && g.ok());
    EXPECT_NEAR(*g, *c, 1e-12 * std::abs(*c) + 1e-12) << n;
    auto again = gpu_->SumOfSquares(t.gpu);
    EXPECT_EQ(*again, *g) << "not deterministic";
  }
}

}  // namespace
}  // namespace traind::engine
