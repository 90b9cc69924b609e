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

}  // namespace
}  // namespace traind
