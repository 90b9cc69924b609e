// Permutation importance: what each score call sees (a permutation of one
// feature's values among the validation rows, one-hot columns together,
// nothing else touched), the values derived from the scores, the matrix
// restored, the features of a pipeline, and a fold that computes it.
#include "worker/engine/fit/importance.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "spec/loader.h"
#include "spec/task_rows.h"
#include "tests/testing/temp_dir.h"
#include "worker/engine/fit.h"

namespace traind::engine {
namespace {

using ::testing::ElementsAre;

constexpr int64_t kWidth = 3;

// 6 rows: column 0 a number, columns 1-2 a one-hot category.
std::vector<float> Matrix() { return {1, 1, 0, 2, 0, 1, 3, 1, 0, 4, 0, 0, 5, 0, 1, 6, 1, 0}; }

TEST(PermutationImportanceTest, ShufflesOneFeatureAmongTheRowsAndRestoresIt) {
  const std::vector<InputFeature> features = {{"a", 0, 1}, {"color", 1, 2}};
  const std::vector<int64_t> rows = {0, 2, 3, 5};
  std::vector<float> m = Matrix();
  const std::vector<float> original = m;
  std::vector<std::vector<float>> seen;
  // A score that depends on where each value went: sum over the rows of
  // (position + 1) * (column 0 + 10 * column 1 + 100 * column 2).
  auto score_of = [&](const std::vector<float>& x) {
    double s = 0;
    for (size_t i = 0; i < rows.size(); ++i) {
      const float* r = x.data() + rows[i] * kWidth;
      s += static_cast<double>(i + 1) * (r[0] + 10 * r[1] + 100 * r[2]);
    }
    return s;
  };
  const double baseline = score_of(m);
  auto result = PermutationImportance(features, 3, 42, rows, kWidth, m.data(), baseline,
                                      /*maximize=*/true, [&]() -> absl::StatusOr<double> {
                                        seen.push_back(m);
                                        return score_of(m);
                                      });
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(m, original);
  ASSERT_EQ(seen.size(), 6u);  // 2 features × 3 repeats
  ASSERT_EQ(result->size(), 2u);
  for (size_t f = 0; f < 2; ++f) {
    const auto& imp = (*result)[f];
    EXPECT_EQ(imp.feature(), features[f].name);
    ASSERT_EQ(imp.values_size(), 3);
    double sum = 0;
    for (int r = 0; r < 3; ++r) {
      const std::vector<float>& x = seen[f * 3 + static_cast<size_t>(r)];
      EXPECT_DOUBLE_EQ(imp.values(r), baseline - score_of(x));
      sum += imp.values(r);
      // The feature's cells of the rows: a permutation of the original's,
      // one-hot columns moved together; every other cell unchanged.
      std::vector<std::vector<float>> before, after;
      for (int64_t row = 0; row < 6; ++row) {
        const bool val = std::find(rows.begin(), rows.end(), row) != rows.end();
        for (int64_t c = 0; c < kWidth; ++c) {
          const bool feature_column =
              c >= features[f].first && c < features[f].first + features[f].count;
          if (!(val && feature_column)) {
            EXPECT_EQ(x[row * kWidth + c], original[row * kWidth + c]) << row << "," << c;
          }
        }
        if (!val) continue;
        before.emplace_back(
            original.begin() + row * kWidth + features[f].first,
            original.begin() + row * kWidth + features[f].first + features[f].count);
        after.emplace_back(x.begin() + row * kWidth + features[f].first,
                           x.begin() + row * kWidth + features[f].first + features[f].count);
      }
      std::sort(before.begin(), before.end());
      std::sort(after.begin(), after.end());
      EXPECT_EQ(before, after);
    }
    const double mean = sum / 3;
    double squares = 0;
    for (double v : imp.values()) squares += (v - mean) * (v - mean);
    EXPECT_DOUBLE_EQ(imp.mean(), mean);
    EXPECT_DOUBLE_EQ(imp.std(), std::sqrt(squares / 3));
  }
  // Some repeat moved something (4 rows: 24 permutations, 6 draws).
  EXPECT_TRUE(std::any_of(seen.begin(), seen.end(), [&](const auto& x) { return x != original; }));

  // The same seed: the same permutations; minimizing flips the sign.
  std::vector<std::vector<float>> again;
  auto flipped = PermutationImportance(features, 3, 42, rows, kWidth, m.data(), baseline,
                                       /*maximize=*/false, [&]() -> absl::StatusOr<double> {
                                         again.push_back(m);
                                         return score_of(m);
                                       });
  ASSERT_TRUE(flipped.ok());
  EXPECT_EQ(again, seen);
  for (size_t f = 0; f < 2; ++f) {
    for (int r = 0; r < 3; ++r) {
      EXPECT_DOUBLE_EQ((*flipped)[f].values(r), -(*result)[f].values(r));
    }
  }
}

TEST(PermutationImportanceTest, AFeatureTheScoreIgnoresIsZeroAndErrorsRestore) {
  const std::vector<InputFeature> features = {{"a", 0, 1}};
  const std::vector<int64_t> rows = {0, 1, 2, 3, 4, 5};
  std::vector<float> m = Matrix();
  const std::vector<float> original = m;
  auto result = PermutationImportance(features, 4, 7, rows, kWidth, m.data(), 0.75, true,
                                      []() -> absl::StatusOr<double> { return 0.75; });
  ASSERT_TRUE(result.ok());
  EXPECT_THAT((*result)[0].values(), ElementsAre(0, 0, 0, 0));
  EXPECT_EQ((*result)[0].mean(), 0);
  EXPECT_EQ((*result)[0].std(), 0);

  auto failed =
      PermutationImportance(features, 4, 7, rows, kWidth, m.data(), 0.75, true,
                            []() -> absl::StatusOr<double> { return absl::InternalError("gone"); });
  EXPECT_EQ(failed.status().message(), "gone");
  EXPECT_EQ(m, original);
}

TEST(PermutationImportanceTest, InputFeaturesOfAPipeline) {
  data::Dataset d;
  d.feature_names = {"x", "y"};
  d.categorical.resize(3);
  d.categorical[0].name = "color";
  d.categorical[1].name = "never_seen";
  d.categorical[2].name = "size";
  FeaturePipeline p;
  p.categories = {{0, 1, 2}, {}, {1, 0}};
  const std::vector<InputFeature> f = InputFeatures(d, p);
  ASSERT_EQ(f.size(), 4u);
  EXPECT_EQ(f[0].name, "x");
  EXPECT_EQ(f[1].first, 1);
  EXPECT_EQ(f[2].name, "color");
  EXPECT_EQ(f[2].first, 2);
  EXPECT_EQ(f[2].count, 3);
  EXPECT_EQ(f[3].name, "size");
  EXPECT_EQ(f[3].first, 5);
  EXPECT_EQ(f[3].count, 2);
  traind::v1::ImportanceSpec spec;
  EXPECT_EQ(ImportanceRepeats(spec), 5);
  spec.set_repeats(12);
  EXPECT_EQ(ImportanceRepeats(spec), 12);
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// A fold of iris with importance: every feature once, in column order, each
// with its repeats, measured with val.loss; the fold's predictions.csv is
// the one a fold without importance writes; the petals matter more than
// the sepals' width (as every model of iris finds); the same again on a
// second run.
TEST(ImportanceFitTest, AFoldMeasuresEveryFeatureAndLeavesItsPredictions) {
  traind::v1::JobSpec spec;
  spec.set_seed(3);
  spec.mutable_data()->set_path(std::string(TRAIND_SOURCE_DIR) + "/examples/data/iris.csv");
  spec.mutable_data()->set_label("species");
  spec.mutable_data()->set_scaling(traind::v1::STANDARD);
  spec.mutable_cross_validation()->set_folds(3);
  auto* d = spec.mutable_model()->add_layers()->mutable_dense();
  d->set_units(16);
  d->set_activation(traind::v1::RELU);
  spec.mutable_model()->add_layers()->mutable_dense()->set_units(3);
  spec.mutable_optimizer()->mutable_adam()->set_learning_rate(0.02);
  spec.mutable_training()->set_epochs(25);
  spec.mutable_training()->set_batch_size(16);
  absl::StatusOr<data::Dataset> iris = data::LoadDataset(spec);
  ASSERT_TRUE(iris.ok()) << iris.status();
  const data::FoldRows rows = std::move(spec::RowsForTask(spec, *iris, 1)).value();
  const traind::testing::TempDir dir("traind-importance");
  FitOptions plain;
  plain.artifacts_dir = dir.Path("plain");
  absl::StatusOr<traind::v1::FoldResult> without = Fit(spec, *iris, rows, 1, plain, nullptr);
  ASSERT_TRUE(without.ok()) << without.status();
  EXPECT_EQ(without->importance_size(), 0);

  spec.mutable_importance()->set_repeats(4);
  std::vector<traind::v1::FoldResult> runs;
  for (const char* name : {"a", "b"}) {
    FitOptions options;
    options.artifacts_dir = dir.Path(name);
    absl::StatusOr<traind::v1::FoldResult> with = Fit(spec, *iris, rows, 1, options, nullptr);
    ASSERT_TRUE(with.ok()) << with.status();
    EXPECT_EQ(ReadAll(dir.Path(std::string(name) + "/predictions.csv")),
              ReadAll(dir.Path("plain/predictions.csv")));
    runs.push_back(*with);
  }
  const traind::v1::FoldResult& r = runs[0];
  EXPECT_EQ(r.importance_metric(), "val.loss (min)");
  ASSERT_EQ(r.importance_size(), 4);
  const char* const kNames[] = {"sepal_length", "sepal_width", "petal_length", "petal_width"};
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(r.importance(i).feature(), kNames[i]);
    EXPECT_EQ(r.importance(i).values_size(), 4);
    const auto& a = r.importance(i).values();
    const auto& b = runs[1].importance(i).values();
    EXPECT_EQ(std::vector<double>(a.begin(), a.end()), std::vector<double>(b.begin(), b.end()))
        << kNames[i];
  }
  EXPECT_GT(std::max(r.importance(2).mean(), r.importance(3).mean()), r.importance(1).mean());
  EXPECT_GT(std::max(r.importance(2).mean(), r.importance(3).mean()), 0.1);
}

// A categorical column is one feature: diabetes's sex (its one-hot columns
// shuffled together) beside the nine numeric columns, in the data's order,
// measured with the selection metric (early_stopping.monitor: val.r2).
TEST(ImportanceFitTest, ACategoricalColumnIsOneFeature) {
  absl::StatusOr<traind::v1::JobSpec> spec =
      spec::LoadJobSpecFile(std::string(TRAIND_SOURCE_DIR) + "/examples/diabetes-regression.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  spec->mutable_data()->set_path(std::string(TRAIND_SOURCE_DIR) + "/" + spec->data().path());
  spec->mutable_training()->set_epochs(5);
  spec->mutable_importance()->set_repeats(2);
  absl::StatusOr<data::Dataset> data = data::LoadDataset(*spec);
  ASSERT_TRUE(data.ok()) << data.status();
  const data::FoldRows rows = std::move(spec::RowsForTask(*spec, *data, 0)).value();
  absl::StatusOr<traind::v1::FoldResult> r = Fit(*spec, *data, rows, 0, FitOptions(), nullptr);
  ASSERT_TRUE(r.ok()) << r.status();
  std::vector<std::string> names;
  for (const auto& f : r->importance()) {
    names.push_back(f.feature());
    EXPECT_EQ(f.values_size(), 2) << f.feature();
  }
  EXPECT_THAT(names, ElementsAre("age", "bmi", "bp", "s1", "s2", "s3", "s4", "s5", "s6", "sex"));
  EXPECT_EQ(r->importance_metric(), "val.r2 (max)");
}

}  // namespace
}  // namespace traind::engine
