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
#include "worker/engine/backend/cuda/cuda_kernels.h"
#include "worker/engine/backend/cuda/cuda_raii.h"
#include "worker/engine/backend/cuda/cuda_status.h"
#include "worker/engine/backend/tensor_checks.h"
#include "worker/engine/status.h"

namespace traind::engine {
namespace {

using cuda::CublasHandle;
using cuda::CublasLtHandle;
using cuda::CudaStatus;
using cuda::DeviceBuffer;
using cuda::Event;
using cuda::PinnedBuffer;
using cuda::Stream;

#define TRAIND_LAUNCH(call) \
  TRAIND_RETURN_IF_ERROR(::traind::engine::cuda::CudaStatus((call), #call))

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

cublasComputeType_t ComputeType(GemmPrecision precision) {
  return precision == GemmPrecision::kTf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
}

// What the device needs of the backend to run a dense kernel.
struct GemmContext {
  cublasHandle_t cublas;
  cublasLtHandle_t cublas_lt;
  cudaStream_t stream;
  void* workspace;
  size_t workspace_bytes;
  GemmPrecision precision;
  bool use_cublaslt;
};

// Row-major GEMMs through column-major cuBLAS: a row-major [r, c] matrix is
// the column-major [c, r] matrix, its transpose. So row-major C = A · B is
// column-major Cᵀ = Bᵀ · Aᵀ: swap the operands, keep the flags.
//
// Forward: cuBLASLt with the bias and the activation in the epilogue where
// it has them (planned once, at creation); otherwise cuBLAS + one
// bias/activation kernel. Backward: cuBLAS GEMMs in the kernel's precision.
// kBf16: x, w and dz are rounded into bf16 scratch buffers owned by the
// kernel (allocated at creation, so a step allocates nothing); the products
// accumulate and write in fp32. Backward reuses the bf16 copies of x and w
// made by the last Forward when it is given the same tensors (the interface
// requires the forward pass's x, and w is only updated after Backward).
class CudaDenseKernel final : public DenseKernel {
 public:
  static absl::StatusOr<std::unique_ptr<CudaDenseKernel>> Create(
      const GemmContext& context, int64_t batch, int64_t in, int64_t out,
      const DenseKernelOptions& options) {
    std::unique_ptr<CudaDenseKernel> k(new CudaDenseKernel(context, batch, in, out, options));
    if (context.precision == GemmPrecision::kBf16) {
      TRAIND_ASSIGN_OR_RETURN(k->x16_, DeviceBuffer::Allocate(Bytes16(batch * in)));
      TRAIND_ASSIGN_OR_RETURN(k->w16_, DeviceBuffer::Allocate(Bytes16(in * out)));
      TRAIND_ASSIGN_OR_RETURN(k->g16_, DeviceBuffer::Allocate(Bytes16(batch * out)));
    }
    if (context.use_cublaslt) TRAIND_RETURN_IF_ERROR(k->PlanLt());
    return k;
  }

  absl::Status Forward(const Tensor& x, const Tensor& w, const Tensor& b, Tensor* y) override {
    TRAIND_RETURN_IF_ERROR(CheckDenseForwardArgs(x, w, b, *y, batch_, in_, out_, bias_));
    const void* a = w.f32();
    const void* bx = x.f32();
    if (bf16()) {
      TRAIND_LAUNCH(cuda::LaunchToBf16(w.f32(), w16_.as<uint16_t>(), in_ * out_, ctx_.stream));
      TRAIND_LAUNCH(cuda::LaunchToBf16(x.f32(), x16_.as<uint16_t>(), batch_ * in_, ctx_.stream));
      w16_source_ = w.raw();
      x16_source_ = x.raw();
      a = w16_.get();
      bx = x16_.get();
    }
    const float one = 1.0f, zero = 0.0f;
    if (lt_ready_) {
      if (lt_bias_ && lt_bias_pointer_ != b.raw()) {
        const void* bias = b.raw();
        TRAIND_RETURN_IF_ERROR(lt_desc_.Set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias));
        lt_bias_pointer_ = bias;
      }
      // y: [batch, out] = x: [batch, in] · w: [in, out]
      // column-major: yᵀ[out, batch] = wᵀ[out, in] · xᵀ[in, batch] (+ bias per row of yᵀ)
      const cublasStatus_t status =
          cublasLtMatmul(ctx_.cublas_lt, lt_desc_.get(), &one, a, lt_a_.get(), bx, lt_b_.get(),
                         &zero, y->f32(), lt_d_.get(), y->f32(), lt_d_.get(), &lt_algo_,
                         ctx_.workspace, ctx_.workspace_bytes, ctx_.stream);
      if (status == CUBLAS_STATUS_SUCCESS) {
        // What the epilogue does not do: the activation (its bias was added).
        if (!lt_activation_fused_) {
          TRAIND_LAUNCH(cuda::LaunchBiasActivation(activation_.kind, activation_.alpha, nullptr,
                                                   y->f32(), batch_, out_, ctx_.stream));
        }
        return absl::OkStatus();
      }
      if (status != CUBLAS_STATUS_NOT_SUPPORTED) {
        return cuda::CublasStatus(status, "cublasLtMatmul (dense forward)");
      }
      // Not for these pointers after all: the cuBLAS path from now on.
      lt_ready_ = false;
    }
    TRAIND_RETURN_IF_ERROR(Gemm(CUBLAS_OP_N, CUBLAS_OP_N, out_, batch_, in_, a, out_, bx, in_,
                                y->f32(), out_, "cublasGemmEx (dense forward)"));
    // y = act(y + b), one fused pass.
    TRAIND_LAUNCH(cuda::LaunchBiasActivation(activation_.kind, activation_.alpha,
                                             bias_ ? b.f32() : nullptr, y->f32(), batch_, out_,
                                             ctx_.stream));
    return absl::OkStatus();
  }

  absl::Status Backward(const Tensor& x, const Tensor& w, const Tensor& y, Tensor* dy, Tensor* dw,
                        Tensor* db, Tensor* dx) override {
    TRAIND_RETURN_IF_ERROR(CheckDenseBackwardArgs(x, w, y, *dy, *dw, db, dx, batch_, in_, out_));
    float* g = dy->f32();
    const void* g_in = g;
    const void* x_in = x.f32();
    const void* w_in = w.f32();
    // dz = dy ⊙ f'(z), from y (as the CPU kernel).
    if (bf16()) {
      TRAIND_LAUNCH(cuda::LaunchActivationGradFromOutputBf16(activation_.kind, activation_.alpha,
                                                             y.f32(), g, g16_.as<uint16_t>(),
                                                             batch_ * out_, ctx_.stream));
      if (x16_source_ != x.raw()) {
        TRAIND_LAUNCH(cuda::LaunchToBf16(x.f32(), x16_.as<uint16_t>(), batch_ * in_, ctx_.stream));
        x16_source_ = x.raw();
      }
      if (dx != nullptr && w16_source_ != w.raw()) {
        TRAIND_LAUNCH(cuda::LaunchToBf16(w.f32(), w16_.as<uint16_t>(), in_ * out_, ctx_.stream));
        w16_source_ = w.raw();
      }
      g_in = g16_.get();
      x_in = x16_.get();
      w_in = w16_.get();
    } else {
      TRAIND_LAUNCH(cuda::LaunchActivationGradFromOutput(activation_.kind, activation_.alpha,
                                                         y.f32(), g, batch_ * out_, ctx_.stream));
    }
    // db: [out] = Σ_rows dz (fp32, in double)
    if (db != nullptr) {
      TRAIND_LAUNCH(cuda::LaunchColumnSum(g, batch_, out_, db->f32(), ctx_.stream));
    }
    // dw: [in, out] = xᵀ · dz; column-major dwᵀ[out, in] = dzᵀ[out, batch] · x[batch, in]
    TRAIND_RETURN_IF_ERROR(Gemm(CUBLAS_OP_N, CUBLAS_OP_T, out_, in_, batch_, g_in, out_, x_in, in_,
                                dw->f32(), out_, "cublasGemmEx (dense backward dw)"));
    if (dx != nullptr) {
      // dx: [batch, in] = dz · wᵀ; column-major dxᵀ[in, batch] = w[in, out] · dzᵀ[out, batch]
      TRAIND_RETURN_IF_ERROR(Gemm(CUBLAS_OP_T, CUBLAS_OP_N, in_, batch_, out_, w_in, out_, g_in,
                                  out_, dx->f32(), in_, "cublasGemmEx (dense backward dx)"));
    }
    return absl::OkStatus();
  }

 private:
  CudaDenseKernel(const GemmContext& context, int64_t batch, int64_t in, int64_t out,
                  const DenseKernelOptions& options)
      : ctx_(context),
        batch_(batch),
        in_(in),
        out_(out),
        activation_(options.activation),
        bias_(options.bias) {}

  static int Int(int64_t v) { return static_cast<int>(v); }
  static size_t Bytes16(int64_t n) { return static_cast<size_t>(n) * sizeof(uint16_t); }
  bool bf16() const { return ctx_.precision == GemmPrecision::kBf16; }
  cudaDataType_t InputType() const { return bf16() ? CUDA_R_16BF : CUDA_R_32F; }

  // Column-major C[m, n] = op(A) · op(B), fp32 C; A and B in the kernel's
  // input type (fp32, or bf16 scratch).
  absl::Status Gemm(cublasOperation_t op_a, cublasOperation_t op_b, int64_t m, int64_t n, int64_t k,
                    const void* a, int64_t lda, const void* b, int64_t ldb, float* c, int64_t ldc,
                    absl::string_view what) {
    const float one = 1.0f, zero = 0.0f;
    return cuda::CublasStatus(
        cublasGemmEx(ctx_.cublas, op_a, op_b, Int(m), Int(n), Int(k), &one, a, InputType(),
                     Int(lda), b, InputType(), Int(ldb), &zero, c, CUDA_R_32F, Int(ldc),
                     ComputeType(ctx_.precision), CUBLAS_GEMM_DEFAULT),
        what);
  }

  // Plans the cuBLASLt forward pass; leaves lt_ready_ false (the cuBLAS
  // path) when cuBLASLt has no algorithm for this shape and epilogue.
  absl::Status PlanLt() {
    const DenseActivation act = activation_.kind;
    // cuBLASLt's GELU is the tanh approximation: within the error of TF32 /
    // bf16 products, not of fp32 ones.
    const bool fuse_relu = act == DenseActivation::kRelu;
    const bool fuse_gelu = act == DenseActivation::kGelu && ctx_.precision != GemmPrecision::kFp32;
    cublasLtEpilogue_t epilogue;
    if (fuse_relu) {
      epilogue = bias_ ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_RELU;
    } else if (fuse_gelu) {
      epilogue = bias_ ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_GELU;
    } else {
      epilogue = bias_ ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
    }
    lt_activation_fused_ = fuse_relu || fuse_gelu || act == DenseActivation::kLinear;
    lt_bias_ = bias_;
    TRAIND_ASSIGN_OR_RETURN(lt_desc_,
                            cuda::LtMatmulDesc::Create(ComputeType(ctx_.precision), CUDA_R_32F));
    const cublasOperation_t no_transpose = CUBLAS_OP_N;
    TRAIND_RETURN_IF_ERROR(lt_desc_.Set(CUBLASLT_MATMUL_DESC_TRANSA, no_transpose));
    TRAIND_RETURN_IF_ERROR(lt_desc_.Set(CUBLASLT_MATMUL_DESC_TRANSB, no_transpose));
    TRAIND_RETURN_IF_ERROR(lt_desc_.Set(CUBLASLT_MATMUL_DESC_EPILOGUE, epilogue));
    if (bias_) {
      const int32_t bias_type = CUDA_R_32F;
      TRAIND_RETURN_IF_ERROR(lt_desc_.Set(CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, bias_type));
    }
    // A = wᵀ[out, in], B = xᵀ[in, batch], D = yᵀ[out, batch], column-major.
    TRAIND_ASSIGN_OR_RETURN(lt_a_, cuda::LtMatrixLayout::Create(InputType(), out_, in_, out_));
    TRAIND_ASSIGN_OR_RETURN(lt_b_, cuda::LtMatrixLayout::Create(InputType(), in_, batch_, in_));
    TRAIND_ASSIGN_OR_RETURN(lt_d_, cuda::LtMatrixLayout::Create(CUDA_R_32F, out_, batch_, out_));
    TRAIND_ASSIGN_OR_RETURN(cuda::LtPreference preference,
                            cuda::LtPreference::Create(ctx_.workspace_bytes));
    cublasLtMatmulHeuristicResult_t result = {};
    int found = 0;
    const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(
        ctx_.cublas_lt, lt_desc_.get(), lt_a_.get(), lt_b_.get(), lt_d_.get(), lt_d_.get(),
        preference.get(), 1, &result, &found);
    if (status == CUBLAS_STATUS_NOT_SUPPORTED || (status == CUBLAS_STATUS_SUCCESS && found == 0)) {
      return absl::OkStatus();  // the cuBLAS path
    }
    TRAIND_RETURN_IF_ERROR(cuda::CublasStatus(status, "cublasLtMatmulAlgoGetHeuristic"));
    if (result.state != CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
    lt_algo_ = result.algo;
    lt_ready_ = true;
    return absl::OkStatus();
  }

  const GemmContext ctx_;
  const int64_t batch_, in_, out_;
  const ActivationFn activation_;
  const bool bias_;

  // cuBLASLt plan of the forward pass.
  bool lt_ready_ = false;
  bool lt_bias_ = false;              // the epilogue adds the bias
  bool lt_activation_fused_ = false;  // the epilogue applies the activation
  const void* lt_bias_pointer_ = nullptr;
  cuda::LtMatmulDesc lt_desc_;
  cuda::LtMatrixLayout lt_a_, lt_b_, lt_d_;
  cublasLtMatmulAlgo_t lt_algo_ = {};

  // kBf16 scratch: x [batch, in], w [in, out], dz [batch, out] as bf16.
  DeviceBuffer x16_, w16_, g16_;
  const void* x16_source_ = nullptr;  // the tensors x16_ / w16_ were made from
  const void* w16_source_ = nullptr;
};

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
    TRAIND_LAUNCH(cuda::LaunchLoss(
        params_, outputs.f32(), classes ? targets.s32() : nullptr,
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
    TRAIND_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dst->raw(), src.raw(), src.bytes(),
                                                cudaMemcpyDeviceToDevice, stream()));
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
    TRAIND_ASSIGN_OR_RETURN(std::unique_ptr<CudaDenseKernel> kernel,
                            CudaDenseKernel::Create(context, batch, in, out, options));
    return std::unique_ptr<DenseKernel>(std::move(kernel));
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
    TRAIND_LAUNCH(cuda::LaunchBatchNormForward(training, momentum, epsilon, x.f32(), batch, n,
                                               gamma.f32(), beta.f32(), running_mean->f32(),
                                               running_var->f32(), mean->f32(), rstd->f32(),
                                               y->f32(), stream()));
    return absl::OkStatus();
  }

  absl::Status BatchNormBackward(const Tensor& x, const Tensor& gamma, const Tensor& mean,
                                 const Tensor& rstd, const Tensor& dy, Tensor* dgamma,
                                 Tensor* dbeta, Tensor* dx) override {
    const int64_t batch = x.rows(), n = x.cols();
    TRAIND_RETURN_IF_ERROR(CheckShape(dy, DType::kF32, batch, n, "batch norm dy"));
    TRAIND_LAUNCH(cuda::LaunchBatchNormBackward(
        x.f32(), batch, n, gamma.f32(), mean.f32(), rstd.f32(), dy.f32(), dgamma->f32(),
        dbeta->f32(), dx != nullptr ? dx->f32() : nullptr, stream()));
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
                                           const Tensor& x, const Tensor& gamma,
                                           const Tensor& beta, const Tensor& mean,
                                           const Tensor& sq, Tensor* running_mean,
                                           Tensor* running_var, Tensor* rstd,
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
    TRAIND_LAUNCH(cuda::LaunchLayerNormBackward(
        x.f32(), batch, n, gamma.f32(), mean.f32(), rstd.f32(), dy.f32(), dgamma->f32(),
        dbeta->f32(), dx != nullptr ? dx->f32() : nullptr, stream()));
    return absl::OkStatus();
  }

  absl::StatusOr<double> SumOfSquares(const Tensor& t) override {
    TRAIND_RETURN_IF_ERROR(CheckDevice(t, "SumOfSquares"));
    TRAIND_RETURN_IF_ERROR(Reserve(&reduce_scratch_, (cuda::kSumPartials + 1) * sizeof(double)));
    TRAIND_RETURN_IF_ERROR(Reserve(&host_result_, sizeof(double)));
    double* partials = reduce_scratch_.as<double>();
    double* out = partials + cuda::kSumPartials;
    TRAIND_LAUNCH(cuda::LaunchSumOfSquares(t.f32(), t.size(), partials, out, stream()));
    TRAIND_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(host_result_.get(), out, sizeof(double),
                                                cudaMemcpyDeviceToHost, stream()));
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
    TRAIND_CUDA_RETURN_IF_ERROR(
        cudaStreamBeginCapture(stream(), cudaStreamCaptureModeThreadLocal));
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
    TRAIND_ASSIGN_OR_RETURN(std::unique_ptr<CudaLossKernel> kernel,
                            CudaLossKernel::Create(stream_, options));
    return std::unique_ptr<LossKernel>(std::move(kernel));
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
