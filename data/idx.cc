#include "data/idx.h"

#include <zlib.h>

#include <cerrno>
#include <cstring>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "base/status.h"

namespace traind::data {
namespace {

int ElementBytes(uint8_t type) {
  switch (type) {
    case 0x08:
    case 0x09:
      return 1;
    case 0x0B:
      return 2;
    case 0x0C:
    case 0x0D:
      return 4;
    case 0x0E:
      return 8;
    default:
      return 0;
  }
}

uint64_t BigEndian(const unsigned char* p, int n) {
  uint64_t v = 0;
  for (int i = 0; i < n; ++i) v = (v << 8) | p[i];
  return v;
}

float Decode(uint8_t type, const unsigned char* p) {
  switch (type) {
    case 0x09:
      return static_cast<float>(static_cast<int8_t>(p[0]));
    case 0x0B:
      return static_cast<float>(static_cast<int16_t>(BigEndian(p, 2)));
    case 0x0C:
      return static_cast<float>(static_cast<int32_t>(BigEndian(p, 4)));
    case 0x0D: {
      const uint32_t bits = static_cast<uint32_t>(BigEndian(p, 4));
      float f;
      std::memcpy(&f, &bits, sizeof f);
      return f;
    }
    case 0x0E: {
      const uint64_t bits = BigEndian(p, 8);
      double d;
      std::memcpy(&d, &bits, sizeof d);
      return static_cast<float>(d);
    }
    default:
      return p[0];
  }
}

struct GzCloser {
  void operator()(gzFile f) const { gzclose(f); }
};

}  // namespace

int64_t IdxArray::elements() const {
  int64_t n = 1;
  for (const int64_t d : dims) n *= d;
  return n;
}

absl::StatusOr<IdxArray> ReadIdx(const std::string& path, int64_t max_elements, bool header_only) {
  // gzread reads a file that is not gzipped as it is.
  std::unique_ptr<gzFile_s, GzCloser> in(gzopen(path.c_str(), "rb"));
  if (in == nullptr) {
    return DataError(
        absl::StrCat(path, ": cannot open: ", errno != 0 ? std::strerror(errno) : "out of memory"));
  }
  gzbuffer(in.get(), 1 << 17);
  // Reads exactly n bytes; false at the end of the file (or an error).
  auto read = [&](void* out, size_t n, size_t* got) -> absl::Status {
    *got = 0;
    while (*got < n) {
      const unsigned chunk = static_cast<unsigned>(std::min<size_t>(n - *got, 1u << 30));
      const int r = gzread(in.get(), static_cast<char*>(out) + *got, chunk);
      if (r < 0) {
        int code = 0;
        const char* what = gzerror(in.get(), &code);
        return DataError(absl::StrCat(path, ": ", code == Z_ERRNO ? std::strerror(errno) : what,
                                      " (corrupt gzip data?)"));
      }
      if (r == 0) break;
      *got += static_cast<size_t>(r);
    }
    return absl::OkStatus();
  };
  unsigned char magic[4];
  size_t got = 0;
  TRAIND_RETURN_IF_ERROR(read(magic, 4, &got));
  if (got < 4 || magic[0] != 0 || magic[1] != 0) {
    return DataError(absl::StrFormat(
        "%s: not an IDX file (it starts %s, an IDX file with 0x00 0x00, the element type and the "
        "number of dimensions)",
        path,
        got == 0 ? std::string("empty")
                 : absl::StrJoin(std::vector<unsigned>(magic, magic + got), " ",
                                 [](std::string* out, unsigned b) {
                                   absl::StrAppend(out, absl::StrFormat("0x%02x", b));
                                 })));
  }
  IdxArray array;
  array.type = magic[2];
  const int width = ElementBytes(array.type);
  if (width == 0) {
    return DataError(absl::StrFormat(
        "%s: unknown IDX element type 0x%02x (0x08 unsigned byte, 0x09 signed byte, 0x0B int16, "
        "0x0C int32, 0x0D float32, 0x0E float64)",
        path, array.type));
  }
  const int ndims = magic[3];
  if (ndims < 1 || ndims > 8) {
    return DataError(
        absl::StrFormat("%s: an IDX file with %d dimensions (1 to 8 are read)", path, ndims));
  }
  std::vector<unsigned char> header(static_cast<size_t>(4 * ndims));
  TRAIND_RETURN_IF_ERROR(read(header.data(), header.size(), &got));
  if (got < header.size()) {
    return DataError(absl::StrFormat("%s: the IDX header ends after %d of its %d bytes", path,
                                     4 + got, 4 + header.size()));
  }
  int64_t elements = 1;
  for (int i = 0; i < ndims; ++i) {
    const int64_t d = static_cast<int64_t>(BigEndian(&header[4 * i], 4));
    if (d == 0)
      return DataError(absl::StrFormat("%s: dimension %d of the IDX header is 0", path, i));
    array.dims.push_back(d);
    if (elements > max_elements / d) {
      return DataError(
          absl::StrFormat("%s: the IDX header declares %s elements, more than the %d read at most",
                          path, absl::StrJoin(array.dims, "×"), max_elements));
    }
    elements *= d;
  }
  if (header_only) return array;
  const size_t bytes = static_cast<size_t>(elements) * static_cast<size_t>(width);
  std::vector<unsigned char> raw;
  unsigned char* data;
  if (array.type == 0x08) {
    array.bytes.resize(bytes);
    data = array.bytes.data();
  } else {
    raw.resize(bytes);
    data = raw.data();
  }
  TRAIND_RETURN_IF_ERROR(read(data, bytes, &got));
  if (got < bytes) {
    return DataError(absl::StrFormat(
        "%s: the IDX header declares %s elements (%d bytes), but the file ends after %d of them",
        path, absl::StrJoin(array.dims, "×"), bytes, got));
  }
  unsigned char extra;
  TRAIND_RETURN_IF_ERROR(read(&extra, 1, &got));
  if (got != 0) {
    return DataError(absl::StrFormat(
        "%s: bytes follow the %s elements its IDX header declares (a truncated header or "
        "another file?)",
        path, absl::StrJoin(array.dims, "×")));
  }
  if (array.type != 0x08) {
    array.values.resize(static_cast<size_t>(elements));
    for (int64_t i = 0; i < elements; ++i) array.values[i] = Decode(array.type, data + i * width);
  }
  return array;
}

}  // namespace traind::data
