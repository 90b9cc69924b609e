// A backend decorator that fails chosen host copies with a device error, as a
// GPU does when the device faults: for tests that every device error reaches
// the caller (and that nothing is written from a copy that failed).
//
// Every call is forwarded to the wrapped backend. CopyToHost calls are
// counted from 1; once fail_copies_to_host_from(n) is set, the n-th call
// and every later one returns DeviceError("CopyToHost: injected device
// failure") without copying (the destination is left as it was).
//
// Thread safety: used by one thread at a time, as any backend.
#ifndef TRAIND_WORKER_ENGINE_TESTING_FAILING_BACKEND_H_
#define TRAIND_WORKER_ENGINE_TESTING_FAILING_BACKEND_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "base/status.h"
#include "worker/engine/backend/backend.h"
#include "worker/engine/tensor.h"

namespace traind::engine::testing {

class FailingBackend final : public Backend {
 public:
  explicit FailingBackend(std::unique_ptr<Backend> inner) : inner_(std::move(inner)) {}

  using Backend::CreateDenseKernel;
  using Backend::SgdUpdate;

  // 0 (the default): no failures.
  void fail_copies_to_host_from(int64_t call) { fail_from_ = call; }
  // CopyToHost calls so far, failed ones included.
  int64_t copies_to_host() const { return copies_to_host_; }

