#include "worker/engine/fit.h"

#include <omp.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "base/status.h"
#include "data/split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/engine/backend/cpu/cpu_backend.h"
#include "worker/engine/testing/epoch_recorder.h"
#include "worker/engine/testing/graph_recording_backend.h"
#include "worker/engine/testing/iris.h"

namespace traind::engine {
namespace {

using ::testing::Pair;
using ::testing::UnorderedElementsAre;
using traind::v1::EpochMetrics;
using traind::v1::FoldResult;
using traind::v1::JobSpec;

using testing::Iris;

// The reference job: Dense(16, relu) + Dense(3), Adam 0.01,
// 100 epochs of batch 16, standardized.
JobSpec ReferenceIrisSpec() {
  JobSpec spec;
  spec.set_seed(42);
  spec.mutable_data()->set_standardize(true);
  traind::v1::Dense* hidden = spec.mutable_model()->add_layers()->mutable_dense();
  hidden->set_units(16);
  hidden->set_activation(traind::v1::RELU);
  spec.mutable_model()->add_layers()->mutable_dense()->set_units(3);
  spec.mutable_loss()->mutable_softmax_cross_entropy();
  spec.mutable_optimizer()->mutable_adam()->set_learning_rate(0.01);
  spec.mutable_training()->set_epochs(100);
  spec.mutable_training()->set_batch_size(16);
  return spec;
}

data::FoldRows IrisFold0() {
  return data::FoldSplit(data::StratifiedKFold(Iris().y, 5, /*shuffle=*/true, 42), 0);
}

TEST(FitTest, IrisFold0LearnsAndReportsEveryEpoch) {
  data::FoldRows rows = IrisFold0();
  ASSERT_EQ(rows.train.size(), 120u);
  ASSERT_EQ(rows.val.size(), 30u);
  testing::EpochRecorder observer;
  FitOptions options;
  options.task = 3;
  options.attempt = 2;
  absl::StatusOr<FoldResult> result = Fit(ReferenceIrisSpec(), Iris(), rows, 0, options, &observer);
  ASSERT_TRUE(result.ok()) << result.status();

  EXPECT_EQ(result->fold(), 0);
  EXPECT_EQ(result->epochs_run(), 100);
  EXPECT_EQ(result->train_rows(), 120);
  EXPECT_EQ(result->val_rows(), 30);
  EXPECT_GE(result->val().at("accuracy"), 0.9);
  EXPECT_GE(result->final_train().at("accuracy"), 0.9);

  ASSERT_EQ(observer.epochs.size(), 100u);
  double best_loss = 1e300;
  int best_epoch = 0;
  for (size_t i = 0; i < observer.epochs.size(); ++i) {
    const EpochMetrics& m = observer.epochs[i];
    EXPECT_EQ(m.task(), 3);
    EXPECT_EQ(m.attempt(), 2);
    EXPECT_EQ(m.epoch(), static_cast<int>(i) + 1);
    EXPECT_EQ(m.batches(), 8 * (static_cast<int64_t>(i) + 1));  // ceil(120 / 16) = 8 per epoch
    EXPECT_GE(m.seconds(), 0.0);
    ASSERT_EQ(m.train().size(), 2u);
    ASSERT_EQ(m.val().size(), 2u);
    for (const auto* map : {&m.train(), &m.val()}) {
      EXPECT_GT(map->at("loss"), 0.0);
      EXPECT_GE(map->at("accuracy"), 0.0);
      EXPECT_LE(map->at("accuracy"), 1.0);
    }
    if (m.val().at("loss") < best_loss) {
      best_loss = m.val().at("loss");
      best_epoch = m.epoch();
    }
  }
  // Learning happened: the loss fell from the first epoch to the last.
  EXPECT_LT(observer.epochs.back().train().at("loss"),
            0.5 * observer.epochs.front().train().at("loss"));
  EXPECT_EQ(result->best_epoch(), best_epoch);
  EXPECT_EQ(result->val().at("loss"), best_loss);
  EXPECT_EQ(result->val().at("accuracy"), observer.epochs[best_epoch - 1].val().at("accuracy"));
  EXPECT_EQ(result->final_train().at("loss"), observer.epochs.back().train().at("loss"));
}

TEST(FitTest, SameSeedGivesIdenticalMetrics) {
  JobSpec spec = ReferenceIrisSpec();
  spec.mutable_training()->set_epochs(15);
  data::FoldRows rows = IrisFold0();
  testing::EpochRecorder a, b, c;
  ASSERT_TRUE(Fit(spec, Iris(), rows, 0, {}, &a).ok());
  ASSERT_TRUE(Fit(spec, Iris(), rows, 0, {}, &b).ok());
  ASSERT_EQ(a.epochs.size(), b.epochs.size());
  for (size_t i = 0; i < a.epochs.size(); ++i) {
    for (const char* key : {"loss", "accuracy"}) {
      EXPECT_EQ(a.epochs[i].train().at(key), b.epochs[i].train().at(key)) << key << " epoch " << i;
      EXPECT_EQ(a.epochs[i].val().at(key), b.epochs[i].val().at(key)) << key << " epoch " << i;
    }
  }
  // Another seed initializes and shuffles differently.
  spec.set_seed(43);
  ASSERT_TRUE(Fit(spec, Iris(), rows, 0, {}, &c).ok());
  EXPECT_NE(a.epochs[0].train().at("loss"), c.epochs[0].train().at("loss"));
}

TEST(FitTest, StopRequestedCancels) {
  testing::EpochRecorder observer;
  observer.stop_after_polls = 11;  // during epoch 2 (8 batches per epoch)
  absl::StatusOr<FoldResult> result =
      Fit(ReferenceIrisSpec(), Iris(), IrisFold0(), 0, {}, &observer);
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(FailureKindOf(result.status()), FailureKind::kCancelled);
  EXPECT_EQ(result.status().message(), "stopped on request at epoch 2, batch 3");
  EXPECT_EQ(observer.epochs.size(), 1u);
}

TEST(FitTest, ObserverErrorStopsTraining) {
  testing::EpochRecorder observer;
  observer.fail_at_epoch = 2;
  absl::StatusOr<FoldResult> result =
      Fit(ReferenceIrisSpec(), Iris(), IrisFold0(), 0, {}, &observer);
  EXPECT_EQ(result.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(observer.epochs.size(), 2u);
}

TEST(FitTest, BatchesCountsStepsAndReportsThePartialEpoch) {
  JobSpec spec = ReferenceIrisSpec();
  spec.mutable_training()->clear_epochs();
  spec.mutable_training()->set_batches(10);
  testing::EpochRecorder observer;
  absl::StatusOr<FoldResult> result = Fit(spec, Iris(), IrisFold0(), 0, {}, &observer);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->epochs_run(), 2);
  ASSERT_EQ(observer.epochs.size(), 2u);
  EXPECT_EQ(observer.epochs[0].batches(), 8);
  EXPECT_EQ(observer.epochs[1].batches(), 10);
  EXPECT_EQ(observer.epochs[1].epoch(), 2);
  EXPECT_EQ(observer.polls, 10);
}

TEST(FitTest, NoValidationRows) {
  JobSpec spec = ReferenceIrisSpec();
  spec.mutable_training()->set_epochs(3);
  data::FoldRows rows;
  for (int64_t i = 0; i < Iris().rows; ++i) rows.train.push_back(i);
  testing::EpochRecorder observer;
  absl::StatusOr<FoldResult> result = Fit(spec, Iris(), rows, 0, {}, &observer);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->best_epoch(), 3);
  EXPECT_TRUE(result->val().empty());
  EXPECT_EQ(result->val_rows(), 0);
  ASSERT_EQ(observer.epochs.size(), 3u);
  EXPECT_TRUE(observer.epochs[0].val().empty());
  EXPECT_EQ(observer.epochs[0].batches(), 10);  // ceil(150 / 16)
}

// The chosen metrics, plus the loss, which is always reported.
TEST(FitTest, ChosenMetricsOnly) {
  JobSpec spec = ReferenceIrisSpec();
  spec.mutable_training()->set_epochs(2);
  spec.mutable_metrics()->add_train(traind::v1::ACCURACY);
  spec.mutable_metrics()->add_val(traind::v1::LOSS);
  testing::EpochRecorder observer;
  absl::StatusOr<FoldResult> result = Fit(spec, Iris(), IrisFold0(), 0, {}, &observer);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_THAT(observer.epochs[1].train(),
              UnorderedElementsAre(Pair("accuracy", ::testing::_), Pair("loss", ::testing::_)));
  EXPECT_THAT(observer.epochs[1].val(), UnorderedElementsAre(Pair("loss", ::testing::_)));
  EXPECT_THAT(result->val(), UnorderedElementsAre(Pair("loss", ::testing::_)));
}

// Standardization is fitted on the training rows only: making the validation
// rows extreme changes nothing the training batches see.
TEST(FitTest, StandardizationIgnoresValidationRows) {
  JobSpec spec = ReferenceIrisSpec();
  spec.mutable_training()->set_epochs(3);
  data::FoldRows rows = IrisFold0();
  data::Dataset extreme = Iris();
  for (int64_t r : rows.val) {
    for (int64_t j = 0; j < extreme.features; ++j) extreme.x[r * extreme.features + j] = 1e6f;
  }
  testing::EpochRecorder normal_run, extreme_run;
  ASSERT_TRUE(Fit(spec, Iris(), rows, 0, {}, &normal_run).ok());
  ASSERT_TRUE(Fit(spec, extreme, rows, 0, {}, &extreme_run).ok());
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(normal_run.epochs[i].train().at("loss"), extreme_run.epochs[i].train().at("loss"));
  }
  // ... while the validation rows, scaled by the training statistics, are far off.
  EXPECT_GT(extreme_run.epochs[2].val().at("loss"), 10 * normal_run.epochs[2].val().at("loss"));
}

