#include "worker/engine/backend/cuda/cuda_backend.h"

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <array>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status.h"
#include "worker/engine/backend/cuda/cuda_conv_kernel.h"
#include "worker/engine/backend/cuda/cuda_dense_kernel.h"
#include "worker/engine/backend/cuda/cuda_image_kernels.h"
#include "worker/engine/backend/cuda/cuda_kernels.h"
#include "worker/engine/backend/cuda/cuda_loss_kernel.h"
#include "worker/engine/backend/cuda/cuda_raii.h"
#include "worker/engine/backend/cuda/cuda_status.h"
#include "worker/engine/backend/cuda/cuda_tensor_checks.h"
#include "worker/engine/backend/tensor_checks.h"

namespace traind::engine {
namespace {

using cuda::CheckDevice;
using cuda::CublasHandle;
using cuda::CublasLtHandle;
using cuda::CudaStatus;
using cuda::DeviceBuffer;
using cuda::Event;
using cuda::PinnedBuffer;
using cuda::Stream;

// cuBLAS workspace (NVIDIA recommends 32 MiB on Hopper); set once so cuBLAS
// never allocates during a step (and a step can be captured in a graph).
constexpr size_t kCublasWorkspaceBytes = size_t{32} << 20;

void FreeDevice(void* p) { (void)cudaFree(p); }

// Grows `buffer` to at least `bytes` (never shrinks).
absl::Status Reserve(DeviceBuffer* buffer, size_t bytes) {
  if (buffer->bytes() >= bytes) return absl::OkStatus();
  *buffer = DeviceBuffer();
  TRAIND_ASSIGN_OR_RETURN(*buffer, DeviceBuffer::Allocate(bytes));
  return absl::OkStatus();
}
absl::Status Reserve(PinnedBuffer* buffer, size_t bytes) {
  if (buffer->bytes() >= bytes) return absl::OkStatus();
  *buffer = PinnedBuffer();
  TRAIND_ASSIGN_OR_RETURN(*buffer, PinnedBuffer::Allocate(bytes));
  return absl::OkStatus();
}

// Host-to-device uploads go through a ring of pinned staging buffers, each
// reused only once the copy out of it has completed (its event): the host
// never waits for the device in the steady state, and the caller may reuse
// its source at once.
constexpr int kUploadSlots = 4;
// Larger CopyFromHost payloads (initial weights, checkpoints) are copied
// straight from pageable memory instead of growing the pinned ring.
constexpr size_t kMaxStagedCopyBytes = size_t{16} << 20;

struct UploadSlot {
  PinnedBuffer buffer;
  Event done;
};

// A multi-tensor optimizer table in device memory: the entries, then one
// chunk per block. Keyed by the tensors' pointers and sizes.
struct MultiTensorTable {
  std::vector<cuda::MultiTensorEntry> entries;
  std::vector<int64_t> sizes;
  DeviceBuffer device;
  int64_t num_chunks = 0;
  uint64_t last_used = 0;

  const cuda::MultiTensorEntry* device_entries() const {
    return device.as<cuda::MultiTensorEntry>();
  }
  const cuda::MultiTensorChunk* device_chunks() const {
    return reinterpret_cast<const cuda::MultiTensorChunk*>(
        device.as<char>() + entries.size() * sizeof(cuda::MultiTensorEntry));
  }
};

// Tables kept at once (an optimizer uses one; a few more cover tests and
// warm starts). The least recently used one is replaced.
constexpr size_t kMaxMultiTensorTables = 4;

bool SameEntries(const std::vector<cuda::MultiTensorEntry>& a,
                 const std::vector<cuda::MultiTensorEntry>& b) {
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(a[0])) == 0);
}

// A captured sequence of the backend's ops: a CUDA graph, launched on the
// backend's stream (kept alive by the graph).
class CudaOpGraph final : public OpGraph {
 public:
  CudaOpGraph(std::shared_ptr<const Stream> stream, cuda::Graph graph, cuda::GraphExec exec)
      : stream_(std::move(stream)), graph_(std::move(graph)), exec_(std::move(exec)) {}

  absl::Status Launch() override {
    TRAIND_CUDA_RETURN_IF_ERROR(cudaGraphLaunch(exec_.get(), stream_->get()));
    return absl::OkStatus();
  }

 private:
  const std::shared_ptr<const Stream> stream_;
  cuda::Graph graph_;
  cuda::GraphExec exec_;
};

class CudaBackend final : public Backend {
 public:
  CudaBackend(const CudaBackendOptions& options, Stream stream, CublasHandle cublas,
              CublasLtHandle cublas_lt, DeviceBuffer cublas_workspace,
              std::array<UploadSlot, kUploadSlots> uploads)
      : options_(options),
        stream_(std::make_shared<const Stream>(std::move(stream))),
        cublas_workspace_(std::move(cublas_workspace)),
        cublas_(std::move(cublas)),
        cublas_lt_(std::move(cublas_lt)),
        uploads_(std::move(uploads)) {}

