#include "data/text.h"

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace traind::data {
namespace {

TEST(FirstInvalidUtf8Test, AcceptsUtf8AndFindsTheFirstBadByte) {
  EXPECT_EQ(FirstInvalidUtf8(""), absl::string_view::npos);
  EXPECT_EQ(FirstInvalidUtf8("setosa"), absl::string_view::npos);
  // é (2 bytes), € (3), 𝔸 (4).
  EXPECT_EQ(FirstInvalidUtf8("caf\xC3\xA9 \xE2\x82\xAC \xF0\x9D\x94\xB8"), absl::string_view::npos);
  EXPECT_EQ(FirstInvalidUtf8("5\xff"), 1u);
  EXPECT_EQ(FirstInvalidUtf8("ab\x80"), 2u);            // a lone continuation byte
  EXPECT_EQ(FirstInvalidUtf8("\xC3"), 0u);              // cut short
  EXPECT_EQ(FirstInvalidUtf8("x\xC0\xAF"), 1u);         // overlong '/'
  EXPECT_EQ(FirstInvalidUtf8("\xE0\x80\xAF"), 0u);      // overlong, 3 bytes
  EXPECT_EQ(FirstInvalidUtf8("\xED\xA0\x80"), 0u);      // a surrogate (U+D800)
  EXPECT_EQ(FirstInvalidUtf8("\xF4\x90\x80\x80"), 0u);  // past U+10FFFF
  EXPECT_EQ(FirstInvalidUtf8("\xC3\xA9\xC3("), 2u);     // valid, then a bad continuation
}

// The first byte that is not part of valid UTF-8, a byte at a time.
size_t ReferenceFirstInvalidUtf8(const std::string& text) {
  size_t i = 0;
  while (i < text.size()) {
    const auto b0 = static_cast<uint8_t>(text[i]);
    size_t n = 1;
    uint32_t cp = b0;
    if (b0 >= 0x80) {
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
        return i;
      }
      if (i + n > text.size()) return i;
      for (size_t k = 1; k < n; ++k) {
        const auto b = static_cast<uint8_t>(text[i + k]);
        if ((b & 0xC0) != 0x80) return i;
        cp = (cp << 6) | (b & 0x3F);
      }
      if (n == 3 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) return i;
      if (n == 4 && (cp < 0x10000 || cp > 0x10FFFF)) return i;
    }
    i += n;
  }
  return absl::string_view::npos;
}

// ASCII is skipped a word at a time: a bad byte, or a good character, at
// any offset of a word, after ASCII runs of any length, is judged as a byte
// at a time judges it.
TEST(FirstInvalidUtf8Test, AgreesWithAByteAtATimeCheck) {
  const std::vector<std::string> pieces = {
      "\xC3\xA9",     "\xE2\x82\xAC", "\xF0\x9D\x94\xB8", "\xFF", "\x80",     "\xC3",
      "\xE0\x80\xAF", "\xED\xA0\x80", "\xF4\x90\x80\x80", "\x7F", "\xC2\xA0", "\xEF\xBF\xBF"};
  std::mt19937 rng(17);
  for (int i = 0; i < 100000; ++i) {
    std::string text;
    const int parts = static_cast<int>(rng() % 4);
    for (int k = 0; k < parts; ++k) {
      text += std::string(rng() % 20, 'a');
      text += pieces[rng() % pieces.size()];
    }
    text += std::string(rng() % 20, 'z');
    ASSERT_EQ(FirstInvalidUtf8(text), ReferenceFirstInvalidUtf8(text)) << i;
  }
}

TEST(QuoteForMessageTest, EscapesWhatIsNotPrintableUtf8) {
  EXPECT_EQ(QuoteForMessage("abc"), "\"abc\"");
  EXPECT_EQ(QuoteForMessage("5\xff"), "\"5\\xff\"");
  EXPECT_EQ(QuoteForMessage("a\"b\\c\nd\te\x01"), "\"a\\\"b\\\\c\\nd\\te\\x01\"");
  EXPECT_EQ(QuoteForMessage("caf\xC3\xA9"), "\"caf\xC3\xA9\"");
}

TEST(QuoteForMessageTest, CutsLongValuesAtACharacterBoundaryAndSaysTheSize) {
  const std::string big(10 * 1024 * 1024, 'x');
  const std::string quoted = QuoteForMessage(big);
  EXPECT_EQ(quoted, "\"" + std::string(kMaxQuotedBytes, 'x') + "\"\xE2\x80\xA6 (10485760 bytes)");
  // 63 ASCII bytes, then a 2-byte character that would end past the limit.
  const std::string edge = std::string(kMaxQuotedBytes - 1, 'y') + "\xC3\xA9" + "zz";
  EXPECT_EQ(QuoteForMessage(edge),
            "\"" + std::string(kMaxQuotedBytes - 1, 'y') + "\"\xE2\x80\xA6 (67 bytes)");
  // Whatever the input, the result is valid UTF-8 and bounded.
  std::string bytes;
  for (int b = 0; b < 256; ++b) bytes.push_back(static_cast<char>(b));
  for (size_t start = 0; start < bytes.size(); start += 7) {
    const std::string q = QuoteForMessage(absl::string_view(bytes).substr(start));
    EXPECT_EQ(FirstInvalidUtf8(q), absl::string_view::npos) << start;
    EXPECT_LE(q.size(), 4 * kMaxQuotedBytes + 32) << start;
  }
}

TEST(JoinForMessageTest, ListsAtMostMaxItems) {
  EXPECT_EQ(JoinForMessage({"a", "b", "c"}), "a, b, c");
  std::vector<std::string> many;
  for (int i = 0; i < 100; ++i) many.push_back("c" + std::to_string(i));
  EXPECT_EQ(JoinForMessage(many, 3), "c0, c1, c2, \xE2\x80\xA6 (100 in all)");
  EXPECT_EQ(JoinForMessage({std::string(100, 'n'), "\xff"}),
            std::string(kMaxQuotedBytes, 'n') + "\xE2\x80\xA6 (100 bytes), \\xff");
}

}  // namespace
}  // namespace traind::data
