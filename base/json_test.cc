#include "base/json.h"

#include <string>

#include "gtest/gtest.h"

namespace traind {
namespace {

TEST(JsonQuoteTest, EscapesWhatJsonRequires) {
  EXPECT_EQ(JsonQuote(""), "\"\"");
  EXPECT_EQ(JsonQuote("plain"), "\"plain\"");
  EXPECT_EQ(JsonQuote("a\"b\\c"), "\"a\\\"b\\\\c\"");
  EXPECT_EQ(JsonQuote("l1\nl2\r\tx"), "\"l1\\nl2\\r\\tx\"");
  EXPECT_EQ(JsonQuote(std::string("\x01\x1f", 2)), "\"\\u0001\\u001f\"");
  EXPECT_EQ(JsonQuote(std::string("nul\0", 4)), "\"nul\\u0000\"");
  EXPECT_EQ(JsonQuote("caf\xc3\xa9 /"), "\"caf\xc3\xa9 /\"");  // UTF-8 and '/' as they are
  EXPECT_EQ(JsonQuote("\x7f"), "\"\x7f\"");                    // DEL needs no escape
}

// Bytes that are not UTF-8 (a URL's %ff%fe) would make the JSON invalid:
// each is written as the text \xFF; valid sequences around them stay.
TEST(JsonQuoteTest, BytesThatAreNotUtf8BecomeText) {
  EXPECT_EQ(JsonQuote("\xff\xfe"), "\"\\\\xff\\\\xfe\"");
  EXPECT_EQ(JsonQuote("a\xc3"), "\"a\\\\xc3\"");                                 // truncated
  EXPECT_EQ(JsonQuote("\xc0\xaf"), "\"\\\\xc0\\\\xaf\"");                        // overlong '/'
  EXPECT_EQ(JsonQuote("\xed\xa0\x80"), "\"\\\\xed\\\\xa0\\\\x80\"");             // a surrogate
  EXPECT_EQ(JsonQuote("\xf4\x90\x80\x80"), "\"\\\\xf4\\\\x90\\\\x80\\\\x80\"");  // > U+10FFFF
  EXPECT_EQ(JsonQuote("\xe2\x82\xac\xf0\x9f\x98\x80\x80"),
            "\"\xe2\x82\xac\xf0\x9f\x98\x80\\\\x80\"");  // € and 😀, then a stray byte
}

}  // namespace
}  // namespace traind