  ~CudaBackend() override {
    // Work still queued may read scratch buffers freed below.
    (void)cudaStreamSynchronize(stream());
  }

  std::string name() const override {
    const char* precision = options_.precision == GemmPrecision::kTf32   ? "tf32"
                            : options_.precision == GemmPrecision::kBf16 ? "bf16"
                                                                         : "fp32";
    return absl::StrCat("cuda (cuBLAS", options_.use_cublaslt ? ", cuBLASLt" : "", ", ", precision,
                        "), device ", options_.device);
  }
  BackendDevice device() const override { return BackendDevice::kGpu; }

  cudaStream_t stream() const { return stream_->get(); }

  absl::StatusOr<Tensor> Allocate1d(DType dtype, int64_t n) override {
    return AllocateImpl(dtype, 1, n, 1);
  }
  absl::StatusOr<Tensor> Allocate2d(DType dtype, int64_t rows, int64_t cols) override {
    return AllocateImpl(dtype, rows, cols, 2);
  }

  absl::Status CopyFromHost(const void* src, Tensor* dst) override {
    TRAIND_RETURN_IF_ERROR(CheckDevice(*dst, "CopyFromHost"));
    if (dst->bytes() == 0) return absl::OkStatus();
    if (dst->bytes() > kMaxStagedCopyBytes) {
      // From pageable memory the call returns once `src` has been staged, so
      // the caller may reuse it at once.
      TRAIND_CUDA_RETURN_IF_ERROR(
          cudaMemcpyAsync(dst->raw(), src, dst->bytes(), cudaMemcpyHostToDevice, stream()));
      return absl::OkStatus();
    }
    TRAIND_ASSIGN_OR_RETURN(void* staging, AcquireUpload(dst->bytes()));
    std::memcpy(staging, src, dst->bytes());
    return Upload(staging, dst->raw(), dst->bytes());
  }

