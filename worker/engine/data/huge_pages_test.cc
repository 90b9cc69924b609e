#include "worker/engine/data/huge_pages.h"

#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace traind::engine {
namespace {

// The /proc/self/smaps entry of the mapping that holds `p`: its header line
// and fields ("" when no mapping holds it).
std::string SmapsEntryOf(const void* p) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  std::ifstream smaps("/proc/self/smaps");
  std::string line, entry;
  bool in = false;
  while (std::getline(smaps, line)) {
    const size_t dash = line.find('-');
    const size_t space = line.find(' ');
    // A header: "start-end perms ...", both in hex.
    if (dash != std::string::npos && space != std::string::npos && dash < space &&
        line.find_first_not_of("0123456789abcdef") == dash) {
      if (in) return entry;
      const uintptr_t start = std::stoull(line.substr(0, dash), nullptr, 16);
      const uintptr_t end = std::stoull(line.substr(dash + 1, space - dash - 1), nullptr, 16);
      in = start <= a && a < end;
      entry.clear();
    }
    if (in) entry += line + "\n";
  }
  return in ? entry : "";
}

TEST(HugePagesTest, LargeArraysAreWholeAlignedHugePagesAdvisedBeforeUse) {
  const size_t bytes = 3 * kHugePageBytes + 12345;  // rounds up to 4 huge pages
  char* p = static_cast<char*>(AllocateHostArray(bytes));
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % kHugePageBytes, 0u);
  for (size_t i = 0; i < bytes; i += 4096) p[i] = static_cast<char>(i);
  p[bytes - 1] = 7;
  const std::string entry = SmapsEntryOf(p);
  ASSERT_FALSE(entry.empty());
  // The mapping is exactly the 4 huge pages (kB), and MADV_HUGEPAGE set its
  // "hg" flag — whether the kernel then found huge pages is its business.
  std::istringstream lines(entry);
  std::string line, flags;
  int64_t size_kb = -1;
  while (std::getline(lines, line)) {
    if (line.rfind("VmFlags:", 0) == 0) flags = line + " ";
    if (line.rfind("Size:", 0) == 0) size_kb = std::stoll(line.substr(5));
  }
  EXPECT_EQ(size_kb, 4 * static_cast<int64_t>(kHugePageBytes >> 10)) << entry;
  // Kernels with THP list the flag (VmFlags: since Linux 3.8).
  std::ifstream thp("/sys/kernel/mm/transparent_hugepage/enabled");
  if (thp && !flags.empty()) {
    EXPECT_NE(flags.find(" hg "), std::string::npos) << flags;
  }
  EXPECT_EQ(p[bytes - 1], 7);
  FreeHostArray(p, bytes);
  EXPECT_EQ(SmapsEntryOf(p), "");  // unmapped, head to tail
  EXPECT_EQ(SmapsEntryOf(p + 3 * kHugePageBytes), "");
}

TEST(HugePagesTest, SmallArraysComeFromTheHeap) {
  void* p = AllocateHostArray(100);
  ASSERT_NE(p, nullptr);
  static_cast<char*>(p)[99] = 1;
  FreeHostArray(p, 100);
  FreeHostArray(nullptr, kHugePageBytes);  // a no-op
}

TEST(HugePagesTest, FeatureMatrixGrowsCopiesAndFreesAcrossTheThreshold) {
  FeatureMatrix m;
  for (int i = 0; i < 1000; ++i) m.push_back(static_cast<float>(i));
  m.resize(kHugePageBytes / sizeof(float) * 2 + 3, -1.0f);  // heap -> huge-page mapping
  EXPECT_EQ(reinterpret_cast<uintptr_t>(m.data()) % kHugePageBytes, 0u);
  for (int i = 0; i < 1000; ++i) ASSERT_EQ(m[static_cast<size_t>(i)], static_cast<float>(i));
  EXPECT_EQ(m.back(), -1.0f);
  FeatureMatrix copy = m;
  EXPECT_EQ(copy, m);
  m.assign(10, 2.0f);
  m.shrink_to_fit();  // huge-page mapping -> heap
  EXPECT_EQ(m, FeatureMatrix(10, 2.0f));
  EXPECT_EQ(copy[999], 999.0f);
}

}  // namespace
}  // namespace traind::engine
