#include "data/npy.h"

#include <sys/stat.h>

#include <algorithm>
#include <bit>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "base/status.h"
#include "data/text.h"

namespace traind::data {
namespace {

// The magic, the version (2 bytes), then the header length.
constexpr unsigned char kMagic[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};
// numpy writes headers of about a hundred bytes; numpy.load refuses headers
// past 10000 bytes by default.
constexpr uint32_t kMaxHeaderBytes = 1 << 16;
// Elements converted at a time: the scratch buffer holds at most 8 × this
// bytes, whatever the size of the array.
constexpr size_t kChunkElements = size_t{1} << 14;
// Tuples and lists in tuples and lists (a structured dtype nests 3 deep).
constexpr int kMaxDepth = 16;

// A Python literal of a header, as numpy's repr of the dict writes it.
struct PyValue {
  enum class Kind { kNone, kString, kInt, kBool, kTuple, kList };
  Kind kind = Kind::kNone;
  std::string text;            // kString
  int64_t number = 0;          // kInt; kBool: 0 or 1
  std::vector<PyValue> items;  // kTuple, kList
};

// The header dict as numpy writes it, "{'descr': '<f4', 'fortran_order':
// False, 'shape': (2, 3), }" then spaces and a newline: Python syntax for
// strings, integers (a Python 2 "L" suffix allowed), True, False, None,
// tuples and lists, whitespace between tokens, trailing commas. The keys are
// strings, each at most once.
class HeaderParser {
 public:
  explicit HeaderParser(absl::string_view text) : text_(text) {}

  // false, with error() saying what is wrong and where, when the text is not
  // such a dict.
  bool Parse(std::vector<std::pair<std::string, PyValue>>* entries) {
    if (!Consume('{')) return Expected("'{'");
    while (!Consume('}')) {
      SkipSpace();
      if (pos_ >= text_.size() || (text_[pos_] != '\'' && text_[pos_] != '"')) {
        return Expected("a quoted key or '}'");
      }
      std::string key;
      if (!String(&key)) return false;
      for (const auto& [seen, unused] : *entries) {
        if (seen == key) {
          error_ = absl::StrCat("the key ", QuoteForMessage(key), " appears twice");
          return false;
        }
      }
      if (!Consume(':')) return Expected("':'");
      PyValue value;
      if (!Value(&value, 0)) return false;
      entries->emplace_back(std::move(key), std::move(value));
      if (Consume('}')) break;
      if (!Consume(',')) return Expected("',' or '}'");
    }
    SkipSpace();
    if (pos_ != text_.size()) return Expected("nothing after the '}'");
    return true;
  }

  const std::string& error() const { return error_; }

