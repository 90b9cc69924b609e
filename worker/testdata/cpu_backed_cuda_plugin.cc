// A stand-in for libtraind_cuda.so that computes on the CPU backend, for
// end-to-end tests of the worker's GPU path on machines without a GPU
// (tests/integration/gpu_path_test.cc). It reports the devices of
// CUDA_VISIBLE_DEVICES (one when unset); its backends are CPU backends under
// another name (engine::Fit refuses a GPU job on a backend whose name starts
// with "cpu"); its "NCCL" joins the ranks' processes over unix sockets
// (unix_socket_communicator.h), so a multi-GPU task trains data-parallel.
//
// Built like the real plugin: hidden visibility, only the entry point
// exported, the CPU backend and the engine's error helpers compiled in.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "worker/engine/backend/backend.h"
#include "worker/engine/backend/cpu/cpu_backend.h"
#include "worker/engine/backend/cuda/cuda_plugin.h"
#include "worker/engine/status.h"
#include "worker/testdata/unix_socket_communicator.h"

namespace traind::engine {

// cpu_backend.cc's precision check, which lives in spec_validation.cc (whose
// protobuf code must not be linked twice into one process). The stand-in
// trains in fp32 only.
absl::Status CheckCpuPrecision(traind::v1::Precision precision, bool) {
  if (precision == traind::v1::PRECISION_UNSPECIFIED || precision == traind::v1::FP32) {
    return absl::OkStatus();
  }
  return InvalidSpecError("training.precision: the CPU-backed CUDA stand-in trains in fp32 only");
}

namespace {

// Forwards everything to a CPU backend except name().
class RenamedBackend final : public Backend {
 public:
  explicit RenamedBackend(std::unique_ptr<Backend> cpu) : b_(std::move(cpu)) {}

  std::string name() const override { return "cuda stand-in (computes on " + b_->name() + ")"; }
  absl::StatusOr<Tensor> Allocate1d(DType t, int64_t n) override { return b_->Allocate1d(t, n); }
  absl::StatusOr<Tensor> Allocate2d(DType t, int64_t r, int64_t c) override {
    return b_->Allocate2d(t, r, c);
  }
  absl::Status CopyFromHost(const void* s, Tensor* d) override { return b_->CopyFromHost(s, d); }
  absl::Status CopyToHost(const Tensor& s, void* d) override { return b_->CopyToHost(s, d); }
  absl::Status Fill(float v, Tensor* d) override { return b_->Fill(v, d); }
  absl::Status GatherRows(const float* s, int64_t c, absl::Span<const int64_t> r,
                          Tensor* d) override {
    return b_->GatherRows(s, c, r, d);
  }
  absl::Status GatherLabels(const int32_t* s, absl::Span<const int64_t> r, Tensor* d) override {
    return b_->GatherLabels(s, r, d);
  }
  absl::StatusOr<std::unique_ptr<DenseKernel>> CreateDenseKernel(
      int64_t batch, int64_t in, int64_t out, const DenseKernelOptions& o) override {
    return b_->CreateDenseKernel(batch, in, out, o);
  }
  absl::Status ActivationForward(const ActivationFn& f, const Tensor& x, Tensor* y) override {
    return b_->ActivationForward(f, x, y);
  }
  absl::Status ActivationBackward(const ActivationFn& f, const Tensor& x, const Tensor& y,
                                  const Tensor& dy, Tensor* dx) override {
    return b_->ActivationBackward(f, x, y, dy, dx);
  }
  absl::Status DropoutForward(float rate, uint64_t seed, const Tensor& x, Tensor* mask,
                              Tensor* y) override {
    return b_->DropoutForward(rate, seed, x, mask, y);
  }
  absl::Status Multiply(const Tensor& a, const Tensor& b, Tensor* out) override {
    return b_->Multiply(a, b, out);
  }
  absl::Status BatchNormForward(bool training, float momentum, float epsilon, const Tensor& x,
                                const Tensor& gamma, const Tensor& beta, Tensor* running_mean,
                                Tensor* running_var, Tensor* mean, Tensor* rstd,
                                Tensor* y) override {
    return b_->BatchNormForward(training, momentum, epsilon, x, gamma, beta, running_mean,
                                running_var, mean, rstd, y);
  }
  absl::Status BatchNormBackward(const Tensor& x, const Tensor& gamma, const Tensor& mean,
                                 const Tensor& rstd, const Tensor& dy, Tensor* dgamma,
                                 Tensor* dbeta, Tensor* dx) override {
    return b_->BatchNormBackward(x, gamma, mean, rstd, dy, dgamma, dbeta, dx);
  }
  absl::Status BatchNormColumnSums(const Tensor& x, Tensor* sum) override {
    return b_->BatchNormColumnSums(x, sum);
  }
  absl::Status BatchNormSquaredDeviations(const Tensor& x, const Tensor& sum, int64_t count,
                                          Tensor* mean, Tensor* sq) override {
    return b_->BatchNormSquaredDeviations(x, sum, count, mean, sq);
  }
  absl::Status BatchNormForwardFromMoments(float momentum, float epsilon, int64_t count,
                                           const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                           const Tensor& mean, const Tensor& sq,
                                           Tensor* running_mean, Tensor* running_var, Tensor* rstd,
                                           Tensor* y) override {
    return b_->BatchNormForwardFromMoments(momentum, epsilon, count, x, gamma, beta, mean, sq,
                                           running_mean, running_var, rstd, y);
  }
  absl::Status BatchNormBackwardSums(const Tensor& x, const Tensor& mean, const Tensor& rstd,
                                     const Tensor& dy, Tensor* dgamma, Tensor* dbeta,
                                     Tensor* sums) override {
    return b_->BatchNormBackwardSums(x, mean, rstd, dy, dgamma, dbeta, sums);
  }
  absl::Status BatchNormBackwardData(const Tensor& x, const Tensor& gamma, const Tensor& mean,
                                     const Tensor& rstd, const Tensor& dy, const Tensor& sums,
                                     int64_t count, Tensor* dx) override {
    return b_->BatchNormBackwardData(x, gamma, mean, rstd, dy, sums, count, dx);
  }
  absl::Status LayerNormForward(float epsilon, const Tensor& x, const Tensor& gamma,
                                const Tensor& beta, Tensor* mean, Tensor* rstd,
                                Tensor* y) override {
    return b_->LayerNormForward(epsilon, x, gamma, beta, mean, rstd, y);
  }
  absl::Status LayerNormBackward(const Tensor& x, const Tensor& gamma, const Tensor& mean,
                                 const Tensor& rstd, const Tensor& dy, Tensor* dgamma,
                                 Tensor* dbeta, Tensor* dx) override {
    return b_->LayerNormBackward(x, gamma, mean, rstd, dy, dgamma, dbeta, dx);
  }
  absl::StatusOr<double> SumOfSquares(const Tensor& t) override { return b_->SumOfSquares(t); }
  absl::Status Scale(float factor, Tensor* t) override { return b_->Scale(factor, t); }
  absl::Status ClipByValue(float limit, Tensor* t) override { return b_->ClipByValue(limit, t); }
  absl::StatusOr<std::unique_ptr<LossKernel>> CreateLossKernel(
      const LossKernelOptions& o) override {
    return b_->CreateLossKernel(o);
  }
  absl::Status SgdUpdate(const SgdStep& s, const Tensor& g, Tensor* v, Tensor* p) override {
    return b_->SgdUpdate(s, g, v, p);
  }
  absl::Status SgdUpdateMany(const SgdStep& s, absl::Span<const Tensor* const> g,
                             absl::Span<Tensor* const> v, absl::Span<Tensor* const> p) override {
    return b_->SgdUpdateMany(s, g, v, p);
  }
  absl::Status AdamUpdate(const AdamStep& s, const Tensor& g, Tensor* m, Tensor* v,
                          Tensor* p) override {
    return b_->AdamUpdate(s, g, m, v, p);
  }
  absl::Status AdamUpdateMany(const AdamStep& s, absl::Span<const Tensor* const> g,
                              absl::Span<Tensor* const> m, absl::Span<Tensor* const> v,
                              absl::Span<Tensor* const> p) override {
    return b_->AdamUpdateMany(s, g, m, v, p);
  }
  absl::Status RmsPropUpdate(const RmsPropStep& s, const Tensor& g, Tensor* square_avg,
                             Tensor* buffer, Tensor* p) override {
    return b_->RmsPropUpdate(s, g, square_avg, buffer, p);
  }

