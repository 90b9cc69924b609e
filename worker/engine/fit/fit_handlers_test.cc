// The fit loop's handlers and features: the PyTorch trajectory on digits,
// checkpoints (resume = uninterrupted, corruption detected), early stopping,
// selection, artifacts, and the non-class targets end to end.
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "base/random.h"
#include "base/status.h"
#include "data/split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "spec/task_plan.h"
#include "spec/task_rows.h"
#include "spec/validation.h"
#include "tests/testing/temp_dir.h"
#include "worker/engine/checkpoint.h"
#include "worker/engine/fit.h"
#include "worker/engine/model_file.h"
#include "worker/engine/testing/epoch_recorder.h"
#include "worker/engine/testing/reference_fixtures.h"

namespace traind::engine {
namespace {

using traind::v1::EpochMetrics;
using traind::v1::FoldResult;
using traind::v1::JobSpec;

std::string Source(const std::string& rel) { return std::string(TRAIND_SOURCE_DIR) + "/" + rel; }

// A fresh empty directory under /tmp.
std::string TempDir() {
  char name[] = "/tmp/traind_fit_XXXXXX";
  return mkdtemp(name);
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

JobSpec DigitsSpec() {
  JobSpec spec;
  spec.mutable_data()->set_path(Source("examples/data/digits.csv"));
  spec.mutable_data()->set_label("digit");
  spec.mutable_data()->set_standardize(true);
  auto* hidden = spec.mutable_model()->add_layers()->mutable_dense();
  hidden->set_units(32);
  hidden->set_activation(traind::v1::RELU);
  spec.mutable_model()->add_layers()->mutable_dense()->set_units(10);
  spec.mutable_optimizer()->mutable_sgd()->set_learning_rate(0.05);
  spec.mutable_training()->set_epochs(5);
  spec.mutable_training()->set_batch_size(32);
  spec.mutable_training()->set_shuffle(false);
  return spec;
}

const data::Dataset& Digits() {
  static const data::Dataset* d =
      new data::Dataset(std::move(data::LoadDataset(DigitsSpec())).value());
  return *d;
}

// The same network from the same initial weights as PyTorch
// (tests/fixtures/digits_trajectory.txt), SGD, no dropout, no shuffling:
// per-epoch train and validation losses within 1e-3 relative.
TEST(TrajectoryTest, MatchesPyTorchOnDigits) {
  auto fx = testing::ReadFixture("digits_trajectory.txt");
  ASSERT_EQ(fx["w0"].size(), 64u * 32u);
  std::vector<std::vector<float>> initial;
  for (const char* key : {"w0", "b0", "w1", "b1"})
    initial.emplace_back(fx[key].begin(), fx[key].end());
  data::FoldRows rows;
  for (int64_t i = 0; i < Digits().rows; ++i) (i < 1437 ? rows.train : rows.val).push_back(i);
  FitOptions options;
  options.initial_parameters = &initial;
  testing::EpochRecorder rec;
  absl::StatusOr<FoldResult> result = Fit(DigitsSpec(), Digits(), rows, 0, options, &rec);
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_EQ(rec.epochs.size(), 5u);
  for (int e = 0; e < 5; ++e) {
    const std::vector<double>& ref = fx["epoch" + std::to_string(e + 1)];
    ASSERT_EQ(ref.size(), 2u);
    EXPECT_NEAR(rec.epochs[e].train().at("loss"), ref[0], 1e-3 * ref[0]) << "epoch " << e + 1;
    EXPECT_NEAR(rec.epochs[e].val().at("loss"), ref[1], 1e-3 * ref[1]) << "epoch " << e + 1;
  }
}

// Iris 5-fold, fold 2, with dropout, batch norm, Adam + schedule, early
// stopping state: everything a checkpoint must carry.
JobSpec CheckpointedIrisSpec() {
  JobSpec spec;
  spec.set_seed(5);
  spec.mutable_data()->set_path(Source("examples/data/iris.csv"));
  spec.mutable_data()->set_label("species");
  spec.mutable_data()->set_scaling(traind::v1::MIN_MAX);
  spec.mutable_cross_validation()->set_folds(5);
  auto* d = spec.mutable_model()->add_layers()->mutable_dense();
  d->set_units(16);
  d->set_activation(traind::v1::GELU);
  spec.mutable_model()->add_layers()->mutable_batch_norm();
  spec.mutable_model()->add_layers()->mutable_dropout()->set_rate(0.2);
  spec.mutable_model()->add_layers()->mutable_dense()->set_units(3);
  spec.mutable_optimizer()->mutable_adam()->set_learning_rate(0.02);
  spec.mutable_optimizer()->mutable_schedule()->mutable_reduce_on_plateau()->set_patience(1);
  spec.mutable_training()->set_epochs(12);
  spec.mutable_training()->set_batch_size(16);
  spec.mutable_metrics()->add_val(traind::v1::LOSS);
  spec.mutable_metrics()->add_val(traind::v1::F1_MACRO);
  spec.mutable_early_stopping()->set_monitor("val.f1_macro");
  spec.mutable_early_stopping()->set_patience(50);
  spec.mutable_early_stopping()->set_restore_best(true);
  spec.mutable_checkpoint()->set_every_epochs(1);
  spec.mutable_checkpoint()->set_keep(3);
  return spec;
}

const data::Dataset& Iris() {
  static const data::Dataset* d =
      new data::Dataset(std::move(data::LoadDataset(CheckpointedIrisSpec())).value());
  return *d;
}

std::vector<std::string> Files(const std::string& dir) {
  std::vector<std::string> names;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) {
      if (e->d_name[0] != '.') names.emplace_back(e->d_name);
    }
    closedir(d);
  }
  std::sort(names.begin(), names.end());
  return names;
}

TEST(CheckpointResumeTest, ResumedRunEqualsUninterruptedRun) {
  const JobSpec spec = CheckpointedIrisSpec();
  const data::FoldRows rows = std::move(spec::RowsForTask(spec, Iris(), 2)).value();
  testing::EpochRecorder full;
  FitOptions plain;
  absl::StatusOr<FoldResult> expected = Fit(spec, Iris(), rows, 2, plain, &full);
  ASSERT_TRUE(expected.ok()) << expected.status();
  ASSERT_EQ(full.epochs.size(), 12u);

  // Stopped in the middle of epoch 6 (8 batches per epoch): the checkpoint is
  // of epoch 5.
  const std::string dir = TempDir();
  FitOptions options;
  options.checkpoint_dir = dir + "/checkpoints";
  testing::EpochRecorder first;
  first.stop_after_polls = 5 * 8 + 3;
  absl::StatusOr<FoldResult> stopped = Fit(spec, Iris(), rows, 2, options, &first);
  ASSERT_FALSE(stopped.ok());
  EXPECT_EQ(FailureKindOf(stopped.status()), FailureKind::kCancelled);
  ASSERT_EQ(first.epochs.size(), 5u);
  // keep: 3 periodic checkpoints.
  EXPECT_THAT(
      Files(options.checkpoint_dir),
      ::testing::ElementsAre("epoch-000003.ckpt", "epoch-000004.ckpt", "epoch-000005.ckpt"));

  testing::EpochRecorder second;
  absl::StatusOr<FoldResult> resumed = Fit(spec, Iris(), rows, 2, options, &second);
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  EXPECT_EQ(second.resumed_after, 5);
  ASSERT_EQ(second.epochs.size(), 7u);
  for (size_t i = 0; i < 7; ++i) {
    const EpochMetrics& a = full.epochs[5 + i];
    const EpochMetrics& b = second.epochs[i];
    EXPECT_EQ(b.epoch(), a.epoch());
    EXPECT_EQ(b.batches(), a.batches());
    for (const char* k : {"loss", "accuracy"}) EXPECT_EQ(b.train().at(k), a.train().at(k)) << k;
    for (const char* k : {"loss", "f1_macro"}) EXPECT_EQ(b.val().at(k), a.val().at(k)) << k;
  }
  EXPECT_EQ(resumed->best_epoch(), expected->best_epoch());
  EXPECT_EQ(resumed->val().at("f1_macro"), expected->val().at("f1_macro"));
  EXPECT_EQ(resumed->selection(), "val.f1_macro (max)");
  EXPECT_TRUE(second.warnings.empty());
}

// A convolutional network on byte images with augmentation, batch norm per
// channel and dropout: a resumed fold sees the same augmented images and
// ends as an uninterrupted one, bit for bit.
TEST(CheckpointResumeTest, ConvNetWithAugmentationResumesExactly) {
  data::Dataset images;
  images.rows = 96;
  images.features = 64;
  images.image_shape = {1, 8, 8};
  images.target = data::TargetKind::kClasses;
  images.classes = {"a", "b", "c"};
  Rng rng(4);
  for (int64_t r = 0; r < images.rows; ++r) {
    const int32_t label = static_cast<int32_t>(r % 3);
    images.y.push_back(label);
    images.lines.push_back(r);
    for (int p = 0; p < 64; ++p) {
      const bool on = label == 0 ? p / 8 == 3 : label == 1 ? p % 8 == 4 : p / 8 == p % 8;
      images.pixels.push_back(static_cast<uint8_t>((on ? 160 : 30) + rng.UniformInt(60)));
    }
  }
  images.outputs = 3;
  JobSpec spec;
  spec.set_seed(11);
  spec.mutable_data()->set_scaling(traind::v1::STANDARD);
  for (int d : {1, 8, 8}) spec.mutable_data()->add_shape(d);
  spec.mutable_data()->mutable_augment()->set_crop_padding(1);
  spec.mutable_data()->mutable_augment()->set_horizontal_flip(true);
  spec.mutable_cross_validation()->set_folds(4);
  auto* conv = spec.mutable_model()->add_layers()->mutable_conv2d();
  conv->set_filters(4);
  conv->add_kernel(3);
  conv->mutable_padding()->set_string_value("same");
  conv->set_activation(traind::v1::RELU);
  spec.mutable_model()->add_layers()->mutable_batch_norm();
  spec.mutable_model()->add_layers()->mutable_max_pool2d()->add_kernel(2);
  spec.mutable_model()->add_layers()->mutable_flatten();
  spec.mutable_model()->add_layers()->mutable_dropout()->set_rate(0.2);
  spec.mutable_model()->add_layers()->mutable_dense()->set_units(3);
  spec.mutable_loss()->mutable_softmax_cross_entropy();
  spec.mutable_optimizer()->mutable_adam()->set_learning_rate(0.01);
  spec.mutable_training()->set_epochs(4);
  spec.mutable_training()->set_batch_size(16);
  spec.mutable_metrics()->add_val(traind::v1::LOSS);
  spec.mutable_metrics()->add_val(traind::v1::ACCURACY);
  spec.mutable_checkpoint()->set_every_epochs(1);
  const data::FoldRows rows = std::move(spec::RowsForTask(spec, images, 1)).value();
  testing::EpochRecorder full;
  absl::StatusOr<FoldResult> expected = Fit(spec, images, rows, 1, FitOptions(), &full);
  ASSERT_TRUE(expected.ok()) << expected.status();
  ASSERT_EQ(full.epochs.size(), 4u);
  EXPECT_GT(full.epochs[3].val().at("accuracy"), 0.8);

  // Stopped in epoch 3 (72 training rows: 5 batches per epoch).
  const std::string dir = TempDir();
  FitOptions options;
  options.checkpoint_dir = dir + "/checkpoints";
  testing::EpochRecorder first;
  first.stop_after_polls = 2 * 5 + 2;
  ASSERT_FALSE(Fit(spec, images, rows, 1, options, &first).ok());
  ASSERT_EQ(first.epochs.size(), 2u);
  testing::EpochRecorder second;
  absl::StatusOr<FoldResult> resumed = Fit(spec, images, rows, 1, options, &second);
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  EXPECT_EQ(second.resumed_after, 2);
  ASSERT_EQ(second.epochs.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(second.epochs[i].train().at("loss"), full.epochs[2 + i].train().at("loss"));
    EXPECT_EQ(second.epochs[i].val().at("loss"), full.epochs[2 + i].val().at("loss"));
  }
  EXPECT_EQ(resumed->val().at("accuracy"), expected->val().at("accuracy"));
}

TEST(CheckpointResumeTest, CorruptAndTruncatedCheckpointsAreSkipped) {
  const JobSpec spec = CheckpointedIrisSpec();
  const data::FoldRows rows = std::move(spec::RowsForTask(spec, Iris(), 0)).value();
  const std::string dir = TempDir();
  FitOptions options;
  options.checkpoint_dir = dir;
  testing::EpochRecorder first;
  first.stop_after_polls = 4 * 8 + 1;  // checkpoints of epochs 2, 3, 4
  ASSERT_FALSE(Fit(spec, Iris(), rows, 0, options, &first).ok());
  // Flip one byte of epoch 4's payload; truncate epoch 3's.
  std::string four = ReadAll(dir + "/epoch-000004.ckpt");
  four[four.size() / 2] ^= 0x40;
  std::ofstream(dir + "/epoch-000004.ckpt", std::ios::binary) << four;
  const std::string three = ReadAll(dir + "/epoch-000003.ckpt");
  std::ofstream(dir + "/epoch-000003.ckpt", std::ios::binary) << three.substr(0, three.size() - 9);
  EXPECT_EQ(CheckpointReader::Parse(four, "x").status().message(),
            "x: checksum mismatch (file corrupt)");
  EXPECT_THAT(std::string(CheckpointReader::Parse(three.substr(0, 100), "y").status().message()),
              ::testing::HasSubstr("truncated"));

  testing::EpochRecorder second;
  absl::StatusOr<FoldResult> resumed = Fit(spec, Iris(), rows, 0, options, &second);
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  EXPECT_EQ(second.resumed_after, 2);  // the newest valid one
  ASSERT_EQ(second.warnings.size(), 2u);
  EXPECT_THAT(second.warnings[0], ::testing::HasSubstr("epoch-000004.ckpt: checksum mismatch"));
  EXPECT_THAT(second.warnings[1], ::testing::HasSubstr("epoch-000003.ckpt: truncated"));
  EXPECT_EQ(second.epochs.front().epoch(), 3);
}

TEST(CheckpointResumeTest, AnotherSpecIsNotResumed) {
  JobSpec spec = CheckpointedIrisSpec();
  const data::FoldRows rows = std::move(spec::RowsForTask(spec, Iris(), 0)).value();
  const std::string dir = TempDir();
  FitOptions options;
  options.checkpoint_dir = dir;
  testing::EpochRecorder first;
  first.stop_after_polls = 2 * 8 + 1;
  ASSERT_FALSE(Fit(spec, Iris(), rows, 0, options, &first).ok());
  spec.mutable_optimizer()->mutable_adam()->set_learning_rate(0.03);
  testing::EpochRecorder second;
  ASSERT_TRUE(Fit(spec, Iris(), rows, 0, options, &second).ok());
  EXPECT_EQ(second.resumed_after, -1);
  EXPECT_EQ(second.epochs.front().epoch(), 1);
  EXPECT_FALSE(second.warnings.empty());
}

TEST(EarlyStoppingTest, StopsAfterPatienceAndRestoresBest) {
  JobSpec spec = CheckpointedIrisSpec();
  spec.clear_checkpoint();
  spec.mutable_training()->set_epochs(200);
  spec.mutable_early_stopping()->set_monitor("val.loss");
  spec.mutable_early_stopping()->set_patience(3);
  spec.mutable_early_stopping()->set_min_delta(0.01);
  const data::FoldRows rows = std::move(spec::RowsForTask(spec, Iris(), 1)).value();
  testing::EpochRecorder rec;
  const std::string dir = TempDir();
  FitOptions options;
  options.artifacts_dir = dir;
  absl::StatusOr<FoldResult> result = Fit(spec, Iris(), rows, 1, options, &rec);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_TRUE(result->stopped_early());
  ASSERT_LT(rec.epochs.size(), 200u);
  // Independently: the epochs after the last improvement by more than 0.01.
  double best = 1e300;
  int best_epoch = 0;
  for (const EpochMetrics& m : rec.epochs) {
    if (m.val().at("loss") < best - 0.01) {
      best = m.val().at("loss");
      best_epoch = m.epoch();
    }
  }
  EXPECT_EQ(static_cast<int>(rec.epochs.size()), best_epoch + 3);
  EXPECT_EQ(result->best_epoch(), best_epoch);
  EXPECT_EQ(result->selection(), "val.loss (min)");
  // predictions.csv comes from the restored best weights: its log loss is
  // the best epoch's validation log loss... checked through its loss.
  ASSERT_EQ(result->predictions_path(), dir + "/predictions.csv");
  std::ifstream in(result->predictions_path());
  std::string header;
  std::getline(in, header);
  EXPECT_EQ(header, "row,fold,true_species,label,p_setosa,p_versicolor,p_virginica");
  const std::vector<std::string> classes = {"setosa", "versicolor", "virginica"};
  double loss = 0;
  int n = 0;
  std::string line;
  while (std::getline(in, line)) {
    std::vector<double> v;
    std::stringstream s(line);
    std::string row, fold, truth, label, f;
    std::getline(s, row, ',');
    std::getline(s, fold, ',');
    std::getline(s, truth, ',');
    std::getline(s, label, ',');
    v.push_back(std::stod(row));
    while (std::getline(s, f, ',')) v.push_back(std::stod(f));
    ASSERT_EQ(v.size(), 4u);
    // Task 1 validates on fold 1; the true class is the file's.
    EXPECT_EQ(fold, "1");
    EXPECT_EQ(truth, classes[static_cast<size_t>(Iris().y[static_cast<size_t>(v[0])])]);
    // The label is the class of the highest probability.
    const size_t best =
        static_cast<size_t>(std::max_element(v.begin() + 1, v.end()) - v.begin() - 1);
    EXPECT_EQ(label, classes[best]) << line;
    EXPECT_EQ(static_cast<int64_t>(v[0]), rows.val[static_cast<size_t>(n)]);
    EXPECT_NEAR(v[1] + v[2] + v[3], 1.0, 1e-5);
    loss -= std::log(v[1 + Iris().y[static_cast<size_t>(v[0])]]);
    ++n;
  }
  EXPECT_EQ(n, static_cast<int>(rows.val.size()));
  EXPECT_NEAR(loss / n, result->val().at("loss"), 1e-5);
}

TEST(RefitTest, TrainsOnAllRowsAndStoresTheModel) {
  JobSpec spec = CheckpointedIrisSpec();
  spec.clear_checkpoint();
  spec.mutable_cross_validation()->set_refit(true);
  const spec::TaskPlan plan = spec::PlanTasks(spec);
  EXPECT_EQ(plan.fold_tasks, 5);
  EXPECT_EQ(plan.total, 6);
  ASSERT_TRUE(spec::IsRefitTask(spec, 5));
  const data::FoldRows rows = std::move(spec::RowsForTask(spec, Iris(), 5)).value();
  EXPECT_EQ(rows.train.size(), 150u);
  EXPECT_TRUE(rows.val.empty());
  const std::string dir = TempDir();
  FitOptions options;
  options.artifacts_dir = dir;
  testing::EpochRecorder rec;
  absl::StatusOr<FoldResult> result = Fit(spec, Iris(), rows, 5, options, &rec);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(rec.epochs.size(), 12u);  // val.* early stopping is inactive without validation rows
  EXPECT_EQ(result->model_path(), dir + "/model.ckpt");
  // The model file (model_file.h): the refit task's, its last epoch, the
  // classes, and the state of every parameter and running statistic.
  absl::StatusOr<TrainedModel> model = ReadModelFile(result->model_path());
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ(model->task, 5);
  EXPECT_EQ(model->epoch, 12);
  EXPECT_EQ(model->classes, (std::vector<std::string>{"setosa", "versicolor", "virginica"}));
  EXPECT_EQ(model->feature_names.size(), 4u);
  std::vector<std::string> names;
  for (const TrainedModel::NamedTensor& t : model->state) names.push_back(t.name);
  EXPECT_THAT(names, ::testing::Contains("layers[0].weight"));
  EXPECT_THAT(names, ::testing::Contains("layers[1].running_mean"));
  // Beside it, the same model as an ONNX graph (onnx_export_test runs it).
  struct stat onnx;
  ASSERT_EQ(stat((dir + "/model.onnx").c_str(), &onnx), 0);
  EXPECT_GT(onnx.st_size, 1000);
}

TEST(DeterminismTest, SameSpecSameMetrics) {
  JobSpec spec = CheckpointedIrisSpec();
  spec.clear_checkpoint();
  spec.mutable_training()->set_epochs(4);
  const data::FoldRows rows = std::move(spec::RowsForTask(spec, Iris(), 3)).value();
  testing::EpochRecorder a, b;
  ASSERT_TRUE(Fit(spec, Iris(), rows, 3, {}, &a).ok());
  ASSERT_TRUE(Fit(spec, Iris(), rows, 3, {}, &b).ok());
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(a.epochs[i].train().at("loss"), b.epochs[i].train().at("loss"));
    EXPECT_EQ(a.epochs[i].val().at("loss"), b.epochs[i].val().at("loss"));
  }
}

