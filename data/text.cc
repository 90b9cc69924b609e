#include "data/text.h"

#include <cstdint>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace traind::data {
namespace {

// Length of the valid UTF-8 sequence at text[i], or 0 when there is none.
size_t Utf8SequenceAt(absl::string_view text, size_t i) {
  const auto byte = [&](size_t k) { return static_cast<uint8_t>(text[k]); };
  const uint8_t b0 = byte(i);
  if (b0 < 0x80) return 1;
  size_t n = 0;
  uint32_t cp = 0;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    n = 2;
    cp = b0 & 0x1F;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    n = 3;
    cp = b0 & 0x0F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    n = 4;
    cp = b0 & 0x07;
  } else {
    return 0;  // a continuation byte, or C0/C1/F5..FF
  }
  if (i + n > text.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    const uint8_t b = byte(i + k);
    if ((b & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (b & 0x3F);
  }
  if (n == 3 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) return 0;
  if (n == 4 && (cp < 0x10000 || cp > 0x10FFFF)) return 0;
  return n;
}

}  // namespace

size_t FirstInvalidUtf8(absl::string_view text) {
  size_t i = 0;
  while (i < text.size()) {
    // ASCII runs dominate data files: skip them 8 bytes at a time (no byte
    // of the word >= 0x80), then a byte at a time.
    if (i + 8 <= text.size()) {
      uint64_t word = 0;
      std::memcpy(&word, text.data() + i, sizeof word);
      if ((word & 0x8080808080808080u) == 0) {
        i += 8;
        continue;
      }
    }
    if (static_cast<uint8_t>(text[i]) < 0x80) {
      ++i;
      continue;
    }
    const size_t n = Utf8SequenceAt(text, i);
    if (n == 0) return i;
    i += n;
  }
  return absl::string_view::npos;
}

namespace {

// Appends `text` escaped and cut to kMaxQuotedBytes; returns the bytes shown.
size_t AppendEscaped(absl::string_view text, std::string* out_string) {
  std::string& out = *out_string;
  size_t i = 0;
  while (i < text.size() && i < kMaxQuotedBytes) {
    const char c = text[i];
    const uint8_t b = static_cast<uint8_t>(c);
    if (b >= 0x80) {
      const size_t n = Utf8SequenceAt(text, i);
      if (n == 0) {
        absl::StrAppendFormat(&out, "\\x%02x", b);
        ++i;
        continue;
      }
      if (i + n > kMaxQuotedBytes) break;  // never cut a character in two
      out.append(text.data() + i, n);
      i += n;
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
        if (b < 0x20 || b == 0x7F) {
          absl::StrAppendFormat(&out, "\\x%02x", b);
        } else {
          out.push_back(c);
        }
    }
    ++i;
  }
  return i;
}

void AppendCutNote(absl::string_view text, size_t shown, std::string* out) {
  if (shown < text.size()) absl::StrAppend(out, "\xE2\x80\xA6 (", text.size(), " bytes)");
}

}  // namespace

std::string QuoteForMessage(absl::string_view text) {
  std::string out = "\"";
  const size_t shown = AppendEscaped(text, &out);
  out += "\"";
  AppendCutNote(text, shown, &out);
  return out;
}

std::string JoinForMessage(const std::vector<std::string>& items, size_t max_items) {
  std::string out;
  for (size_t k = 0; k < items.size() && k < max_items; ++k) {
    if (k > 0) out += ", ";
    AppendCutNote(items[k], AppendEscaped(items[k], &out), &out);
  }
  if (items.size() > max_items) {
    absl::StrAppend(&out, ", \xE2\x80\xA6 (", items.size(), " in all)");
  }
  return out;
}

}  // namespace traind::data
