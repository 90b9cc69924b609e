// Which library multiplies each of a CPU dense layer's matrices: oneDNN, or
// OpenBLAS's OpenMP build where it is measured faster.
//
// On CPUs where oneDNN 2.6 has no AVX-512 (AVX2 only, or capped by
// ONEDNN_MAX_CPU_ISA), its sgemm runs the forward (x·w) and input-gradient
// (dz·wᵀ) products of large layers at half of OpenBLAS's rate or less when w
// is 32-byte aligned, as every traind tensor is (docs/benchmarks.md: 65–70
// against 170–180 GFLOP/s on two Zen 2 cores for 256×2048·2048×4096 per
// thread), while its weight-gradient product (xᵀ·dz) is the faster of the two.
// So there, and for products big enough that OpenBLAS measured faster
// (cpu_gemm.cc), traind calls OpenBLAS for those two; everywhere else oneDNN.
//
// The choice is a fixed rule of the ISA oneDNN uses and the shape, never a
// timing taken when the kernel is planned: a retried attempt that resumes a
// fold from its checkpoint must multiply with the same library as the first
// attempt, or the resumed fold is no longer equal to the uninterrupted one to
// the bit (two libraries sum in different orders).
//
// TRAIND_CPU_GEMM=onednn|openblas|auto (default auto) overrides the rule for
// a process (traind passes it on to its workers); openblas still multiplies
// the weight gradient with oneDNN.
#ifndef TRAIND_WORKER_ENGINE_BACKEND_CPU_CPU_GEMM_H_
#define TRAIND_WORKER_ENGINE_BACKEND_CPU_CPU_GEMM_H_

#include <cstdint>

#include "absl/status/statusor.h"

namespace traind::engine::cpu {

enum class GemmPolicy {
  kAuto,      // the rule above
  kOneDnn,    // oneDNN for every product
  kOpenBlas,  // OpenBLAS for forward and input-gradient products of any size
};

// The policy TRAIND_CPU_GEMM names (kAuto when unset or empty);
// InvalidArgument naming the variable and its value otherwise.
absl::StatusOr<GemmPolicy> GemmPolicyFromEnvironment();

// OpenBLAS's row-major single-precision GEMM,
// C = op(A) · op(B) + beta · C (cblas_sgemm of the OpenMP build). Called
// inside an OpenMP parallel region of more than one thread it runs on the
// calling thread alone; outside, on omp_get_max_threads() threads.
struct OpenBlas {
  void Sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const float* a,
             int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) const;

  using SgemmFn = void (*)(int, int, int, int, int, int, float, const float*, int, const float*,
                           int, float, float*, int);
  SgemmFn sgemm = nullptr;
};

// Debian's OpenBLAS OpenMP build (libopenblas0-openmp), loaded once per
// process (dlopen of its own directory: the system's libblas.so.3 choice does
// not matter). Unavailable when the package is missing or the library is not
// an OpenMP build (its threads would fight oneDNN's), with the reason.
absl::StatusOr<const OpenBlas*> LoadOpenBlas();

// The products of one slab of a dense layer: [batch, rows] · [rows, out].
struct GemmLibraries {
  bool forward_openblas = false;  // x·w
  bool data_openblas = false;     // dz·wᵀ
  bool any() const { return forward_openblas || data_openblas; }
};

// The libraries for a slab of `rows` rows of w in a layer of batch × out, by
// `policy` on a CPU where oneDNN `has_avx512` or not; `openblas_loaded`:
// whether LoadOpenBlas succeeded (if not, oneDNN for all).
GemmLibraries ChooseGemmLibraries(GemmPolicy policy, bool has_avx512, bool openblas_loaded,
                                  int64_t batch, int64_t rows, int64_t out);

// Whether oneDNN's effective CPU ISA includes AVX-512 (avx512_core).
bool OneDnnHasAvx512();

}  // namespace traind::engine::cpu

#endif  // TRAIND_WORKER_ENGINE_BACKEND_CPU_CPU_GEMM_H_