 private:
  void SkipSpace() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\t' ||
                                   text_[pos_] == '\n' || text_[pos_] == '\r')) {
      ++pos_;
    }
  }

  // Skips whitespace, then `c` when it comes next.
  bool Consume(char c) {
    SkipSpace();
    if (pos_ < text_.size() && text_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }

  bool Expected(absl::string_view what) {
    error_ = pos_ >= text_.size()
                 ? absl::StrCat("expected ", what, ", but the header ends")
                 : absl::StrFormat("expected %s at byte %d of the header, not %s", what, pos_,
                                   QuoteForMessage(text_.substr(pos_, 1)));
    return false;
  }

  bool Value(PyValue* out, int depth) {
    SkipSpace();
    if (depth > kMaxDepth) {
      error_ = absl::StrFormat("tuples and lists nested more than %d deep", kMaxDepth);
      return false;
    }
    if (pos_ >= text_.size()) return Expected("a value");
    const char c = text_[pos_];
    if (c == '\'' || c == '"') {
      out->kind = PyValue::Kind::kString;
      return String(&out->text);
    }
    if (c == '(' || c == '[') {
      ++pos_;
      return Sequence(c == '(' ? ')' : ']', out, depth + 1);
    }
    if (c == '-' || c == '+' || std::isdigit(static_cast<unsigned char>(c))) {
      out->kind = PyValue::Kind::kInt;
      return Integer(&out->number);
    }
    for (const auto& [word, kind, number] :
         {std::tuple("True", PyValue::Kind::kBool, 1), std::tuple("False", PyValue::Kind::kBool, 0),
          std::tuple("None", PyValue::Kind::kNone, 0)}) {
      const absl::string_view w(word);
      if (text_.substr(pos_, w.size()) == w && !IdentifierAt(pos_ + w.size())) {
        pos_ += w.size();
        out->kind = kind;
        out->number = number;
        return true;
      }
    }
    return Expected("a value");
  }

  bool IdentifierAt(size_t i) const {
    return i < text_.size() && (std::isalnum(static_cast<unsigned char>(text_[i])) ||
                                text_[i] == '_' || text_[i] == '.');
  }

  // A quoted string: a backslash takes the next character as it is.
  bool String(std::string* out) {
    const char quote = text_[pos_++];
    while (pos_ < text_.size() && text_[pos_] != quote) {
      if (text_[pos_] == '\n') return Expected("the closing quote");
      if (text_[pos_] == '\\') ++pos_;
      if (pos_ < text_.size()) out->push_back(text_[pos_++]);
    }
    if (pos_ >= text_.size()) return Expected("the closing quote");
    ++pos_;
    return true;
  }

  bool Integer(int64_t* out) {
    const size_t start = pos_;
    bool negative = false;
    if (text_[pos_] == '-' || text_[pos_] == '+') negative = text_[pos_++] == '-';
    if (pos_ >= text_.size() || !std::isdigit(static_cast<unsigned char>(text_[pos_]))) {
      return Expected("a digit");
    }
    uint64_t magnitude = 0;
    const uint64_t limit = uint64_t{std::numeric_limits<int64_t>::max()} + (negative ? 1 : 0);
    while (pos_ < text_.size() && std::isdigit(static_cast<unsigned char>(text_[pos_]))) {
      const unsigned digit = static_cast<unsigned>(text_[pos_++] - '0');
      if (magnitude > (limit - digit) / 10) {
        error_ =
            absl::StrFormat("the integer at byte %d of the header does not fit in 64 bits", start);
        return false;
      }
      magnitude = magnitude * 10 + digit;
    }
    if (pos_ < text_.size() && (text_[pos_] == 'L' || text_[pos_] == 'l')) ++pos_;
    if (IdentifierAt(pos_)) return Expected("',' or a closing bracket after the integer");
    *out = negative ? static_cast<int64_t>(0 - magnitude) : static_cast<int64_t>(magnitude);
    return true;
  }

  // The items of a tuple or a list, after its opening bracket. "(x)" without
  // a comma is x itself, as in Python.
  bool Sequence(char close, PyValue* out, int depth) {
    std::vector<PyValue> items;
    bool comma = false;
    while (!Consume(close)) {
      PyValue item;
      if (!Value(&item, depth)) return false;
      items.push_back(std::move(item));
      if (Consume(close)) break;
      if (!Consume(',')) return Expected(close == ')' ? "',' or ')'" : "',' or ']'");
      comma = true;
    }
    if (close == ')' && items.size() == 1 && !comma) {
      PyValue inner = std::move(items[0]);
      *out = std::move(inner);
      return true;
    }
    out->kind = close == ')' ? PyValue::Kind::kTuple : PyValue::Kind::kList;
    out->items = std::move(items);
    return true;
  }

  absl::string_view text_;
  size_t pos_ = 0;
  std::string error_;
};

struct Dtype {
  NpyArray::Type type = NpyArray::Type::kUint8;
  int width = 1;      // bytes per element
  bool swap = false;  // stored in the other byte order than this machine's
};

