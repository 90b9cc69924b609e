// The CUDA backend's loss kernels, optimizer updates and memory handling
// against the CPU backend on fresh random inputs. Tests skip with the
// reason when no device is found (no driver in CI).
#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "base/status.h"
#include "gtest/gtest.h"
#include "worker/engine/backend/cuda/cuda_backend.h"
#include "worker/engine/backend/cuda/cuda_raii.h"
#include "worker/engine/backend/cuda/cuda_status.h"
#include "worker/engine/backend/cuda/testing/cuda_vs_cpu_fixture.h"

namespace traind::engine {
namespace {

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
