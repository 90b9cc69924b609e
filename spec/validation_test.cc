// Submit-time validation: bad specs are refused with the field path; the
// task layout; the memory estimate.
#include "spec/validation.h"

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status.h"
#include "data/dataset.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "spec/memory_estimate.h"
#include "spec/task_plan.h"
#include "spec/task_rows.h"
#include "tests/testing/temp_dir.h"

namespace traind::spec {
namespace {

using traind::v1::JobSpec;

JobSpec Iris() {
  JobSpec spec;
  spec.mutable_data()->set_path(std::string(TRAIND_SOURCE_DIR) + "/examples/data/iris.csv");
  spec.mutable_data()->set_label("species");
  spec.mutable_cross_validation()->set_folds(5);
  auto* d = spec.mutable_model()->add_layers()->mutable_dense();
  d->set_units(8);
  d->set_activation(traind::v1::RELU);
  spec.mutable_model()->add_layers()->mutable_dense()->set_units(3);
  spec.mutable_optimizer()->mutable_adam()->set_learning_rate(0.01);
  spec.mutable_training()->set_epochs(3);
  spec.mutable_training()->set_batch_size(16);
  return spec;
}

std::string Error(const JobSpec& spec) {
  absl::Status s = ValidateJobSpec(spec, ValidationContext());
  EXPECT_TRUE(s.ok() || FailureKindOf(s) == FailureKind::kInvalidSpec) << s;
  return std::string(s.message());
}

TEST(ValidateJobSpecTest, AcceptsTheBaseSpec) { EXPECT_EQ(Error(Iris()), ""); }

// The data's size, for the server's limits: rows, columns, and the fewest
// rows a task trains on (as the worker splits them).
TEST(ValidateJobSpecTest, ReportsTheDataSize) {
  auto shape_of = [](const JobSpec& spec) {
    ValidatedShape shape;
    absl::Status s = ValidateJobSpec(spec, ValidationContext(), &shape);
    EXPECT_TRUE(s.ok()) << s;
    return shape;
  };
  ValidatedShape shape = shape_of(Iris());  // 150 rows, 5 folds of 30
  EXPECT_EQ(shape.rows, 150);
  EXPECT_EQ(shape.columns, 5);
  EXPECT_EQ(shape.validation_rows, 0);
  EXPECT_EQ(shape.min_train_rows, 120);
  JobSpec seven = Iris();  // folds of 22 and 21 rows
  seven.mutable_cross_validation()->set_folds(7);
  seven.mutable_cross_validation()->set_repeats(3);
  EXPECT_EQ(shape_of(seven).min_train_rows, 150 - 22);
  JobSpec holdout = Iris();
  holdout.mutable_cross_validation()->Clear();
  holdout.mutable_cross_validation()->set_validation_fraction(0.25);
  holdout.mutable_cross_validation()->set_refit(true);
  EXPECT_LT(shape_of(holdout).min_train_rows, 150);
  EXPECT_GT(shape_of(holdout).min_train_rows, 100);
  JobSpec plain = Iris();
  plain.clear_cross_validation();
  EXPECT_EQ(shape_of(plain).min_train_rows, 150);
  JobSpec val_file = Iris();
  val_file.mutable_cross_validation()->Clear();
  val_file.mutable_cross_validation()->set_validation_path(val_file.data().path());
  shape = shape_of(val_file);
  EXPECT_EQ(shape.rows, 150);
  EXPECT_EQ(shape.validation_rows, 150);
  EXPECT_EQ(shape.min_train_rows, 150);
}

// min_train_rows comes from one pass over the file (no rows held); it is
// what the worker's own split (RowsForTask on the loaded data) gives the
// smallest task, for holdouts (stratified or not) and group k-fold (shuffled
// or not, several seeds) on imbalanced classes and uneven groups.
// Text in a column read as numbers is the spec's error, found at submit with
// the value, file, line and column (of the validation file too, whose columns
// may be in another order). Missing values, non-finite and out-of-range
// numbers are not text: the worker reports those.
TEST(ValidateJobSpecTest, TextInANumericFeatureColumnIsASpecError) {
  std::string csv = "a,b,label\n1,NA,x\n2,inf,y\n3,1e39,x\n4,,y\n";
  for (int r = 0; r < 20; ++r) csv += absl::StrCat(r, ",", r % 5, ",", r % 2 ? "x" : "y", "\n");
  traind::testing::TempFile train(csv);
  traind::testing::TempFile val("label,b,a\nx,2,1\ny,-Infinity,2\nx,abc,3\n");
  JobSpec spec = Iris();
  spec.mutable_data()->set_path(train.path());
  spec.mutable_data()->set_label("label");
  spec.mutable_data()->set_missing(traind::v1::IMPUTE_MEAN);
  spec.mutable_model()->mutable_layers(1)->mutable_dense()->set_units(2);
  EXPECT_TRUE(ValidateJobSpec(spec, ValidationContext()).ok())
      << ValidateJobSpec(spec, ValidationContext());

  spec.mutable_cross_validation()->Clear();
  spec.mutable_cross_validation()->set_validation_path(val.path());
  absl::Status s = ValidateJobSpec(spec, ValidationContext());
  EXPECT_EQ(FailureKindOf(s), FailureKind::kInvalidSpec) << s;
  EXPECT_EQ(s.message(), "data.categorical: column \"b\" holds text (\"abc\" at " + val.path() +
                             ":4, column 2), not a number: if the column is a category, list it "
                             "in data.categorical (or in data.ignore); else fix the value");
  for (bool categorical : {true, false}) {
    JobSpec fixed = spec;
    if (categorical) {
      fixed.mutable_data()->add_categorical("b");
    } else {
      fixed.mutable_data()->add_ignore("b");
    }
    EXPECT_TRUE(ValidateJobSpec(fixed, ValidationContext()).ok())
        << ValidateJobSpec(fixed, ValidationContext());
  }
}

TEST(ValidateJobSpecTest, MinTrainRowsIsWhatTheWorkersSplitGives) {
  std::string csv = "x,g,y\n";
  std::mt19937 rng(3);
  for (int r = 0; r < 997; ++r) {
    const int group = static_cast<int>(rng() % 23) * static_cast<int>(rng() % 3);  // uneven
    const int label = rng() % 10 < 7 ? 0 : (rng() % 2 ? 1 : 2);                    // imbalanced
    csv += absl::StrCat(r % 17, ",", "g", group, ",", label, "\n");
  }
  traind::testing::TempFile file(csv);
  JobSpec base = Iris();
  base.mutable_data()->set_path(file.path());
  base.mutable_data()->set_label("y");
  base.mutable_data()->add_ignore("g");  // a feature only where it is not the group column
  std::vector<JobSpec> specs;
  for (double fraction : {0.1, 0.25, 0.333}) {
    for (bool stratified : {true, false}) {
      JobSpec spec = base;
      spec.mutable_cross_validation()->Clear();
      spec.mutable_cross_validation()->set_validation_fraction(fraction);
      spec.mutable_cross_validation()->set_stratified(stratified);
      specs.push_back(spec);
    }
  }
  for (uint64_t seed : {1u, 2u, 99u}) {
    for (bool shuffle : {true, false}) {
      for (int folds : {2, 3, 5}) {
        JobSpec spec = base;
        spec.mutable_data()->clear_ignore();
        spec.set_seed(seed);
        spec.mutable_cross_validation()->set_folds(folds);
        spec.mutable_cross_validation()->set_group_column("g");
        spec.mutable_cross_validation()->set_shuffle(shuffle);
        specs.push_back(spec);
      }
    }
  }
  JobSpec stratified_kfold = base;
  stratified_kfold.mutable_cross_validation()->set_folds(6);
  specs.push_back(stratified_kfold);
  for (const JobSpec& spec : specs) {
    ValidatedShape shape;
    absl::Status s = ValidateJobSpec(spec, ValidationContext(), &shape);
    ASSERT_TRUE(s.ok()) << s << spec.cross_validation().DebugString();
    absl::StatusOr<data::Dataset> data = data::LoadDataset(spec);
    ASSERT_TRUE(data.ok()) << data.status();
    size_t fewest = SIZE_MAX;
    for (int task = 0; task < PlanTasks(spec).total; ++task) {
      absl::StatusOr<data::FoldRows> rows = RowsForTask(spec, *data, task);
      ASSERT_TRUE(rows.ok()) << rows.status();
      fewest = std::min(fewest, rows->train.size());
    }
    EXPECT_EQ(shape.min_train_rows, static_cast<int64_t>(fewest))
        << spec.cross_validation().DebugString();
    EXPECT_EQ(shape.rows, 997);
  }
  // Folds beyond the groups the file has, and a binary target of 3 classes:
  // named at submit from the same pass.
  JobSpec groups = specs.back();
  groups.mutable_data()->clear_ignore();
  groups.mutable_cross_validation()->set_group_column("g");
  groups.mutable_cross_validation()->set_folds(100);
  EXPECT_THAT(Error(groups), ::testing::HasSubstr("100 folds, but group_column \"g\" has only"));
  JobSpec units = base;
  units.mutable_model()->mutable_layers(1)->mutable_dense()->set_units(4);
  EXPECT_THAT(Error(units), ::testing::HasSubstr("but data.label \"y\" has 3 classes"));
}

TEST(ValidateJobSpecTest, RejectsWithTheFieldPath) {
  JobSpec spec = Iris();
  spec.mutable_model()->mutable_layers(0)->mutable_dense()->set_activation(
      static_cast<traind::v1::Activation>(42));
  EXPECT_EQ(Error(spec), "model.layers[0].dense.activation: unknown value 42");

  spec = Iris();
  spec.mutable_loss()->mutable_softmax_cross_entropy()->add_class_weights(1);
  spec.mutable_loss()->mutable_softmax_cross_entropy()->add_class_weights(-0.5);
  spec.mutable_loss()->mutable_softmax_cross_entropy()->add_class_weights(1);
  EXPECT_EQ(Error(spec),
            "loss.softmax_cross_entropy.class_weights[1]: must be a number >= 0, got -0.5");

  spec = Iris();
  spec.mutable_loss()->mutable_softmax_cross_entropy()->add_class_weights(1);
  EXPECT_EQ(Error(spec),
            "loss.softmax_cross_entropy.class_weights: has 1 weights, but there are 3 classes");

  spec = Iris();
  spec.mutable_early_stopping()->set_monitor("val.f1_macro");
  EXPECT_EQ(Error(spec),
            "early_stopping.monitor: val.f1_macro is not computed (metrics.val: loss, accuracy)");

  spec = Iris();
  spec.mutable_early_stopping()->set_monitor("loss");
  EXPECT_EQ(Error(spec), "early_stopping.monitor: \"loss\" must start with train. or val.");

  spec = Iris();
  spec.clear_cross_validation();
  spec.mutable_early_stopping();
  EXPECT_THAT(Error(spec), ::testing::StartsWith(
                               "early_stopping.monitor: val.loss (min) needs validation rows"));

  spec = Iris();
  spec.mutable_model()->add_layers()->mutable_dropout()->set_rate(1.0);
  EXPECT_EQ(Error(spec), "model.layers[2].dropout.rate: must be in [0, 1), got 1");

  spec = Iris();
  spec.mutable_metrics()->add_val(traind::v1::R2);
  EXPECT_EQ(Error(spec), "metrics.val[0]: r2 does not apply to class targets");

  spec = Iris();
  spec.mutable_metrics()->add_val(traind::v1::ROC_AUC);
  EXPECT_EQ(Error(spec),
            "metrics.val: roc_auc needs a binary or multi-label target (data.label has 3 classes)");

  spec = Iris();
  spec.mutable_cross_validation()->set_validation_fraction(0.2);
  EXPECT_EQ(Error(spec),
            "cross_validation: set only one of folds, validation_fraction and validation_path");

  spec = Iris();
  spec.mutable_data()->add_features("petal_width");
  spec.mutable_data()->add_features("wingspan");
  EXPECT_THAT(Error(spec),
              ::testing::StartsWith("data.features[1]: column \"wingspan\" not found"));

  spec = Iris();
  spec.mutable_optimizer()->mutable_schedule()->mutable_step()->set_step_size(0);
  EXPECT_EQ(Error(spec), "optimizer.schedule.step.step_size: must be positive, got 0");

  spec = Iris();
  spec.mutable_optimizer()->mutable_clipping()->set_max_norm(-1);
  EXPECT_EQ(Error(spec), "optimizer.clipping.max_norm: must be a positive number, got -1");
}

TEST(ValidateJobSpecTest, PosWeightLengthAndBinaryOutputs) {
  JobSpec spec = Iris();
  spec.mutable_loss()->mutable_sigmoid_binary_cross_entropy();
  spec.mutable_model()->mutable_layers(1)->mutable_dense()->set_units(1);
  EXPECT_EQ(Error(spec),
            "data.label: column \"species\" has 3 classes, but sigmoid_binary_cross_entropy on "
            "data.label needs exactly 2 (data.labels for multi-label targets)");

  // Multi-label: three 0/1 columns, two pos_weight values.
  spec = Iris();
  spec.mutable_data()->set_path(std::string(TRAIND_SOURCE_DIR) +
                                "/examples/data/digits_attributes.csv");
  spec.mutable_data()->clear_label();
  for (const char* l : {"even", "large", "prime"}) spec.mutable_data()->add_labels(l);
  spec.mutable_cross_validation()->Clear();
  spec.mutable_cross_validation()->set_folds(3);
  spec.mutable_loss()->mutable_sigmoid_binary_cross_entropy()->add_pos_weight(1);
  spec.mutable_loss()->mutable_sigmoid_binary_cross_entropy()->add_pos_weight(2);
  EXPECT_EQ(
      Error(spec),
      "loss.sigmoid_binary_cross_entropy.pos_weight: has 2 values, but the model has 3 outputs");
  spec.mutable_loss()->mutable_sigmoid_binary_cross_entropy()->add_pos_weight(0);
  EXPECT_EQ(Error(spec),
            "loss.sigmoid_binary_cross_entropy.pos_weight[2]: must be a positive number, got 0");
  spec.mutable_loss()->mutable_sigmoid_binary_cross_entropy()->set_pos_weight(2, 3);
  EXPECT_EQ(Error(spec), "");
  spec.mutable_cross_validation()->set_stratified(true);
  EXPECT_EQ(Error(spec),
            "cross_validation.stratified: needs class labels (data.label with a class loss)");
}

TEST(PlanTasksTest, Layouts) {
  JobSpec spec = Iris();
  TaskPlan p = PlanTasks(spec);
  EXPECT_EQ(p.folds, 5);
  EXPECT_EQ(p.repeats, 1);
  EXPECT_FALSE(p.refit);
  EXPECT_EQ(p.total, 5);
  spec.mutable_cross_validation()->set_repeats(3);
  spec.mutable_cross_validation()->set_refit(true);
  p = PlanTasks(spec);
  EXPECT_EQ(p.fold_tasks, 15);
  EXPECT_EQ(p.total, 16);
  EXPECT_EQ(TaskCount(spec), 16);
  spec.mutable_cross_validation()->Clear();
  spec.mutable_cross_validation()->set_validation_fraction(0.2);
  p = PlanTasks(spec);
  EXPECT_EQ(p.total, 1);
  EXPECT_EQ(p.folds, 1);
  spec.clear_cross_validation();
  EXPECT_EQ(PlanTasks(spec).total, 1);
}

TEST(MemoryEstimateTest, CountsParametersStateAndActivations) {
  JobSpec spec;
  auto* d = spec.mutable_model()->add_layers()->mutable_dense();
  d->set_units(100);
  spec.mutable_model()->add_layers()->mutable_dense()->set_units(10);
  spec.mutable_optimizer()->mutable_adam()->set_learning_rate(0.1);
  spec.mutable_training()->set_batch_size(32);
  const MemoryEstimate e = EstimateMemory(spec, 50, 10);
  const int64_t params = 50 * 100 + 100 + 100 * 10 + 10;
  EXPECT_EQ(e.parameters, 4 * params);
  EXPECT_EQ(e.gradients, 4 * params);
  EXPECT_EQ(e.optimizer_state, 2 * 4 * params);  // Adam: m and v
  EXPECT_EQ(e.best_weights, 0);
  // Per row: input 50, loss gradient and targets 2·10, y and dy per layer.
  // And a window of training and validation predictions: 32768 rows each.
  EXPECT_EQ(e.activations, 2 * 32 * (50 + 20 + 2 * 100 + 2 * 10) * 4 + 2 * 32768 * 10 * 4);
  EXPECT_EQ(EstimateMemoryBytes(spec, 50, 10), e.total());
  spec.mutable_optimizer()->mutable_sgd()->set_learning_rate(0.1);
  EXPECT_EQ(EstimateMemory(spec, 50, 10).optimizer_state, 0);
}

// Image layers: a conv2d's weights are filters · (channels / groups) · kh · kw
// (+ bias), its rows hold y and dy of filters · OH · OW values, max pooling
// also where each maximum was; the unfolded input is workspace.
TEST(MemoryEstimateTest, CountsConvolutionsAndPooling) {
  JobSpec spec;
  for (int d : {2, 10, 10}) spec.mutable_data()->add_shape(d);
  auto* c = spec.mutable_model()->add_layers()->mutable_conv2d();  // 2×10×10 -> 8×8×8
  c->set_filters(8);
  c->add_kernel(3);
  spec.mutable_model()->add_layers()->mutable_max_pool2d()->add_kernel(2);  // -> 8×4×4
  spec.mutable_model()->add_layers()->mutable_dense()->set_units(10);
  spec.mutable_optimizer()->mutable_sgd()->set_learning_rate(0.1);
  spec.mutable_training()->set_batch_size(16);
  const MemoryEstimate e = EstimateMemory(spec, 200, 10);
  const int64_t params = 8 * 2 * 9 + 8 + 128 * 10 + 10;
  EXPECT_EQ(e.parameters, 4 * params);
  EXPECT_EQ(e.gradients, 4 * params);
  // Per row: input 200, loss gradient and targets 2·10, conv 2·512, pool
  // 3·128, dense 2·10, and the channels-last conversions' bound, 4 times the
  // largest image (512).
  EXPECT_EQ(e.activations,
            2 * 16 * (200 + 20 + 2 * 512 + 3 * 128 + 2 * 10 + 4 * 512) * 4 + 2 * 32768 * 10 * 4);
  const MemoryEstimate dense_only = [&] {
    JobSpec d = spec;
    d.clear_data();
    d.mutable_model()->clear_layers();
    d.mutable_model()->add_layers()->mutable_dense()->set_units(10);
    return EstimateMemory(d, 128, 10);
  }();
  // The conv's unfolded input: 16 images · 64 output pixels · 18 values.
  EXPECT_GE(e.workspace - dense_only.workspace, 16 * 64 * 18 * 4);
  // On a GPU, an asymmetric padding ("same" with a 2×2 kernel: 0 above, 1
  // below) adds padded copies of x and dx: 2 · 16 images · 2 · 11 · 11.
  spec.mutable_resources()->set_device(traind::v1::GPU);
  const int64_t gpu_valid = EstimateMemory(spec, 200, 10).workspace;
  c->clear_kernel();
  c->add_kernel(2);
  c->mutable_padding()->set_string_value("same");  // 2×10×10 -> 8×10×10
  const int64_t cpu_same = [&] {
    JobSpec on_cpu = spec;
    on_cpu.mutable_resources()->set_device(traind::v1::CPU);
    return EstimateMemory(on_cpu, 200, 10).workspace;
  }();
  EXPECT_EQ(EstimateMemory(spec, 200, 10).workspace - cpu_same,
            (32 << 20) + (64 << 10) + 16 * 10 * 8 + 16 * 10 * 4 + 2 * 16 * 2 * 11 * 11 * 4);
  EXPECT_GT(gpu_valid, 0);
}

TEST(MemoryEstimateTest, Bf16CopiesAndTheGpuWorkspaceAreCounted) {
  JobSpec spec;
  spec.mutable_model()->add_layers()->mutable_dense()->set_units(100);
  spec.mutable_model()->add_layers()->mutable_dense()->set_units(10);
  spec.mutable_training()->set_batch_size(32);
  const int64_t fp32 = EstimateMemory(spec, 50, 10).workspace;
  spec.mutable_training()->set_precision(traind::v1::BF16);
  // Per dense layer, 2 bytes per element of x, w and dy.
  const int64_t copies = 2 * (32 * 50 + 50 * 100 + 32 * 100) + 2 * (32 * 100 + 100 * 10 + 32 * 10);
  EXPECT_EQ(EstimateMemory(spec, 50, 10).workspace - fp32, copies);
  spec.mutable_training()->set_precision(traind::v1::FP32);
  spec.mutable_resources()->set_device(traind::v1::GPU);
  // cuBLAS workspace, optimizer pointer tables, the loss's partial sums
  // (doubles), the step graph's predictions (floats).
  EXPECT_EQ(EstimateMemory(spec, 50, 10).workspace - fp32,
            (32 << 20) + (64 << 10) + 32 * 10 * 8 + 32 * 10 * 4);
}

}  // namespace
}  // namespace traind::spec