TEST(FitTest, WrongOutputWidth) {
  JobSpec spec = ReferenceIrisSpec();
  spec.mutable_model()->mutable_layers(1)->mutable_dense()->set_units(4);
  absl::StatusOr<FoldResult> result = Fit(spec, Iris(), IrisFold0(), 0, {}, nullptr);
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(FailureKindOf(result.status()), FailureKind::kInvalidSpec);
  EXPECT_EQ(result.status().message(),
            "model.layers[1].dense.units: 4 units, but the data has 3 classes");
}

TEST(FitTest, BadSpecsAndRows) {
  JobSpec spec = ReferenceIrisSpec();
  spec.mutable_training()->set_batch_size(0);
  EXPECT_EQ(Fit(spec, Iris(), IrisFold0(), 0, {}, nullptr).status().message(),
            "training.batch_size: must be positive, got 0");
  spec = ReferenceIrisSpec();
  spec.mutable_training()->set_batches(5);
  EXPECT_EQ(Fit(spec, Iris(), IrisFold0(), 0, {}, nullptr).status().message(),
            "training: set only one of epochs and batches");
  spec = ReferenceIrisSpec();
  spec.mutable_model()->clear_layers();
  EXPECT_EQ(FailureKindOf(Fit(spec, Iris(), IrisFold0(), 0, {}, nullptr).status()),
            FailureKind::kInvalidSpec);
  data::FoldRows rows = IrisFold0();
  rows.val.push_back(150);
  EXPECT_EQ(Fit(ReferenceIrisSpec(), Iris(), rows, 0, {}, nullptr).status().code(),
            absl::StatusCode::kInvalidArgument);
  data::Dataset bad_code = Iris();
  bad_code.y[7] = 3;  // iris has 3 classes
  const absl::Status code =
      Fit(ReferenceIrisSpec(), bad_code, IrisFold0(), 0, {}, nullptr).status();
  EXPECT_EQ(code.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code.message(), "Fit: row 7 has class code 3, not in [0, 3)");
}

