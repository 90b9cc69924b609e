// The CPU backend's dense kernels: y = act(x w + b) and its backward pass as
// three matmuls planned once per shape (the activation fused into the forward
// one as a post-op where its derivative needs only y), in f32 or, for
// precision BF16, on bf16 copies of x, w and dz with f32 accumulation; oneDNN
// multiplies, or OpenBLAS for some f32 products (cpu_gemm.h). Made by the CPU
// backend's CreateDenseKernel.
//
// Thread safety: as the backend (one thread at a time); the loops use the
// process's OpenMP threads.
#ifndef TRAIND_WORKER_ENGINE_BACKEND_CPU_CPU_DENSE_KERNEL_H_
#define TRAIND_WORKER_ENGINE_BACKEND_CPU_CPU_DENSE_KERNEL_H_

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "oneapi/dnnl/dnnl.hpp"
#include "traind/v1/job.pb.h"
#include "worker/engine/backend/backend.h"
#include "worker/engine/backend/cpu/cpu_gemm.h"

namespace traind::engine::cpu {

// How f32 dense kernels choose their GEMM library (cpu_gemm.h).
struct CpuGemmConfig {
  GemmPolicy policy = GemmPolicy::kAuto;
  bool has_avx512 = true;  // OneDnnHasAvx512() of the process
};

// The process's: TRAIND_CPU_GEMM's policy (its error when it names none)
// and oneDNN's ISA.
absl::StatusOr<CpuGemmConfig> CpuGemmConfigOfProcess();

// How an f32 dense layer whose activation's derivative needs only y is
// run: `parts` row slabs of w (one per thread when the layer splits, see
// cpu_parallel.h SplitsInRowSlabs, else 1) and the libraries of each slab's
// products, by its largest slab (they differ by a row at most);
// `openblas_loaded` as in ChooseGemmLibraries.
struct DenseLayout {
  int parts = 1;
  GemmLibraries libraries;
};
DenseLayout ChooseDenseLayout(const CpuGemmConfig& gemm, bool openblas_loaded, int64_t batch,
                              int64_t in, int64_t out, int threads);

// A dense kernel for [batch, in] -> [batch, out] on `engine` and `stream`
// (not owned: they outlive the kernel), BF16 or f32 by `precision`; f32
// products by `gemm`'s rule. FailedPrecondition when the policy is
// kOpenBlas and OpenBLAS cannot be loaded.
// REQUIRES: batch, in, out > 0 (the backend checks). DeviceError /
// OutOfMemoryError when oneDNN cannot plan it.
absl::StatusOr<std::unique_ptr<DenseKernel>> CreateCpuDenseKernel(
    const dnnl::engine& engine, const dnnl::stream& stream, traind::v1::Precision precision,
    int64_t batch, int64_t in, int64_t out, const DenseKernelOptions& options,
    const CpuGemmConfig& gemm);

}  // namespace traind::engine::cpu

#endif  // TRAIND_WORKER_ENGINE_BACKEND_CPU_CPU_DENSE_KERNEL_H_
