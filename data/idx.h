// IDX files, the format of the MNIST family (MNIST, Fashion-MNIST, KMNIST),
// gzipped or not: a 4-byte magic (0, 0, the element type, the number of
// dimensions), each dimension as a big-endian uint32, then the elements in
// row-major order, big-endian. Unsigned bytes (images, labels) stay bytes;
// the other types are read as float.
#ifndef TRAIND_DATA_IDX_H_
#define TRAIND_DATA_IDX_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace traind::data {

struct IdxArray {
  // 0x08 unsigned byte, 0x09 signed byte, 0x0B int16, 0x0C int32,
  // 0x0D float32, 0x0E float64.
  uint8_t type = 0;
  std::vector<int64_t> dims;
  std::vector<uint8_t> bytes;  // type 0x08: the elements as they are
  std::vector<float> values;   // the other types: each element as a float

  int64_t elements() const;
};

// Reads `path` (gzip is recognized by its magic bytes). Errors (DataError)
// name the file and what is wrong: not an IDX file, an unknown element
// type, a header larger than `max_elements`, a file that ends before its
// elements or goes on after them, corrupt gzip data. `header_only`: the type
// and dimensions, no elements (what follows the header is not read).
absl::StatusOr<IdxArray> ReadIdx(const std::string& path, int64_t max_elements = int64_t{1} << 31,
                                 bool header_only = false);

}  // namespace traind::data

#endif  // TRAIND_DATA_IDX_H_
