#include "worker/engine/backend/tensor_checks.h"
#include "worker/engine/backend/cuda/cuda_backend.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <climits>
#include <cmath>
#include <cstring>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "worker/engine/backend/cuda/cuda_kernels.h"
#include "worker/engine/backend/cuda/cuda_raii.h"
#include "worker/engine/backend/cuda/cuda_status.h"
#include "worker/engine/status.h"

namespace traind::engine {
namespace {

using cuda::Act;
using cuda::CublasHandle;
using cuda::CudaStatus;
using cuda::DeviceBuffer;
using cuda::Event;
using cuda::PinnedBuffer;
using cuda::Stream;

#define TRAIND_LAUNCH(call) TRAIND_RETURN_IF_ERROR(::traind::engine::cuda::CudaStatus((call), #call))

static_assert(static_cast<int>(DenseActivation::kLinear) == static_cast<int>(Act::kLinear));
static_assert(static_cast<int>(DenseActivation::kRelu) == static_cast<int>(Act::kRelu));
static_assert(static_cast<int>(DenseActivation::kLeakyRelu) == static_cast<int>(Act::kLeakyRelu));
static_assert(static_cast<int>(DenseActivation::kElu) == static_cast<int>(Act::kElu));
static_assert(static_cast<int>(DenseActivation::kGelu) == static_cast<int>(Act::kGelu));
static_assert(static_cast<int>(DenseActivation::kSigmoid) == static_cast<int>(Act::kSigmoid));
static_assert(static_cast<int>(DenseActivation::kTanh) == static_cast<int>(Act::kTanh));
static_assert(static_cast<int>(DenseActivation::kSoftplus) == static_cast<int>(Act::kSoftplus));
static_assert(static_cast<int>(DenseActivation::kSwish) == static_cast<int>(Act::kSwish));

Act ToAct(DenseActivation kind) { return static_cast<Act>(static_cast<int>(kind)); }

// cuBLAS workspace (NVIDIA recommends 32 MiB on Hopper); set once so cuBLAS
// never allocates during a step (and a step can be captured in a graph).
constexpr size_t kCublasWorkspaceBytes = size_t{32} << 20;

void FreeDevice(void* p) { (void)cudaFree(p); }

absl::Status CheckDevice(const Tensor& t, absl::string_view what) {
  if (!t.empty() && t.space() != MemorySpace::kDevice) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": a host tensor was passed to the CUDA backend"));
  }
  return absl::OkStatus();
}

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

// Row-major GEMMs through column-major cuBLAS: a row-major [r, c] matrix is
// the column-major [c, r] matrix, its transpose. So row-major C = A · B is
// column-major Cᵀ = Bᵀ · Aᵀ: swap the operands, keep the flags.
class CudaDenseKernel final : public DenseKernel {
 public:
  CudaDenseKernel(cublasHandle_t cublas, cudaStream_t stream, int64_t batch, int64_t in,
                  int64_t out, const DenseKernelOptions& options)
      : cublas_(cublas),
        stream_(stream),
        batch_(batch),
        in_(in),
        out_(out),
        activation_(options.activation),
        bias_(options.bias) {}

  absl::Status Forward(const Tensor& x, const Tensor& w, const Tensor& b, Tensor* y) override {
    TRAIND_RETURN_IF_ERROR(CheckDenseForwardArgs(x, w, b, *y, batch_, in_, out_, bias_));
    const float one = 1.0f, zero = 0.0f;
    // y: [batch, out] = x: [batch, in] · w: [in, out]
    // column-major: yᵀ[out, batch] = wᵀ[out, in] · xᵀ[in, batch]
    TRAIND_CUBLAS_RETURN_IF_ERROR(cublasSgemm(cublas_, CUBLAS_OP_N, CUBLAS_OP_N, Int(out_),
                                              Int(batch_), Int(in_), &one, w.f32(), Int(out_),
                                              x.f32(), Int(in_), &zero, y->f32(), Int(out_)));
    // y = act(y + b), one fused pass.
    TRAIND_LAUNCH(cuda::LaunchBiasActivation(ToAct(activation_.kind), activation_.alpha,
                                             bias_ ? b.f32() : nullptr, y->f32(), batch_, out_,
                                             stream_));
    return absl::OkStatus();
  }

