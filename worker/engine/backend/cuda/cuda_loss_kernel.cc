#include "worker/engine/backend/cuda/cuda_loss_kernel.h"

#include <cuda_runtime_api.h>

#include <climits>
#include <cstdint>
#include <cstring>
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status.h"
#include "worker/engine/backend/cuda/cuda_kernels.h"
#include "worker/engine/backend/cuda/cuda_status.h"
#include "worker/engine/backend/cuda/cuda_tensor_checks.h"
#include "worker/engine/backend/tensor_checks.h"

namespace traind::engine {
namespace {

using cuda::CheckDevice;
using cuda::DeviceBuffer;
using cuda::PinnedBuffer;
using cuda::Stream;

// A loss planned once: its parameters (weights as doubles), the per-row
// values and partial sums (scratch), the slots and the bad-class-code
// record live on the device, allocated at creation; Compute only enqueues
// (LaunchLoss) on the backend's stream, and ReadSlots copies the slots and
// the record through pinned memory and waits. Shares the backend's stream,
// which thus stays valid for the kernel's lifetime.
class CudaLossKernel final : public LossKernel {
 public:
  static absl::StatusOr<std::unique_ptr<CudaLossKernel>> Create(
      std::shared_ptr<const Stream> stream, const LossKernelOptions& options) {
    TRAIND_RETURN_IF_ERROR(CheckLossKernelOptions(options));
    constexpr int64_t kMaxDoubles = INT64_MAX / static_cast<int64_t>(sizeof(double));
    if (options.max_batch > (kMaxDoubles - cuda::kSumPartials) / options.width ||
        options.slots > kMaxDoubles - 2) {
      return absl::InvalidArgumentError(
          absl::StrFormat("loss kernel: max_batch %d x width %d, %d slots: too large",
                          options.max_batch, options.width, options.slots));
    }
    std::unique_ptr<CudaLossKernel> k(new CudaLossKernel(std::move(stream), options));
    const size_t slot_bytes = static_cast<size_t>(options.slots) * sizeof(double);
    // The slots, the stored gradient scale, the bad-class-code record.
    const size_t state_bytes = slot_bytes + sizeof(double) + sizeof(cuda::LossBadCode);
    const size_t scratch_bytes =
        static_cast<size_t>(cuda::LossScratchDoubles(options.max_batch, options.width)) *
        sizeof(double);
    TRAIND_ASSIGN_OR_RETURN(k->scratch_, DeviceBuffer::Allocate(scratch_bytes));
    TRAIND_ASSIGN_OR_RETURN(k->state_, DeviceBuffer::Allocate(state_bytes));
    TRAIND_ASSIGN_OR_RETURN(k->host_, PinnedBuffer::Allocate(state_bytes));
    k->params_.kind = options.kind;
    k->params_.width = options.width;
    k->params_.weight_total = static_cast<double>(options.width);
    k->params_.label_smoothing = options.label_smoothing;
    k->params_.huber_delta = options.huber_delta;
    if (!options.weights.empty()) {
      const size_t weight_bytes = options.weights.size() * sizeof(double);
      TRAIND_ASSIGN_OR_RETURN(k->weights_, DeviceBuffer::Allocate(weight_bytes));
      // From pageable memory: returns once the source has been staged.
      TRAIND_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(k->weights_.get(), k->options_.weights.data(),
                                                  weight_bytes, cudaMemcpyHostToDevice,
                                                  k->stream_));
      k->params_.weights = k->weights_.as<double>();
      k->params_.weight_total = 0;
      for (double w : options.weights) k->params_.weight_total += w;
    }
    // Slots 0 (bytes 0), the record empty (bytes 0xff: row -1).
    TRAIND_CUDA_RETURN_IF_ERROR(
        cudaMemsetAsync(k->state_.get(), 0, slot_bytes + sizeof(double), k->stream_));
    TRAIND_CUDA_RETURN_IF_ERROR(k->ResetBadCode());
    return k;
  }

