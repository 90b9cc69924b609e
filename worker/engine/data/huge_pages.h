// Host arrays that the kernel may back with 2 MiB pages (transparent huge
// pages, madvise mode): a training step gathers its batch's rows from all
// over the feature matrix, and with 4 KiB pages nearly every row costs a TLB
// miss and a page walk. Measured on a 60,000 × 784 matrix: the 128-row
// gather of a shuffled batch took 0.037 ms instead of 0.051 (docs/benchmarks.md).
#ifndef TRAIND_WORKER_ENGINE_DATA_HUGE_PAGES_H_
#define TRAIND_WORKER_ENGINE_DATA_HUGE_PAGES_H_

#include <cstddef>
#include <new>
#include <vector>

namespace traind::engine {

inline constexpr size_t kHugePageBytes = size_t{2} << 20;

// `bytes` of memory. From kHugePageBytes up: a private
// anonymous mapping of whole 2 MiB-aligned huge pages, advised
// MADV_HUGEPAGE before any page is touched (the kernel backs it with huge
// pages where it can, with 4 KiB pages where it cannot or THP is off);
// below: operator new. Throws std::bad_alloc when out of memory.
void* AllocateHostArray(size_t bytes);
// Frees what AllocateHostArray(bytes) returned.
void FreeHostArray(void* p, size_t bytes) noexcept;

// A std::allocator for large host arrays (AllocateHostArray).
template <typename T>
struct HugePageAllocator {
  using value_type = T;
  HugePageAllocator() = default;
  template <typename U>
  HugePageAllocator(const HugePageAllocator<U>&) noexcept {}  // NOLINT: allocator rebinding
  T* allocate(size_t n) {
    if (n > static_cast<size_t>(-1) / sizeof(T)) throw std::bad_array_new_length();
    return static_cast<T*>(AllocateHostArray(n * sizeof(T)));
  }
  void deallocate(T* p, size_t n) noexcept { FreeHostArray(p, n * sizeof(T)); }
  template <typename U>
  bool operator==(const HugePageAllocator<U>&) const noexcept {
    return true;
  }
  template <typename U>
  bool operator!=(const HugePageAllocator<U>&) const noexcept {
    return false;
  }
};

// A fold's feature matrix, [rows, width] row-major.
using FeatureMatrix = std::vector<float, HugePageAllocator<float>>;

}  // namespace traind::engine

#endif  // TRAIND_WORKER_ENGINE_DATA_HUGE_PAGES_H_