  absl::Status Backward(const Tensor& x, const Tensor& w, const Tensor& y, Tensor* dy, Tensor* dw,
                        Tensor* db, Tensor* dx) override {
    TRAIND_RETURN_IF_ERROR(CheckDenseBackwardArgs(x, w, y, *dy, *dw, db, dx, batch_, in_, out_));
    float* g = dy->f32();
    // dz = dy ⊙ f'(z), from y (as the CPU kernel).
    TRAIND_LAUNCH(cuda::LaunchActivationGradFromOutput(
        ToAct(activation_.kind), activation_.alpha, y.f32(), g, batch_ * out_, stream_));
    // db: [out] = Σ_rows dz
    if (db != nullptr) TRAIND_LAUNCH(cuda::LaunchColumnSum(g, batch_, out_, db->f32(), stream_));
    const float one = 1.0f, zero = 0.0f;
    // dw: [in, out] = xᵀ · dz; column-major dwᵀ[out, in] = dzᵀ[out, batch] · x[batch, in]
    TRAIND_CUBLAS_RETURN_IF_ERROR(cublasSgemm(cublas_, CUBLAS_OP_N, CUBLAS_OP_T, Int(out_),
                                              Int(in_), Int(batch_), &one, g, Int(out_), x.f32(),
                                              Int(in_), &zero, dw->f32(), Int(out_)));
    if (dx != nullptr) {
      // dx: [batch, in] = dz · wᵀ; column-major dxᵀ[in, batch] = w[in, out] · dzᵀ[out, batch]
      TRAIND_CUBLAS_RETURN_IF_ERROR(cublasSgemm(cublas_, CUBLAS_OP_T, CUBLAS_OP_N, Int(in_),
                                                Int(batch_), Int(out_), &one, w.f32(), Int(out_),
                                                g, Int(out_), &zero, dx->f32(), Int(in_)));
    }
    return absl::OkStatus();
  }

 private:
  static int Int(int64_t v) { return static_cast<int>(v); }

  cublasHandle_t cublas_;
  cudaStream_t stream_;
  const int64_t batch_, in_, out_;
  const ActivationFn activation_;
  const bool bias_;
};

class CudaBackend final : public Backend {
 public:
  CudaBackend(int device, Stream stream, CublasHandle cublas, DeviceBuffer cublas_workspace,
              Event gather_rows_done, Event gather_labels_done)
      : device_(device),
        stream_(std::move(stream)),
        cublas_workspace_(std::move(cublas_workspace)),
        cublas_(std::move(cublas)),
        gather_rows_done_(std::move(gather_rows_done)),
        gather_labels_done_(std::move(gather_labels_done)) {}

  ~CudaBackend() override {
    // Work still queued may read scratch buffers freed below.
    (void)cudaStreamSynchronize(stream_.get());
  }

  std::string name() const override { return absl::StrCat("cuda (cuBLAS), device ", device_); }

  cudaStream_t stream() const { return stream_.get(); }

  absl::StatusOr<Tensor> Allocate1d(DType dtype, int64_t n) override {
    return AllocateImpl(dtype, 1, n, 1);
  }
  absl::StatusOr<Tensor> Allocate2d(DType dtype, int64_t rows, int64_t cols) override {
    return AllocateImpl(dtype, rows, cols, 2);
  }

