// The GEMMs of a CPU training step alone, made with the library calls the
// CPU backend makes: the ceiling that cpu_bench compares a step with
// (gemmset, fit --gemmset-sets) and the per-layer library comparison
// (gemmlibs).
//
// Thread safety: not thread-safe; the products use the process's OpenMP
// threads.
#ifndef TRAIND_BENCH_GEMM_SET_H_
#define TRAIND_BENCH_GEMM_SET_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "dnnl.hpp"
#include "worker/engine/backend/cpu/cpu_dense_kernel.h"
#include "worker/engine/backend/cpu/cpu_gemm.h"
#include "worker/engine/backend/cpu/onednn_plans.h"

namespace traind::bench {

// Seconds since t0.
inline double SecondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Buffers of floats filled with a fixed pattern in [-0.5, 0.5), each
// starting `extra_bytes` past the CPU backend's tensor alignment
// (cpu_parallel.h kAlignment), freed with the set.
class AlignedBuffers {
 public:
  float* New(int64_t n, int64_t extra_bytes = 0);

 private:
  std::vector<std::unique_ptr<float, void (*)(void*)>> buffers_;
};

// One dense layer's three products as the CPU backend's row-slab kernel
// (backend/cpu/cpu_dense_kernel.cc, CpuSplitDenseKernel) runs them: w cut in
// `parts` slabs of rows, each product one OpenMP region with one
// single-threaded call per slab (oneDNN matmuls planned for one thread, or
// OpenBLAS's sgemm), or, for one part, one call on the calling thread. On
// operands aligned as the backend's tensors, w `w_offset` bytes past that.
class SlabProducts {
 public:
  enum Op { kForward, kWeights, kData };

  // `blas` may be null when no product runs in OpenBLAS. `buffers` holds
  // the operands and outlives the products. `momentum` > 0: the weight
  // gradient accumulates into its destination, dw = xᵀ·dz + momentum·dw
  // (a oneDNN sum post-op, OpenBLAS's beta), as the kernel's BackwardUpdate
  // makes it when SGD with momentum updates in the backward pass.
  SlabProducts(const dnnl::engine& eng, const engine::cpu::OpenBlas* blas, int parts, int64_t batch,
               int64_t in, int64_t out, AlignedBuffers* buffers, int64_t w_offset = 0,
               float momentum = 0.0f);

  // One product of every slab, in OpenBLAS or oneDNN.
  void Run(Op op, bool openblas);

 private:
  struct Slab {
    int64_t r0, r1;
    engine::cpu::MatmulPlan forward, weights, data;  // run as the kernel runs its own
    dnnl::stream stream;
  };

  void Plan(const dnnl::engine& eng, int t);
  void RunSlab(Op op, bool openblas, int t);

  const engine::cpu::OpenBlas* blas_;
  const int64_t batch_, in_, out_;
  const float momentum_;
  float *x_, *w_, *dz_, *y_, *dw_, *dx_;
  std::vector<Slab> slabs_;
};

// The GEMM set of one fp32 training step of an MLP alone: per dense layer
// the forward x·w, the weight gradient xᵀ·dz and (but for the first layer)
// the input gradient dz·wᵀ, each as the CPU backend runs it
// (ChooseDenseLayout): a layer it cuts in row slabs, or whose products
// cpu_gemm.h gives to OpenBLAS, as SlabProducts; any other as one oneDNN
// matmul on all threads. Planned once, run as many times as asked.
class GemmSetRunner {
 public:
  // For features → hidden... → classes, batch rows. `momentum` > 0: the
  // step's SGD with momentum updates the row-slab layers in their backward
  // pass, so their weight gradients accumulate (SlabProducts). Errors:
  // TRAIND_CPU_GEMM's.
  static absl::StatusOr<std::unique_ptr<GemmSetRunner>> Create(int64_t features,
                                                               const std::vector<int>& hidden,
                                                               int64_t classes, int64_t batch,
                                                               float momentum);

  // n sets back to back after `warmup` untimed ones: their total seconds.
  // Adds each set's seconds to *set_seconds (unless null) and each
  // product's to its total.
  double Run(int n, int warmup, std::vector<double>* set_seconds);

  double flops() const { return flops_; }  // of one set
  size_t gemms() const { return gemms_.size(); }
  int openblas_gemms() const { return openblas_gemms_; }
  int slab_gemms() const { return slab_gemms_; }
  // "\"<layer>.<product>\": mean ms, ..." over the timed sets.
  std::string ProductsJson() const;

 private:
  struct Gemm {
    std::string name;  // "<layer>.<product>"
    std::function<void()> run;
    double seconds = 0;  // summed over the timed sets
  };

  GemmSetRunner() : eng_(dnnl::engine::kind::cpu, 0), stream_(eng_) {}

  void Plan(const engine::cpu::CpuGemmConfig& gemm, const std::vector<int64_t>& widths,
            int64_t batch, float momentum);
  // Each product timed too (a clock read costs some 20 ns).
  void RunSet(bool timed);

  dnnl::engine eng_;
  dnnl::stream stream_;
  // Aligned as the CPU backend's tensors: on AVX2, oneDNN's sgemm takes
  // another path for 32-byte aligned operands.
  AlignedBuffers buffers_;
  std::vector<std::unique_ptr<SlabProducts>> slab_layers_;
  std::vector<Gemm> gemms_;
  double flops_ = 0;
  int openblas_gemms_ = 0, slab_gemms_ = 0, timed_sets_ = 0;
};

}  // namespace traind::bench

#endif  // TRAIND_BENCH_GEMM_SET_H_
