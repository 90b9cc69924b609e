#include "data/text.h"

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