  absl::Status CopyFromHost(const void* src, Tensor* dst) override {
    TRAIND_RETURN_IF_ERROR(CheckDevice(*dst, "CopyFromHost"));
    if (dst->bytes() == 0) return absl::OkStatus();
    // From pageable memory the call returns once `src` has been staged, so
    // the caller may reuse it at once.
    TRAIND_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dst->raw(), src, dst->bytes(),
                                                cudaMemcpyHostToDevice, stream_.get()));
    return absl::OkStatus();
  }

  absl::Status CopyToHost(const Tensor& src, void* dst) override {
    TRAIND_RETURN_IF_ERROR(CheckDevice(src, "CopyToHost"));
    if (src.bytes() == 0) return absl::OkStatus();
    TRAIND_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dst, src.raw(), src.bytes(),
                                                cudaMemcpyDeviceToHost, stream_.get()));
    TRAIND_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_.get()));
    return absl::OkStatus();
  }

  absl::Status Fill(float value, Tensor* dst) override {
    if (dst->dtype() != DType::kF32) return absl::InvalidArgumentError("Fill: not an f32 tensor");
    TRAIND_RETURN_IF_ERROR(CheckDevice(*dst, "Fill"));
    TRAIND_LAUNCH(cuda::LaunchFill(value, dst->f32(), dst->size(), stream_.get()));
    return absl::OkStatus();
  }

  absl::Status GatherRows(const float* src, int64_t cols, absl::Span<const int64_t> rows,
                          Tensor* dst) override {
    const int64_t n = static_cast<int64_t>(rows.size());
    TRAIND_RETURN_IF_ERROR(CheckShape(*dst, DType::kF32, n, cols, "GatherRows dst"));
    TRAIND_RETURN_IF_ERROR(CheckDevice(*dst, "GatherRows"));
    if (dst->bytes() == 0) return absl::OkStatus();
    // Gather on the host into pinned staging, then one asynchronous copy. The
    // staging buffer is reused once the previous copy out of it is done.
    TRAIND_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(gather_rows_done_.get()));
    TRAIND_RETURN_IF_ERROR(Reserve(&row_staging_, dst->bytes()));
    float* staging = row_staging_.as<float>();
    for (int64_t i = 0; i < n; ++i) {
      std::memcpy(staging + i * cols, src + rows[static_cast<size_t>(i)] * cols,
                  static_cast<size_t>(cols) * sizeof(float));
    }
    TRAIND_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dst->raw(), staging, dst->bytes(),
                                                cudaMemcpyHostToDevice, stream_.get()));
    TRAIND_CUDA_RETURN_IF_ERROR(cudaEventRecord(gather_rows_done_.get(), stream_.get()));
    return absl::OkStatus();
  }

  absl::Status GatherLabels(const int32_t* src, absl::Span<const int64_t> rows,
                            Tensor* dst) override {
    if (dst->dtype() != DType::kS32 || dst->size() != static_cast<int64_t>(rows.size())) {
      return absl::InvalidArgumentError("GatherLabels: dst is not an s32 tensor of rows.size()");
    }
    TRAIND_RETURN_IF_ERROR(CheckDevice(*dst, "GatherLabels"));
    if (dst->bytes() == 0) return absl::OkStatus();
    TRAIND_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(gather_labels_done_.get()));
    TRAIND_RETURN_IF_ERROR(Reserve(&label_staging_, dst->bytes()));
    int32_t* staging = label_staging_.as<int32_t>();
    for (size_t i = 0; i < rows.size(); ++i) staging[i] = src[rows[i]];
    TRAIND_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dst->raw(), staging, dst->bytes(),
                                                cudaMemcpyHostToDevice, stream_.get()));
    TRAIND_CUDA_RETURN_IF_ERROR(cudaEventRecord(gather_labels_done_.get(), stream_.get()));
    return absl::OkStatus();
  }

  absl::StatusOr<std::unique_ptr<DenseKernel>> CreateDenseKernel(
      int64_t batch, int64_t in, int64_t out, const DenseKernelOptions& options) override {
    if (batch <= 0 || in <= 0 || out <= 0 || batch > INT_MAX || in > INT_MAX || out > INT_MAX) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "dense kernel [%d, %d] -> [%d, %d]: dimensions must be in [1, 2^31)", batch, in, batch,
          out));
    }
    return std::unique_ptr<DenseKernel>(
        new CudaDenseKernel(cublas_.get(), stream_.get(), batch, in, out, options));
  }

  absl::Status ActivationForward(const ActivationFn& f, const Tensor& x, Tensor* y) override {
    TRAIND_RETURN_IF_ERROR(CheckSameSize(x, *y, "ActivationForward"));
    TRAIND_LAUNCH(cuda::LaunchActivationForward(ToAct(f.kind), f.alpha, x.f32(), y->f32(),
                                                x.size(), stream_.get()));
    return absl::OkStatus();
  }

  absl::Status ActivationBackward(const ActivationFn& f, const Tensor& x, const Tensor& y,
                                  const Tensor& dy, Tensor* dx) override {
    TRAIND_RETURN_IF_ERROR(CheckSameSize(x, y, "ActivationBackward"));
    TRAIND_RETURN_IF_ERROR(CheckSameSize(x, dy, "ActivationBackward"));
    TRAIND_RETURN_IF_ERROR(CheckSameSize(x, *dx, "ActivationBackward"));
    TRAIND_LAUNCH(cuda::LaunchActivationBackward(ToAct(f.kind), f.alpha, x.f32(), y.f32(),
                                                 dy.f32(), dx->f32(), x.size(), stream_.get()));
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
                                      x.size(), stream_.get()));
    return absl::OkStatus();
  }

  absl::Status Multiply(const Tensor& a, const Tensor& b, Tensor* out) override {
    TRAIND_RETURN_IF_ERROR(CheckSameSize(a, b, "Multiply"));
    TRAIND_RETURN_IF_ERROR(CheckSameSize(a, *out, "Multiply"));
    TRAIND_LAUNCH(cuda::LaunchMultiply(a.f32(), b.f32(), out->f32(), a.size(), stream_.get()));
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
        running_mean->f32(), running_var->f32(), mean->f32(), rstd->f32(), y->f32(),
        stream_.get()));
    return absl::OkStatus();
  }

  absl::Status BatchNormBackward(const Tensor& x, const Tensor& gamma, const Tensor& mean,
                                 const Tensor& rstd, const Tensor& dy, Tensor* dgamma,
                                 Tensor* dbeta, Tensor* dx) override {
    const int64_t batch = x.rows(), n = x.cols();
    TRAIND_RETURN_IF_ERROR(CheckShape(dy, DType::kF32, batch, n, "batch norm dy"));
    TRAIND_LAUNCH(cuda::LaunchBatchNormBackward(x.f32(), batch, n, gamma.f32(), mean.f32(),
                                                rstd.f32(), dy.f32(), dgamma->f32(),
                                                dbeta->f32(), dx != nullptr ? dx->f32() : nullptr,
                                                stream_.get()));
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
    TRAIND_LAUNCH(cuda::LaunchLayerNormForward(epsilon, x.f32(), batch, n, gamma.f32(),
                                               beta.f32(), mean->f32(), rstd->f32(), y->f32(),
                                               stream_.get()));
    return absl::OkStatus();
  }

  absl::Status LayerNormBackward(const Tensor& x, const Tensor& gamma, const Tensor& mean,
                                 const Tensor& rstd, const Tensor& dy, Tensor* dgamma,
                                 Tensor* dbeta, Tensor* dx) override {
    const int64_t batch = x.rows(), n = x.cols();
    TRAIND_RETURN_IF_ERROR(CheckShape(dy, DType::kF32, batch, n, "layer norm dy"));
    TRAIND_LAUNCH(cuda::LaunchLayerNormBackward(x.f32(), batch, n, gamma.f32(), mean.f32(),
                                                rstd.f32(), dy.f32(), dgamma->f32(),
                                                dbeta->f32(), dx != nullptr ? dx->f32() : nullptr,
                                                stream_.get()));
    return absl::OkStatus();
  }

  absl::StatusOr<double> SumOfSquares(const Tensor& t) override {
    TRAIND_RETURN_IF_ERROR(CheckDevice(t, "SumOfSquares"));
    TRAIND_RETURN_IF_ERROR(Reserve(&reduce_scratch_, (cuda::kSumPartials + 1) * sizeof(double)));
    TRAIND_RETURN_IF_ERROR(Reserve(&host_result_, sizeof(cuda::SoftmaxResult)));
    double* partials = reduce_scratch_.as<double>();
    double* out = partials + cuda::kSumPartials;
    TRAIND_LAUNCH(cuda::LaunchSumOfSquares(t.f32(), t.size(), partials, out, stream_.get()));
    TRAIND_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(host_result_.get(), out, sizeof(double),
                                                cudaMemcpyDeviceToHost, stream_.get()));
    TRAIND_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_.get()));
    return *host_result_.as<double>();
  }

  absl::Status Scale(float factor, Tensor* t) override {
    TRAIND_LAUNCH(cuda::LaunchScale(factor, t->f32(), t->size(), stream_.get()));
    return absl::OkStatus();
  }

  absl::Status ClipByValue(float limit, Tensor* t) override {
    TRAIND_LAUNCH(cuda::LaunchClip(limit, t->f32(), t->size(), stream_.get()));
    return absl::OkStatus();
  }

  absl::Status SoftmaxCrossEntropy(const Tensor& logits, const Tensor& labels, Tensor* dlogits,
                                   LossStats* stats) override {
    const int64_t batch = logits.rows();
    const int64_t classes = logits.cols();
    TRAIND_RETURN_IF_ERROR(CheckShape(logits, DType::kF32, batch, classes, "softmax logits"));
    if (labels.dtype() != DType::kS32 || labels.size() != batch) {
      return absl::InvalidArgumentError("softmax cross-entropy: labels must be s32 [batch]");
    }
    if (dlogits != nullptr) {
      TRAIND_RETURN_IF_ERROR(CheckShape(*dlogits, DType::kF32, batch, classes, "softmax dlogits"));
    }
    const size_t rows = static_cast<size_t>(batch);
    TRAIND_RETURN_IF_ERROR(Reserve(&row_loss_, rows * sizeof(double) + sizeof(cuda::SoftmaxResult)));
    TRAIND_RETURN_IF_ERROR(Reserve(&row_correct_, rows * sizeof(long long)));
    TRAIND_RETURN_IF_ERROR(Reserve(&host_result_, sizeof(cuda::SoftmaxResult)));
    double* row_loss = row_loss_.as<double>();
    auto* device_result = reinterpret_cast<cuda::SoftmaxResult*>(row_loss + rows);
    TRAIND_LAUNCH(cuda::LaunchSoftmaxCrossEntropy(
        logits.f32(), labels.s32(), batch, classes, dlogits != nullptr ? dlogits->f32() : nullptr,
        row_loss, row_correct_.as<long long>(), device_result, stream_.get()));
    TRAIND_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(host_result_.get(), device_result,
                                                sizeof(cuda::SoftmaxResult),
                                                cudaMemcpyDeviceToHost, stream_.get()));
    TRAIND_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_.get()));
    const cuda::SoftmaxResult& result = *host_result_.as<cuda::SoftmaxResult>();
    if (result.bad_row >= 0) {
      return absl::InvalidArgumentError(
          absl::StrFormat("softmax cross-entropy: label %d of row %d is not in [0, %d)",
                          result.bad_label, result.bad_row, classes));
    }
    stats->loss_sum = result.loss_sum;
    stats->correct = result.correct;
    return absl::OkStatus();
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
    TRAIND_LAUNCH(cuda::LaunchSgd(
        static_cast<float>(step.learning_rate), static_cast<float>(step.weight_decay),
        static_cast<float>(step.momentum), step.nesterov, grad.f32(), v, param->f32(),
        param->size(), stream_.get()));
    return absl::OkStatus();
  }

  absl::Status AdamUpdate(const AdamStep& step, const Tensor& grad, Tensor* m, Tensor* v,
                          Tensor* param) override {
    TRAIND_RETURN_IF_ERROR(CheckSameSize(grad, *param, "AdamUpdate"));
    TRAIND_RETURN_IF_ERROR(CheckSameSize(grad, *m, "AdamUpdate"));
    TRAIND_RETURN_IF_ERROR(CheckSameSize(grad, *v, "AdamUpdate"));
    // The scalars exactly as the CPU backend computes them.
    const double bias_correction1 = 1.0 - std::pow(step.beta1, static_cast<double>(step.step));
    const double bias_correction2 = 1.0 - std::pow(step.beta2, static_cast<double>(step.step));
    const float step_size = static_cast<float>(step.learning_rate / bias_correction1);
    const float sqrt_bc2 = static_cast<float>(std::sqrt(bias_correction2));
    const float l2 = step.decoupled ? 0.0f : static_cast<float>(step.weight_decay);
    const float decay =
        step.decoupled ? static_cast<float>(1.0 - step.learning_rate * step.weight_decay) : 1.0f;
    TRAIND_LAUNCH(cuda::LaunchAdam(
        step_size, sqrt_bc2, static_cast<float>(step.beta1), static_cast<float>(step.beta2),
        static_cast<float>(1.0 - step.beta1), static_cast<float>(1.0 - step.beta2),
        static_cast<float>(step.epsilon), l2, decay, grad.f32(), m->f32(), v->f32(),
        param->f32(), param->size(), stream_.get()));
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
        square_avg->f32(), b, param->f32(), param->size(), stream_.get()));
    return absl::OkStatus();
  }

 private:
  absl::StatusOr<Tensor> AllocateImpl(DType dtype, int64_t rows, int64_t cols, int rank) {
    if (rows < 0 || cols < 0) return absl::InvalidArgumentError("Allocate: negative dimension");
    const size_t bytes = static_cast<size_t>(rows * cols) * SizeOf(dtype);
    void* data = nullptr;
    // Never a null pointer for an empty tensor: Tensor::empty() means "no buffer".
    const size_t asked = bytes > 0 ? bytes : 256;
    TRAIND_RETURN_IF_ERROR(CudaStatus(cudaMalloc(&data, asked), "cudaMalloc (tensor)", asked));
    return Tensor(data, &FreeDevice, dtype, rows, cols, rank, MemorySpace::kDevice);
  }

  const int device_;
  // Destroyed in reverse order: the handle before its workspace and stream.
  Stream stream_;
  DeviceBuffer cublas_workspace_;
  CublasHandle cublas_;
  Event gather_rows_done_, gather_labels_done_;
  PinnedBuffer row_staging_, label_staging_;
  DeviceBuffer row_loss_, row_correct_, reduce_scratch_;
  PinnedBuffer host_result_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Backend>> CreateCudaBackend(const CudaBackendOptions& options) {
  std::string reason;
  const int devices = cuda::DeviceCount(&reason);
  if (devices == 0) return absl::FailedPreconditionError(reason);
  if (options.device < 0 || options.device >= devices) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "CUDA device %d does not exist (%d visible)", options.device, devices));
  }
  TRAIND_CUDA_RETURN_IF_ERROR(cudaSetDevice(options.device));
  TRAIND_ASSIGN_OR_RETURN(Stream stream, Stream::Create());
  TRAIND_ASSIGN_OR_RETURN(CublasHandle cublas, CublasHandle::Create(stream.get()));
  TRAIND_ASSIGN_OR_RETURN(DeviceBuffer workspace, DeviceBuffer::Allocate(kCublasWorkspaceBytes));
  TRAIND_CUBLAS_RETURN_IF_ERROR(
      cublasSetWorkspace(cublas.get(), workspace.get(), workspace.bytes()));
  TRAIND_CUBLAS_RETURN_IF_ERROR(cublasSetPointerMode(cublas.get(), CUBLAS_POINTER_MODE_HOST));
  TRAIND_CUBLAS_RETURN_IF_ERROR(cublasSetMathMode(
      cublas.get(), options.allow_tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
  TRAIND_ASSIGN_OR_RETURN(Event rows_done, Event::Create());
  TRAIND_ASSIGN_OR_RETURN(Event labels_done, Event::Create());
  return std::unique_ptr<Backend>(new CudaBackend(options.device, std::move(stream),
                                                  std::move(cublas), std::move(workspace),
                                                  std::move(rows_done), std::move(labels_done)));
}

cudaStream_t CudaStreamOf(Backend& backend) {
  auto* cuda_backend = dynamic_cast<CudaBackend*>(&backend);
  return cuda_backend != nullptr ? cuda_backend->stream() : nullptr;
}

}  // namespace traind::engine