TEST(FitTest, DivergenceIsReported) {
  JobSpec spec = ReferenceIrisSpec();
  spec.mutable_data()->set_standardize(false);
  spec.mutable_optimizer()->mutable_sgd()->set_learning_rate(1e30);
  absl::StatusOr<FoldResult> result = Fit(spec, Iris(), IrisFold0(), 0, {}, nullptr);
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(FailureKindOf(result.status()), FailureKind::kDiverged);
  EXPECT_THAT(std::string(result.status().message()),
              ::testing::MatchesRegex("loss became (nan|inf) at epoch [0-9]+, batch [0-9]+"));
}

// The training loss of an epoch is read from the backend in runs of
// batches (every 256 and at the epoch's end): with a learning rate too small
// to change a float weight, every batch sees the initial model, so the
// epoch's training loss and accuracy over 600 batches equal those of the
// validation pass over the same rows.
TEST(FitTest, TrainingLossIsReadWholeAcrossLongEpochs) {
  JobSpec spec = ReferenceIrisSpec();
  spec.mutable_optimizer()->mutable_sgd()->set_learning_rate(1e-30);
  spec.mutable_training()->set_epochs(1);
  spec.mutable_training()->set_batch_size(1);
  spec.mutable_metrics()->add_train(traind::v1::ACCURACY);
  spec.mutable_metrics()->add_val(traind::v1::ACCURACY);
  data::FoldRows rows;
  for (int64_t r = 0; r < 150; ++r) rows.train.push_back(r);
  for (int repeat = 0; repeat < 4; ++repeat) {
    for (int64_t r = 0; r < 150; ++r) rows.train.push_back(r);  // 750 rows, 750 batches
  }
  for (int64_t r = 0; r < 150; ++r) rows.val.push_back(r);
  testing::EpochRecorder observer;
  absl::StatusOr<FoldResult> result = Fit(spec, Iris(), rows, 0, {}, &observer);
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_EQ(observer.epochs.size(), 1u);
  const EpochMetrics& e = observer.epochs[0];
  EXPECT_EQ(e.batches(), 750);
  EXPECT_NEAR(e.train().at("loss"), e.val().at("loss"), 1e-6 * e.val().at("loss"));
  EXPECT_NEAR(e.train().at("accuracy"), e.val().at("accuracy"), 1e-12);
}

