#include "worker/engine/data/huge_pages.h"

#include <sys/mman.h>

#include <cstdint>
#include <new>

namespace traind::engine {
namespace {

size_t RoundUpToHugePages(size_t bytes) {
  return (bytes + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
}

}  // namespace

void* AllocateHostArray(size_t bytes) {
  if (bytes < kHugePageBytes) return ::operator new(bytes == 0 ? 1 : bytes);
  const size_t size = RoundUpToHugePages(bytes);
  if (size < bytes || size + kHugePageBytes < size) throw std::bad_alloc();
  // Map one huge page more than needed, then unmap the unaligned head and
  // the tail, so that exactly [start, start + size) stays mapped.
  const size_t mapped = size + kHugePageBytes;
  void* p = mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  const uintptr_t base = reinterpret_cast<uintptr_t>(p);
  const uintptr_t start = (base + kHugePageBytes - 1) & ~(uintptr_t{kHugePageBytes} - 1);
  if (start > base) munmap(p, start - base);
  const uintptr_t end = start + size;
  if (base + mapped > end) munmap(reinterpret_cast<void*>(end), base + mapped - end);
  // Advice only: a kernel without THP says EINVAL, and the pages stay 4 KiB.
  (void)madvise(reinterpret_cast<void*>(start), size, MADV_HUGEPAGE);
  return reinterpret_cast<void*>(start);
}

void FreeHostArray(void* p, size_t bytes) noexcept {
  if (p == nullptr) return;
  if (bytes < kHugePageBytes) {
    ::operator delete(p);
    return;
  }
  munmap(p, RoundUpToHugePages(bytes));
}

}  // namespace traind::engine
