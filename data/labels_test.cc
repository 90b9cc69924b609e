#include "data/labels.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace traind::data {
namespace {

using ::testing::ElementsAre;

TEST(EncodeLabelsTest, StringsSortLexicographically) {
  LabelEncoding e = EncodeLabels({"virginica", "setosa", "versicolor", "setosa", "virginica"});
  EXPECT_THAT(e.classes, ElementsAre("setosa", "versicolor", "virginica"));
  EXPECT_THAT(e.codes, ElementsAre(2, 0, 1, 0, 2));
}

TEST(EncodeLabelsTest, NumbersSortNumerically) {
  LabelEncoding e = EncodeLabels({"2", "10", "1", "10"});
  EXPECT_THAT(e.classes, ElementsAre("1", "2", "10"));
  EXPECT_THAT(e.codes, ElementsAre(1, 2, 0, 2));
}

TEST(EncodeLabelsTest, NegativeAndFractionalNumbers) {
  LabelEncoding e = EncodeLabels({"0.5", "-3", "1e1", "+2"});
  EXPECT_THAT(e.classes, ElementsAre("-3", "0.5", "+2", "1e1"));
  EXPECT_THAT(e.codes, ElementsAre(1, 0, 3, 2));
}

TEST(EncodeLabelsTest, OneNonNumberMakesAllStrings) {
  LabelEncoding e = EncodeLabels({"2", "10", "x"});
  EXPECT_THAT(e.classes, ElementsAre("10", "2", "x"));
  EXPECT_THAT(e.codes, ElementsAre(1, 0, 2));
  // "nan" is not a finite number.
  EXPECT_THAT(EncodeLabels({"nan", "10", "9"}).classes, ElementsAre("10", "9", "nan"));
}

TEST(EncodeLabelsTest, Empty) {
  LabelEncoding e = EncodeLabels({});
  EXPECT_TRUE(e.classes.empty());
  EXPECT_TRUE(e.codes.empty());
}

}  // namespace
}  // namespace traind::data