namespace traind::spec {
namespace {

// The daemon's integration test expects these field paths.
TEST(ValidateJobSpecTest, DaemonCases) {
  struct Case {
    void (*mutate)(JobSpec*);
    std::string field;
  };
  const Case cases[] = {
      {[](JobSpec* s) { s->mutable_data()->set_path("/nonexistent/iris.csv"); }, "data.path"},
      {[](JobSpec* s) { s->mutable_data()->set_label("kind"); }, "data.label"},
      {[](JobSpec* s) { s->mutable_cross_validation()->set_folds(1); }, "cross_validation.folds"},
      {[](JobSpec* s) { s->mutable_cross_validation()->set_folds(151); }, "cross_validation.folds"},
      {[](JobSpec* s) { s->mutable_training()->set_batches(100); }, "training"},
      {[](JobSpec* s) { s->mutable_training()->clear_epochs(); }, "training"},
      {[](JobSpec* s) { s->mutable_training()->set_batch_size(0); }, "training.batch_size"},
      {[](JobSpec* s) { s->mutable_model()->clear_layers(); }, "model.layers"},
      {[](JobSpec* s) { s->mutable_model()->mutable_layers(0)->mutable_dense()->set_units(0); },
       "model.layers[0].dense.units"},
      {[](JobSpec* s) { s->mutable_model()->mutable_layers(1)->mutable_dense()->set_units(4); },
       "model.layers[1].dense.units"},
      {[](JobSpec* s) { s->clear_optimizer(); }, "optimizer"},
      {[](JobSpec* s) { s->mutable_resources()->set_device(traind::v1::GPU); }, "resources.device"},
  };
  for (const Case& c : cases) {
    JobSpec spec = Iris();
    c.mutate(&spec);
    EXPECT_EQ(Error(spec).rfind(c.field + ":", 0), 0u) << c.field << ": " << Error(spec);
  }
}

}  // namespace
}  // namespace traind::spec

