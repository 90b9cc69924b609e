// How the CPU backend's loops use the OpenMP threads that oneDNN also runs
// on, and its host memory's alignment.
#ifndef TRAIND_WORKER_ENGINE_BACKEND_CPU_CPU_PARALLEL_H_
#define TRAIND_WORKER_ENGINE_BACKEND_CPU_CPU_PARALLEL_H_

#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <new>

namespace traind::engine::cpu {

// Loops shorter than this run on one thread: forking costs more than it saves.
inline constexpr int64_t kParallelThreshold = 1 << 15;

// Host tensors and scratch buffers: 64-byte aligned (a cache line, an
// AVX-512 register), freed by FreeAligned.
inline constexpr std::align_val_t kAlignment{64};
inline void FreeAligned(void* p) { ::operator delete(p, kAlignment); }

// Whether a loop over n elements forks: more than `threshold` of them, and
// more than one thread to run them. Every loop of the backend branches on
// this rather than `omp parallel if (...)`: a one-thread region still builds
// a team, which allocates in libgomp each time (with OMP_NUM_THREADS=1, as
// traind's workers run by default, too).
inline bool Forks(int64_t n, int64_t threshold = kParallelThreshold) {
  return n > threshold && omp_get_max_threads() > 1;
}

// body(i0, i1) over [0, n): split evenly across the threads when the loop
// forks (Forks), else on this thread.
template <typename Body>
void ParallelFor(int64_t n, Body body) {
  if (!Forks(n)) {
    body(0, n);
    return;
  }
#pragma omp parallel
  {
    const int64_t threads = omp_get_num_threads();
    const int64_t chunk = ((n + threads - 1) / threads + 15) & ~int64_t{15};
    const int64_t begin = std::min(n, chunk * omp_get_thread_num());
    body(begin, std::min(n, begin + chunk));
  }
}

// Slabs of [0, n): thread t of `threads` owns [SlabBegin(n, threads, t),
// SlabBegin(n, threads, t + 1)).
inline int64_t SlabBegin(int64_t n, int64_t threads, int64_t t) {
  const int64_t chunk = (n + threads - 1) / threads;
  return std::min(n, chunk * t);
}

// Whether the dense kernel splits a [rows, cols] weight matrix in row slabs,
// one per thread, for all three of its matmuls, so that each thread's rows
// stay in its core's cache up to the optimizer's update, whose flat split
// (ForEachSegment) gives each thread about the same rows (see
// cpu_dense_kernel.cc).
inline bool SplitsInRowSlabs(int64_t rows, int64_t cols, int64_t threads) {
  return threads > 1 && rows * cols > kParallelThreshold && rows >= 16 * threads;
}

}  // namespace traind::engine::cpu

#endif  // TRAIND_WORKER_ENGINE_BACKEND_CPU_CPU_PARALLEL_H_
