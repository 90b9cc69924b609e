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
// With a device: CUDA vs CPU
// ---------------------------------------------------------------------------

// A tensor on each backend with the same contents.
struct Pair {
  Tensor cpu, gpu;
};

class CudaVsCpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string reason;
    if (cuda::DeviceCount(&reason) == 0) GTEST_SKIP() << reason;
    auto cpu = CreateCpuBackend();
    ASSERT_TRUE(cpu.ok()) << cpu.status();
    cpu_ = std::move(*cpu);
    auto gpu = CreateCudaBackend();
    ASSERT_TRUE(gpu.ok()) << gpu.status();
    gpu_ = std::move(*gpu);
  }

  // Tensors of every CUDA backend live in the device's memory: a tensor
  // allocated by gpu_ works with another CUDA backend of the same device.
  Pair FromHost(const std::vector<float>& v, int64_t rows, int64_t cols, int rank = 2) {
    Pair p;
    p.cpu = std::move(rank == 1 ? cpu_->Allocate1d(DType::kF32, cols)
                                : cpu_->Allocate2d(DType::kF32, rows, cols))
                .value();
    p.gpu = std::move(rank == 1 ? gpu_->Allocate1d(DType::kF32, cols)
                                : gpu_->Allocate2d(DType::kF32, rows, cols))
                .value();
    EXPECT_TRUE(cpu_->CopyFromHost(v.data(), &p.cpu).ok());
    EXPECT_TRUE(gpu_->CopyFromHost(v.data(), &p.gpu).ok());
    // The upload is asynchronous on gpu_'s stream; another backend's stream
    // must not read the tensor before it lands.
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    return p;
  }
  Pair Random(int64_t rows, int64_t cols, double lo, double hi, int rank = 2) {
    std::vector<float> v(static_cast<size_t>(rows * cols));
    for (float& x : v) x = static_cast<float>(lo + (hi - lo) * rng_.Uniform());
    return FromHost(v, rows, cols, rank);
  }
  Pair Random1d(int64_t n, double lo, double hi) { return Random(1, n, lo, hi, 1); }
  Pair Zeros(int64_t rows, int64_t cols, int rank = 2) {
    return FromHost(std::vector<float>(static_cast<size_t>(rows * cols), 0.0f), rows, cols, rank);
  }

  // s32 class codes [codes.size()] on each backend.
  Pair Codes(const std::vector<int32_t>& codes) {
    const int64_t n = static_cast<int64_t>(codes.size());
    Pair p;
    p.cpu = std::move(cpu_->Allocate1d(DType::kS32, n)).value();
    p.gpu = std::move(gpu_->Allocate1d(DType::kS32, n)).value();
    EXPECT_TRUE(cpu_->CopyFromHost(codes.data(), &p.cpu).ok());
    EXPECT_TRUE(gpu_->CopyFromHost(codes.data(), &p.gpu).ok());
    return p;
  }
  // Fresh targets of a loss: class codes in [0, width) (softmax
  // cross-entropy), 0/1 labels (sigmoid BCE) or values (regression).
  Pair LossTargets(LossKind kind, int64_t batch, int64_t width) {
    if (kind == LossKind::kSoftmaxCrossEntropy) {
      std::vector<int32_t> codes(static_cast<size_t>(batch));
      for (int32_t& c : codes) {
        c = static_cast<int32_t>(rng_.UniformInt(static_cast<uint64_t>(width)));
      }
      return Codes(codes);
    }
    std::vector<float> v(static_cast<size_t>(batch * width));
    for (float& x : v) {
      x = kind == LossKind::kSigmoidBinaryCrossEntropy ? (rng_.Uniform() < 0.5 ? 0.0f : 1.0f)
                                                       : static_cast<float>(6 * rng_.Uniform() - 3);
    }
    return FromHost(v, batch, width);
  }
  // Slot `slot` of a loss kernel (NaN when ReadSlots fails).
  static double Slot(LossKernel& k, int64_t slot) {
    double v = std::numeric_limits<double>::quiet_NaN();
    const absl::Status s = k.ReadSlots(slot, 1, &v);
    EXPECT_TRUE(s.ok()) << s;
    return v;
  }

  std::vector<float> Host(const Tensor& t, Backend& b) {
    std::vector<float> v(static_cast<size_t>(t.size()));
    const absl::Status s = b.CopyToHost(t, v.data());
    EXPECT_TRUE(s.ok()) << s;
    return v;
  }

  // |gpu - cpu| <= atol + rtol |cpu| elementwise; NaN never passes. `gpu`:
  // the backend whose stream wrote p.gpu last (default gpu_).
  void ExpectClose(const Pair& p, double rtol, double atol, const std::string& what,
                   Backend* gpu = nullptr) {
    const std::vector<float> c = Host(p.cpu, *cpu_), g = Host(p.gpu, gpu ? *gpu : *gpu_);
    ASSERT_EQ(c.size(), g.size());
    int bad = 0;
    for (size_t i = 0; i < c.size(); ++i) {
      const bool ok = !std::isnan(g[i]) && !std::isnan(c[i]) &&
                      std::abs(double{g[i]} - c[i]) <= atol + rtol * std::abs(double{c[i]});
      if (!ok && ++bad <= 5) {
        ADD_FAILURE() << what << "[" << i << "]: gpu " << g[i] << " vs cpu " << c[i];
      }
    }
    EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << c.size() << " differ";
  }

  // Every activation, with and without bias: forward, and backward for the
  // training kernels, against the CPU backend.
  void CheckDenseEveryActivation(Backend& gpu, double rtol, double atol);

  std::unique_ptr<Backend> cpu_, gpu_;
  Rng rng_{20240611};
};