 private:
  std::unique_ptr<Backend> b_;
};

// As CUDA counts them: the entries of CUDA_VISIBLE_DEVICES (traind gives a
// multi-GPU task's ranks all of its GPUs), one device when it is unset.
int DeviceCountImpl(std::string* reason) {
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  if (visible == nullptr) return 1;
  if (*visible == '\0') {
    if (reason != nullptr) *reason = "CUDA_VISIBLE_DEVICES is empty";
    return 0;
  }
  return 1 + static_cast<int>(std::count(visible, visible + std::strlen(visible), ','));
}

absl::Status CreateBackendImpl(int device, traind::v1::Precision precision,
                               std::unique_ptr<Backend>* backend) {
  if (device < 0 || device >= DeviceCountImpl(nullptr)) {
    return absl::FailedPreconditionError(absl::StrCat("no device ", device));
  }
  absl::StatusOr<std::unique_ptr<Backend>> cpu = CreateCpuBackend(precision);
  if (!cpu.ok()) return cpu.status();
  *backend = std::make_unique<RenamedBackend>(std::move(*cpu));
  return absl::OkStatus();
}

absl::Status NewUniqueIdImpl(std::string* unique_id) {
  absl::StatusOr<std::string> id = testdata::NewUnixSocketUniqueId();
  if (!id.ok()) return id.status();
  *unique_id = std::move(*id);
  return absl::OkStatus();
}

absl::Status CreateCommunicatorImpl(Backend* backend, const std::string& unique_id, int rank,
                                    int size, double timeout_seconds,
                                    std::unique_ptr<Communicator>* communicator) {
  if (dynamic_cast<RenamedBackend*>(backend) == nullptr) {
    return absl::InvalidArgumentError(
        "stand-in NCCL: the backend was not made by this plugin's create_backend");
  }
  absl::StatusOr<std::unique_ptr<Communicator>> created = testdata::CreateUnixSocketCommunicator(
      unique_id, rank, size,
      timeout_seconds > 0 ? absl::Seconds(timeout_seconds) : absl::Seconds(120));
  if (!created.ok()) return created.status();
  *communicator = std::move(*created);
  return absl::OkStatus();
}

constexpr CudaPluginApi kApi = {
    kCudaPluginAbiVersion,   sizeof(CudaPluginApi), "CPU-backed CUDA stand-in (tests)",
    &DeviceCountImpl,        &CreateBackendImpl,    &NewUniqueIdImpl,
    &CreateCommunicatorImpl,
};

}  // namespace
}  // namespace traind::engine

extern "C" __attribute__((visibility("default"))) const traind::engine::CudaPluginApi*
traind_cuda_plugin_v1(uint32_t abi_version) {
  if (abi_version != traind::engine::kCudaPluginAbiVersion) return nullptr;
  return &traind::engine::kApi;
}
