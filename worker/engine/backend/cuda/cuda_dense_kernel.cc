#include "worker/engine/backend/cuda/cuda_dense_kernel.h"

#include <cstdint>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status.h"
#include "worker/engine/backend/cuda/cuda_kernels.h"
#include "worker/engine/backend/cuda/cuda_raii.h"
#include "worker/engine/backend/cuda/cuda_status.h"
#include "worker/engine/backend/tensor_checks.h"

namespace traind::engine {
namespace {

using cuda::DeviceBuffer;

cublasComputeType_t ComputeType(GemmPrecision precision) {
  return precision == GemmPrecision::kTf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
}

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

}  // namespace

absl::StatusOr<std::unique_ptr<DenseKernel>> CreateCudaDenseKernel(
    const GemmContext& context, int64_t batch, int64_t in, int64_t out,
    const DenseKernelOptions& options) {
  TRAIND_ASSIGN_OR_RETURN(std::unique_ptr<CudaDenseKernel> kernel,
                          CudaDenseKernel::Create(context, batch, in, out, options));
  return std::unique_ptr<DenseKernel>(std::move(kernel));
}

}  // namespace traind::engine