  absl::Status CopyToHost(const Tensor& src, void* dst) override {
    TRAIND_RETURN_IF_ERROR(CheckDevice(src, "CopyToHost"));
    if (src.bytes() == 0) return absl::OkStatus();
    TRAIND_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(dst, src.raw(), src.bytes(), cudaMemcpyDeviceToHost, stream()));
    TRAIND_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream()));
    return absl::OkStatus();
  }

  absl::Status Copy(const Tensor& src, Tensor* dst) override {
    TRAIND_RETURN_IF_ERROR(CheckCopyArgs(src, *dst));
    if (src.bytes() == 0) return absl::OkStatus();
    TRAIND_RETURN_IF_ERROR(CheckDevice(src, "Copy"));
    TRAIND_RETURN_IF_ERROR(CheckDevice(*dst, "Copy"));
    TRAIND_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(dst->raw(), src.raw(), src.bytes(), cudaMemcpyDeviceToDevice, stream()));
    return absl::OkStatus();
  }

  absl::Status Fill(float value, Tensor* dst) override {
    if (dst->dtype() != DType::kF32) return absl::InvalidArgumentError("Fill: not an f32 tensor");
    TRAIND_RETURN_IF_ERROR(CheckDevice(*dst, "Fill"));
    TRAIND_LAUNCH(cuda::LaunchFill(value, dst->f32(), dst->size(), stream()));
    return absl::OkStatus();
  }

  absl::Status GatherRows(const float* src, int64_t cols, absl::Span<const int64_t> rows,
                          Tensor* dst) override {
    const int64_t n = static_cast<int64_t>(rows.size());
    TRAIND_RETURN_IF_ERROR(CheckShape(*dst, DType::kF32, n, cols, "GatherRows dst"));
    TRAIND_RETURN_IF_ERROR(CheckDevice(*dst, "GatherRows"));
    if (dst->bytes() == 0) return absl::OkStatus();
    // Gather on the host into pinned staging, then one asynchronous copy.
    TRAIND_ASSIGN_OR_RETURN(void* staging_bytes, AcquireUpload(dst->bytes()));
    float* staging = static_cast<float*>(staging_bytes);
    for (int64_t i = 0; i < n; ++i) {
      std::memcpy(staging + i * cols, src + rows[static_cast<size_t>(i)] * cols,
                  static_cast<size_t>(cols) * sizeof(float));
    }
    return Upload(staging, dst->raw(), dst->bytes());
  }

  absl::Status GatherLabels(const int32_t* src, absl::Span<const int64_t> rows,
                            Tensor* dst) override {
    if (dst->dtype() != DType::kS32 || dst->size() != static_cast<int64_t>(rows.size())) {
      return absl::InvalidArgumentError("GatherLabels: dst is not an s32 tensor of rows.size()");
    }
    TRAIND_RETURN_IF_ERROR(CheckDevice(*dst, "GatherLabels"));
    if (dst->bytes() == 0) return absl::OkStatus();
    TRAIND_ASSIGN_OR_RETURN(void* staging_bytes, AcquireUpload(dst->bytes()));
    int32_t* staging = static_cast<int32_t*>(staging_bytes);
    for (size_t i = 0; i < rows.size(); ++i) staging[i] = src[rows[i]];
    return Upload(staging, dst->raw(), dst->bytes());
  }

  absl::StatusOr<std::unique_ptr<DenseKernel>> CreateDenseKernel(
      int64_t batch, int64_t in, int64_t out, const DenseKernelOptions& options) override {
    if (batch <= 0 || in <= 0 || out <= 0 || batch > INT_MAX || in > INT_MAX || out > INT_MAX) {
      return absl::InvalidArgumentError(
          absl::StrFormat("dense kernel [%d, %d] -> [%d, %d]: dimensions must be in [1, 2^31)",
                          batch, in, batch, out));
    }
    GemmContext context;
    context.cublas = cublas_.get();
    context.cublas_lt = cublas_lt_.get();
    context.stream = stream();
    context.workspace = cublas_workspace_.get();
    context.workspace_bytes = cublas_workspace_.bytes();
    context.precision = options_.precision;
    context.use_cublaslt = options_.use_cublaslt;
    return CreateCudaDenseKernel(context, batch, in, out, options);
  }

  absl::StatusOr<std::unique_ptr<Conv2dKernel>> CreateConv2dKernel(
      const Conv2dGeometry& geometry, const Conv2dKernelOptions& options) override {
    TRAIND_RETURN_IF_ERROR(CheckConv2dGeometry(geometry));
    if (options.channels_last) {
      return absl::UnimplementedError(name() + ": images are NCHW (no channels-last convolution)");
    }
    if (geometry.batch > INT_MAX || geometry.in_channels > INT_MAX ||
        geometry.out_channels > INT_MAX || geometry.in_height > INT_MAX ||
        geometry.in_width > INT_MAX) {
      return absl::InvalidArgumentError("conv2d: dimensions must be below 2^31");
    }
    // cuDNN is loaded (its handle made) by the first convolution only: a
    // dense model never pays for it.
    if (cudnn_.get() == nullptr) {
      TRAIND_ASSIGN_OR_RETURN(cudnn_, cuda::CudnnHandle::Create(stream()));
    }
    ConvContext context;
    context.cudnn = cudnn_.get();
    context.stream = stream();
    context.precision = options_.precision;
    return CreateCudaConv2dKernel(context, geometry, options);
  }

  using Backend::CreatePool2dKernel;
  absl::StatusOr<std::unique_ptr<Pool2dKernel>> CreatePool2dKernel(
      const Pool2dGeometry& geometry, const Pool2dKernelOptions& options) override {
    TRAIND_RETURN_IF_ERROR(CheckPool2dGeometry(geometry));
    if (options.channels_last) {
      return absl::UnimplementedError(name() + ": images are NCHW (no channels-last pooling)");
    }
    return CreateCudaPool2dKernel(stream(), geometry, options.kind);
  }

  absl::Status TransposeBlocks(const Tensor& x, int64_t blocks, int64_t rows, int64_t cols,
                               Tensor* y) override {
    if (blocks < 0 || rows < 0 || cols < 0 || x.size() != blocks * rows * cols ||
        y->size() != blocks * rows * cols || x.dtype() != DType::kF32 ||
        y->dtype() != DType::kF32) {
      return absl::InvalidArgumentError(
          absl::StrFormat("TransposeBlocks: %d × [%d, %d] of a %d-value x into a %d-value y",
                          blocks, rows, cols, x.size(), y->size()));
    }
    TRAIND_LAUNCH(cuda::LaunchTransposeBlocks(x.f32(), blocks, rows, cols, y->f32(), stream()));
    return absl::OkStatus();
  }

  absl::Status ActivationForward(const ActivationFn& f, const Tensor& x, Tensor* y) override {
    TRAIND_RETURN_IF_ERROR(CheckSameSize(x, *y, "ActivationForward"));
    TRAIND_LAUNCH(
        cuda::LaunchActivationForward(f.kind, f.alpha, x.f32(), y->f32(), x.size(), stream()));
    return absl::OkStatus();
  }

  absl::Status ActivationBackward(const ActivationFn& f, const Tensor& x, const Tensor& y,
                                  const Tensor& dy, Tensor* dx) override {
    TRAIND_RETURN_IF_ERROR(CheckSameSize(x, y, "ActivationBackward"));
    TRAIND_RETURN_IF_ERROR(CheckSameSize(x, dy, "ActivationBackward"));
    TRAIND_RETURN_IF_ERROR(CheckSameSize(x, *dx, "ActivationBackward"));
    TRAIND_LAUNCH(cuda::LaunchActivationBackward(f.kind, f.alpha, x.f32(), y.f32(), dy.f32(),
                                                 dx->f32(), x.size(), stream()));
    return absl::OkStatus();
  }

  absl::Status DropoutForward(float rate, uint64_t seed, const Tensor& x, Tensor* mask,
                              Tensor* y) override {
    TRAIND_RETURN_IF_ERROR(CheckSameSize(x, *mask, "DropoutForward"));
    TRAIND_RETURN_IF_ERROR(CheckSameSize(x, *y, "DropoutForward"));
    // u < rate with u = (draw >> 11) · 2^-53 <=> (draw >> 11) < ceil(rate · 2^53).
    const double scaled = std::ceil(static_cast<double>(rate) * 0x1.0p53);
    const uint64_t threshold =
        scaled <= 0 ? 0 : (scaled >= 0x1.0p63 ? ~uint64_t{0} : static_cast<uint64_t>(scaled));
    const float keep = 1.0f / (1.0f - rate);
    TRAIND_LAUNCH(cuda::LaunchDropout(seed, threshold, keep, x.f32(), mask->f32(), y->f32(),
                                      x.size(), stream()));
    return absl::OkStatus();
  }

  absl::Status Multiply(const Tensor& a, const Tensor& b, Tensor* out) override {
    TRAIND_RETURN_IF_ERROR(CheckSameSize(a, b, "Multiply"));
    TRAIND_RETURN_IF_ERROR(CheckSameSize(a, *out, "Multiply"));
    TRAIND_LAUNCH(cuda::LaunchMultiply(a.f32(), b.f32(), out->f32(), a.size(), stream()));
    return absl::OkStatus();
  }

  absl::Status BatchNormForward(bool training, float momentum, float epsilon, const Tensor& x,
                                const Tensor& gamma, const Tensor& beta, Tensor* running_mean,
                                Tensor* running_var, Tensor* mean, Tensor* rstd,
                                Tensor* y) override {
    const int64_t batch = x.rows(), n = x.cols();
    TRAIND_RETURN_IF_ERROR(
        CheckBatchNormArgs(x, gamma, beta, *running_mean, *running_var, *mean, *rstd, *y));
    TRAIND_LAUNCH(cuda::LaunchBatchNormForward(
        training, momentum, epsilon, x.f32(), batch, n, gamma.f32(), beta.f32(),
        running_mean->f32(), running_var->f32(), mean->f32(), rstd->f32(), y->f32(), stream()));
    return absl::OkStatus();
  }

  absl::Status BatchNormBackward(const Tensor& x, const Tensor& gamma, const Tensor& mean,
                                 const Tensor& rstd, const Tensor& dy, Tensor* dgamma,
                                 Tensor* dbeta, Tensor* dx) override {
    const int64_t batch = x.rows(), n = x.cols();
    TRAIND_RETURN_IF_ERROR(CheckShape(dy, DType::kF32, batch, n, "batch norm dy"));
    TRAIND_LAUNCH(cuda::LaunchBatchNormBackward(x.f32(), batch, n, gamma.f32(), mean.f32(),
                                                rstd.f32(), dy.f32(), dgamma->f32(), dbeta->f32(),
                                                dx != nullptr ? dx->f32() : nullptr, stream()));
    return absl::OkStatus();
  }

  absl::Status BatchNormColumnSums(const Tensor& x, Tensor* sum) override {
    TRAIND_RETURN_IF_ERROR(CheckStatistic(*sum, x.cols(), "batch norm sum"));
    TRAIND_LAUNCH(cuda::LaunchColumnSum(x.f32(), x.rows(), x.cols(), sum->f32(), stream()));
    return absl::OkStatus();
  }

  absl::Status BatchNormSquaredDeviations(const Tensor& x, const Tensor& sum, int64_t count,
                                          Tensor* mean, Tensor* sq) override {
    const int64_t batch = x.rows(), n = x.cols();
    TRAIND_RETURN_IF_ERROR(CheckBatchNormSquaredDeviationsArgs(x, sum, count, *mean, *sq));
    TRAIND_LAUNCH(cuda::LaunchBatchNormSquaredDeviations(x.f32(), batch, n, sum.f32(), count,
                                                         mean->f32(), sq->f32(), stream()));
    return absl::OkStatus();
  }

  absl::Status BatchNormForwardFromMoments(float momentum, float epsilon, int64_t count,
                                           const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                           const Tensor& mean, const Tensor& sq,
                                           Tensor* running_mean, Tensor* running_var, Tensor* rstd,
                                           Tensor* y) override {
    const int64_t batch = x.rows(), n = x.cols();
    TRAIND_RETURN_IF_ERROR(CheckBatchNormFromMomentsArgs(count, x, gamma, beta, mean, sq,
                                                         *running_mean, *running_var, *rstd, *y));
    TRAIND_LAUNCH(cuda::LaunchBatchNormForwardFromMoments(
        momentum, epsilon, count, x.f32(), batch, n, gamma.f32(), beta.f32(), mean.f32(), sq.f32(),
        running_mean->f32(), running_var->f32(), rstd->f32(), y->f32(), stream()));
    return absl::OkStatus();
  }

  absl::Status BatchNormBackwardSums(const Tensor& x, const Tensor& mean, const Tensor& rstd,
                                     const Tensor& dy, Tensor* dgamma, Tensor* dbeta,
                                     Tensor* sums) override {
    const int64_t batch = x.rows(), n = x.cols();
    TRAIND_RETURN_IF_ERROR(
        CheckBatchNormBackwardSumsArgs(x, mean, rstd, dy, *dgamma, *dbeta, *sums));
    TRAIND_LAUNCH(cuda::LaunchBatchNormBackwardSums(x.f32(), batch, n, mean.f32(), rstd.f32(),
                                                    dy.f32(), dgamma->f32(), dbeta->f32(),
                                                    sums->f32(), stream()));
    return absl::OkStatus();
  }

  absl::Status BatchNormBackwardData(const Tensor& x, const Tensor& gamma, const Tensor& mean,
                                     const Tensor& rstd, const Tensor& dy, const Tensor& sums,
                                     int64_t count, Tensor* dx) override {
    const int64_t batch = x.rows(), n = x.cols();
    TRAIND_RETURN_IF_ERROR(
        CheckBatchNormBackwardDataArgs(x, gamma, mean, rstd, dy, sums, count, *dx));
    TRAIND_LAUNCH(cuda::LaunchBatchNormBackwardData(x.f32(), batch, n, gamma.f32(), mean.f32(),
                                                    rstd.f32(), dy.f32(), sums.f32(), count,
                                                    dx->f32(), stream()));
    return absl::OkStatus();
  }

  absl::Status LayerNormForward(float epsilon, const Tensor& x, const Tensor& gamma,
                                const Tensor& beta, Tensor* mean, Tensor* rstd,
                                Tensor* y) override {
    const int64_t batch = x.rows(), n = x.cols();
    TRAIND_RETURN_IF_ERROR(CheckShape(*y, DType::kF32, batch, n, "layer norm y"));
    if (mean->size() != batch || rstd->size() != batch || gamma.size() != n || beta.size() != n) {
      return absl::InvalidArgumentError("layer norm: bad statistic sizes");
    }
    TRAIND_LAUNCH(cuda::LaunchLayerNormForward(epsilon, x.f32(), batch, n, gamma.f32(), beta.f32(),
                                               mean->f32(), rstd->f32(), y->f32(), stream()));
    return absl::OkStatus();
  }

  absl::Status LayerNormBackward(const Tensor& x, const Tensor& gamma, const Tensor& mean,
                                 const Tensor& rstd, const Tensor& dy, Tensor* dgamma,
                                 Tensor* dbeta, Tensor* dx) override {
    const int64_t batch = x.rows(), n = x.cols();
    TRAIND_RETURN_IF_ERROR(CheckShape(dy, DType::kF32, batch, n, "layer norm dy"));
    TRAIND_LAUNCH(cuda::LaunchLayerNormBackward(x.f32(), batch, n, gamma.f32(), mean.f32(),
                                                rstd.f32(), dy.f32(), dgamma->f32(), dbeta->f32(),
                                                dx != nullptr ? dx->f32() : nullptr, stream()));
    return absl::OkStatus();
  }

  absl::StatusOr<double> SumOfSquares(const Tensor& t) override {
    TRAIND_RETURN_IF_ERROR(CheckDevice(t, "SumOfSquares"));
    TRAIND_RETURN_IF_ERROR(Reserve(&reduce_scratch_, (cuda::kSumPartials + 1) * sizeof(double)));
    TRAIND_RETURN_IF_ERROR(Reserve(&host_result_, sizeof(double)));
    double* partials = reduce_scratch_.as<double>();
    double* out = partials + cuda::kSumPartials;
    TRAIND_LAUNCH(cuda::LaunchSumOfSquares(t.f32(), t.size(), partials, out, stream()));
    TRAIND_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(host_result_.get(), out, sizeof(double), cudaMemcpyDeviceToHost, stream()));
    TRAIND_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream()));
    return *host_result_.as<double>();
  }

  absl::Status Scale(float factor, Tensor* t) override {
    TRAIND_LAUNCH(cuda::LaunchScale(factor, t->f32(), t->size(), stream()));
    return absl::OkStatus();
  }

  absl::Status ClipByValue(float limit, Tensor* t) override {
    TRAIND_LAUNCH(cuda::LaunchClip(limit, t->f32(), t->size(), stream()));
    return absl::OkStatus();
  }

  // Stream capture (this thread only): the ops record() enqueues become
  // graph nodes instead of running. A call that is not allowed while
  // capturing (a synchronization, a host copy, an allocation) fails and
  // invalidates the capture; its error is returned.
  absl::StatusOr<std::unique_ptr<OpGraph>> Capture(
      const std::function<absl::Status()>& record) override {
    TRAIND_CUDA_RETURN_IF_ERROR(cudaStreamBeginCapture(stream(), cudaStreamCaptureModeThreadLocal));
    const absl::Status recorded = record();
    cudaGraph_t raw = nullptr;
    const cudaError_t ended = cudaStreamEndCapture(stream(), &raw);
    cuda::Graph graph(raw);
    if (!recorded.ok()) {
      (void)cudaGetLastError();  // the capture's own error, if any, is not sticky
      return recorded;
    }
    TRAIND_CUDA_RETURN_IF_ERROR(ended);
    TRAIND_ASSIGN_OR_RETURN(cuda::GraphExec exec, cuda::GraphExec::Instantiate(graph));
    return std::unique_ptr<OpGraph>(new CudaOpGraph(stream_, std::move(graph), std::move(exec)));
  }

  absl::StatusOr<std::unique_ptr<LossKernel>> CreateLossKernel(
      const LossKernelOptions& options) override {
    return CreateCudaLossKernel(stream_, options);
  }

  absl::Status SgdUpdate(const SgdStep& step, const Tensor& grad, Tensor* velocity,
                         Tensor* param) override {
    TRAIND_RETURN_IF_ERROR(CheckSameSize(grad, *param, "SgdUpdate"));
    float* v = nullptr;
    if (step.momentum != 0.0) {
      if (velocity == nullptr) {
        return absl::InvalidArgumentError("SgdUpdate: momentum without velocity");
      }
      TRAIND_RETURN_IF_ERROR(CheckSameSize(grad, *velocity, "SgdUpdate"));
      v = velocity->f32();
    }
    TRAIND_LAUNCH(cuda::LaunchSgd(static_cast<float>(step.learning_rate),
                                  static_cast<float>(step.weight_decay),
                                  static_cast<float>(step.momentum), step.nesterov, grad.f32(), v,
                                  param->f32(), param->size(), stream()));
    return absl::OkStatus();
  }

  // One launch over every tensor (see MultiTensorTable).
  absl::Status SgdUpdateMany(const SgdStep& step, absl::Span<const Tensor* const> grads,
                             absl::Span<Tensor* const> velocities,
                             absl::Span<Tensor* const> params) override {
    const bool momentum = step.momentum != 0.0;
    TRAIND_RETURN_IF_ERROR(CheckSgdManyArgs(momentum, grads, velocities, params));
    table_entries_.clear();
    table_sizes_.clear();
    for (size_t i = 0; i < params.size(); ++i) {
      TRAIND_RETURN_IF_ERROR(CheckDevice(*params[i], "SgdUpdate"));
      float* v = momentum ? velocities[i]->f32() : nullptr;
      table_entries_.push_back({grads[i]->f32(), v, nullptr, params[i]->f32()});
      table_sizes_.push_back(params[i]->size());
    }
    TRAIND_ASSIGN_OR_RETURN(const MultiTensorTable* table, TableFor());
    TRAIND_LAUNCH(cuda::LaunchSgdMany(
        static_cast<float>(step.learning_rate), static_cast<float>(step.weight_decay),
        static_cast<float>(step.momentum), step.nesterov, table->device_entries(),
        table->device_chunks(), table->num_chunks, stream()));
    return absl::OkStatus();
  }

  absl::Status AdamUpdate(const AdamStep& step, const Tensor& grad, Tensor* m, Tensor* v,
                          Tensor* param) override {
    TRAIND_RETURN_IF_ERROR(CheckSameSize(grad, *param, "AdamUpdate"));
    TRAIND_RETURN_IF_ERROR(CheckSameSize(grad, *m, "AdamUpdate"));
    TRAIND_RETURN_IF_ERROR(CheckSameSize(grad, *v, "AdamUpdate"));
    const AdamScalars a = AdamScalarsOf(step);
    TRAIND_LAUNCH(cuda::LaunchAdam(a.step_size, a.sqrt_bc2, a.b1, a.b2, a.one_minus_b1,
                                   a.one_minus_b2, a.eps, a.l2, a.decay, grad.f32(), m->f32(),
                                   v->f32(), param->f32(), param->size(), stream()));
    return absl::OkStatus();
  }

  // One launch over every tensor (see MultiTensorTable).
  absl::Status AdamUpdateMany(const AdamStep& step, absl::Span<const Tensor* const> grads,
                              absl::Span<Tensor* const> m, absl::Span<Tensor* const> v,
                              absl::Span<Tensor* const> params) override {
    TRAIND_RETURN_IF_ERROR(CheckAdamManyArgs(grads, m, v, params));
    table_entries_.clear();
    table_sizes_.clear();
    for (size_t i = 0; i < params.size(); ++i) {
      TRAIND_RETURN_IF_ERROR(CheckDevice(*params[i], "AdamUpdate"));
      table_entries_.push_back({grads[i]->f32(), m[i]->f32(), v[i]->f32(), params[i]->f32()});
      table_sizes_.push_back(params[i]->size());
    }
    TRAIND_ASSIGN_OR_RETURN(const MultiTensorTable* table, TableFor());
    const AdamScalars a = AdamScalarsOf(step);
    TRAIND_LAUNCH(cuda::LaunchAdamMany(
        a.step_size, a.sqrt_bc2, a.b1, a.b2, a.one_minus_b1, a.one_minus_b2, a.eps, a.l2, a.decay,
        table->device_entries(), table->device_chunks(), table->num_chunks, stream()));
    return absl::OkStatus();
  }

  absl::Status RmsPropUpdate(const RmsPropStep& step, const Tensor& grad, Tensor* square_avg,
                             Tensor* buffer, Tensor* param) override {
    TRAIND_RETURN_IF_ERROR(CheckSameSize(grad, *param, "RmsPropUpdate"));
    TRAIND_RETURN_IF_ERROR(CheckSameSize(grad, *square_avg, "RmsPropUpdate"));
    float* b = nullptr;
    if (step.momentum > 0) {
      if (buffer == nullptr) return absl::InvalidArgumentError("RmsPropUpdate: no momentum buffer");
      TRAIND_RETURN_IF_ERROR(CheckSameSize(grad, *buffer, "RmsPropUpdate"));
      b = buffer->f32();
    }
    TRAIND_LAUNCH(cuda::LaunchRmsProp(
        static_cast<float>(step.learning_rate), static_cast<float>(step.alpha),
        static_cast<float>(1.0 - step.alpha), static_cast<float>(step.epsilon),
        static_cast<float>(step.momentum), static_cast<float>(step.weight_decay), grad.f32(),
        square_avg->f32(), b, param->f32(), param->size(), stream()));
    return absl::OkStatus();
  }

 private:
  // Adam's scalars exactly as the CPU backend computes them.
  absl::StatusOr<Tensor> AllocateImpl(DType dtype, int64_t rows, int64_t cols, int rank) {
    if (rows < 0 || cols < 0) return absl::InvalidArgumentError("Allocate: negative dimension");
    const size_t bytes = static_cast<size_t>(rows * cols) * SizeOf(dtype);
    void* data = nullptr;
    // Never a null pointer for an empty tensor: Tensor::empty() means "no buffer".
    const size_t asked = bytes > 0 ? bytes : 256;
    TRAIND_RETURN_IF_ERROR(CudaStatus(cudaMalloc(&data, asked), "cudaMalloc (tensor)", asked));
    return Tensor(data, &FreeDevice, dtype, rows, cols, rank, MemorySpace::kDevice);
  }

  // The next staging slot, at least `bytes` large, once the copy out of it
  // has completed (in the steady state it has long completed: no wait).
  absl::StatusOr<void*> AcquireUpload(size_t bytes) {
    UploadSlot& slot = uploads_[next_upload_];
    TRAIND_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(slot.done.get()));
    TRAIND_RETURN_IF_ERROR(Reserve(&slot.buffer, bytes));
    return slot.buffer.get();
  }
  // Enqueues the copy out of the slot AcquireUpload returned and moves on.
  absl::Status Upload(const void* staging, void* dst, size_t bytes) {
    UploadSlot& slot = uploads_[next_upload_];
    next_upload_ = (next_upload_ + 1) % kUploadSlots;
    TRAIND_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(dst, staging, bytes, cudaMemcpyHostToDevice, stream()));
    TRAIND_CUDA_RETURN_IF_ERROR(cudaEventRecord(slot.done.get(), stream()));
    return absl::OkStatus();
  }

  // The device table of table_entries_ / table_sizes_: a cached one when the
  // same tensors were updated before (no upload), else a new one, uploaded
  // once. Allocates only when a table outgrows the buffer it replaces.
  absl::StatusOr<const MultiTensorTable*> TableFor() {
    ++table_clock_;
    for (MultiTensorTable& t : tables_) {
      if (t.sizes == table_sizes_ && SameEntries(t.entries, table_entries_)) {
        t.last_used = table_clock_;
        return &t;
      }
    }
    MultiTensorTable* table = nullptr;
    if (tables_.size() < kMaxMultiTensorTables) {
      table = &tables_.emplace_back();
    } else {
      table = &tables_[0];
      for (MultiTensorTable& t : tables_) {
        if (t.last_used < table->last_used) table = &t;
      }
    }
    // Chunks: each tensor in runs of at most kMultiTensorChunk elements.
    table_chunks_.clear();
    for (size_t i = 0; i < table_sizes_.size(); ++i) {
      for (int64_t start = 0; start < table_sizes_[i]; start += cuda::kMultiTensorChunk) {
        const int64_t count = std::min(cuda::kMultiTensorChunk, table_sizes_[i] - start);
        table_chunks_.push_back({static_cast<int32_t>(i), static_cast<int32_t>(count), start});
      }
    }
    const size_t entry_bytes = table_entries_.size() * sizeof(cuda::MultiTensorEntry);
    const size_t chunk_bytes = table_chunks_.size() * sizeof(cuda::MultiTensorChunk);
    table->entries = table_entries_;
    table->sizes = table_sizes_;
    table->num_chunks = static_cast<int64_t>(table_chunks_.size());
    table->last_used = table_clock_;
    if (entry_bytes + chunk_bytes == 0) return table;
    // The old buffer may still be read by a launch in flight: cudaFree waits.
    TRAIND_RETURN_IF_ERROR(Reserve(&table->device, entry_bytes + chunk_bytes));
    TRAIND_ASSIGN_OR_RETURN(void* staging, AcquireUpload(entry_bytes + chunk_bytes));
    std::memcpy(staging, table_entries_.data(), entry_bytes);
    if (chunk_bytes > 0) {
      std::memcpy(static_cast<char*>(staging) + entry_bytes, table_chunks_.data(), chunk_bytes);
    }
    TRAIND_RETURN_IF_ERROR(Upload(staging, table->device.get(), entry_bytes + chunk_bytes));
    return table;
  }

  const CudaBackendOptions options_;
  // Destroyed in reverse order: the handles before their workspace and stream.
  // Shared with the loss kernels, which keep it for their lifetime.
  std::shared_ptr<const Stream> stream_;
  DeviceBuffer cublas_workspace_;
  CublasHandle cublas_;
  CublasLtHandle cublas_lt_;
  cuda::CudnnHandle cudnn_;  // made by the first CreateConv2dKernel
  std::array<UploadSlot, kUploadSlots> uploads_;
  int next_upload_ = 0;
  DeviceBuffer reduce_scratch_;
  PinnedBuffer host_result_;
  // Multi-tensor optimizer tables (host scratch reused between calls).
  std::vector<MultiTensorTable> tables_;
  uint64_t table_clock_ = 0;
  std::vector<cuda::MultiTensorEntry> table_entries_;
  std::vector<int64_t> table_sizes_;
  std::vector<cuda::MultiTensorChunk> table_chunks_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Backend>> CreateCudaBackend(const CudaBackendOptions& options) {
  std::string reason;
  const int devices = cuda::DeviceCount(&reason);
  if (devices == 0) return absl::FailedPreconditionError(reason);
  if (options.device < 0 || options.device >= devices) {
    return absl::InvalidArgumentError(
        absl::StrFormat("CUDA device %d does not exist (%d visible)", options.device, devices));
  }
  TRAIND_CUDA_RETURN_IF_ERROR(cudaSetDevice(options.device));
  TRAIND_ASSIGN_OR_RETURN(Stream stream, Stream::Create());
  TRAIND_ASSIGN_OR_RETURN(CublasHandle cublas, CublasHandle::Create(stream.get()));
  TRAIND_ASSIGN_OR_RETURN(CublasLtHandle cublas_lt, CublasLtHandle::Create());
  TRAIND_ASSIGN_OR_RETURN(DeviceBuffer workspace, DeviceBuffer::Allocate(kCublasWorkspaceBytes));
  TRAIND_CUBLAS_RETURN_IF_ERROR(
      cublasSetWorkspace(cublas.get(), workspace.get(), workspace.bytes()));
  TRAIND_CUBLAS_RETURN_IF_ERROR(cublasSetPointerMode(cublas.get(), CUBLAS_POINTER_MODE_HOST));
  // The compute type of each GEMM says what it may use (CUBLAS_COMPUTE_32F:
  // no TF32, whatever the math mode).
  TRAIND_CUBLAS_RETURN_IF_ERROR(cublasSetMathMode(cublas.get(), CUBLAS_DEFAULT_MATH));
  std::array<UploadSlot, kUploadSlots> uploads;
  for (UploadSlot& slot : uploads) {
    TRAIND_ASSIGN_OR_RETURN(slot.done, Event::Create());
  }
  return std::unique_ptr<Backend>(new CudaBackend(options, std::move(stream), std::move(cublas),
                                                  std::move(cublas_lt), std::move(workspace),
                                                  std::move(uploads)));
}

cudaStream_t CudaStreamOf(Backend& backend) {
  auto* cuda_backend = dynamic_cast<CudaBackend*>(&backend);
  return cuda_backend != nullptr ? cuda_backend->stream() : nullptr;
}

}  // namespace traind::engine
