#include "data/split.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "base/random.h"

namespace traind::data {

std::vector<std::vector<int64_t>> KFold(int64_t rows, int folds, bool shuffle, uint64_t seed) {
  if (folds < 1 || folds > rows) return {};
  std::vector<int64_t> order(static_cast<size_t>(rows));
  for (int64_t i = 0; i < rows; ++i) order[static_cast<size_t>(i)] = i;
  if (shuffle) {
    Rng rng(DeriveSeed(seed, kSplitStream));
    Shuffle(order.data(), order.size(), rng);
  }
  std::vector<std::vector<int64_t>> result(static_cast<size_t>(folds));
  const int64_t base = rows / folds;
  const int64_t extra = rows % folds;
  int64_t start = 0;
  for (int k = 0; k < folds; ++k) {
    const int64_t size = base + (k < extra ? 1 : 0);
    std::vector<int64_t>& fold = result[static_cast<size_t>(k)];
    fold.assign(order.begin() + start, order.begin() + start + size);
    std::sort(fold.begin(), fold.end());
    start += size;
  }
  return result;
}

std::vector<std::vector<int64_t>> StratifiedKFold(const std::vector<int32_t>& labels, int folds,
                                                  bool shuffle, uint64_t seed) {
  const int64_t rows = static_cast<int64_t>(labels.size());
  if (folds < 1 || folds > rows) return {};
  // Rows of each class in file order; classes in ascending label order.
  std::map<int32_t, std::vector<int64_t>> by_class;
  for (int64_t i = 0; i < rows; ++i) by_class[labels[static_cast<size_t>(i)]].push_back(i);

  // Dealing the sorted labels round-robin: position p of the sorted list goes
  // to fold p % folds. Class c occupies positions [begin, begin + count), so
  // fold k receives the positions p in that range with p % folds == k.
  std::vector<std::vector<int64_t>> result(static_cast<size_t>(folds));
  Rng rng(DeriveSeed(seed, kSplitStream));
  std::vector<int32_t> fold_of;  // fold of each row of the class, in class order
  int64_t begin = 0;
  for (auto& [label, members] : by_class) {
    const int64_t count = static_cast<int64_t>(members.size());
    fold_of.clear();
    for (int k = 0; k < folds; ++k) {
      // Positions p in [begin, begin + count) with p % folds == k.
      const int64_t first = begin + ((k - begin % folds) % folds + folds) % folds;
      const int64_t n = first < begin + count ? (begin + count - 1 - first) / folds + 1 : 0;
      fold_of.insert(fold_of.end(), static_cast<size_t>(n), k);
    }
    if (shuffle) Shuffle(fold_of.data(), fold_of.size(), rng);
    for (int64_t i = 0; i < count; ++i) {
      result[static_cast<size_t>(fold_of[static_cast<size_t>(i)])].push_back(
          members[static_cast<size_t>(i)]);
    }
    begin += count;
  }
  for (std::vector<int64_t>& fold : result) std::sort(fold.begin(), fold.end());
  return result;
}

std::vector<int> GroupKFoldAssignment(const std::vector<int64_t>& group_sizes, int folds,
                                      bool shuffle, uint64_t seed) {
  if (folds < 1 || folds > static_cast<int>(group_sizes.size())) return {};
  std::vector<int32_t> order(group_sizes.size());
  for (size_t g = 0; g < order.size(); ++g) order[g] = static_cast<int32_t>(g);
  if (shuffle) {
    Rng rng(DeriveSeed(seed, kSplitStream));
    Shuffle(order.data(), order.size(), rng);
  }
  std::stable_sort(order.begin(), order.end(),
                   [&](int32_t a, int32_t b) { return group_sizes[a] > group_sizes[b]; });
  std::vector<int> fold_of(group_sizes.size(), 0);
  std::vector<int64_t> fold_rows(static_cast<size_t>(folds), 0);
  for (int32_t g : order) {
    size_t smallest = 0;
    for (size_t k = 1; k < fold_rows.size(); ++k) {
      if (fold_rows[k] < fold_rows[smallest]) smallest = k;
    }
    fold_of[static_cast<size_t>(g)] = static_cast<int>(smallest);
    fold_rows[smallest] += group_sizes[static_cast<size_t>(g)];
  }
  return fold_of;
}

std::vector<std::vector<int64_t>> GroupKFold(const std::vector<int32_t>& groups, int folds,
                                             bool shuffle, uint64_t seed) {
  // Dense codes 0..G-1 of the groups present, in ascending order of their code.
  std::map<int32_t, int32_t> dense;
  for (int32_t g : groups) dense.emplace(g, 0);
  std::vector<int64_t> sizes;
  for (auto& [code, index] : dense) {
    index = static_cast<int32_t>(sizes.size());
    sizes.push_back(0);
  }
  for (int32_t g : groups) ++sizes[static_cast<size_t>(dense[g])];
  const std::vector<int> fold_of = GroupKFoldAssignment(sizes, folds, shuffle, seed);
  if (fold_of.empty()) return {};
  std::vector<std::vector<int64_t>> result(static_cast<size_t>(folds));
  for (size_t i = 0; i < groups.size(); ++i) {
    result[static_cast<size_t>(fold_of[static_cast<size_t>(dense[groups[i]])])].push_back(
        static_cast<int64_t>(i));
  }
  return result;
}

int64_t HoldoutTake(int64_t count, double fraction, bool stratified) {
  if (stratified) {
    return std::min(static_cast<int64_t>(std::llround(fraction * static_cast<double>(count))),
                    count);
  }
  const int64_t n = static_cast<int64_t>(std::ceil(fraction * static_cast<double>(count)));
  return std::max<int64_t>(1, std::min<int64_t>(n, count - 1));
}

std::vector<int64_t> HoldoutRows(int64_t rows, const std::vector<int32_t>* labels, double fraction,
                                 bool shuffle, uint64_t seed) {
  Rng rng(DeriveSeed(seed, kSplitStream));
  std::vector<int64_t> val;
  auto take = [&](std::vector<int64_t> members, int64_t n) {
    if (shuffle) Shuffle(members.data(), members.size(), rng);
    val.insert(val.end(), members.end() - n, members.end());
  };
  if (labels == nullptr) {
    std::vector<int64_t> all(static_cast<size_t>(rows));
    for (int64_t i = 0; i < rows; ++i) all[static_cast<size_t>(i)] = i;
    const int64_t n = HoldoutTake(rows, fraction, /*stratified=*/false);
    take(std::move(all), n);
  } else {
    std::map<int32_t, std::vector<int64_t>> by_class;
    for (int64_t i = 0; i < rows; ++i) by_class[(*labels)[static_cast<size_t>(i)]].push_back(i);
    for (auto& [label, members] : by_class) {
      const int64_t n =
          HoldoutTake(static_cast<int64_t>(members.size()), fraction, /*stratified=*/true);
      take(std::move(members), n);
    }
  }
  std::sort(val.begin(), val.end());
  return val;
}

FoldRows FoldSplit(const std::vector<std::vector<int64_t>>& folds, int fold) {
  FoldRows split;
  if (fold < 0 || fold >= static_cast<int>(folds.size())) return split;
  split.val = folds[static_cast<size_t>(fold)];
  for (int k = 0; k < static_cast<int>(folds.size()); ++k) {
    if (k == fold) continue;
    const std::vector<int64_t>& rows = folds[static_cast<size_t>(k)];
    split.train.insert(split.train.end(), rows.begin(), rows.end());
  }
  std::sort(split.train.begin(), split.train.end());
  std::sort(split.val.begin(), split.val.end());
  return split;
}

}  // namespace traind::data
