// Cross-validation fold splitters.
//
// Splits depend only on their arguments (the job's seed, never the fold being
// trained), so every worker of a job computes the same folds.
#ifndef TRAIND_DATA_SPLIT_H_
#define TRAIND_DATA_SPLIT_H_

#include <cstdint>
#include <vector>

namespace traind::data {

// Validation rows of each of `folds` folds, each list sorted ascending. The
// folds are disjoint, cover 0..rows-1, and their sizes differ by at most one
// (the first rows % folds folds hold one more). Without shuffle, fold k holds
// the k-th contiguous block of rows (scikit-learn's KFold); with shuffle, the
// rows are permuted by a PRNG seeded from `seed` first.
// Returns no folds when folds < 1 or folds > rows.
std::vector<std::vector<int64_t>> KFold(int64_t rows, int folds, bool shuffle, uint64_t seed);

// As KFold, keeping class proportions (scikit-learn's StratifiedKFold): the
// sorted labels are dealt round-robin to the folds, which fixes how many rows
// of each class each fold gets; then each class's rows, in file order (or
// shuffled when `shuffle`), fill those places fold by fold. Every class's count
// in each fold is within one of count / folds, and fold sizes differ by at most
// one. Labels may be any int32 values.
// Returns no folds when folds < 1 or folds > labels.size().
std::vector<std::vector<int64_t>> StratifiedKFold(const std::vector<int32_t>& labels, int folds,
                                                  bool shuffle, uint64_t seed);

// Group k-fold: rows sharing a group code are never split across folds.
// Groups are ordered by size, largest first (ties: ascending code, or a
// shuffled order when `shuffle`), and each goes to the fold with the fewest
// rows so far (the lowest index on ties), as scikit-learn's GroupKFold.
// Returns no folds when folds < 1 or folds > the number of groups.
std::vector<std::vector<int64_t>> GroupKFold(const std::vector<int32_t>& groups, int folds,
                                             bool shuffle, uint64_t seed);

// The fold each group goes to, by GroupKFold's rule, from the groups' sizes
// (group_sizes[code]): what GroupKFold assigns, without the rows. Empty
// when folds < 1 or folds > the number of groups.
std::vector<int> GroupKFoldAssignment(const std::vector<int64_t>& group_sizes, int folds,
                                      bool shuffle, uint64_t seed);

// How many of `count` rows a holdout validates on: unstratified (count: every
// row) ceil(fraction · count) clamped to [1, count - 1]; stratified (count:
// one class's rows) round(fraction · count), at most count.
int64_t HoldoutTake(int64_t count, double fraction, bool stratified);

// Holdout: the validation rows, about `fraction` of them (ceil(fraction ·
// rows), at least 1, at most rows - 1). With labels (stratified), each class
// contributes round(fraction · its count) rows. Rows are drawn shuffled by
// `seed` when `shuffle`, else the last rows (of each class) are taken.
std::vector<int64_t> HoldoutRows(int64_t rows, const std::vector<int32_t>* labels, double fraction,
                                 bool shuffle, uint64_t seed);

struct FoldRows {
  std::vector<int64_t> train, val;  // both ascending
};

// Fold `fold` validates on folds[fold] and trains on the rows of all others.
// REQUIRES: 0 <= fold < folds.size(); folds as returned by the functions above.
FoldRows FoldSplit(const std::vector<std::vector<int64_t>>& folds, int fold);

}  // namespace traind::data

#endif  // TRAIND_DATA_SPLIT_H_
