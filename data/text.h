// Text that crosses a proto boundary: UTF-8 checks and bounded quoting.
//
// Every string the worker reports (messages, class names, column names,
// categories) travels in a proto string field, which must be valid UTF-8 and
// fits in a message of bounded size. Data files are therefore read as UTF-8
// (csv.h refuses other bytes, naming line and column), and a message that
// quotes a value from the data quotes it through QuoteForMessage.
//
// Thread-safety: pure functions.
#ifndef TRAIND_DATA_TEXT_H_
#define TRAIND_DATA_TEXT_H_

#include <cstddef>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace traind::data {

// Longest value (bytes) QuoteForMessage shows before it cuts.
inline constexpr size_t kMaxQuotedBytes = 64;

// The offset of the first byte of `text` that is not part of a valid UTF-8
// sequence (overlong forms, surrogates and code points past U+10FFFF are
// invalid), or npos when all of it is valid.
size_t FirstInvalidUtf8(absl::string_view text);

// `text` in double quotes for an error message: at most kMaxQuotedBytes of
// it (cut at a character boundary, then "…" and the full size in bytes),
// with control characters, quotes, backslashes and bytes that are not UTF-8
// escaped (\n, \t, \", \\, \xff). The result is always valid UTF-8 and at
// most about 4 × kMaxQuotedBytes + 32 bytes long.
//   QuoteForMessage("5\xff") == "\"5\\xff\""
std::string QuoteForMessage(absl::string_view text);

// `items` joined by ", ", each escaped and cut as QuoteForMessage does (without
// the quotes), at most `max_items` of them, then ", … (N in all)" — for
// messages that list column names.
std::string JoinForMessage(const std::vector<std::string>& items, size_t max_items = 20);

}  // namespace traind::data

#endif  // TRAIND_DATA_TEXT_H_
