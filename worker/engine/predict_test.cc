// Predict: a fold's model scoring the training file reproduces that fold's
// out-of-fold predictions (every example spec: classes with batch norm,
// binary, multi-label, regression with a categorical column and imputed
// cells); the preprocessing of a hand-made model computed by hand (scaling,
// imputation, one-hot with an unseen category); ensembles are the mean; bad
// input is named by file, line and column.
#include "worker/engine/predict.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "data/dataset.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "spec/loader.h"
#include "spec/task_rows.h"
#include "tests/testing/temp_dir.h"
#include "worker/engine/fit.h"
#include "worker/engine/model_file.h"

namespace traind::engine {
namespace {

using ::testing::HasSubstr;

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// A predictions CSV: its header, and its lines by their `row` value.
struct Csv {
  std::vector<std::string> header;
  std::map<int64_t, std::vector<std::string>> rows;
};

Csv ParseCsv(const std::string& text) {
  Csv csv;
  std::istringstream in(text);
  std::string line;
  std::getline(in, line);
  csv.header = absl::StrSplit(line, ',');
  while (std::getline(in, line)) {
    std::vector<std::string> fields = absl::StrSplit(line, ',');
    csv.rows[std::stoll(fields[0])] = fields;
  }
  return csv;
}

// The example spec `name`, its data path absolute, `epochs` epochs.
traind::v1::JobSpec ExampleSpec(const std::string& name, int epochs) {
  absl::StatusOr<traind::v1::JobSpec> spec =
      spec::LoadJobSpecFile(std::string(TRAIND_SOURCE_DIR) + "/examples/" + name + ".yaml");
  EXPECT_TRUE(spec.ok()) << spec.status();
  traind::v1::JobSpec s = *spec;
  s.mutable_data()->set_path(std::string(TRAIND_SOURCE_DIR) + "/" + s.data().path());
  s.mutable_training()->set_epochs(epochs);
  return s;
}

// Trains task `task` of `spec` with its artifacts under `dir`.
traind::v1::FoldResult TrainTask(const traind::v1::JobSpec& spec, int task,
                                 const std::string& dir) {
  absl::StatusOr<data::Dataset> data = data::LoadDataset(spec);
  EXPECT_TRUE(data.ok()) << data.status();
  absl::StatusOr<data::FoldRows> rows = spec::RowsForTask(spec, *data, task);
  EXPECT_TRUE(rows.ok()) << rows.status();
  FitOptions options;
  options.artifacts_dir = dir;
  absl::StatusOr<traind::v1::FoldResult> result = Fit(spec, *data, *rows, task, options, nullptr);
  EXPECT_TRUE(result.ok()) << result.status();
  return result.ok() ? *result : traind::v1::FoldResult();
}

class OutOfFoldTest : public ::testing::TestWithParam<const char*> {};

// The fold's model on the whole training file: for the fold's validation
// rows, the same label and the same numbers as predictions.csv (the same
// network, state and preprocessing on the same CPU; batches of another size
// may round differently, hence 1e-5, relative for regression values).
TEST_P(OutOfFoldTest, PredictingTheTrainingFileReproducesTheFoldsPredictions) {
  const traind::testing::TempDir dir("traind-predict");
  traind::v1::JobSpec spec = ExampleSpec(GetParam(), 3);
  std::string data_path = spec.data().path();
  if (std::string(GetParam()) == "diabetes-regression") {
    // Missing cells, imputed with the fold's medians, in training and in
    // predict alike.
    std::string text = ReadAll(data_path);
    std::vector<std::string> lines = absl::StrSplit(text, '\n');
    for (size_t i = 1; i < lines.size(); i += 7) {
      std::vector<std::string> cells = absl::StrSplit(lines[i], ',');
      if (cells.size() < 3) continue;
      cells[i % 3 == 0 ? 0 : 2] = "";   // age or bmi
      if (i % 5 == 0) cells[1] = "NA";  // sex
      lines[i] = absl::StrJoin(cells, ",");
    }
    data_path = dir.Write("diabetes_missing.csv", absl::StrJoin(lines, "\n"));
    spec.mutable_data()->set_path(data_path);
  }
  const traind::v1::FoldResult fold = TrainTask(spec, 1, dir.path());
  ASSERT_FALSE(fold.predictions_path().empty());
  ASSERT_EQ(fold.model_path(), dir.Path("model.ckpt"));
  const Csv expected = ParseCsv(ReadAll(fold.predictions_path()));

  absl::StatusOr<Predictions> p = Predict({fold.model_path()}, data_path);
  ASSERT_TRUE(p.ok()) << p.status();
  const Csv actual = ParseCsv(p->Csv());
  // The same columns but the fold and repeat (the training file holds the
  // targets: they come along as true_<column>).
  std::vector<std::string> expected_header;
  for (const std::string& name : expected.header) {
    if (name != "fold" && name != "repeat") expected_header.push_back(name);
  }
  ASSERT_EQ(expected.header.at(1), "fold");
  EXPECT_EQ(actual.header, expected_header);
  absl::StatusOr<data::Dataset> data = data::LoadDataset(spec);
  ASSERT_TRUE(data.ok());
  EXPECT_EQ(p->rows, data->rows);  // every row of the file scored
  ASSERT_EQ(static_cast<int64_t>(actual.rows.size()), data->rows);
  ASSERT_FALSE(expected.rows.empty());
  const bool text_truth = data->target != data::TargetKind::kRegression &&
                          data->target != data::TargetKind::kMultiLabel;
  for (const auto& [row, want] : expected.rows) {
    const std::vector<std::string>& got = actual.rows.at(row);
    ASSERT_EQ(got.size(), actual.header.size());
    ASSERT_EQ(want.size(), expected.header.size());
    EXPECT_EQ(want[1], "1");  // task 1 validates on fold 1 (of repeat 0)
    for (size_t c = 1; c < actual.header.size(); ++c) {
      const std::string& name = actual.header[c];
      const size_t w =
          static_cast<size_t>(std::find(expected.header.begin(), expected.header.end(), name) -
                              expected.header.begin());
      if (name == "label" || (absl::StartsWith(name, "true_") && text_truth)) {
        EXPECT_EQ(got[c], want[w]) << "row " << row << " column " << name;
      } else {
        const double v = std::stod(want[w]);
        EXPECT_NEAR(std::stod(got[c]), v, 1e-5 * std::max(1.0, std::fabs(v)))
            << "row " << row << " column " << name;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Examples, OutOfFoldTest,
                         ::testing::Values("iris-cv", "digits-multiclass", "breast-cancer-binary",
                                           "digits-multilabel", "diabetes-regression"));

// y = b + w_a * (a' ) + w_blue * [blue] + w_red * [red], a' = (a - 2) / 4,
// a missing -> 6 (its imputation value).
TrainedModel HandModel() {
  TrainedModel m;
  m.spec.mutable_data()->set_path("train.csv");
  m.spec.mutable_data()->set_label("y");
  m.spec.mutable_data()->add_categorical("color");
  m.spec.mutable_data()->set_missing(traind::v1::IMPUTE_MEAN);
  m.spec.mutable_model()->add_layers()->mutable_dense()->set_units(1);
  m.spec.mutable_loss()->mutable_mse();
  m.feature_names = {"a"};
  m.impute = {6};
  m.offset = {2};
  m.scale = {4};
  m.categorical = {{"color", {"blue", "red"}}};
  m.target = data::TargetKind::kRegression;
  m.target_names = {"y"};
  m.state = {{"layers[0].weight", {3, 1}, {2.0f, 10.0f, 100.0f}}, {"layers[0].bias", {1}, {0.5f}}};
  return m;
}

TEST(PredictTest, PreprocessingOfAHandMadeModel) {
  const traind::testing::TempDir dir("traind-predict");
  ASSERT_TRUE(WriteModelFile(HandModel(), dir.Path("model.ckpt")).ok());
  // Columns in another order, an extra column, no label column.
  const std::string data =
      dir.Write("new.csv", "note,color,a\nx,blue,10\ny,red,2\nz,green,-2\nw,,\nv,NA,6\n");
  absl::StatusOr<Predictions> p = Predict({dir.Path("model.ckpt")}, data);
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_EQ(p->rows, 5);
  ASSERT_EQ(p->outputs, 1);
  // a' = 2, blue: 0.5 + 4 + 10; a' = 0, red: 0.5 + 100; a' = -1, unseen
  // green: all zeros; missing a -> 6 (a' = 1), missing color: all zeros.
  EXPECT_THAT(p->values, ::testing::ElementsAre(14.5f, 100.5f, -1.5f, 2.5f, 2.5f));
  EXPECT_EQ(p->Csv(), "row,prediction\n0,14.5\n1,100.5\n2,-1.5\n3,2.5\n4,2.5\n");
}

// The model's id columns (data.id, else data.ignore) and its targets come
// along where the scored file has them, as the file holds them; a missing
// one is left out.
TEST(PredictTest, IdsAndTrueTargetsComeAlong) {
  const traind::testing::TempDir dir("traind-predict");
  TrainedModel m = HandModel();
  m.spec.mutable_data()->add_ignore("note");
  m.spec.mutable_data()->add_ignore("row");  // a predictions column's name: not copied
  ASSERT_TRUE(WriteModelFile(m, dir.Path("ignore.ckpt")).ok());
  const std::string file =
      dir.Write("new.csv", "y,color,note,a,row\n14,blue,\"x, y\",10,7\n,red,z,2,8\n");
  absl::StatusOr<Predictions> p = Predict({dir.Path("ignore.ckpt")}, file);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->Csv(), "row,note,true_y,prediction\n0,\"x, y\",14,14.5\n1,z,,100.5\n");

  m.spec.mutable_data()->add_id("key");
  m.spec.mutable_data()->add_id("city");  // not in the file
  ASSERT_TRUE(WriteModelFile(m, dir.Path("id.ckpt")).ok());
  p = Predict({dir.Path("id.ckpt")}, dir.Write("no_y.csv", "a,key,note,color\n10,k1,n,blue\n"));
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->Csv(), "row,key,prediction\n0,k1,14.5\n");
}

TEST(PredictTest, AnEnsembleIsTheMeanOfItsModels) {
  const traind::testing::TempDir dir("traind-predict");
  TrainedModel a = HandModel(), b = HandModel();
  b.offset = {0};  // other statistics: a' = a / 4
  b.state[1].values = {-1.5f};
  ASSERT_TRUE(WriteModelFile(a, dir.Path("a.ckpt")).ok());
  ASSERT_TRUE(WriteModelFile(b, dir.Path("b.ckpt")).ok());
  const std::string data = dir.Write("new.csv", "a,color\n10,blue\n");
  absl::StatusOr<Predictions> p = Predict({dir.Path("a.ckpt"), dir.Path("b.ckpt")}, data);
  ASSERT_TRUE(p.ok()) << p.status();
  // a: 14.5; b: -1.5 + 2 * 2.5 + 10 = 13.5.
  EXPECT_THAT(p->values, ::testing::ElementsAre(14.0f));

  TrainedModel other = HandModel();
  other.feature_names = {"b"};
  ASSERT_TRUE(WriteModelFile(other, dir.Path("other.ckpt")).ok());
  p = Predict({dir.Path("a.ckpt"), dir.Path("other.ckpt")}, data);
  ASSERT_FALSE(p.ok());
  EXPECT_THAT(p.status().message(), HasSubstr("other.ckpt: cannot be averaged with"));
  EXPECT_THAT(p.status().message(), HasSubstr("feature columns differ"));
}

TEST(PredictTest, BadInputIsNamedByFileLineAndColumn) {
  const traind::testing::TempDir dir("traind-predict");
  TrainedModel model = HandModel();
  ASSERT_TRUE(WriteModelFile(model, dir.Path("model.ckpt")).ok());
  const std::string m = dir.Path("model.ckpt");

  std::string f = dir.Write("no_a.csv", "color,b\nblue,1\n");
  absl::StatusOr<Predictions> p = Predict({m}, f);
  ASSERT_FALSE(p.ok());
  EXPECT_THAT(p.status().message(), HasSubstr(f + ": column \"a\" not found; columns: color, b"));

  f = dir.Write("bad_cell.csv", "a,color\n1,blue\n\n2x,red\n");
  p = Predict({m}, f);
  ASSERT_FALSE(p.ok());
  EXPECT_THAT(p.status().message(),
              HasSubstr(f + ":4: column \"a\" (column 1): \"2x\" is not a number"));

  f = dir.Write("twice.csv", "a,color,a\n1,blue,2\n");
  p = Predict({m}, f);
  ASSERT_FALSE(p.ok());
  EXPECT_THAT(p.status().message(), HasSubstr("column \"a\" appears 2 times"));

  model.spec.mutable_data()->set_missing(traind::v1::MISSING_ERROR);
  ASSERT_TRUE(WriteModelFile(model, dir.Path("strict.ckpt")).ok());
  f = dir.Write("missing.csv", "color,a\nblue,1\nred,NA\n");
  p = Predict({dir.Path("strict.ckpt")}, f);
  ASSERT_FALSE(p.ok());
  EXPECT_THAT(p.status().message(),
              HasSubstr(f + ":3: column \"a\" (column 2): missing value (data.missing: error)"));

  f = dir.Write("empty.csv", "");
  p = Predict({m}, f);
  ASSERT_FALSE(p.ok());
  EXPECT_THAT(p.status().message(), HasSubstr(f));

  p = Predict({dir.Path("nope.ckpt")}, dir.Write("ok.csv", "a,color\n1,blue\n"));
  ASSERT_FALSE(p.ok());
  EXPECT_THAT(p.status().message(), HasSubstr("nope.ckpt"));
}

TEST(PredictTest, AStateThatDoesNotFitTheSpecIsNamed) {
  const traind::testing::TempDir dir("traind-predict");
  TrainedModel model = HandModel();
  model.state[0].shape = {1, 3};
  ASSERT_TRUE(WriteModelFile(model, dir.Path("model.ckpt")).ok());
  absl::StatusOr<Predictions> p =
      Predict({dir.Path("model.ckpt")}, dir.Write("ok.csv", "a,color\n1,blue\n"));
  ASSERT_FALSE(p.ok());
  EXPECT_THAT(p.status().message(),
              HasSubstr("model.ckpt: state \"layers[0].weight\" has shape [1, 3], the network's "
                        "is [3, 1]"));
}

}  // namespace
}  // namespace traind::engine
