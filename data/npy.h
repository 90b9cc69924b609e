// NPY files, the format of numpy.save: the magic "\x93NUMPY", a version
// (1.0, 2.0 or 3.0), the length of the header (2 bytes in version 1.0, 4
// after, little-endian), the header (a Python dict literal naming the
// element type, 'descr', the order, 'fortran_order', and the shape), then
// the elements in row-major order. Unsigned bytes (images) and bools stay
// bytes; the other integer and float types, little- or big-endian, are read
// as float. Strings, Python objects, structured and complex types and
// Fortran-ordered arrays are refused.
#ifndef TRAIND_DATA_NPY_H_
#define TRAIND_DATA_NPY_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace traind::data {

struct NpyArray {
  // kUint8 also stands for bool ('|b1'): its elements are 0 and 1.
  enum class Type { kUint8, kInt8, kInt16, kUint16, kInt32, kInt64, kFloat32, kFloat64 };

  Type type = Type::kUint8;
  std::vector<int64_t> shape;  // empty for a 0-d array (one element)
  std::vector<uint8_t> bytes;  // kUint8: the elements as they are stored
  std::vector<float> values;   // the other types: each element as a float
                               // (int64 past 2^24 rounded; NaN and inf kept)

  // The product of `shape` (1 for a 0-d array, 0 when a dimension is 0).
  int64_t elements() const;
};

// Reads `path`, streaming: the data goes straight into `bytes` or, converted
// a chunk at a time, into `values`. Errors (DataError) name the file and what
// is wrong: not an NPY file, an unsupported version, a malformed header (and
// what is malformed in it), an unsupported element type (named), Fortran
// order, a shape of more than `max_elements` elements, a file that ends
// before its elements or goes on after them.
// `header_only`: the type and shape, no elements (nor the check of the
// file's length against them).
absl::StatusOr<NpyArray> ReadNpy(const std::string& path, int64_t max_elements = int64_t{1} << 31,
                                 bool header_only = false);

}  // namespace traind::data

#endif  // TRAIND_DATA_NPY_H_