// The dtype a descr such as "<f4", "|u1" or ">i8" names. false, with `what`
// naming the type for the message, when traind does not read it.
bool ParseDescr(absl::string_view descr, Dtype* out, std::string* what) {
  char order = '=';
  if (!descr.empty() && absl::string_view("<>|=").find(descr[0]) != absl::string_view::npos) {
    order = descr[0];
    descr.remove_prefix(1);
  }
  const char kind = descr.empty() ? '?' : descr[0];
  int size = 0;
  bool sized = descr.size() >= 2 && descr.size() <= 4;
  for (size_t i = 1; sized && i < descr.size(); ++i) {
    if (!std::isdigit(static_cast<unsigned char>(descr[i]))) sized = false;
    size = size * 10 + (descr[i] - '0');
  }
  switch (kind) {
    case 'U':
      *what = "strings";
      return false;
    case 'S':
    case 'a':
      *what = "byte strings";
      return false;
    case 'O':
      *what = "Python objects";
      return false;
    case 'V':
      *what = "raw or structured records";
      return false;
    case 'M':
      *what = "datetimes";
      return false;
    case 'm':
      *what = "timedeltas";
      return false;
    case 'c':
      *what = "complex numbers";
      return false;
    default:
      break;
  }
  using Type = NpyArray::Type;
  const std::string code = sized ? absl::StrCat(std::string(1, kind), size) : "";
  if (code == "b1" || code == "u1") {
    out->type = Type::kUint8;
  } else if (code == "i1") {
    out->type = Type::kInt8;
  } else if (code == "i2") {
    out->type = Type::kInt16;
  } else if (code == "u2") {
    out->type = Type::kUint16;
  } else if (code == "i4") {
    out->type = Type::kInt32;
  } else if (code == "i8") {
    out->type = Type::kInt64;
  } else if (code == "f4") {
    out->type = Type::kFloat32;
  } else if (code == "f8") {
    out->type = Type::kFloat64;
  } else {
    if (sized && (kind == 'i' || kind == 'u' || kind == 'f')) {
      *what = absl::StrCat(kind == 'i' ? "int" : kind == 'u' ? "uint" : "float", 8 * size);
    } else if (sized && kind == 'b') {
      *what = absl::StrCat("bool of ", size, " bytes");
    } else {
      *what = "not a NumPy type";
    }
    return false;
  }
  out->width = size;
  const bool little = std::endian::native == std::endian::little;
  out->swap = size > 1 && ((order == '<' && !little) || (order == '>' && little));
  return true;
}

// Converts `n` stored elements of type T to float.
template <typename T>
void Convert(const unsigned char* in, size_t n, bool swap, float* out) {
  for (size_t i = 0; i < n; ++i) {
    unsigned char b[sizeof(T)];
    std::memcpy(b, in + i * sizeof(T), sizeof(T));
    if (swap) std::reverse(b, b + sizeof(T));
    T v;
    std::memcpy(&v, b, sizeof(T));
    out[i] = static_cast<float>(v);
  }
}

void ConvertChunk(const Dtype& dtype, const unsigned char* in, size_t n, float* out) {
  using Type = NpyArray::Type;
  switch (dtype.type) {
    case Type::kInt8:
      return Convert<int8_t>(in, n, dtype.swap, out);
    case Type::kInt16:
      return Convert<int16_t>(in, n, dtype.swap, out);
    case Type::kUint16:
      return Convert<uint16_t>(in, n, dtype.swap, out);
    case Type::kInt32:
      return Convert<int32_t>(in, n, dtype.swap, out);
    case Type::kInt64:
      return Convert<int64_t>(in, n, dtype.swap, out);
    case Type::kFloat32:
      return Convert<float>(in, n, dtype.swap, out);
    case Type::kFloat64:
      return Convert<double>(in, n, dtype.swap, out);
    case Type::kUint8:
      return Convert<uint8_t>(in, n, dtype.swap, out);
  }
}

// (3, 28, 28), (5,) or (), as Python writes a shape.
std::string ShapeString(const std::vector<int64_t>& shape) {
  return absl::StrCat("(", absl::StrJoin(shape, ", "), shape.size() == 1 ? ",)" : ")");
}

uint64_t LittleEndian(const unsigned char* p, int n) {
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};

}  // namespace

int64_t NpyArray::elements() const {
  // A 0 anywhere makes the product 0, whatever the other dimensions.
  if (std::find(shape.begin(), shape.end(), 0) != shape.end()) return 0;
  int64_t n = 1;
  for (const int64_t d : shape) n *= d;
  return n;
}

