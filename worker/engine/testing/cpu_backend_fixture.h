// A CPU backend per test, and tensors of uniform random values on it
// (cpu_backend_test.cc, cpu_loss_test.cc, cpu_split_dense_test.cc).
#ifndef TRAIND_WORKER_ENGINE_TESTING_CPU_BACKEND_FIXTURE_H_
#define TRAIND_WORKER_ENGINE_TESTING_CPU_BACKEND_FIXTURE_H_

#include <cstdint>
#include <memory>
#include <utility>

#include "base/random.h"
#include "gtest/gtest.h"
#include "worker/engine/backend/backend.h"
#include "worker/engine/backend/cpu/cpu_backend.h"

namespace traind::engine {

// [rows, cols] (or [rows] when cols is 0) f32 on `backend`, of values
// uniform in [-scale, scale).
inline Tensor RandomTensor(Backend* backend, int64_t rows, int64_t cols, double scale, Rng& rng) {
  Tensor t = std::move(cols > 0 ? backend->Allocate2d(DType::kF32, rows, cols)
                                : backend->Allocate1d(DType::kF32, rows))
                 .value();
  for (int64_t i = 0; i < t.size(); ++i) {
    t.f32()[i] = static_cast<float>(scale * (2 * rng.Uniform() - 1));
  }
  return t;
}

class CpuBackendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<Backend>> backend = CreateCpuBackend();
    ASSERT_TRUE(backend.ok()) << backend.status();
    backend_ = std::move(*backend);
  }

  Tensor Random2d(int64_t rows, int64_t cols, double scale, Rng& rng) {
    return RandomTensor(backend_.get(), rows, cols, scale, rng);
  }
  Tensor Random1d(int64_t n, double scale, Rng& rng) {
    return RandomTensor(backend_.get(), n, 0, scale, rng);
  }

  std::unique_ptr<Backend> backend_;
};

}  // namespace traind::engine

#endif  // TRAIND_WORKER_ENGINE_TESTING_CPU_BACKEND_FIXTURE_H_
