#include "base/json.h"

#include <cstdint>

#include "absl/strings/str_cat.h"

namespace traind {
namespace {

// The length of the valid UTF-8 sequence at the start of `s` (1 to 4), or
// 0 where it is not one: a stray continuation byte, a truncated or
// overlong sequence, a surrogate, or past U+10FFFF.
size_t Utf8Length(absl::string_view s) {
  const auto b = [&s](size_t i) { return static_cast<unsigned char>(s[i]); };
  const unsigned char c = b(0);
  size_t n = 0;
  uint32_t cp = 0;
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF) {
    n = 2;
    cp = c & 0x1F;
  } else if (c >= 0xE0 && c <= 0xEF) {
    n = 3;
    cp = c & 0x0F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4;
    cp = c & 0x07;
  } else {
    return 0;
  }
  if (s.size() < n) return 0;
  for (size_t i = 1; i < n; ++i) {
    if ((b(i) & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (b(i) & 0x3F);
  }
  if ((n == 3 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) ||
      (n == 4 && (cp < 0x10000 || cp > 0x10FFFF))) {
    return 0;
  }
  return n;
}

}  // namespace

std::string JsonQuote(absl::string_view s) {
  std::string out = "\"";
  out.reserve(s.size() + 2);
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (static_cast<unsigned char>(c) >= 0x80) {
      const size_t n = Utf8Length(s.substr(i));
      if (n == 0) {
        // Not UTF-8 (a percent-decoded URL, a file name): the byte as the
        // text \xFF, so that the JSON stays valid and says what was sent.
        absl::StrAppend(&out, "\\\\x", absl::Hex(static_cast<unsigned char>(c), absl::kZeroPad2));
      } else {
        out.append(s.data() + i, n);
        i += n - 1;
      }
      continue;
    }
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          absl::StrAppend(&out, "\\u00", absl::Hex(static_cast<unsigned char>(c), absl::kZeroPad2));
        } else {
          out += c;
        }
    }
  }
  out += "\"";
  return out;
}

}  // namespace traind