absl::StatusOr<NpyArray> ReadNpy(const std::string& path, int64_t max_elements, bool header_only) {
  errno = 0;
  std::unique_ptr<std::FILE, FileCloser> in(std::fopen(path.c_str(), "rb"));
  if (in == nullptr) {
    return DataError(
        absl::StrCat(path, ": cannot open: ", errno != 0 ? std::strerror(errno) : "out of memory"));
  }
  // Reads up to n bytes; *got < n at the end of the file.
  auto read = [&](void* out, size_t n, size_t* got) -> absl::Status {
    *got = n == 0 ? 0 : std::fread(out, 1, n, in.get());
    if (*got < n && std::ferror(in.get())) {
      return DataError(absl::StrCat(path, ": cannot read: ", std::strerror(errno)));
    }
    return absl::OkStatus();
  };

  // The magic, the version and the header length.
  unsigned char preamble[12];
  size_t got = 0;
  TRAIND_RETURN_IF_ERROR(read(preamble, 8, &got));
  if (got < sizeof kMagic || std::memcmp(preamble, kMagic, sizeof kMagic) != 0) {
    const bool zip = got >= 4 && std::memcmp(preamble, "PK\x03\x04", 4) == 0;
    return DataError(absl::StrFormat(
        "%s: not an NPY file (it starts %s, an NPY file with 0x93 \"NUMPY\")%s", path,
        got == 0 ? std::string("empty")
                 : absl::StrJoin(
                       std::vector<unsigned>(preamble, preamble + std::min<size_t>(got, 6)), " ",
                       [](std::string* out, unsigned b) {
                         absl::StrAppend(out, absl::StrFormat("0x%02x", b));
                       }),
        zip ? "; a zip file, as numpy.savez writes: unzip it and read its .npy files" : ""));
  }
  const int major = got > 6 ? preamble[6] : -1;
  const int minor = got > 7 ? preamble[7] : -1;
  if (got == 8 && (major < 1 || major > 3 || minor != 0)) {
    return DataError(absl::StrFormat(
        "%s: NPY version %d.%d is not supported (versions 1.0, 2.0 and 3.0 are read)", path, major,
        minor));
  }
  const int length_bytes = major == 1 ? 2 : 4;
  size_t more = 0;
  if (got == 8) TRAIND_RETURN_IF_ERROR(read(preamble + 8, length_bytes, &more));
  if (got < 8 || more < static_cast<size_t>(length_bytes)) {
    return DataError(absl::StrFormat(
        "%s: the file ends after %d bytes, before the NPY header (magic, version, header length) "
        "is complete",
        path, got + more));
  }
  const uint64_t header_bytes = LittleEndian(preamble + 8, length_bytes);
  const uint64_t data_offset = 8 + length_bytes + header_bytes;
  if (header_bytes > kMaxHeaderBytes) {
    return DataError(absl::StrFormat(
        "%s: the NPY header is %d bytes long, more than the %d read at most (a corrupt header "
        "length?)",
        path, header_bytes, kMaxHeaderBytes));
  }
  std::string header(header_bytes, '\0');
  TRAIND_RETURN_IF_ERROR(read(header.data(), header.size(), &got));
  if (got < header.size()) {
    return DataError(absl::StrFormat("%s: the NPY header ends after %d of its %d bytes", path,
                                     8 + length_bytes + got, data_offset));
  }

  // The header dict.
  auto malformed = [&](absl::string_view what) {
    return DataError(absl::StrFormat("%s: malformed NPY header: %s (the header reads %s)", path,
                                     what,
                                     QuoteForMessage(absl::StripTrailingAsciiWhitespace(header))));
  };
  std::vector<std::pair<std::string, PyValue>> entries;
  HeaderParser parser(header);
  if (!parser.Parse(&entries)) return malformed(parser.error());
  const PyValue* descr = nullptr;
  const PyValue* fortran_order = nullptr;
  const PyValue* shape = nullptr;
  for (const auto& [key, value] : entries) {
    if (key == "descr") {
      descr = &value;
    } else if (key == "fortran_order") {
      fortran_order = &value;
    } else if (key == "shape") {
      shape = &value;
    } else {
      return malformed(absl::StrCat("unexpected key ", QuoteForMessage(key),
                                    " (an NPY header has 'descr', 'fortran_order' and 'shape')"));
    }
  }
  if (descr == nullptr) return malformed("no 'descr' key");
  if (fortran_order == nullptr) return malformed("no 'fortran_order' key");
  if (shape == nullptr) return malformed("no 'shape' key");
  if (descr->kind == PyValue::Kind::kList) {
    return DataError(absl::StrCat(
        path,
        ": a structured dtype (a record of named fields) is not supported; use uint8, int "
        "or float arrays"));
  }
  if (descr->kind != PyValue::Kind::kString) return malformed("'descr' is not a string");
  if (fortran_order->kind != PyValue::Kind::kBool) {
    return malformed("'fortran_order' is neither True nor False");
  }
  if (shape->kind != PyValue::Kind::kTuple) return malformed("'shape' is not a tuple");
  NpyArray array;
  for (const PyValue& d : shape->items) {
    if (d.kind != PyValue::Kind::kInt) return malformed("'shape' holds something not an integer");
    if (d.number < 0) {
      return malformed(absl::StrCat("'shape' has a negative dimension, ", d.number));
    }
    array.shape.push_back(d.number);
  }
  Dtype dtype;
  std::string what;
  if (!ParseDescr(descr->text, &dtype, &what)) {
    return DataError(
        absl::StrFormat("%s: dtype %s (%s) is not supported; use uint8, int or float arrays", path,
                        QuoteForMessage(descr->text), what));
  }
  array.type = dtype.type;
  if (fortran_order->number != 0) {
    return DataError(absl::StrCat(path,
                                  ": Fortran-ordered arrays are not supported; save with "
                                  "np.ascontiguousarray"));
  }

  // The element count, checked before anything is allocated for it.
  const std::string declared = absl::StrFormat("shape %s and dtype %s", ShapeString(array.shape),
                                               QuoteForMessage(descr->text));
  int64_t elements = 1;
  bool overflow = false;
  if (std::find(array.shape.begin(), array.shape.end(), 0) == array.shape.end()) {
    for (const int64_t d : array.shape) {
      overflow = overflow || __builtin_mul_overflow(elements, d, &elements);
    }
    overflow = overflow || elements > std::numeric_limits<int64_t>::max() / dtype.width;
  } else {
    elements = 0;
  }
  if (overflow) {
    return DataError(absl::StrFormat(
        "%s: the NPY header declares shape %s, more elements than a 64-bit count holds", path,
        ShapeString(array.shape)));
  }
  if (elements > max_elements) {
    return DataError(absl::StrFormat(
        "%s: the NPY header declares shape %s, %d elements, more than the %d read at most", path,
        ShapeString(array.shape), elements, max_elements));
  }
  if (header_only) return array;
  const uint64_t data_bytes = static_cast<uint64_t>(elements) * dtype.width;
  auto ends_early = [&](uint64_t read_bytes) {
    return DataError(absl::StrFormat("%s: the file ends after %d of %d bytes of data (%s)", path,
                                     read_bytes, data_bytes, declared));
  };
  auto goes_on = [&]() {
    return DataError(absl::StrFormat(
        "%s: the file goes on after the %d bytes of data that %s declare (several arrays saved "
        "to one file?)",
        path, data_bytes, declared));
  };
  // A regular file's size tells a short or long file before the data is read.
  struct stat st;
  if (fstat(fileno(in.get()), &st) == 0 && S_ISREG(st.st_mode)) {
    const uint64_t size = static_cast<uint64_t>(st.st_size);
    const uint64_t available = size > data_offset ? size - data_offset : 0;
    if (available < data_bytes) return ends_early(available);
    if (available > data_bytes) return goes_on();
  }

  // The data, straight into the array: bytes as they are, float32 in this
  // machine's byte order as it is, the rest converted a chunk at a time.
  if (dtype.type == NpyArray::Type::kUint8) {
    array.bytes.resize(static_cast<size_t>(elements));
    TRAIND_RETURN_IF_ERROR(read(array.bytes.data(), array.bytes.size(), &got));
    if (got < array.bytes.size()) return ends_early(got);
  } else if (dtype.type == NpyArray::Type::kFloat32 && !dtype.swap) {
    array.values.resize(static_cast<size_t>(elements));
    TRAIND_RETURN_IF_ERROR(read(array.values.data(), data_bytes, &got));
    if (got < data_bytes) return ends_early(got);
  } else {
    array.values.resize(static_cast<size_t>(elements));
    std::vector<unsigned char> chunk(std::min(static_cast<size_t>(elements), kChunkElements) *
                                     dtype.width);
    for (size_t done = 0; done < array.values.size();) {
      const size_t n = std::min(array.values.size() - done, kChunkElements);
      TRAIND_RETURN_IF_ERROR(read(chunk.data(), n * dtype.width, &got));
      if (got < n * dtype.width) return ends_early(done * dtype.width + got);
      ConvertChunk(dtype, chunk.data(), n, array.values.data() + done);
      done += n;
    }
  }
  unsigned char extra;
  TRAIND_RETURN_IF_ERROR(read(&extra, 1, &got));
  if (got != 0) return goes_on();
  return array;
}

}  // namespace traind::data