constexpr double kRtol = 1e-5, kAtol = 1e-6;
// GEMM sums in another order (and cuBLAS may split k): a looser bound.
constexpr double kGemmRtol = 1e-4, kGemmAtol = 1e-5;

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

void CudaVsCpuTest::CheckDenseEveryActivation(Backend& gpu, double rtol, double atol) {
  const int64_t batch = 37, in = 19, out = 23;
  for (DenseActivation act :
       {DenseActivation::kLinear, DenseActivation::kRelu, DenseActivation::kLeakyRelu,
        DenseActivation::kElu, DenseActivation::kSigmoid, DenseActivation::kTanh,
        DenseActivation::kGelu, DenseActivation::kSoftplus, DenseActivation::kSwish}) {
    for (bool bias : {true, false}) {
      SCOPED_TRACE(testing::Message()
                   << "activation " << static_cast<int>(act) << " bias " << bias);
      DenseKernelOptions options;
      options.activation.kind = act;
      options.activation.alpha = 0.1f;
      options.bias = bias;
      auto kc = cpu_->CreateDenseKernel(batch, in, out, options);
      auto kg = gpu.CreateDenseKernel(batch, in, out, options);
      ASSERT_TRUE(kc.ok() && kg.ok());
      Pair x = Random(batch, in, -1, 1), w = Random(in, out, -0.5, 0.5);
      Pair b = Random1d(out, -0.5, 0.5), y = Zeros(batch, out);
      ASSERT_TRUE((*kc)->Forward(x.cpu, w.cpu, b.cpu, &y.cpu).ok());
      ASSERT_TRUE((*kg)->Forward(x.gpu, w.gpu, b.gpu, &y.gpu).ok());
      ExpectClose(y, rtol, atol, "dense y", &gpu);
      if (!DerivativeFromOutput(act)) continue;  // not a training kernel
      Pair dy = Random(batch, out, -1, 1), dw = Zeros(in, out), db = Zeros(1, out, 1);
      Pair dx = Zeros(batch, in);
      ASSERT_TRUE((*kc)->Backward(x.cpu, w.cpu, y.cpu, &dy.cpu, &dw.cpu, &db.cpu, &dx.cpu).ok());
      ASSERT_TRUE((*kg)->Backward(x.gpu, w.gpu, y.gpu, &dy.gpu, &dw.gpu, &db.gpu, &dx.gpu).ok());
      ExpectClose(dy, rtol, atol, "dense dz", &gpu);
      ExpectClose(dw, rtol, atol, "dense dw", &gpu);
      ExpectClose(db, rtol, atol, "dense db", &gpu);
      ExpectClose(dx, rtol, atol, "dense dx", &gpu);
    }
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

// Loss kernels: slot values within 1e-9, grads and predictions within
// 1e-5 (relative; both backends compute each in double and round it to
// float).
constexpr double kLossRtol = 1e-5, kLossAtol = 1e-12;

TEST_F(CudaVsCpuTest, LossKernelEveryKindMatchesCpu) {
  struct Case {
    const char* name;
    LossKind kind;
    int64_t width, batch;
    bool weights;
    double smoothing, delta;
  };
  const Case cases[] = {
      {"softmax cross-entropy", LossKind::kSoftmaxCrossEntropy, 10, 67, false, 0, 1},
      {"softmax cross-entropy, class weights, smoothing", LossKind::kSoftmaxCrossEntropy, 10, 67,
       true, 0.1, 1},
      {"softmax cross-entropy, 1000 classes", LossKind::kSoftmaxCrossEntropy, 1000, 2049, true,
       0.05, 1},
      {"sigmoid BCE", LossKind::kSigmoidBinaryCrossEntropy, 7, 67, false, 0, 1},
      {"sigmoid BCE, pos_weight", LossKind::kSigmoidBinaryCrossEntropy, 7, 67, true, 0, 1},
      {"mse", LossKind::kMse, 5, 67, false, 0, 1},
      {"mse, 600k elements", LossKind::kMse, 300, 2049, false, 0, 1},
      {"l1", LossKind::kL1, 5, 67, false, 0, 1},
      {"huber, delta 0.7", LossKind::kHuber, 5, 67, false, 0, 0.7},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    LossKernelOptions options;
    options.kind = c.kind;
    options.width = c.width;
    options.max_batch = c.batch + 13;
    options.slots = 3;
    if (c.weights) {
      for (int64_t j = 0; j < c.width; ++j) options.weights.push_back(0.25 + 2 * rng_.Uniform());
    }
    options.label_smoothing = c.smoothing;
    options.huber_delta = c.delta;
    auto kc = cpu_->CreateLossKernel(options);
    auto kg = gpu_->CreateLossKernel(options);
    ASSERT_TRUE(kc.ok()) << kc.status();
    ASSERT_TRUE(kg.ok()) << kg.status();
    LossKernel &cpu = **kc, &gpu = **kg;
    Pair outputs = Random(c.batch, c.width, -5, 5);
    Pair targets = LossTargets(c.kind, c.batch, c.width);
    const double scale = 1.0 / static_cast<double>(c.batch);
    Pair grad = Zeros(c.batch, c.width), pred = Zeros(c.batch, c.width);
    ASSERT_TRUE(cpu.Compute(outputs.cpu, targets.cpu, scale, &grad.cpu, &pred.cpu, 1).ok());
    ASSERT_TRUE(gpu.Compute(outputs.gpu, targets.gpu, scale, &grad.gpu, &pred.gpu, 1).ok());
    const double want = Slot(cpu, 1), got = Slot(gpu, 1);
    EXPECT_NEAR(got, want, 1e-9 * std::abs(want));
    ExpectClose(grad, kLossRtol, kLossAtol, "loss grad");
    ExpectClose(pred, kLossRtol, kLossAtol, "loss predictions");
    // Without a gradient (slot 0), without predictions (slot 2).
    Pair pred_only = Zeros(c.batch, c.width), grad_only = Zeros(c.batch, c.width);
    ASSERT_TRUE(cpu.Compute(outputs.cpu, targets.cpu, scale, nullptr, &pred_only.cpu, 0).ok());
    ASSERT_TRUE(gpu.Compute(outputs.gpu, targets.gpu, scale, nullptr, &pred_only.gpu, 0).ok());
    ASSERT_TRUE(cpu.Compute(outputs.cpu, targets.cpu, scale, &grad_only.cpu, nullptr, 2).ok());
    ASSERT_TRUE(gpu.Compute(outputs.gpu, targets.gpu, scale, &grad_only.gpu, nullptr, 2).ok());
    ExpectClose(pred_only, kLossRtol, kLossAtol, "loss predictions (no grad)");
    ExpectClose(grad_only, kLossRtol, kLossAtol, "loss grad (no predictions)");
    // The same sum whatever is written beside it, bit for bit (a fixed order).
    std::vector<double> slots(3);
    ASSERT_TRUE(gpu.ReadSlots(0, 3, slots.data()).ok());
    EXPECT_EQ(slots, std::vector<double>(3, got));
  }
}

TEST_F(CudaVsCpuTest, LossKernelSlotsAndEmptyBatches) {
  LossKernelOptions options;
  options.kind = LossKind::kMse;
  options.width = 4;
  options.max_batch = 20;
  options.slots = 5;
  auto kc = cpu_->CreateLossKernel(options);
  auto kg = gpu_->CreateLossKernel(options);
  ASSERT_TRUE(kc.ok()) << kc.status();
  ASSERT_TRUE(kg.ok()) << kg.status();
  LossKernel &cpu = **kc, &gpu = **kg;
  // Fresh slots read 0.
  EXPECT_EQ(Slot(gpu, 4), 0.0);
  // Batches of several sizes, one slot each, all read back at once.
  const int64_t batches[] = {20, 1, 7, 13, 20};
  for (int64_t slot = 0; slot < 5; ++slot) {
    const int64_t batch = batches[slot];
    Pair outputs = Random(batch, 4, -3, 3), targets = LossTargets(LossKind::kMse, batch, 4);
    ASSERT_TRUE(cpu.Compute(outputs.cpu, targets.cpu, 1.0, nullptr, nullptr, slot).ok());
    ASSERT_TRUE(gpu.Compute(outputs.gpu, targets.gpu, 1.0, nullptr, nullptr, slot).ok());
  }
  std::vector<double> want(5), got(5);
  ASSERT_TRUE(cpu.ReadSlots(0, 5, want.data()).ok());
  ASSERT_TRUE(gpu.ReadSlots(0, 5, got.data()).ok());
  for (int i = 0; i < 5; ++i) EXPECT_NEAR(got[i], want[i], 1e-9 * std::abs(want[i])) << i;
  // A range of them; an empty range; ranges outside the slots.
  std::vector<double> part(2, -1.0);
  ASSERT_TRUE(gpu.ReadSlots(2, 2, part.data()).ok());
  EXPECT_EQ(part, (std::vector<double>{got[2], got[3]}));
  EXPECT_TRUE(gpu.ReadSlots(5, 0, part.data()).ok());
  EXPECT_EQ(gpu.ReadSlots(4, 2, part.data()).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(gpu.ReadSlots(-1, 1, part.data()).code(), absl::StatusCode::kInvalidArgument);

  // Batch 0: the slot becomes 0 (grad and predictions of no rows).
  Tensor none = std::move(gpu_->Allocate2d(DType::kF32, 0, 4)).value();
  Tensor none_targets = std::move(gpu_->Allocate2d(DType::kF32, 0, 4)).value();
  Tensor none_grad = std::move(gpu_->Allocate2d(DType::kF32, 0, 4)).value();
  ASSERT_TRUE(gpu.Compute(none, none_targets, 1.0, &none_grad, nullptr, 3).ok());
  EXPECT_EQ(Slot(gpu, 3), 0.0);
  EXPECT_EQ(Slot(gpu, 2), got[2]);  // the others keep theirs

  // Softmax cross-entropy of no rows as well.
  LossKernelOptions ce;
  ce.width = 6;
  ce.max_batch = 8;
  auto kce = gpu_->CreateLossKernel(ce);
  ASSERT_TRUE(kce.ok()) << kce.status();
  Pair outputs = Random(8, 6, -2, 2), codes = LossTargets(LossKind::kSoftmaxCrossEntropy, 8, 6);
  ASSERT_TRUE((*kce)->Compute(outputs.gpu, codes.gpu, 1.0, nullptr, nullptr, 0).ok());
  EXPECT_GT(Slot(**kce, 0), 0.0);
  Tensor no_logits = std::move(gpu_->Allocate2d(DType::kF32, 0, 6)).value();
  Tensor no_codes = std::move(gpu_->Allocate1d(DType::kS32, 0)).value();
  ASSERT_TRUE((*kce)->Compute(no_logits, no_codes, 1.0, nullptr, nullptr, 0).ok());
  EXPECT_EQ(Slot(**kce, 0), 0.0);

  // Arguments out of range are refused, not launched.
  EXPECT_EQ(gpu.Compute(none, none_targets, 1.0, nullptr, nullptr, 5).code(),
            absl::StatusCode::kInvalidArgument);
  LossKernelOptions bad = options;
  bad.width = 0;
  EXPECT_EQ(gpu_->CreateLossKernel(bad).status().code(), absl::StatusCode::kInvalidArgument);
}

// A Compute given kStoredGradScale uses the scale stored last before it on
// the stream (read when the kernel runs).
TEST_F(CudaVsCpuTest, LossKernelStoredGradScale) {
  LossKernelOptions options;
  options.kind = LossKind::kHuber;
  options.width = 3;
  options.max_batch = 8;
  auto kc = cpu_->CreateLossKernel(options);
  auto kg = gpu_->CreateLossKernel(options);
  ASSERT_TRUE(kc.ok() && kg.ok());
  Pair outputs = Random(8, 3, -3, 3), targets = LossTargets(LossKind::kHuber, 8, 3);
  Pair grad = Random(8, 3, 0, 1);
  for (double scale : {0.125, 3.0}) {
    ASSERT_TRUE((*kc)->Compute(outputs.cpu, targets.cpu, scale, &grad.cpu, nullptr, 0).ok());
    ASSERT_TRUE((*kg)->StoreGradScale(scale).ok());
    ASSERT_TRUE(
        (*kg)
            ->Compute(outputs.gpu, targets.gpu, LossKernel::kStoredGradScale, &grad.gpu, nullptr, 0)
            .ok());
    ExpectClose(grad, 1e-6, 1e-12, absl::StrCat("grad, stored scale ", scale));
  }
}

TEST_F(CudaVsCpuTest, LossKernelReportsAnOutOfRangeClassCode) {
  LossKernelOptions options;
  options.width = 5;
  options.max_batch = 9;
  options.slots = 2;
  auto kc = cpu_->CreateLossKernel(options);
  auto kg = gpu_->CreateLossKernel(options);
  ASSERT_TRUE(kc.ok()) << kc.status();
  ASSERT_TRUE(kg.ok()) << kg.status();
  LossKernel &cpu = **kc, &gpu = **kg;
  Pair outputs = Random(9, 5, -2, 2), grad = Zeros(9, 5);
  std::vector<int32_t> codes = {0, 1, 2, 3, 4, 0, 5, 1, -1};
  Pair targets = Codes(codes);
  // Reported by Compute or, at the latest, by ReadSlots: the first bad row.
  absl::Status s = gpu.Compute(outputs.gpu, targets.gpu, 1.0, &grad.gpu, nullptr, 0);
  double value = 0;
  if (s.ok()) s = gpu.ReadSlots(0, 1, &value);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("class code 5 of row 6"), std::string::npos) << s;
  // In the CPU kernel's words.
  const absl::Status sc = cpu.Compute(outputs.cpu, targets.cpu, 1.0, &grad.cpu, nullptr, 0);
  EXPECT_EQ(s.message(), sc.message());
  // Reported once: the kernel goes on with good codes.
  codes[6] = 2;
  codes[8] = 4;
  targets = Codes(codes);
  ASSERT_TRUE(cpu.Compute(outputs.cpu, targets.cpu, 1.0, &grad.cpu, nullptr, 1).ok());
  ASSERT_TRUE(gpu.Compute(outputs.gpu, targets.gpu, 1.0, &grad.gpu, nullptr, 1).ok());
  const double want = Slot(cpu, 1);
  EXPECT_NEAR(Slot(gpu, 1), want, 1e-9 * want);
  ExpectClose(grad, kLossRtol, kLossAtol, "loss grad after a bad code");
  // A bad code of an earlier batch (its row within that batch) is reported
  // when any slot is read; a negative one too.
  Pair small = Random(3, 5, -2, 2), bad_codes = Codes({4, -2, 0});
  s = gpu.Compute(small.gpu, bad_codes.gpu, 1.0, nullptr, nullptr, 0);
  if (s.ok()) s = gpu.Compute(outputs.gpu, targets.gpu, 1.0, nullptr, nullptr, 1);
  if (s.ok()) s = gpu.ReadSlots(1, 1, &value);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("class code -2 of row 1"), std::string::npos) << s;
  EXPECT_NEAR(Slot(gpu, 1), want, 1e-9 * want);
}

TEST_F(CudaVsCpuTest, OptimizerUpdates) {
  const int64_t n = 1001;
  // SGD: plain, momentum, Nesterov, each with weight decay.
  for (int variant = 0; variant < 3; ++variant) {
    SgdStep step;
    step.learning_rate = 0.05;
    step.momentum = variant == 0 ? 0.0 : 0.9;
    step.nesterov = variant == 2;
    step.weight_decay = 1e-3;
    Pair w = Random1d(n, -1, 1), v = Random1d(n, -0.1, 0.1);
    for (int t = 0; t < 3; ++t) {
      Pair g = Random1d(n, -1, 1);
      ASSERT_TRUE(cpu_->SgdUpdate(step, g.cpu, &v.cpu, &w.cpu).ok());
      ASSERT_TRUE(gpu_->SgdUpdate(step, g.gpu, &v.gpu, &w.gpu).ok());
    }
    ExpectClose(w, kRtol, kAtol, "sgd w");
  }
  // Adam and AdamW.
  for (bool decoupled : {false, true}) {
    AdamStep step;
    step.learning_rate = 1e-2;
    step.weight_decay = 1e-2;
    step.decoupled = decoupled;
    Pair w = Random1d(n, -1, 1), m = Zeros(1, n, 1), v = Zeros(1, n, 1);
    for (int t = 1; t <= 3; ++t) {
      step.step = t;
      Pair g = Random1d(n, -1, 1);
      ASSERT_TRUE(cpu_->AdamUpdate(step, g.cpu, &m.cpu, &v.cpu, &w.cpu).ok());
      ASSERT_TRUE(gpu_->AdamUpdate(step, g.gpu, &m.gpu, &v.gpu, &w.gpu).ok());
    }
    ExpectClose(w, kRtol, kAtol, "adam w");
    ExpectClose(m, kRtol, kAtol, "adam m");
    ExpectClose(v, kRtol, kAtol, "adam v");
  }
  // RMSprop with and without momentum.
  for (double momentum : {0.0, 0.9}) {
    RmsPropStep step;
    step.learning_rate = 1e-2;
    step.momentum = momentum;
    step.weight_decay = 1e-3;
    Pair w = Random1d(n, -1, 1), s = Zeros(1, n, 1), b = Zeros(1, n, 1);
    for (int t = 0; t < 3; ++t) {
      Pair g = Random1d(n, -1, 1);
      ASSERT_TRUE(cpu_->RmsPropUpdate(step, g.cpu, &s.cpu, &b.cpu, &w.cpu).ok());
      ASSERT_TRUE(gpu_->RmsPropUpdate(step, g.gpu, &s.gpu, &b.gpu, &w.gpu).ok());
    }
    ExpectClose(w, kRtol, kAtol, "rmsprop w");
  }
}

TEST_F(CudaVsCpuTest, MultiTensorUpdatesEqualTensorByTensor) {
  // Sizes around the multi-tensor chunk (4096) and a tiny one.
  const std::vector<int64_t> sizes = {1, 4095, 4096, 4097, 10000, 33};
  const size_t k = sizes.size();
  auto make = [&](double lo, double hi) {
    std::vector<Pair> v;
    for (int64_t n : sizes) v.push_back(Random1d(n, lo, hi));
    return v;
  };
  // Two GPU copies of the same start: one updated per tensor, one in one launch.
  auto copy_gpu = [&](const std::vector<Pair>& from) {
    std::vector<Pair> to;
    for (const Pair& p : from) to.push_back(FromHost(Host(p.gpu, *gpu_), 1, p.gpu.size(), 1));
    return to;
  };
  auto expect_equal = [&](const std::vector<Pair>& a, const std::vector<Pair>& b,
                          const std::string& what) {
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_EQ(Host(a[i].gpu, *gpu_), Host(b[i].gpu, *gpu_)) << what << " tensor " << i;
    }
  };
  auto ptrs = [](std::vector<Pair>& v) {
    std::vector<Tensor*> out;
    for (Pair& p : v) out.push_back(&p.gpu);
    return out;
  };
  for (int variant = 0; variant < 3; ++variant) {
    SCOPED_TRACE(testing::Message() << "sgd variant " << variant);
    SgdStep step;
    step.learning_rate = 0.05;
    step.momentum = variant == 0 ? 0.0 : 0.9;
    step.nesterov = variant == 2;
    step.weight_decay = 1e-3;
    std::vector<Pair> w1 = make(-1, 1), v1 = make(-0.1, 0.1);
    std::vector<Pair> w2 = copy_gpu(w1), v2 = copy_gpu(v1);
    std::vector<Tensor*> pw = ptrs(w2), pv = ptrs(v2);
    for (int t = 0; t < 3; ++t) {  // later steps reuse the uploaded table
      std::vector<Pair> g = make(-1, 1);
      std::vector<const Tensor*> pg;
      for (size_t i = 0; i < k; ++i) {
        ASSERT_TRUE(gpu_->SgdUpdate(step, g[i].gpu, &v1[i].gpu, &w1[i].gpu).ok());
        pg.push_back(&g[i].gpu);
      }
      const absl::Span<Tensor* const> velocities =
          variant == 0 ? absl::Span<Tensor* const>() : absl::Span<Tensor* const>(pv);
      ASSERT_TRUE(gpu_->SgdUpdateMany(step, pg, velocities, pw).ok());
    }
    expect_equal(w1, w2, "sgd w");
    if (variant > 0) expect_equal(v1, v2, "sgd v");
  }
  for (bool decoupled : {false, true}) {
    SCOPED_TRACE(decoupled ? "adamw" : "adam");
    AdamStep step;
    step.learning_rate = 1e-2;
    step.weight_decay = 1e-2;
    step.decoupled = decoupled;
    std::vector<Pair> w1 = make(-1, 1), m1 = make(0, 0), v1 = make(0, 0);
    std::vector<Pair> w2 = copy_gpu(w1), m2 = copy_gpu(m1), v2 = copy_gpu(v1);
    std::vector<Tensor*> pw = ptrs(w2), pm = ptrs(m2), pv = ptrs(v2);
    for (int t = 1; t <= 3; ++t) {
      step.step = t;
      std::vector<Pair> g = make(-1, 1);
      std::vector<const Tensor*> pg;
      for (size_t i = 0; i < k; ++i) {
        ASSERT_TRUE(gpu_->AdamUpdate(step, g[i].gpu, &m1[i].gpu, &v1[i].gpu, &w1[i].gpu).ok());
        pg.push_back(&g[i].gpu);
      }
      // A subset first (another table), then all of them.
      if (t == 2) {
        std::vector<const Tensor*> g0 = {pg[0]};
        std::vector<Tensor*> m0 = {pm[0]}, v0 = {pv[0]}, w0 = {pw[0]};
        ASSERT_TRUE(gpu_->AdamUpdateMany(step, g0, m0, v0, w0).ok());
        ASSERT_TRUE(gpu_->AdamUpdate(step, *pg[0], &m1[0].gpu, &v1[0].gpu, &w1[0].gpu).ok());
      }
      ASSERT_TRUE(gpu_->AdamUpdateMany(step, pg, pm, pv, pw).ok());
    }
    expect_equal(w1, w2, "adam w");
    expect_equal(m1, m2, "adam m");
    expect_equal(v1, v2, "adam v");
  }
  // Mismatched lists are refused, not launched.
  std::vector<Pair> w = make(-1, 1);
  std::vector<Tensor*> pw = ptrs(w);
  std::vector<const Tensor*> pg = {&w[0].gpu};
  SgdStep step;
  step.learning_rate = 0.1;
  EXPECT_FALSE(gpu_->SgdUpdateMany(step, pg, {}, pw).ok());
}