// examples/data/digits.csv, labelled by its "digit" column.
absl::StatusOr<data::Dataset> Digits() {
  traind::v1::DataSpec data_spec;
  data_spec.set_path(std::string(TRAIND_SOURCE_DIR) + "/examples/data/digits.csv");
  data_spec.set_label("digit");
  return data::LoadDataset(data_spec);
}

TEST(FitTest, SgdWithMomentumAndNoShuffleOnDigits) {
  absl::StatusOr<data::Dataset> digits = Digits();
  ASSERT_TRUE(digits.ok()) << digits.status();
  ASSERT_EQ(digits->features, 64);
  ASSERT_EQ(digits->classes.size(), 10u);
  JobSpec spec;
  spec.set_seed(7);
  spec.mutable_data()->set_standardize(true);
  traind::v1::Dense* hidden = spec.mutable_model()->add_layers()->mutable_dense();
  hidden->set_units(128);
  hidden->set_activation(traind::v1::RELU);
  hidden->set_init(traind::v1::XAVIER_NORMAL);
  spec.mutable_model()->add_layers()->mutable_dense()->set_units(10);
  spec.mutable_optimizer()->mutable_sgd()->set_learning_rate(0.05);
  spec.mutable_optimizer()->mutable_sgd()->set_momentum(0.9);
  spec.mutable_training()->set_epochs(5);
  spec.mutable_training()->set_batch_size(32);
  spec.mutable_training()->set_shuffle(false);
  data::FoldRows rows = data::FoldSplit(data::StratifiedKFold(digits->y, 5, true, 7), 1);
  absl::StatusOr<FoldResult> result = Fit(spec, *digits, rows, 1, {}, nullptr);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_GE(result->val().at("accuracy"), 0.93);
}

