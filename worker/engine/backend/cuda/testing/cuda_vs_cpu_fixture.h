// The CUDA backend's tests against the CPU backend: a tensor pair with the
// same contents on each, random inputs, and an elementwise comparison
// (ggml's test-backend-ops pattern). Skips without a device.
#ifndef TRAIND_WORKER_ENGINE_BACKEND_CUDA_TESTING_CUDA_VS_CPU_FIXTURE_H_
#define TRAIND_WORKER_ENGINE_BACKEND_CUDA_TESTING_CUDA_VS_CPU_FIXTURE_H_

#include <cuda_runtime.h>

#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "base/random.h"
#include "gtest/gtest.h"
#include "worker/engine/backend/cpu/cpu_backend.h"
#include "worker/engine/backend/cuda/cuda_backend.h"
#include "worker/engine/backend/cuda/cuda_status.h"

namespace traind::engine {

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

inline constexpr double kRtol = 1e-5, kAtol = 1e-6;
// GEMM sums in another order (and cuBLAS may split k): a looser bound.
inline constexpr double kGemmRtol = 1e-4, kGemmAtol = 1e-5;

inline void CudaVsCpuTest::CheckDenseEveryActivation(Backend& gpu, double rtol, double atol) {
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

}  // namespace traind::engine

#endif  // TRAIND_WORKER_ENGINE_BACKEND_CUDA_TESTING_CUDA_VS_CPU_FIXTURE_H_
