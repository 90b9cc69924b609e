// The CPU loss kernel splits a large batch's rows over the threads: its
// value, gradient and predictions must be loss_math.h's serial ones, bit for
// bit, whatever the thread count (resumed folds replay exactly).
#include <omp.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "worker/engine/backend/backend.h"
#include "worker/engine/backend/cpu/cpu_backend.h"
#include "worker/engine/backend/loss_math.h"
#include "worker/engine/random.h"

namespace traind::engine {
namespace {

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

TEST(CpuLossKernelTest, ThreadsSplitRowsAndGiveTheSerialValuesBitForBit) {
  absl::StatusOr<std::unique_ptr<Backend>> made = CreateCpuBackend();
  ASSERT_TRUE(made.ok()) << made.status();
  Backend* backend = made->get();
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