namespace traind::spec {
namespace {

absl::Status ValidateWith(const JobSpec& spec, bool cpu_bf16, int gpus = 0) {
  ValidationContext context;
  context.cpu_bf16 = cpu_bf16;
  context.gpus = gpus;
  return ValidateJobSpec(spec, context);
}

TEST(ValidateJobSpecTest, PrecisionOnTheCpu) {
  JobSpec spec = Iris();
  for (traind::v1::Precision p : {traind::v1::PRECISION_UNSPECIFIED, traind::v1::FP32}) {
    spec.mutable_training()->set_precision(p);
    EXPECT_TRUE(ValidateWith(spec, false).ok()) << ValidateWith(spec, false);
  }

  spec.mutable_training()->set_precision(traind::v1::BF16);
  EXPECT_TRUE(ValidateWith(spec, true).ok()) << ValidateWith(spec, true);
  absl::Status no_bf16 = ValidateWith(spec, false);
  EXPECT_EQ(FailureKindOf(no_bf16), FailureKind::kInvalidSpec);
  EXPECT_EQ(no_bf16.message(),
            "training.precision: bf16 needs a CPU with AVX512-BF16 or AMX, as oneDNN sees it "
            "(the workers' CPU has neither, or ONEDNN_MAX_CPU_ISA caps it below them); use fp32");

  spec.mutable_training()->set_precision(traind::v1::TF32);
  for (bool cpu_bf16 : {false, true}) {
    absl::Status tf32 = ValidateWith(spec, cpu_bf16);
    EXPECT_EQ(FailureKindOf(tf32), FailureKind::kInvalidSpec);
    EXPECT_EQ(tf32.message(),
              "training.precision: tf32 is a GPU mode (resources.device: gpu); CPU jobs train "
              "in fp32 or bf16");
  }

  spec.mutable_training()->set_precision(static_cast<traind::v1::Precision>(9));
  EXPECT_EQ(ValidateWith(spec, true).message(), "training.precision: unknown value 9");
}

TEST(ValidateJobSpecTest, PrecisionOnTheGpuIsNotTheCpusConcern) {
  JobSpec spec = Iris();
  spec.mutable_resources()->set_device(traind::v1::GPU);
  spec.mutable_resources()->set_count(1);
  for (traind::v1::Precision p : {traind::v1::BF16, traind::v1::TF32}) {
    spec.mutable_training()->set_precision(p);
    EXPECT_TRUE(ValidateWith(spec, /*cpu_bf16=*/false, /*gpus=*/1).ok())
        << ValidateWith(spec, false, 1);
  }
  spec.mutable_training()->set_precision(static_cast<traind::v1::Precision>(9));
  EXPECT_EQ(ValidateWith(spec, false, 1).message(), "training.precision: unknown value 9");
}

// A search is checked trial by trial at submit: a value that makes an
// invalid spec names the trial and its values; one that does not fit the
// data (a last layer of the wrong width) too; the score must be a computed
// val.* metric.
TEST(ValidateJobSpecTest, EveryTrialOfASearchIsValidated) {
  JobSpec spec = Iris();
  auto* dim = spec.mutable_search()->add_space();
  dim->set_path("model.layers[0].dense.units");
  dim->mutable_values()->add_values()->set_number_value(8);
  dim->mutable_values()->add_values()->set_number_value(0);
  spec.mutable_search()->mutable_sampler()->mutable_grid();
  EXPECT_EQ(Error(spec),
            "search: trial 1 (model.layers[0].dense.units = 0): model.layers[0].dense.units: "
            "must be positive, got 0");
  dim->mutable_values()->mutable_values(1)->set_number_value(16);
  EXPECT_EQ(Error(spec), "");
  dim->set_path("model.layers[1].dense.units");  // the output layer: 3 classes
  EXPECT_THAT(Error(spec), ::testing::StartsWith("search: trial 0 (model.layers[1].dense.units = "
                                                 "8): model.layers[1].dense.units: "));
  dim->set_path("model.layers[0].dense.units");
  spec.mutable_search()->set_metric("val.f1_macro");
  EXPECT_THAT(Error(spec), ::testing::HasSubstr("search.metric: val.f1_macro is not computed"));
  spec.mutable_search()->set_metric("train.loss");
  EXPECT_EQ(Error(spec), "search.metric: train.loss: trials are scored on a val.* metric");
  spec.mutable_search()->set_metric("val.accuracy");
  EXPECT_EQ(Error(spec), "");
}

// A version 1.0 NPY file of `descr` elements.
std::string Npy(const std::string& descr, const std::string& shape, const std::string& data) {
  std::string header =
      "{'descr': '" + descr + "', 'fortran_order': False, 'shape': " + shape + ", }";
  while ((10 + header.size() + 1) % 64 != 0) header.push_back(' ');
  header.push_back('\n');
  std::string out = "\x93NUMPY";
  out += std::string({1, 0, static_cast<char>(header.size()), 0});
  return out + header + data;
}

// 6 images of 1×4×4 bytes (NPY) with labels 0, 1, 2, 0, 1, 2 (NPY int64).
JobSpec Images(const traind::testing::TempDir& dir) {
  JobSpec spec = Iris();
  std::string labels;
  for (int64_t i = 0; i < 6; ++i) {
    const int64_t v = i % 3;
    labels.append(reinterpret_cast<const char*>(&v), 8);
  }
  spec.mutable_data()->set_path(dir.Write("x.npy", Npy("|u1", "(6, 4, 4)", std::string(96, 'a'))));
  spec.mutable_data()->set_labels_path(dir.Write("y.npy", Npy("<i8", "(6,)", labels)));
  spec.mutable_data()->clear_label();
  spec.mutable_cross_validation()->set_folds(2);
  spec.mutable_model()->clear_layers();
  auto* conv = spec.mutable_model()->add_layers()->mutable_conv2d();
  conv->set_filters(2);
  conv->add_kernel(3);
  spec.mutable_model()->add_layers()->mutable_batch_norm();
  spec.mutable_model()->add_layers()->mutable_flatten();
  spec.mutable_model()->add_layers()->mutable_dense()->set_units(3);
  return spec;
}

TEST(ValidateJobSpecTest, ImagesStateTheirShapeAndTheirFieldsAreChecked) {
  traind::testing::TempDir dir;
  JobSpec spec = Images(dir);
  ValidatedShape shape;
  ASSERT_TRUE(ValidateJobSpec(spec, ValidationContext(), &shape).ok())
      << ValidateJobSpec(spec, ValidationContext());
  EXPECT_EQ(shape.rows, 6);
  EXPECT_EQ(shape.features, 16);
  EXPECT_EQ(shape.columns, 0);  // no header: max_columns does not apply to pixels
  EXPECT_THAT(shape.image_shape, ::testing::ElementsAre(1, 4, 4));

  JobSpec s = spec;
  s.mutable_model()->mutable_layers(3)->mutable_dense()->set_units(2);
  EXPECT_EQ(Error(s),
            "model.layers[3].dense.units: the last layer has 2 units, but the images' labels "
            "name 3 classes");
  s = spec;
  s.mutable_data()->mutable_normalize()->add_mean(0.5);
  s.mutable_data()->mutable_normalize()->add_mean(0.5);
  s.mutable_data()->mutable_normalize()->add_std(0.2);
  EXPECT_EQ(Error(s), "data.normalize.mean: give one value, or one per channel (1); got 2");
  s.mutable_data()->mutable_normalize()->clear_mean();
  s.mutable_data()->mutable_normalize()->add_mean(0.5);
  s.mutable_data()->mutable_normalize()->set_std(0, 0);
  EXPECT_EQ(Error(s), "data.normalize.std[0]: must be positive, got 0");
  s = spec;
  s.mutable_data()->mutable_augment()->set_crop_padding(5);
  EXPECT_EQ(Error(s),
            "data.augment.crop_padding: must be between 0 and the image's size (4×4), got 5");
  s = spec;
  s.mutable_data()->add_image_size(8);
  EXPECT_THAT(Error(s),
              ::testing::StartsWith("data.image_size: only for image folders (data.path "));
  s = spec;
  // Groups of images come from a column of a CSV labels file: these labels
  // are NPY.
  s.mutable_cross_validation()->set_group_column("patient");
  EXPECT_THAT(Error(s), ::testing::StartsWith("cross_validation.group_column: images take their "
                                              "groups from a column of a CSV labels file, but "
                                              "data.labels_path: "));
  // A layer that does not fit the images the files state.
  s = spec;
  s.mutable_model()->mutable_layers(0)->mutable_conv2d()->set_kernel(0, 5);
  EXPECT_THAT(Error(s), ::testing::HasSubstr("model.layers[0].conv2d"));

  // Image fields on a table.
  JobSpec table = Iris();
  table.mutable_data()->set_layout("NHWC");
  EXPECT_THAT(Error(table), ::testing::StartsWith("data.layout: only for NPY images (data.path " +
                                                  Iris().data().path() + " is a table)"));
  table = Iris();
  table.mutable_data()->mutable_augment()->set_horizontal_flip(true);
  EXPECT_EQ(Error(table), "data.augment: only for images (an image format, or data.shape)");
}

}  // namespace
}  // namespace traind::spec