// On one rank, SGD with momentum runs inside the backward pass of a layer the
// CPU backend splits in row slabs (64 × 600 on 2 threads): every step of the
// fit updates that weight there and the three other parameters from their
// gradients, and trains as the update from the gradient does, to rounding.
// The same spec with clipping (that never clips), and the same fit with
// FitOptions::update_in_backward false, update every parameter from its
// gradient.
TEST(FitTest, SgdWithMomentumUpdatesSplitLayersInTheBackwardPass) {
  absl::StatusOr<data::Dataset> digits = Digits();
  ASSERT_TRUE(digits.ok()) << digits.status();
  JobSpec spec;
  spec.set_seed(11);
  spec.mutable_data()->set_standardize(true);
  traind::v1::Dense* hidden = spec.mutable_model()->add_layers()->mutable_dense();
  hidden->set_units(600);
  hidden->set_activation(traind::v1::RELU);
  spec.mutable_model()->add_layers()->mutable_dense()->set_units(10);
  spec.mutable_optimizer()->mutable_sgd()->set_learning_rate(0.02);
  spec.mutable_optimizer()->mutable_sgd()->set_momentum(0.9);
  spec.mutable_optimizer()->mutable_sgd()->set_weight_decay(1e-4);
  spec.mutable_training()->set_epochs(3);
  spec.mutable_training()->set_batch_size(32);
  JobSpec clipped = spec;
  clipped.mutable_optimizer()->mutable_clipping()->set_max_norm(1e30);
  const data::FoldRows rows = data::FoldSplit(data::StratifiedKFold(digits->y, 5, true, 7), 1);
  const int64_t steps = 3 * ((static_cast<int64_t>(rows.train.size()) + 31) / 32);
  const int saved_threads = omp_get_max_threads();
  omp_set_num_threads(2);
  std::vector<testing::EpochRecorder> observers(3);
  for (int run = 0; run < 3; ++run) {
    SCOPED_TRACE(::testing::Message() << "run " << run);
    std::unique_ptr<Backend> backend =
        testing::NewGraphRecordingBackend(std::move(CreateCpuBackend()).value(), "recording");
    FitOptions options;
    options.backend = backend.get();
    options.step_graphs = false;  // as on the CPU backend, which has none
    options.update_in_backward = run != 2;
    absl::StatusOr<FoldResult> result =
        Fit(run == 1 ? clipped : spec, *digits, rows, 1, options, &observers[run]);
    ASSERT_TRUE(result.ok()) << result.status();
    EXPECT_GE(result->val().at("accuracy"), 0.9);
    auto* recording = static_cast<testing::GraphRecordingBackend*>(backend.get());
    EXPECT_EQ(recording->backward_updates(), run == 0 ? steps : 0);
    EXPECT_EQ(recording->sgd_updated_tensors(), (run == 0 ? 3 : 4) * steps);
    ASSERT_EQ(observers[run].epochs.size(), 3u);
  }
  omp_set_num_threads(saved_threads);
  for (size_t e = 0; e < 3; ++e) {
    const double a = observers[0].epochs[e].train().at("loss");
    for (int run = 1; run < 3; ++run) {
      const double b = observers[run].epochs[e].train().at("loss");
      EXPECT_NEAR(a, b, 1e-4 * b) << "epoch " << e + 1 << ", run " << run;
    }
  }
}

// Step graphs, on a backend that records them as CUDA does (frozen
// arguments, tensors read when replayed): training equals the CPU's op by op
// bit for bit, and the graph is recorded once and replayed at the full
// batches after the first.
struct GraphRun {
  absl::StatusOr<FoldResult> result = absl::UnknownError("not run");
  testing::EpochRecorder observer;
  int64_t graphs = 0, launches = 0;
};

std::unique_ptr<GraphRun> FitWithGraphs(const JobSpec& spec, const data::FoldRows& rows,
                                        bool graphs) {
  auto run = std::make_unique<GraphRun>();
  std::unique_ptr<Backend> backend =
      testing::NewGraphRecordingBackend(std::move(CreateCpuBackend()).value(), "recording");
  FitOptions options;
  options.backend = backend.get();
  options.step_graphs = graphs;
  run->result = Fit(spec, Iris(), rows, 0, options, &run->observer);
  auto* recording = static_cast<testing::GraphRecordingBackend*>(backend.get());
  run->graphs = recording->graphs();
  run->launches = recording->launches();
  return run;
}

void ExpectSameTraining(const testing::EpochRecorder& a, const testing::EpochRecorder& b) {
  ASSERT_EQ(a.epochs.size(), b.epochs.size());
  for (size_t e = 0; e < a.epochs.size(); ++e) {
    for (const auto& [name, value] : a.epochs[e].train()) {
      EXPECT_EQ(b.epochs[e].train().at(name), value) << "train " << name << " epoch " << e + 1;
    }
    for (const auto& [name, value] : a.epochs[e].val()) {
      EXPECT_EQ(b.epochs[e].val().at(name), value) << "val " << name << " epoch " << e + 1;
    }
  }
}

