#include "data/split.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace traind::data {
namespace {

using ::testing::ElementsAre;
using Folds = std::vector<std::vector<int64_t>>;

// Every row in exactly one fold; each fold ascending; sizes within one.
void ExpectPartition(const Folds& folds, int64_t rows) {
  std::vector<int> seen(static_cast<size_t>(rows), 0);
  size_t min_size = SIZE_MAX, max_size = 0;
  for (const auto& fold : folds) {
    EXPECT_TRUE(std::is_sorted(fold.begin(), fold.end()));
    min_size = std::min(min_size, fold.size());
    max_size = std::max(max_size, fold.size());
    for (int64_t r : fold) {
      ASSERT_GE(r, 0);
      ASSERT_LT(r, rows);
      ++seen[static_cast<size_t>(r)];
    }
  }
  for (int64_t r = 0; r < rows; ++r) EXPECT_EQ(seen[static_cast<size_t>(r)], 1) << "row " << r;
  EXPECT_LE(max_size - min_size, 1u);
}

TEST(KFoldTest, ContiguousWithoutShuffle) {
  Folds folds = KFold(7, 3, /*shuffle=*/false, 0);
  EXPECT_THAT(folds, ElementsAre(ElementsAre(0, 1, 2), ElementsAre(3, 4), ElementsAre(5, 6)));
}

TEST(KFoldTest, ShuffledPartitionDeterministicBySeed) {
  for (int64_t rows : {10, 101, 150}) {
    for (int k : {2, 3, 5, 10}) {
      Folds a = KFold(rows, k, true, 42);
      ASSERT_EQ(a.size(), static_cast<size_t>(k));
      ExpectPartition(a, rows);
      EXPECT_EQ(a, KFold(rows, k, true, 42));
      EXPECT_NE(a, KFold(rows, k, true, 43));
      EXPECT_NE(a, KFold(rows, k, false, 42));
    }
  }
}

TEST(KFoldTest, BadFoldCounts) {
  EXPECT_TRUE(KFold(5, 0, true, 1).empty());
  EXPECT_TRUE(KFold(5, 6, true, 1).empty());
  EXPECT_EQ(KFold(5, 5, true, 1).size(), 5u);
}

std::vector<int32_t> Labels(const std::vector<int>& counts) {
  std::vector<int32_t> labels;
  for (size_t c = 0; c < counts.size(); ++c) labels.insert(labels.end(), counts[c], c);
  return labels;
}

void ExpectStratified(const Folds& folds, const std::vector<int32_t>& labels) {
  ExpectPartition(folds, static_cast<int64_t>(labels.size()));
  std::map<int32_t, int> total;
  for (int32_t y : labels) ++total[y];
  const double k = static_cast<double>(folds.size());
  for (const auto& fold : folds) {
    std::map<int32_t, int> count;
    for (int64_t r : fold) ++count[labels[static_cast<size_t>(r)]];
    for (const auto& [label, n] : total) {
      EXPECT_LE(std::abs(count[label] - n / k), 1.0) << "class " << label;
    }
  }
}

TEST(StratifiedKFoldTest, ClassCountsAndSizesBalanced) {
  // Uneven classes, shuffled label order.
  std::vector<int32_t> labels = Labels({13, 7, 22, 1, 5});
  std::vector<int32_t> interleaved;
  for (size_t i = 0; i < labels.size(); ++i)
    interleaved.push_back(labels[(i * 17) % labels.size()]);
  for (const auto* y : {&labels, &interleaved}) {
    for (int k : {2, 3, 4, 5}) {
      for (bool shuffle : {false, true}) {
        Folds folds = StratifiedKFold(*y, k, shuffle, 7);
        ASSERT_EQ(folds.size(), static_cast<size_t>(k));
        ExpectStratified(folds, *y);
      }
    }
  }
}

TEST(StratifiedKFoldTest, IrisLikeFiveFolds) {
  std::vector<int32_t> labels = Labels({50, 50, 50});
  Folds folds = StratifiedKFold(labels, 5, true, 42);
  for (const auto& fold : folds) {
    ASSERT_EQ(fold.size(), 30u);
    int count[3] = {0, 0, 0};
    for (int64_t r : fold) ++count[labels[static_cast<size_t>(r)]];
    EXPECT_THAT(count, ElementsAre(10, 10, 10));
  }
}

TEST(StratifiedKFoldTest, WithoutShuffleEachClassIsDealtInOrder) {
  // Classes 0 (rows 0-5) and 1 (rows 6-9), 2 folds: the sorted labels dealt
  // round-robin give each fold 3 of class 0 and 2 of class 1; each class's
  // rows fill fold 0 first, in file order.
  Folds folds = StratifiedKFold({0, 0, 0, 0, 0, 0, 1, 1, 1, 1}, 2, false, 0);
  EXPECT_THAT(folds, ElementsAre(ElementsAre(0, 1, 2, 6, 7), ElementsAre(3, 4, 5, 8, 9)));
  // Labels need not be sorted or contiguous codes.
  folds = StratifiedKFold({5, -1, 5, -1, 5, -1}, 3, false, 0);
  EXPECT_THAT(folds, ElementsAre(ElementsAre(0, 1), ElementsAre(2, 3), ElementsAre(4, 5)));
}

TEST(StratifiedKFoldTest, DeterministicBySeed) {
  std::vector<int32_t> labels = Labels({40, 30, 30});
  Folds a = StratifiedKFold(labels, 5, true, 1);
  EXPECT_EQ(a, StratifiedKFold(labels, 5, true, 1));
  EXPECT_NE(a, StratifiedKFold(labels, 5, true, 2));
  EXPECT_TRUE(StratifiedKFold(labels, 101, true, 1).empty());
  EXPECT_TRUE(StratifiedKFold(labels, 0, true, 1).empty());
}

TEST(FoldSplitTest, TrainIsTheOtherFolds) {
  Folds folds = {{1, 4}, {0, 5}, {2, 3}};
  FoldRows rows = FoldSplit(folds, 1);
  EXPECT_THAT(rows.val, ElementsAre(0, 5));
  EXPECT_THAT(rows.train, ElementsAre(1, 2, 3, 4));
  rows = FoldSplit(folds, 0);
  EXPECT_THAT(rows.val, ElementsAre(1, 4));
  EXPECT_THAT(rows.train, ElementsAre(0, 2, 3, 5));
}

}  // namespace
}  // namespace traind::data

