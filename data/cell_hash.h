// Hashing and comparing cells, the keys of CsvProfiler's distinct-value sets
// (held as std::string, looked up by absl::string_view). Cells are mostly
// short (numbers, categories, labels): up to 16 bytes they are read as two
// overlapping words, without a loop or a call.
//
// Thread-safety: pure functions.
#ifndef TRAIND_DATA_CELL_HASH_H_
#define TRAIND_DATA_CELL_HASH_H_

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "absl/hash/hash.h"
#include "absl/strings/string_view.h"

namespace traind::data {
namespace cell_internal {

inline uint64_t Load64(const char* p) {
  uint64_t v = 0;
  std::memcpy(&v, p, sizeof v);
  return v;
}

inline uint32_t Load32(const char* p) {
  uint32_t v = 0;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// The high and low halves of a * b, folded.
inline uint64_t Fold(uint64_t a, uint64_t b) {
  const unsigned __int128 product = static_cast<unsigned __int128>(a) * b;
  return static_cast<uint64_t>(product) ^ static_cast<uint64_t>(product >> 64);
}

}  // namespace cell_internal

struct CellHash {
  using is_transparent = void;
  size_t operator()(absl::string_view cell) const {
    using cell_internal::Load32;
    using cell_internal::Load64;
    const size_t n = cell.size();
    const char* const p = cell.data();
    if (n > 16) return absl::Hash<absl::string_view>()(cell);
    uint64_t a = 0;
    uint64_t b = 0;
    if (n >= 8) {
      a = Load64(p);
      b = Load64(p + n - 8);
    } else if (n >= 4) {
      a = Load32(p);
      b = Load32(p + n - 4);
    } else if (n > 0) {
      a = (uint64_t{static_cast<unsigned char>(p[0])} << 16) |
          (uint64_t{static_cast<unsigned char>(p[n / 2])} << 8) |
          static_cast<unsigned char>(p[n - 1]);
    }
    return cell_internal::Fold(
        cell_internal::Fold(a ^ 0xa0761d6478bd642full, b ^ 0xe7037ed1a0b428dbull),
        n ^ 0x8ebc6af09c88c6e3ull);
  }
};

struct CellEq {
  using is_transparent = void;
  bool operator()(absl::string_view a, absl::string_view b) const {
    using cell_internal::Load32;
    using cell_internal::Load64;
    const size_t n = a.size();
    if (n != b.size()) return false;
    if (n >= 8 && n <= 16) {
      return ((Load64(a.data()) ^ Load64(b.data())) |
              (Load64(a.data() + n - 8) ^ Load64(b.data() + n - 8))) == 0;
    }
    if (n >= 4 && n < 8) {
      return ((Load32(a.data()) ^ Load32(b.data())) |
              (Load32(a.data() + n - 4) ^ Load32(b.data() + n - 4))) == 0;
    }
    if (n < 4) {
      for (size_t i = 0; i < n; ++i) {
        if (a[i] != b[i]) return false;
      }
      return true;
    }
    return a == b;
  }
};

}  // namespace traind::data

#endif  // TRAIND_DATA_CELL_HASH_H_