TEST(FitStepGraphTest, GraphsReplayFullBatchesAndTrainAsOpByOne) {
  JobSpec weighted = ReferenceIrisSpec();
  for (double w : {1.0, 3.0, 0.5}) {
    weighted.mutable_loss()->mutable_softmax_cross_entropy()->add_class_weights(w);
  }
  JobSpec normalized = ReferenceIrisSpec();
  normalized.mutable_model()->clear_layers();
  auto* d1 = normalized.mutable_model()->add_layers()->mutable_dense();
  d1->set_units(16);
  d1->set_activation(traind::v1::GELU);  // not fused: its own kernel
  normalized.mutable_model()->add_layers()->mutable_batch_norm();
  auto* d2 = normalized.mutable_model()->add_layers()->mutable_dense();
  d2->set_units(8);
  d2->set_activation(traind::v1::TANH);
  normalized.mutable_model()->add_layers()->mutable_layer_norm();
  normalized.mutable_model()->add_layers()->mutable_dense()->set_units(3);
  normalized.mutable_optimizer()->clear_adam();
  normalized.mutable_optimizer()->mutable_sgd()->set_learning_rate(0.05);
  normalized.mutable_optimizer()->mutable_sgd()->set_momentum(0.9);
  normalized.mutable_optimizer()->mutable_clipping()->set_max_norm(0.5);
  normalized.mutable_training()->set_epochs(20);
  const data::FoldRows rows = IrisFold0();  // 120 rows: 7 full batches of 16 and one of 8
  struct Case {
    const char* name;
    JobSpec spec;
  };
  // With class weights, batches weigh differently: each replay reads the
  // gradient scale stored before it.
  for (const Case& c : {Case{"adam", ReferenceIrisSpec()}, Case{"normalized", normalized},
                        Case{"class weights", weighted}}) {
    SCOPED_TRACE(c.name);
    testing::EpochRecorder eager;
    FitOptions cpu;
    ASSERT_TRUE(Fit(c.spec, Iris(), rows, 0, cpu, &eager).ok());
    std::unique_ptr<GraphRun> run = FitWithGraphs(c.spec, rows, true);
    ASSERT_TRUE(run->result.ok()) << run->result.status();
    ExpectSameTraining(eager, run->observer);
    EXPECT_EQ(run->graphs, 1);
    const int64_t epochs = c.spec.training().epochs();
    // Every full batch but the first (op by op), the second's graph
    // launched as soon as recorded.
    EXPECT_EQ(run->launches, 7 * epochs - 1);
  }
}

TEST(FitStepGraphTest, NoGraphWithDropoutOrWhenTurnedOff) {
  JobSpec dropout = ReferenceIrisSpec();
  dropout.mutable_model()->mutable_layers(0)->mutable_dense();
  *dropout.mutable_model()->add_layers() = dropout.model().layers(1);
  dropout.mutable_model()->mutable_layers(1)->mutable_dropout()->set_rate(0.2);
  const data::FoldRows rows = IrisFold0();
  for (const auto& [spec, graphs] :
       {std::pair{dropout, true}, std::pair{ReferenceIrisSpec(), false}}) {
    testing::EpochRecorder eager;
    FitOptions cpu;
    ASSERT_TRUE(Fit(spec, Iris(), rows, 0, cpu, &eager).ok());
    std::unique_ptr<GraphRun> run = FitWithGraphs(spec, rows, graphs);
    ASSERT_TRUE(run->result.ok()) << run->result.status();
    ExpectSameTraining(eager, run->observer);
    EXPECT_EQ(run->graphs, 0);
    EXPECT_EQ(run->launches, 0);
  }
}

TEST(FitStepGraphTest, DivergenceUnderGraphsIsReportedAsOpByOne) {
  JobSpec spec = ReferenceIrisSpec();
  spec.mutable_data()->set_standardize(false);
  spec.mutable_optimizer()->mutable_sgd()->set_learning_rate(1e30);
  const absl::Status eager = Fit(spec, Iris(), IrisFold0(), 0, {}, nullptr).status();
  std::unique_ptr<GraphRun> run = FitWithGraphs(spec, IrisFold0(), true);
  EXPECT_EQ(FailureKindOf(run->result.status()), FailureKind::kDiverged);
  EXPECT_EQ(run->result.status().message(), eager.message());
}

}  // namespace
}  // namespace traind::engine