  absl::Status Compute(const Tensor& outputs, const Tensor& targets, double grad_scale,
                       Tensor* grad, Tensor* predictions, int64_t slot) override {
    TRAIND_RETURN_IF_ERROR(
        CheckLossComputeArgs(options_, outputs, targets, grad, predictions, slot));
    const int64_t batch = outputs.rows();
    if (batch > 0) {
      TRAIND_RETURN_IF_ERROR(CheckDevice(outputs, "loss outputs"));
      TRAIND_RETURN_IF_ERROR(CheckDevice(targets, "loss targets"));
      if (grad != nullptr) TRAIND_RETURN_IF_ERROR(CheckDevice(*grad, "loss grad"));
      if (predictions != nullptr) {
        TRAIND_RETURN_IF_ERROR(CheckDevice(*predictions, "loss predictions"));
      }
    }
    const bool classes = options_.kind == LossKind::kSoftmaxCrossEntropy;
    TRAIND_LAUNCH(
        cuda::LaunchLoss(params_, outputs.f32(), classes ? targets.s32() : nullptr,
                         classes ? nullptr : targets.f32(), batch, grad_scale,
                         grad_scale == kStoredGradScale ? stored_scale() : nullptr,
                         grad != nullptr && batch > 0 ? grad->f32() : nullptr,
                         predictions != nullptr && batch > 0 ? predictions->f32() : nullptr,
                         scratch_.as<double>(), slots() + slot, bad_code(), stream_));
    return absl::OkStatus();
  }

  absl::Status ReadSlots(int64_t first, int64_t count, double* values) override {
    TRAIND_RETURN_IF_ERROR(CheckLossSlots(options_.slots, first, count));
    double* host_slots = host_.as<double>();
    auto* host_bad = reinterpret_cast<cuda::LossBadCode*>(host_slots + options_.slots + 1);
    const size_t bytes = static_cast<size_t>(count) * sizeof(double);
    if (bytes > 0) {
      TRAIND_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(host_slots + first, slots() + first, bytes,
                                                  cudaMemcpyDeviceToHost, stream_));
    }
    TRAIND_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(host_bad, bad_code(), sizeof(cuda::LossBadCode),
                                                cudaMemcpyDeviceToHost, stream_));
    TRAIND_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
    if (host_bad->row >= 0) {
      const cuda::LossBadCode bad = *host_bad;
      TRAIND_CUDA_RETURN_IF_ERROR(ResetBadCode());
      return absl::InvalidArgumentError(absl::StrFormat(
          "loss: class code %d of row %d is not in [0, %d)", bad.code, bad.row, options_.width));
    }
    if (bytes > 0) std::memcpy(values, host_slots + first, bytes);
    return absl::OkStatus();
  }

  absl::Status StoreGradScale(double scale) override {
    TRAIND_LAUNCH(cuda::LaunchStoreDouble(stored_scale(), scale, stream_));
    return absl::OkStatus();
  }

  absl::Status CopySlot(int64_t from, int64_t to) override {
    TRAIND_RETURN_IF_ERROR(CheckLossSlots(options_.slots, from, 1));
    TRAIND_RETURN_IF_ERROR(CheckLossSlots(options_.slots, to, 1));
    if (from == to) return absl::OkStatus();
    TRAIND_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(slots() + to, slots() + from, sizeof(double),
                                                cudaMemcpyDeviceToDevice, stream_));
    return absl::OkStatus();
  }

 private:
  CudaLossKernel(std::shared_ptr<const Stream> stream, const LossKernelOptions& options)
      : stream_owner_(std::move(stream)), stream_(stream_owner_->get()), options_(options) {}

  double* slots() const { return state_.as<double>(); }
  double* stored_scale() const { return slots() + options_.slots; }
  cuda::LossBadCode* bad_code() const {
    return reinterpret_cast<cuda::LossBadCode*>(slots() + options_.slots + 1);
  }
  cudaError_t ResetBadCode() {
    return cudaMemsetAsync(bad_code(), 0xff, sizeof(cuda::LossBadCode), stream_);
  }

  const std::shared_ptr<const Stream> stream_owner_;
  const cudaStream_t stream_;
  const LossKernelOptions options_;
  LossParams params_;  // weights: weights_ (null without weights)
  DeviceBuffer weights_;
  DeviceBuffer scratch_;  // cuda::LossScratchDoubles(max_batch, width) doubles
  DeviceBuffer state_;    // the slots' doubles, the stored scale, a cuda::LossBadCode
  PinnedBuffer host_;     // as state_
};

}  // namespace

absl::StatusOr<std::unique_ptr<LossKernel>> CreateCudaLossKernel(
    std::shared_ptr<const cuda::Stream> stream, const LossKernelOptions& options) {
  TRAIND_ASSIGN_OR_RETURN(std::unique_ptr<CudaLossKernel> kernel,
                          CudaLossKernel::Create(std::move(stream), options));
  return std::unique_ptr<LossKernel>(std::move(kernel));
}

}  // namespace traind::engine
