// The CPU backend's loss kernel: hand values of every loss, class weights and
// label smoothing, gradients against finite differences, slots, the stored
// gradient scale, the options' checks; and, as it splits a large batch's rows
// over the threads, its value, gradient and predictions against
// loss_math.h's serial ones, bit for bit, whatever the thread count (resumed
// folds replay exactly).
#include <omp.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "base/random.h"
#include "base/status.h"
#include "gtest/gtest.h"
#include "worker/engine/backend/backend.h"
#include "worker/engine/backend/cpu/cpu_backend.h"
#include "worker/engine/backend/loss_math.h"
#include "worker/engine/testing/cpu_backend_fixture.h"

namespace traind::engine {
namespace {

class CpuLossKernelTest : public CpuBackendTest {};

// A loss kernel of `options` on the test's backend.
std::unique_ptr<LossKernel> MakeLoss(Backend* backend, const LossKernelOptions& options) {
  absl::StatusOr<std::unique_ptr<LossKernel>> k = backend->CreateLossKernel(options);
  EXPECT_TRUE(k.ok()) << k.status();
  return k.ok() ? std::move(k).value() : nullptr;
}

double ReadSlot(LossKernel* k, int64_t slot) {
  double v = -1;
  EXPECT_TRUE(k->ReadSlots(slot, 1, &v).ok());
  return v;
}

TEST_F(CpuLossKernelTest, SoftmaxCrossEntropyKernelValues) {
  Tensor logits = std::move(backend_->Allocate2d(DType::kF32, 3, 3)).value();
  Tensor labels = std::move(backend_->Allocate1d(DType::kS32, 3)).value();
  Tensor grad = std::move(backend_->Allocate2d(DType::kF32, 3, 3)).value();
  Tensor pred = std::move(backend_->Allocate2d(DType::kF32, 3, 3)).value();
  const float z[9] = {1,    2, 3,      //
                      1000, 0, -1000,  //
                      1000, 0, -1000};
  const int32_t y[3] = {2, 0, 1};
  ASSERT_TRUE(backend_->CopyFromHost(z, &logits).ok());
  ASSERT_TRUE(backend_->CopyFromHost(y, &labels).ok());
  LossKernelOptions o;
  o.width = 3;
  o.max_batch = 3;
  o.slots = 2;
  std::unique_ptr<LossKernel> k = MakeLoss(backend_.get(), o);
  ASSERT_TRUE(k->Compute(logits, labels, 1.0 / 3, &grad, &pred, 1).ok());
  // Row 0: log(e + e² + e³) - 3 = log(1 + e⁻¹ + e⁻²) = 0.4076059644.
  // Row 1: log(1 + e⁻¹⁰⁰⁰ + e⁻²⁰⁰⁰) ≈ 0, no overflow. Row 2: 1000 - 0 = 1000.
  EXPECT_NEAR(ReadSlot(k.get(), 1), 0.4076059644443804 + 0.0 + 1000.0, 1e-6);
  // dL/dz = (softmax - onehot) · scale. Row 0: softmax = e^(z-3) / (1 + e⁻¹ + e⁻²).
  const double s = 1 + std::exp(-1.0) + std::exp(-2.0);
  EXPECT_NEAR(grad.f32()[0], std::exp(-2.0) / s / 3, 1e-7);
  EXPECT_NEAR(grad.f32()[1], std::exp(-1.0) / s / 3, 1e-7);
  EXPECT_NEAR(grad.f32()[2], (1 / s - 1) / 3, 1e-7);
  EXPECT_NEAR(grad.f32()[3], 0.0, 1e-7);
  EXPECT_NEAR(grad.f32()[7], -1.0 / 3, 1e-7);
  EXPECT_NEAR(grad.f32()[6], 1.0 / 3, 1e-7);
  // Predictions: the softmax.
  EXPECT_NEAR(pred.f32()[0], std::exp(-2.0) / s, 1e-7);
  EXPECT_NEAR(pred.f32()[2], 1 / s, 1e-7);
  EXPECT_NEAR(pred.f32()[3], 1.0, 1e-7);
  EXPECT_EQ(pred.f32()[5], 0.0f);

  // A class code outside [0, classes) names its row; the slot keeps its value.
  const int32_t bad[3] = {0, 3, 0};
  ASSERT_TRUE(backend_->CopyFromHost(bad, &labels).ok());
  const absl::Status st = k->Compute(logits, labels, 0, nullptr, nullptr, 1);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(st.message(), "loss: class code 3 of row 1 is not in [0, 3)");
  EXPECT_NEAR(ReadSlot(k.get(), 1), 1000.4076059644443804, 1e-6);
}

// Class weights and label smoothing, by hand: logits [0, ln 3] give
// p = [1/4, 3/4]; label 1, weights [2, 1], smoothing 0.1 over 2 classes:
// 0.9 · 1 · (-ln 3/4) + 0.05 (2 (-ln 1/4) + 1 (-ln 3/4)).
TEST_F(CpuLossKernelTest, SoftmaxCrossEntropyKernelWeightsAndSmoothing) {
  Tensor logits = std::move(backend_->Allocate2d(DType::kF32, 1, 2)).value();
  Tensor labels = std::move(backend_->Allocate1d(DType::kS32, 1)).value();
  Tensor grad = std::move(backend_->Allocate2d(DType::kF32, 1, 2)).value();
  logits.f32()[0] = 0;
  logits.f32()[1] = static_cast<float>(std::log(3.0));
  labels.s32()[0] = 1;
  LossKernelOptions o;
  o.width = 2;
  o.weights = {2, 1};
  o.label_smoothing = 0.1;
  std::unique_ptr<LossKernel> k = MakeLoss(backend_.get(), o);
  ASSERT_TRUE(k->Compute(logits, labels, 1.0, &grad, nullptr, 0).ok());
  const double p0 = 0.25, p1 = 0.75;
  EXPECT_NEAR(ReadSlot(k.get(), 0), 0.9 * -std::log(p1) + 0.05 * (2 * -std::log(p0) - std::log(p1)),
              1e-6);
  // d/dz_j = 0.9 w_y (p_j - [j = y]) + 0.05 (W p_j - w_j), W = 3.
  EXPECT_NEAR(grad.f32()[0], 0.9 * p0 + 0.05 * (3 * p0 - 2), 1e-6);
  EXPECT_NEAR(grad.f32()[1], 0.9 * (p1 - 1) + 0.05 * (3 * p1 - 1), 1e-6);
}

// Hand values of the elementwise losses, one row [z0, z1] against [y0, y1].
TEST_F(CpuLossKernelTest, ElementwiseLossKernelsHandValues) {
  Tensor out = std::move(backend_->Allocate2d(DType::kF32, 1, 2)).value();
  Tensor target = std::move(backend_->Allocate2d(DType::kF32, 1, 2)).value();
  Tensor grad = std::move(backend_->Allocate2d(DType::kF32, 1, 2)).value();
  Tensor pred = std::move(backend_->Allocate2d(DType::kF32, 1, 2)).value();
  out.f32()[0] = 0.5f;
  out.f32()[1] = -2.0f;
  target.f32()[0] = 1.0f;
  target.f32()[1] = 0.0f;
  const double sig0 = 1 / (1 + std::exp(-0.5)), sig1 = 1 / (1 + std::exp(2.0));
  struct Case {
    LossKind kind;
    std::vector<double> weights;
    double delta;
    double value, g0, g1, p0, p1;
  };
  const Case cases[] = {
      // pos_weight [3, 1]: 3 (-ln σ(0.5)) + (-ln(1 - σ(-2))).
      {LossKind::kSigmoidBinaryCrossEntropy,
       {3, 1},
       1,
       -3 * std::log(sig0) - std::log(1 - sig1),
       3 * (sig0 - 1),
       sig1,
       sig0,
       sig1},
      // (0.5 - 1)² + (-2)².
      {LossKind::kMse, {}, 1, 0.25 + 4, -1, -4, 0.5, -2},
      {LossKind::kL1, {}, 1, 0.5 + 2, -1, -1, 0.5, -2},
      // delta 1: 0.5 · 0.25 (quadratic), 1 · (2 - 0.5) (linear).
      {LossKind::kHuber, {}, 1, 0.125 + 1.5, -0.5, -1, 0.5, -2},
      // delta 3: both quadratic.
      {LossKind::kHuber, {}, 3, 0.125 + 2, -0.5, -2, 0.5, -2},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(static_cast<int>(c.kind));
    LossKernelOptions o;
    o.kind = c.kind;
    o.width = 2;
    o.weights = c.weights;
    o.huber_delta = c.delta;
    std::unique_ptr<LossKernel> k = MakeLoss(backend_.get(), o);
    ASSERT_TRUE(k->Compute(out, target, 0.5, &grad, &pred, 0).ok());
    EXPECT_NEAR(ReadSlot(k.get(), 0), c.value, 1e-6);
    EXPECT_NEAR(grad.f32()[0], 0.5 * c.g0, 1e-6);  // grad_scale 0.5
    EXPECT_NEAR(grad.f32()[1], 0.5 * c.g1, 1e-6);
    EXPECT_NEAR(pred.f32()[0], c.p0, 1e-6);
    EXPECT_NEAR(pred.f32()[1], c.p1, 1e-6);
  }
}

// Every loss's gradient against central differences of its slot value,
// using the perturbation float32 actually applied.
TEST_F(CpuLossKernelTest, LossKernelGradientsMatchFiniteDifferences) {
  const int64_t batch = 5, width = 4;
  for (LossKind kind : {LossKind::kSoftmaxCrossEntropy, LossKind::kSigmoidBinaryCrossEntropy,
                        LossKind::kMse, LossKind::kL1, LossKind::kHuber}) {
    SCOPED_TRACE(static_cast<int>(kind));
    Rng rng(3);
    Tensor out = Random2d(batch, width, 3.0, rng);
    const bool classes = kind == LossKind::kSoftmaxCrossEntropy;
    Tensor targets = classes ? std::move(backend_->Allocate1d(DType::kS32, batch)).value()
                             : std::move(backend_->Allocate2d(DType::kF32, batch, width)).value();
    for (int64_t i = 0; i < targets.size(); ++i) {
      if (classes) {
        targets.s32()[i] = static_cast<int32_t>(i % width);
      } else if (kind == LossKind::kSigmoidBinaryCrossEntropy) {
        targets.f32()[i] = rng.Uniform() < 0.5 ? 0.0f : 1.0f;
      } else {
        // Outputs minus distances clear of L1's and Huber's kinks (0, ±delta).
        const double d[4] = {0.2, -0.45, 1.2, -1.9};
        targets.f32()[i] = out.f32()[i] - static_cast<float>(d[i % 4]);
      }
    }
    LossKernelOptions o;
    o.kind = kind;
    o.width = width;
    o.max_batch = batch;
    if (classes || kind == LossKind::kSigmoidBinaryCrossEntropy) o.weights = {0.5, 2, 1, 0};
    if (classes) o.label_smoothing = 0.2;
    o.huber_delta = 0.7;
    std::unique_ptr<LossKernel> k = MakeLoss(backend_.get(), o);
    Tensor grad = std::move(backend_->Allocate2d(DType::kF32, batch, width)).value();
    ASSERT_TRUE(k->Compute(out, targets, 1.0, &grad, nullptr, 0).ok());
    auto value = [&]() {
      EXPECT_TRUE(k->Compute(out, targets, 0, nullptr, nullptr, 0).ok());
      return ReadSlot(k.get(), 0);
    };
    const float eps = 1e-2f;
    for (int64_t i = 0; i < out.size(); ++i) {
      float& z = out.f32()[i];
      const float saved = z;
      z = saved + eps;
      const float hi = z;
      const double v_hi = value();
      z = saved - eps;
      const float lo = z;
      const double v_lo = value();
      z = saved;
      const double numeric = (v_hi - v_lo) / (double{hi} - lo);
      EXPECT_NEAR(grad.f32()[i], numeric, 2e-4 * (1 + std::abs(numeric))) << "output " << i;
    }
  }
}

TEST_F(CpuLossKernelTest, LossKernelSlotsAndEmptyBatches) {
  LossKernelOptions o;
  o.kind = LossKind::kMse;
  o.width = 2;
  o.max_batch = 2;
  o.slots = 3;
  std::unique_ptr<LossKernel> k = MakeLoss(backend_.get(), o);
  Tensor out = std::move(backend_->Allocate2d(DType::kF32, 2, 2)).value();
  Tensor target = std::move(backend_->Allocate2d(DType::kF32, 2, 2)).value();
  for (int i = 0; i < 4; ++i) {
    out.f32()[i] = static_cast<float>(i);
    target.f32()[i] = 0;
  }
  ASSERT_TRUE(k->Compute(out, target, 1, nullptr, nullptr, 0).ok());  // 0 + 1 + 4 + 9
  Tensor first = out.Rows(1, 1);                                      // a view: row 1 only
  Tensor first_target = target.Rows(1, 1);
  ASSERT_TRUE(k->Compute(first, first_target, 1, nullptr, nullptr, 2).ok());  // 4 + 9
  double v[3] = {-1, -1, -1};
  ASSERT_TRUE(k->ReadSlots(0, 3, v).ok());
  EXPECT_EQ(v[0], 14);
  EXPECT_EQ(v[1], 0);  // never written: slots start at 0
  EXPECT_EQ(v[2], 13);
  // 0 rows: the slot becomes 0.
  Tensor none = out.Rows(0, 0), no_target = target.Rows(0, 0);
  ASSERT_TRUE(k->Compute(none, no_target, 1, nullptr, nullptr, 0).ok());
  EXPECT_EQ(ReadSlot(k.get(), 0), 0);
  // Out of range.
  EXPECT_EQ(k->ReadSlots(2, 2, v).message(), "loss: slots [2, 4) are not in [0, 3)");
  EXPECT_EQ(k->Compute(out, target, 1, nullptr, nullptr, 3).message(),
            "loss: slot 3 is not in [0, 3)");
  Tensor wide = std::move(backend_->Allocate2d(DType::kF32, 3, 2)).value();
  EXPECT_EQ(k->Compute(wide, target, 1, nullptr, nullptr, 0).message(),
            "loss: outputs [3, 2], expected [batch <= 2, 2]");
  EXPECT_EQ(k->Compute(out, first_target, 1, nullptr, nullptr, 0).message(),
            "loss: targets must be [2, 2] values (f32)");
}

TEST_F(CpuLossKernelTest, CopyAndCopySlot) {
  Tensor a = std::move(backend_->Allocate2d(DType::kF32, 3, 2)).value();
  Tensor b = std::move(backend_->Allocate2d(DType::kF32, 4, 2)).value();
  for (int i = 0; i < 6; ++i) a.f32()[i] = static_cast<float>(i + 1);
  for (int i = 0; i < 8; ++i) b.f32()[i] = -1;
  Tensor rows = b.Rows(1, 3);
  ASSERT_TRUE(backend_->Copy(a, &rows).ok());
  EXPECT_EQ(std::vector<float>(b.f32(), b.f32() + 8),
            (std::vector<float>{-1, -1, 1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(backend_->Copy(a, &b).message(),
            "Copy: source [3, 2] and destination [4, 2] differ in type or size");

  LossKernelOptions o;
  o.kind = LossKind::kL1;
  o.slots = 3;
  std::unique_ptr<LossKernel> k = MakeLoss(backend_.get(), o);
  Tensor out = std::move(backend_->Allocate2d(DType::kF32, 1, 1)).value();
  Tensor target = std::move(backend_->Allocate2d(DType::kF32, 1, 1)).value();
  out.f32()[0] = 2.5f;
  target.f32()[0] = 0;
  ASSERT_TRUE(k->Compute(out, target, 1, nullptr, nullptr, 2).ok());
  ASSERT_TRUE(k->CopySlot(2, 0).ok());
  double v[3];
  ASSERT_TRUE(k->ReadSlots(0, 3, v).ok());
  EXPECT_EQ(v[0], 2.5);
  EXPECT_EQ(v[1], 0);
  EXPECT_EQ(v[2], 2.5);
  EXPECT_EQ(k->CopySlot(3, 0).message(), "loss: slots [3, 4) are not in [0, 3)");

  // The stored gradient scale: 0 at first, then what was stored last.
  Tensor grad = std::move(backend_->Allocate2d(DType::kF32, 1, 1)).value();
  ASSERT_TRUE(k->Compute(out, target, LossKernel::kStoredGradScale, &grad, nullptr, 0).ok());
  EXPECT_EQ(grad.f32()[0], 0.0f);
  ASSERT_TRUE(k->StoreGradScale(0.25).ok());
  ASSERT_TRUE(k->Compute(out, target, LossKernel::kStoredGradScale, &grad, nullptr, 0).ok());
  EXPECT_EQ(grad.f32()[0], 0.25f);  // d|z - 0|/dz = 1
  ASSERT_TRUE(k->Compute(out, target, 2.0, &grad, nullptr, 0).ok());
  EXPECT_EQ(grad.f32()[0], 2.0f);  // a given scale wins
}

TEST_F(CpuLossKernelTest, LossKernelOptionsAreChecked) {
  auto error = [&](LossKernelOptions o) {
    absl::StatusOr<std::unique_ptr<LossKernel>> k = backend_->CreateLossKernel(o);
    EXPECT_EQ(k.status().code(), absl::StatusCode::kInvalidArgument);
    return std::string(k.status().message());
  };
  LossKernelOptions o;
  o.width = 3;
  o.weights = {1, 2};
  EXPECT_EQ(error(o), "loss kernel: 2 weights for width 3");
  o.weights = {1, -2, 1};
  EXPECT_EQ(error(o), "loss kernel: weight 1 is -2 (must be finite and >= 0)");
  o.weights.clear();
  o.label_smoothing = 1;
  EXPECT_EQ(error(o), "loss kernel: label_smoothing 1 is not in [0, 1)");
  o.label_smoothing = 0;
  o.slots = 0;
  EXPECT_EQ(error(o), "loss kernel: width 3, max_batch 1, slots 0 (each must be >= 1)");
  o.slots = 1;
  o.kind = LossKind::kHuber;
  o.huber_delta = 0;
  EXPECT_EQ(error(o), "loss kernel: huber delta 0 is not > 0");
  o.kind = LossKind::kMse;
  o.weights = {1, 1, 1};
  EXPECT_EQ(error(o), "loss kernel: 3 weights for width 3 (this loss takes none)");
}

struct Case {
  const char* name;
  LossKind kind;
  int64_t width;
};

// Restores the OpenMP thread count on scope exit.
class ThreadCount {
 public:
  explicit ThreadCount(int n) : saved_(omp_get_max_threads()) { omp_set_num_threads(n); }
  ~ThreadCount() { omp_set_num_threads(saved_); }

 private:
  const int saved_;
};

bool SameBits(const std::vector<float>& a, const float* b) {
  return std::memcmp(a.data(), b, a.size() * sizeof(float)) == 0;
}

TEST_F(CpuLossKernelTest, ThreadsSplitRowsAndGiveTheSerialValuesBitForBit) {
  Backend* backend = backend_.get();
  // 333 rows: no thread gets a round share; sizes on both sides of the
  // kernel's parallel threshold.
  for (const Case& c : {Case{"softmax", LossKind::kSoftmaxCrossEntropy, 10},
                        Case{"softmax, 3 classes", LossKind::kSoftmaxCrossEntropy, 3},
                        Case{"bce", LossKind::kSigmoidBinaryCrossEntropy, 4},
                        Case{"mse", LossKind::kMse, 7}, Case{"huber", LossKind::kHuber, 2}}) {
    for (int64_t batch : {1, 100, 333}) {
      SCOPED_TRACE(::testing::Message() << c.name << ", batch " << batch);
      LossKernelOptions o;
      o.kind = c.kind;
      o.width = c.width;
      o.max_batch = 333;
      o.huber_delta = 0.5;
      if (c.kind == LossKind::kSoftmaxCrossEntropy) {
        o.label_smoothing = 0.1;
        for (int64_t j = 0; j < c.width; ++j)
          o.weights.push_back(1 + 0.25 * static_cast<double>(j));
      }
      const bool classes = c.kind == LossKind::kSoftmaxCrossEntropy;
      Rng rng(7);
      Tensor z = std::move(backend->Allocate2d(DType::kF32, batch, c.width)).value();
      for (int64_t i = 0; i < z.size(); ++i) z.f32()[i] = static_cast<float>(8 * rng.Uniform() - 4);
      Tensor targets = classes
                           ? std::move(backend->Allocate1d(DType::kS32, batch)).value()
                           : std::move(backend->Allocate2d(DType::kF32, batch, c.width)).value();
      for (int64_t i = 0; i < targets.size(); ++i) {
        if (classes) {
          targets.s32()[i] = static_cast<int32_t>(rng.Uniform() * static_cast<double>(c.width));
        } else {
          targets.f32()[i] = static_cast<float>(c.kind == LossKind::kSigmoidBinaryCrossEntropy
                                                    ? rng.Uniform() < 0.5
                                                    : 3 * rng.Uniform() - 1);
        }
      }
      // The serial reference, straight from loss_math.h.
      const size_t n = static_cast<size_t>(batch * c.width);
      std::vector<float> ref_grad(n), ref_pred(n);
      const double scale = 1.0 / static_cast<double>(batch);
      const double ref = loss_math::SumOnHost(
          ParamsOf(o), z.f32(), batch, classes ? targets.s32() : nullptr,
          classes ? nullptr : targets.f32(), scale, ref_grad.data(), ref_pred.data());
      for (int threads : {1, 2, 3}) {
        SCOPED_TRACE(::testing::Message() << threads << " threads");
        const ThreadCount count(threads);
        absl::StatusOr<std::unique_ptr<LossKernel>> k = backend->CreateLossKernel(o);
        ASSERT_TRUE(k.ok()) << k.status();
        Tensor grad = std::move(backend->Allocate2d(DType::kF32, batch, c.width)).value();
        Tensor pred = std::move(backend->Allocate2d(DType::kF32, batch, c.width)).value();
        ASSERT_TRUE((*k)->Compute(z, targets, scale, &grad, &pred, 0).ok());
        double value = 0;
        ASSERT_TRUE((*k)->ReadSlots(0, 1, &value).ok());
        EXPECT_EQ(std::memcmp(&value, &ref, sizeof value), 0) << value << " vs " << ref;
        EXPECT_TRUE(SameBits(ref_grad, grad.f32()));
        EXPECT_TRUE(SameBits(ref_pred, pred.f32()));
        // Without gradient and predictions: the same value.
        ASSERT_TRUE((*k)->Compute(z, targets, scale, nullptr, nullptr, 0).ok());
        ASSERT_TRUE((*k)->ReadSlots(0, 1, &value).ok());
        EXPECT_EQ(std::memcmp(&value, &ref, sizeof value), 0) << value << " vs " << ref;
      }
    }
  }
}

}  // namespace
}  // namespace traind::engine