TEST(ValidateEveryTest, ValidatesEveryNthAndTheLastEpoch) {
  JobSpec spec = CheckpointedIrisSpec();
  spec.clear_checkpoint();
  spec.clear_early_stopping();
  spec.mutable_optimizer()->clear_schedule();
  spec.mutable_training()->set_epochs(7);
  spec.mutable_training()->set_validate_every(3);
  const data::FoldRows rows = std::move(spec::RowsForTask(spec, Iris(), 0)).value();
  testing::EpochRecorder rec;
  ASSERT_TRUE(Fit(spec, Iris(), rows, 0, {}, &rec).ok());
  std::vector<int> validated;
  for (const EpochMetrics& m : rec.epochs) {
    if (!m.val().empty()) validated.push_back(m.epoch());
  }
  EXPECT_THAT(validated, ::testing::ElementsAre(3, 6, 7));
}

TEST(TargetsTest, RegressionMultiLabelAndCategoricalEndToEnd) {
  // y = 2 a - b + (c == "u" ? 1 : 0); labels l1 = a > 0, l2 = b > 0.
  std::string csv = "a;b;c;y;l1;l2\n";
  Rng rng(4);
  for (int i = 0; i < 120; ++i) {
    const double a = 2 * rng.Uniform() - 1, b = 2 * rng.Uniform() - 1;
    const bool u = rng.Uniform() < 0.5;
    csv += absl::StrFormat("%.4f;%.4f;%s;%.4f;%d;%d\n", a, b, u ? "u" : "v",
                           2 * a - b + (u ? 1 : 0), a > 0, b > 0);
  }
  traind::testing::TempFile file(csv);
  JobSpec spec;
  spec.set_seed(1);
  spec.mutable_data()->set_path(file.path());
  spec.mutable_data()->set_delimiter(";");
  spec.mutable_data()->set_label("y");
  spec.mutable_data()->add_categorical("c");
  spec.mutable_data()->add_ignore("l1");
  spec.mutable_data()->add_ignore("l2");
  spec.mutable_cross_validation()->set_validation_fraction(0.25);
  auto* h = spec.mutable_model()->add_layers()->mutable_dense();
  h->set_units(16);
  h->set_activation(traind::v1::TANH);
  spec.mutable_model()->add_layers()->mutable_dense()->set_units(1);
  spec.mutable_loss()->mutable_mse();
  spec.mutable_optimizer()->mutable_adam()->set_learning_rate(0.02);
  spec.mutable_training()->set_epochs(60);
  spec.mutable_training()->set_batch_size(16);
  spec.mutable_metrics()->add_val(traind::v1::R2);
  spec.mutable_metrics()->add_val(traind::v1::RMSE);
  ASSERT_TRUE(spec::ValidateJobSpec(spec, {}).ok()) << spec::ValidateJobSpec(spec, {});
  absl::StatusOr<data::Dataset> data = data::LoadDataset(spec);
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(data->features, 2);
  ASSERT_EQ(data->categorical.size(), 1u);
  data::FoldRows rows = std::move(spec::RowsForTask(spec, *data, 0)).value();
  EXPECT_EQ(rows.val.size(), 30u);
  absl::StatusOr<FoldResult> r = Fit(spec, *data, rows, 0, {}, nullptr);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE(r->val().contains("r2")) << r->DebugString();
  EXPECT_GT(r->val().at("r2"), 0.9);

  // Multi-label on the same file.
  spec.mutable_data()->clear_label();
  spec.mutable_data()->clear_ignore();
  spec.mutable_data()->add_ignore("y");
  spec.mutable_data()->add_labels("l1");
  spec.mutable_data()->add_labels("l2");
  spec.mutable_model()->mutable_layers(1)->mutable_dense()->set_units(2);
  spec.mutable_loss()->mutable_sigmoid_binary_cross_entropy()->add_pos_weight(1);
  spec.mutable_loss()->mutable_sigmoid_binary_cross_entropy()->add_pos_weight(2);
  spec.mutable_metrics()->clear_val();
  spec.mutable_metrics()->add_val(traind::v1::ROC_AUC);
  spec.mutable_metrics()->add_val(traind::v1::F1_MACRO);
  ASSERT_TRUE(spec::ValidateJobSpec(spec, {}).ok()) << spec::ValidateJobSpec(spec, {});
  data = data::LoadDataset(spec);
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(data->target, data::TargetKind::kMultiLabel);
  rows = std::move(spec::RowsForTask(spec, *data, 0)).value();
  r = Fit(spec, *data, rows, 0, {}, nullptr);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_GT(r->val().at("roc_auc"), 0.95);
}

}  // namespace
}  // namespace traind::engine

namespace traind::engine {
namespace {

TEST(EarlyStoppingTest, BaselineAndStartFromEpoch) {
  JobSpec spec = CheckpointedIrisSpec();
  spec.clear_checkpoint();
  spec.mutable_training()->set_epochs(30);
  auto* es = spec.mutable_early_stopping();
  es->set_monitor("val.loss");
  es->set_patience(2);
  es->set_restore_best(false);
  // A baseline no epoch can beat: improvements never reset the count.
  es->set_baseline(0.0);
  const data::FoldRows rows = std::move(spec::RowsForTask(spec, Iris(), 0)).value();
  testing::EpochRecorder rec;
  absl::StatusOr<FoldResult> r = Fit(spec, Iris(), rows, 0, {}, &rec);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(rec.epochs.size(), 2u);
  EXPECT_TRUE(r->stopped_early());
  // Monitoring starts after epoch 10: the earliest stop is epoch 12.
  es->set_start_from_epoch(10);
  testing::EpochRecorder later;
  r = Fit(spec, Iris(), rows, 0, {}, &later);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(later.epochs.size(), 12u);
}

}  // namespace
}  // namespace traind::engine