namespace traind::data {
namespace {

// Every row in exactly one fold.
void ExpectCovering(const std::vector<std::vector<int64_t>>& folds, int64_t rows) {
  std::vector<int> seen(static_cast<size_t>(rows), 0);
  for (const auto& fold : folds) {
    for (int64_t r : fold) ++seen[static_cast<size_t>(r)];
  }
  for (int64_t r = 0; r < rows; ++r) EXPECT_EQ(seen[static_cast<size_t>(r)], 1) << r;
}

TEST(GroupKFoldTest, GroupsAreNeverSplit) {
  // 40 rows in 11 groups of uneven sizes.
  std::vector<int32_t> groups;
  for (int g = 0; g < 11; ++g) {
    for (int i = 0; i < 1 + (g * 7) % 6; ++i) groups.push_back(g);
  }
  for (bool shuffle : {false, true}) {
    const auto folds = GroupKFold(groups, 4, shuffle, 3);
    ASSERT_EQ(folds.size(), 4u);
    ExpectCovering(folds, static_cast<int64_t>(groups.size()));
    std::map<int32_t, int> fold_of;
    for (size_t k = 0; k < folds.size(); ++k) {
      EXPECT_FALSE(folds[k].empty());
      for (int64_t r : folds[k]) {
        auto [it, inserted] = fold_of.emplace(groups[static_cast<size_t>(r)], static_cast<int>(k));
        EXPECT_EQ(it->second, static_cast<int>(k)) << "group " << groups[static_cast<size_t>(r)];
      }
    }
  }
  EXPECT_TRUE(GroupKFold(groups, 12, false, 3).empty());  // more folds than groups
}

TEST(HoldoutTest, SizeStratificationAndSeed) {
  std::vector<int32_t> labels;
  for (int i = 0; i < 100; ++i) labels.push_back(i < 70 ? 0 : 1);
  const auto val = HoldoutRows(100, &labels, 0.2, true, 9);
  ASSERT_EQ(val.size(), 20u);
  const auto minority = std::count_if(val.begin(), val.end(), [](int64_t r) { return r >= 70; });
  EXPECT_EQ(minority, 6);  // round(0.2 · 30)
  EXPECT_TRUE(std::is_sorted(val.begin(), val.end()));
  EXPECT_EQ(val, HoldoutRows(100, &labels, 0.2, true, 9));      // identical on every run
  EXPECT_NE(val, HoldoutRows(100, &labels, 0.2, true, 10));     // another seed, another split
  const auto plain = HoldoutRows(10, nullptr, 0.25, false, 0);  // ceil(2.5) = 3, the last rows
  EXPECT_EQ(plain, (std::vector<int64_t>{7, 8, 9}));
}

}  // namespace
}  // namespace traind::data