TEST_F(CudaVsCpuTest, StagedUploadsNeverOverwriteACopyInFlight) {
  // More uploads than staging slots, each from the same host buffer changed
  // in between: every tensor must hold what it was given.
  std::vector<Tensor> tensors;
  std::vector<float> host(3000);
  for (int i = 0; i < 11; ++i) {
    for (size_t j = 0; j < host.size(); ++j) host[j] = static_cast<float>(i * 10000 + j);
    tensors.push_back(std::move(gpu_->Allocate1d(DType::kF32, 3000)).value());
    ASSERT_TRUE(gpu_->CopyFromHost(host.data(), &tensors.back()).ok());
  }
  for (int i = 0; i < 11; ++i) {
    std::vector<float> got(3000);
    ASSERT_TRUE(gpu_->CopyToHost(tensors[i], got.data()).ok());
    EXPECT_EQ(got[0], static_cast<float>(i * 10000));
    EXPECT_EQ(got[2999], static_cast<float>(i * 10000 + 2999));
  }
}

TEST_F(CudaVsCpuTest, HugeAllocationIsOutOfMemoryWithBytes) {
  const absl::StatusOr<Tensor> t = gpu_->Allocate2d(DType::kF32, int64_t{1} << 30, 1 << 10);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(FailureKindOf(t.status()), FailureKind::kOutOfMemory) << t.status();
  EXPECT_NE(t.status().message().find("needed"), std::string::npos) << t.status();
  EXPECT_NE(t.status().message().find("free"), std::string::npos) << t.status();
  // The failure is not sticky: the backend still works.
  EXPECT_TRUE(gpu_->Allocate1d(DType::kF32, 10).ok());
}

TEST_F(CudaVsCpuTest, RaiiBuffersAreMoveOnlyAndFreeTheirMemory) {
  size_t free_before = 0, total = 0, free_held = 0, free_after = 0;
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  ASSERT_EQ(cudaMemGetInfo(&free_before, &total), cudaSuccess);
  {
    auto buffer = cuda::DeviceBuffer::Allocate(size_t{256} << 20);
    ASSERT_TRUE(buffer.ok()) << buffer.status();
    cuda::DeviceBuffer moved = std::move(*buffer);
    EXPECT_EQ(buffer->get(), nullptr);
    ASSERT_EQ(cudaMemGetInfo(&free_held, &total), cudaSuccess);
    EXPECT_LE(free_held + (size_t{256} << 20), free_before + (size_t{8} << 20));
  }
  ASSERT_EQ(cudaMemGetInfo(&free_after, &total), cudaSuccess);
  EXPECT_GE(free_after + (size_t{8} << 20), free_before);
}

}  // namespace
}  // namespace traind::engine
