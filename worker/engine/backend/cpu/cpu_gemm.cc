#include "worker/engine/backend/cpu/cpu_gemm.h"

#include <dlfcn.h>

#include <cstdlib>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "oneapi/dnnl/dnnl.hpp"

#ifndef TRAIND_OPENBLAS_OPENMP_LIBRARY
#define TRAIND_OPENBLAS_OPENMP_LIBRARY "/usr/lib/x86_64-linux-gnu/openblas-openmp/libopenblas.so.0"
#endif

namespace traind::engine::cpu {
namespace {

// CBLAS's enumerations (their values are the CBLAS ABI).
constexpr int kCblasRowMajor = 101;
constexpr int kCblasNoTrans = 111;
constexpr int kCblasTrans = 112;
// openblas_get_parallel(): 2 for an OpenMP build.
constexpr int kOpenBlasOpenMp = 2;

// Where OpenBLAS measured faster than oneDNN at AVX2 (`cpu_bench gemmlibs` on
// Zen 2, docs/benchmarks.md), by the slab's product batch × rows × out.
// Forward: alike at case 1's largest slab (128 × 392 × 512 = 25.7 M
// multiply-adds), OpenBLAS 2.2–2.7× faster from 256 × 512 × 1024 (134 M) up.
// Input gradient ([batch, out] · [out, rows]): oneDNN 8% faster at 256 ×
// 512 × 1024, even at 256 × 512 × 4096, OpenBLAS 10–14% faster at 256 × 2048
// × 1024 and 256 × 2048 × 4096: it follows the slab's rows, not the size.
constexpr int64_t kForwardMinMacs = int64_t{1} << 26;
constexpr int64_t kDataMinRows = 2048;

absl::StatusOr<const OpenBlas*> Load() {
  const char* path = TRAIND_OPENBLAS_OPENMP_LIBRARY;
  void* handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* error = dlerror();
    return absl::UnavailableError(
        absl::StrCat("OpenBLAS (OpenMP build) not loaded: ", error != nullptr ? error : path));
  }
  auto get_parallel = reinterpret_cast<int (*)()>(dlsym(handle, "openblas_get_parallel"));
  if (get_parallel == nullptr || get_parallel() != kOpenBlasOpenMp) {
    return absl::UnavailableError(absl::StrCat(path, " is not OpenBLAS's OpenMP build"));
  }
  static OpenBlas blas;
  blas.sgemm = reinterpret_cast<OpenBlas::SgemmFn>(dlsym(handle, "cblas_sgemm"));
  if (blas.sgemm == nullptr) {
    return absl::UnavailableError(absl::StrCat(path, " has no cblas_sgemm"));
  }
  return &blas;  // the handle stays open for the process's life
}

}  // namespace

absl::StatusOr<GemmPolicy> GemmPolicyFromEnvironment() {
  const char* value = std::getenv("TRAIND_CPU_GEMM");
  const absl::string_view v = value != nullptr ? value : "";
  if (v.empty() || v == "auto") return GemmPolicy::kAuto;
  if (v == "onednn") return GemmPolicy::kOneDnn;
  if (v == "openblas") return GemmPolicy::kOpenBlas;
  return absl::InvalidArgumentError(
      absl::StrCat("TRAIND_CPU_GEMM=", v, ": expected auto, onednn or openblas"));
}

void OpenBlas::Sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const float* a,
                     int64_t lda, const float* b, int64_t ldb, float beta, float* c,
                     int64_t ldc) const {
  sgemm(kCblasRowMajor, trans_a ? kCblasTrans : kCblasNoTrans,
        trans_b ? kCblasTrans : kCblasNoTrans, static_cast<int>(m), static_cast<int>(n),
        static_cast<int>(k), 1.0f, a, static_cast<int>(lda), b, static_cast<int>(ldb), beta, c,
        static_cast<int>(ldc));
}

absl::StatusOr<const OpenBlas*> LoadOpenBlas() {
  static const absl::StatusOr<const OpenBlas*>* loaded =
      new absl::StatusOr<const OpenBlas*>(Load());
  return *loaded;
}

GemmLibraries ChooseGemmLibraries(GemmPolicy policy, bool has_avx512, bool openblas_loaded,
                                  int64_t batch, int64_t rows, int64_t out) {
  GemmLibraries l;
  if (!openblas_loaded || policy == GemmPolicy::kOneDnn) return l;
  if (policy == GemmPolicy::kOpenBlas) {
    l.forward_openblas = true;
    l.data_openblas = true;
    return l;
  }
  if (has_avx512) return l;
  // x[:, slab] · w[slab, :] and dz · w[slab, :]ᵀ: batch × rows × out each.
  const int64_t macs = batch * rows * out;
  l.forward_openblas = macs >= kForwardMinMacs;
  l.data_openblas = macs >= kForwardMinMacs && rows >= kDataMinRows;
  return l;
}

bool OneDnnHasAvx512() {
  const int isa = static_cast<int>(dnnl::get_effective_cpu_isa());
  return (isa & dnnl_cpu_isa_avx512_core) == dnnl_cpu_isa_avx512_core;
}

}  // namespace traind::engine::cpu