  std::string name() const override { return inner_->name(); }
  BackendDevice device() const override { return inner_->device(); }
  absl::StatusOr<Tensor> Allocate1d(DType dtype, int64_t n) override {
    return inner_->Allocate1d(dtype, n);
  }
  absl::StatusOr<Tensor> Allocate2d(DType dtype, int64_t rows, int64_t cols) override {
    return inner_->Allocate2d(dtype, rows, cols);
  }
  absl::Status CopyFromHost(const void* src, Tensor* dst) override {
    return inner_->CopyFromHost(src, dst);
  }
  absl::Status CopyToHost(const Tensor& src, void* dst) override {
    ++copies_to_host_;
    if (fail_from_ > 0 && copies_to_host_ >= fail_from_) {
      return DeviceError("CopyToHost: injected device failure");
    }
    return inner_->CopyToHost(src, dst);
  }
  absl::Status Copy(const Tensor& src, Tensor* dst) override { return inner_->Copy(src, dst); }
  absl::Status Fill(float value, Tensor* dst) override { return inner_->Fill(value, dst); }
  absl::Status GatherRows(const float* src, int64_t cols, absl::Span<const int64_t> rows,
                          Tensor* dst) override {
    return inner_->GatherRows(src, cols, rows, dst);
  }
  absl::Status GatherLabels(const int32_t* src, absl::Span<const int64_t> rows,
                            Tensor* dst) override {
    return inner_->GatherLabels(src, rows, dst);
  }
  absl::StatusOr<std::unique_ptr<DenseKernel>> CreateDenseKernel(
      int64_t batch, int64_t in, int64_t out, const DenseKernelOptions& options) override {
    return inner_->CreateDenseKernel(batch, in, out, options);
  }
  absl::Status ActivationForward(const ActivationFn& f, const Tensor& x, Tensor* y) override {
    return inner_->ActivationForward(f, x, y);
  }
  absl::Status ActivationBackward(const ActivationFn& f, const Tensor& x, const Tensor& y,
                                  const Tensor& dy, Tensor* dx) override {
    return inner_->ActivationBackward(f, x, y, dy, dx);
  }
  absl::Status DropoutForward(float rate, uint64_t seed, const Tensor& x, Tensor* mask,
                              Tensor* y) override {
    return inner_->DropoutForward(rate, seed, x, mask, y);
  }
  absl::Status Multiply(const Tensor& a, const Tensor& b, Tensor* out) override {
    return inner_->Multiply(a, b, out);
  }
  absl::Status BatchNormForward(bool training, float momentum, float epsilon, const Tensor& x,
                                const Tensor& gamma, const Tensor& beta, Tensor* running_mean,
                                Tensor* running_var, Tensor* mean, Tensor* rstd,
                                Tensor* y) override {
    return inner_->BatchNormForward(training, momentum, epsilon, x, gamma, beta, running_mean,
                                    running_var, mean, rstd, y);
  }
  absl::Status BatchNormBackward(const Tensor& x, const Tensor& gamma, const Tensor& mean,
                                 const Tensor& rstd, const Tensor& dy, Tensor* dgamma,
                                 Tensor* dbeta, Tensor* dx) override {
    return inner_->BatchNormBackward(x, gamma, mean, rstd, dy, dgamma, dbeta, dx);
  }
  absl::Status BatchNormColumnSums(const Tensor& x, Tensor* sum) override {
    return inner_->BatchNormColumnSums(x, sum);
  }
  absl::Status BatchNormSquaredDeviations(const Tensor& x, const Tensor& sum, int64_t count,
                                          Tensor* mean, Tensor* sq) override {
    return inner_->BatchNormSquaredDeviations(x, sum, count, mean, sq);
  }
  absl::Status BatchNormForwardFromMoments(float momentum, float epsilon, int64_t count,
                                           const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                           const Tensor& mean, const Tensor& sq,
                                           Tensor* running_mean, Tensor* running_var, Tensor* rstd,
                                           Tensor* y) override {
    return inner_->BatchNormForwardFromMoments(momentum, epsilon, count, x, gamma, beta, mean, sq,
                                               running_mean, running_var, rstd, y);
  }
  absl::Status BatchNormBackwardSums(const Tensor& x, const Tensor& mean, const Tensor& rstd,
                                     const Tensor& dy, Tensor* dgamma, Tensor* dbeta,
                                     Tensor* sums) override {
    return inner_->BatchNormBackwardSums(x, mean, rstd, dy, dgamma, dbeta, sums);
  }
  absl::Status BatchNormBackwardData(const Tensor& x, const Tensor& gamma, const Tensor& mean,
                                     const Tensor& rstd, const Tensor& dy, const Tensor& sums,
                                     int64_t count, Tensor* dx) override {
    return inner_->BatchNormBackwardData(x, gamma, mean, rstd, dy, sums, count, dx);
  }
  absl::Status LayerNormForward(float epsilon, const Tensor& x, const Tensor& gamma,
                                const Tensor& beta, Tensor* mean, Tensor* rstd,
                                Tensor* y) override {
    return inner_->LayerNormForward(epsilon, x, gamma, beta, mean, rstd, y);
  }
  absl::Status LayerNormBackward(const Tensor& x, const Tensor& gamma, const Tensor& mean,
                                 const Tensor& rstd, const Tensor& dy, Tensor* dgamma,
                                 Tensor* dbeta, Tensor* dx) override {
    return inner_->LayerNormBackward(x, gamma, mean, rstd, dy, dgamma, dbeta, dx);
  }
  absl::StatusOr<double> SumOfSquares(const Tensor& t) override { return inner_->SumOfSquares(t); }
  absl::Status Scale(float factor, Tensor* t) override { return inner_->Scale(factor, t); }
  absl::Status ClipByValue(float limit, Tensor* t) override {
    return inner_->ClipByValue(limit, t);
  }
  absl::StatusOr<std::unique_ptr<OpGraph>> Capture(
      const std::function<absl::Status()>& record) override {
    return inner_->Capture(record);
  }
  absl::StatusOr<std::unique_ptr<LossKernel>> CreateLossKernel(
      const LossKernelOptions& options) override {
    return inner_->CreateLossKernel(options);
  }
  absl::Status SgdUpdate(const SgdStep& step, const Tensor& grad, Tensor* velocity,
                         Tensor* param) override {
    return inner_->SgdUpdate(step, grad, velocity, param);
  }
  absl::Status SgdUpdateMany(const SgdStep& step, absl::Span<const Tensor* const> grads,
                             absl::Span<Tensor* const> velocities,
                             absl::Span<Tensor* const> params) override {
    return inner_->SgdUpdateMany(step, grads, velocities, params);
  }
  absl::Status AdamUpdate(const AdamStep& step, const Tensor& grad, Tensor* m, Tensor* v,
                          Tensor* param) override {
    return inner_->AdamUpdate(step, grad, m, v, param);
  }
  absl::Status AdamUpdateMany(const AdamStep& step, absl::Span<const Tensor* const> grads,
                              absl::Span<Tensor* const> m, absl::Span<Tensor* const> v,
                              absl::Span<Tensor* const> params) override {
    return inner_->AdamUpdateMany(step, grads, m, v, params);
  }
  absl::Status RmsPropUpdate(const RmsPropStep& step, const Tensor& grad, Tensor* square_avg,
                             Tensor* buffer, Tensor* param) override {
    return inner_->RmsPropUpdate(step, grad, square_avg, buffer, param);
  }

 private:
  std::unique_ptr<Backend> inner_;
  int64_t copies_to_host_ = 0;
  int64_t fail_from_ = 0;
};

}  // namespace traind::engine::testing

#endif  // TRAIND_WORKER_ENGINE_TESTING_FAILING_BACKEND_H_
