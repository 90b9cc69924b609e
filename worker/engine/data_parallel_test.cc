// Data parallelism in Fit: N ranks (threads of an InProcessGroup, each with
// its own CPU backend) against one rank at the same global batch. The
// one-rank run is the reference: N ranks must reach its weights, metrics and
// predictions within float rounding, and every rank must report exactly the
// same metrics.
#include <dirent.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/status.h"
#include "data/split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/temp_dir.h"
#include "tests/testing/tfevents_reader.h"
#include "worker/engine/backend/cpu/cpu_backend.h"
#include "worker/engine/checkpoint.h"
#include "worker/engine/data/features.h"
#include "worker/engine/fit.h"
#include "worker/engine/network.h"
#include "worker/engine/parallel/in_process_communicator.h"
#include "worker/engine/testing/epoch_recorder.h"

namespace traind::engine {
namespace {

using ::testing::HasSubstr;
using traind::v1::EpochMetrics;
using traind::v1::FoldResult;
using traind::v1::JobSpec;

// ------------------------------------------------------------------ data

std::string Source(const std::string& rel) { return std::string(TRAIND_SOURCE_DIR) + "/" + rel; }

traind::v1::DataSpec IrisData() {
  traind::v1::DataSpec data;
  data.set_path(Source("examples/data/iris.csv"));
  data.set_label("species");
  data.set_standardize(true);
  return data;
}

const data::Dataset& Iris() {
  static const data::Dataset* iris =
      new data::Dataset(std::move(data::LoadDataset(IrisData())).value());
  return *iris;
}

data::FoldRows IrisFold0() {
  return data::FoldSplit(data::StratifiedKFold(Iris().y, 5, /*shuffle=*/true, 42), 0);
}

void AddDense(JobSpec* spec, int units, traind::v1::Activation activation) {
  traind::v1::Dense* dense = spec->mutable_model()->add_layers()->mutable_dense();
  dense->set_units(units);
  dense->set_activation(activation);
}

// Dense(16, relu) + Dense(3), Adam, batch 16: 120 training rows give
// batches of 16 and a last one of 8.
JobSpec DataParallelIrisSpec() {
  JobSpec spec;
  spec.set_seed(42);
  *spec.mutable_data() = IrisData();
  AddDense(&spec, 16, traind::v1::RELU);
  AddDense(&spec, 3, traind::v1::LINEAR);
  spec.mutable_loss()->mutable_softmax_cross_entropy();
  spec.mutable_optimizer()->mutable_adam()->set_learning_rate(0.01);
  spec.mutable_training()->set_epochs(4);
  spec.mutable_training()->set_batch_size(16);
  for (auto m :
       {traind::v1::LOSS, traind::v1::ACCURACY, traind::v1::F1_MACRO, traind::v1::LOG_LOSS}) {
    spec.mutable_metrics()->add_train(m);
    spec.mutable_metrics()->add_val(m);
  }
  return spec;
}

// A dense layer without bias (batch norm after it cancels any bias: its
// gradient would be rounding noise only, which Adam would scale up to
// steps of the learning rate).
void AddDenseWithoutBias(JobSpec* spec, int units) {
  AddDense(spec, units, traind::v1::LINEAR);
  spec->mutable_model()->mutable_layers()->rbegin()->mutable_dense()->set_bias(false);
}

// Dense(16, no bias) + batch norm + relu + Dense(3) on iris, batch 10.
JobSpec IrisBatchNormSpec() {
  JobSpec spec = DataParallelIrisSpec();
  spec.mutable_model()->clear_layers();
  AddDenseWithoutBias(&spec, 16);
  spec.mutable_model()->add_layers()->mutable_batch_norm();
  spec.mutable_model()->add_layers()->mutable_activation()->set_function(traind::v1::RELU);
  AddDense(&spec, 3, traind::v1::LINEAR);
  spec.mutable_training()->set_batch_size(10);  // 3 ranks: 4, 3, 3 rows
  return spec;
}

// Regression on diabetes (unscaled targets, so the gradients are large and
// clipping by norm is active at every step), SGD with momentum.
JobSpec DiabetesSpec() {
  JobSpec spec;
  spec.set_seed(3);
  spec.mutable_data()->set_path(Source("examples/data/diabetes.csv"));
  spec.mutable_data()->set_label("progression");
  spec.mutable_data()->add_categorical("sex");
  spec.mutable_data()->set_standardize(true);
  AddDense(&spec, 16, traind::v1::TANH);
  AddDense(&spec, 1, traind::v1::LINEAR);
  spec.mutable_loss()->mutable_mse();
  spec.mutable_optimizer()->mutable_sgd()->set_learning_rate(0.02);
  spec.mutable_optimizer()->mutable_sgd()->set_momentum(0.9);
  spec.mutable_optimizer()->mutable_clipping()->set_max_norm(5.0);
  spec.mutable_training()->set_epochs(4);
  spec.mutable_training()->set_batch_size(32);
  for (auto m : {traind::v1::LOSS, traind::v1::MSE, traind::v1::MAE, traind::v1::R2}) {
    spec.mutable_metrics()->add_train(m);
  }
  for (auto m : {traind::v1::LOSS, traind::v1::RMSE, traind::v1::R2}) {
    spec.mutable_metrics()->add_val(m);
  }
  return spec;
}

const data::Dataset& Diabetes() {
  static const data::Dataset* d =
      new data::Dataset(std::move(data::LoadDataset(DiabetesSpec())).value());
  return *d;
}

// Binary classification with scores for ROC AUC; clipping by value.
JobSpec BreastCancerSpec() {
  JobSpec spec;
  spec.set_seed(11);
  spec.mutable_data()->set_path(Source("examples/data/breast_cancer.csv"));
  spec.mutable_data()->set_label("diagnosis");
  spec.mutable_data()->set_standardize(true);
  AddDense(&spec, 8, traind::v1::RELU);
  AddDense(&spec, 1, traind::v1::LINEAR);
  spec.mutable_loss()->mutable_sigmoid_binary_cross_entropy();
  spec.mutable_optimizer()->mutable_adam()->set_learning_rate(0.005);
  spec.mutable_optimizer()->mutable_clipping()->set_max_value(0.05);
  spec.mutable_training()->set_epochs(3);
  spec.mutable_training()->set_batch_size(24);
  for (auto m :
       {traind::v1::LOSS, traind::v1::ACCURACY, traind::v1::ROC_AUC, traind::v1::F1_MACRO}) {
    spec.mutable_metrics()->add_train(m);
    spec.mutable_metrics()->add_val(m);
  }
  return spec;
}

const data::Dataset& BreastCancer() {
  static const data::Dataset* d =
      new data::Dataset(std::move(data::LoadDataset(BreastCancerSpec())).value());
  return *d;
}

// ---------------------------------------------------------------- running

// A fresh directory, removed (with its files) at the end of the test.
class ScratchDir {
 public:
  ScratchDir() {
    const char* tmp = std::getenv("TEST_TMPDIR");
    std::string pattern = std::string(tmp != nullptr ? tmp : "/tmp") + "/traind_dp_XXXXXX";
    path_ = mkdtemp(pattern.data()) != nullptr ? pattern : "";
  }
  ~ScratchDir() {
    if (path_.empty()) return;
    if (DIR* dir = opendir(path_.c_str())) {
      while (dirent* e = readdir(dir)) {
        if (std::string(e->d_name) != "." && std::string(e->d_name) != "..") {
          std::remove((path_ + "/" + e->d_name).c_str());
        }
      }
      closedir(dir);
    }
    rmdir(path_.c_str());
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

struct RankRun {
  absl::StatusOr<FoldResult> result = absl::UnknownError("not run");
  testing::EpochRecorder recorder;
  absl::Duration took;
};

// Sets up one rank before it runs: its observer and its rows.
using RankSetup =
    std::function<void(int rank, testing::EpochRecorder* recorder, data::FoldRows* rows)>;

// `ranks` threads, each calling Fit as one rank of an InProcessGroup with
// its own CPU backend. `options` is every rank's, but for the backend and
// the communicator.
std::vector<std::unique_ptr<RankRun>> RunRanks(int ranks, const JobSpec& spec,
                                               const data::Dataset& data,
                                               const data::FoldRows& rows,
                                               const FitOptions& options,
                                               const RankSetup& setup = nullptr) {
  // Much longer than any test: a failure that shows up only after this
  // long is a hang, not the fast failure the abort path promises.
  InProcessGroup group(ranks, absl::Seconds(120));
  std::vector<std::unique_ptr<RankRun>> runs;
  for (int r = 0; r < ranks; ++r) runs.push_back(std::make_unique<RankRun>());
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r) {
    threads.emplace_back([&, r] {
      RankRun& run = *runs[static_cast<size_t>(r)];
      data::FoldRows my_rows = rows;
      if (setup) setup(r, &run.recorder, &my_rows);
      std::unique_ptr<Communicator> communicator = group.Rank(r);
      absl::StatusOr<std::unique_ptr<Backend>> backend = CreateCpuBackend();
      if (!backend.ok()) {
        run.result = backend.status();
        communicator->Abort(backend.status().message());
        return;
      }
      FitOptions mine = options;
      mine.backend = backend->get();
      mine.communicator = communicator.get();
      const absl::Time start = absl::Now();
      run.result = Fit(spec, data, my_rows, 0, mine, &run.recorder);
      run.took = absl::Now() - start;
    });
  }
  for (std::thread& t : threads) t.join();
  return runs;
}

struct Reference {
  absl::StatusOr<FoldResult> result = absl::UnknownError("not run");
  testing::EpochRecorder recorder;
};

// The same task on one rank, no communicator.
std::unique_ptr<Reference> RunOneRank(const JobSpec& spec, const data::Dataset& data,
                                      const data::FoldRows& rows, const FitOptions& options) {
  auto ref = std::make_unique<Reference>();
  ref->result = Fit(spec, data, rows, 0, options, &ref->recorder);
  return ref;
}

// ------------------------------------------------------------- comparing

void ExpectSameMap(const google::protobuf::Map<std::string, double>& a,
                   const google::protobuf::Map<std::string, double>& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (const auto& [key, value] : a) {
    ASSERT_TRUE(b.contains(key)) << what << " " << key;
    EXPECT_EQ(value, b.at(key)) << what << " " << key;
  }
}

// Every rank reports exactly what rank 0 reports, and returns the same result.
void ExpectRanksAgree(const std::vector<std::unique_ptr<RankRun>>& runs) {
  const RankRun& first = *runs[0];
  ASSERT_TRUE(first.result.ok()) << first.result.status();
  for (size_t r = 1; r < runs.size(); ++r) {
    const RankRun& run = *runs[r];
    ASSERT_TRUE(run.result.ok()) << "rank " << r << ": " << run.result.status();
    ASSERT_EQ(run.recorder.epochs.size(), first.recorder.epochs.size()) << "rank " << r;
    for (size_t e = 0; e < first.recorder.epochs.size(); ++e) {
      const EpochMetrics& a = first.recorder.epochs[e];
      const EpochMetrics& b = run.recorder.epochs[e];
      const std::string what = absl::StrCat("rank ", r, " epoch ", e + 1);
      EXPECT_EQ(a.epoch(), b.epoch()) << what;
      EXPECT_EQ(a.batches(), b.batches()) << what;
      EXPECT_EQ(a.seconds(), b.seconds()) << what;
      ExpectSameMap(a.train(), b.train(), what + " train");
      ExpectSameMap(a.val(), b.val(), what + " val");
    }
    EXPECT_EQ(run.result->best_epoch(), first.result->best_epoch()) << "rank " << r;
    EXPECT_EQ(run.result->epochs_run(), first.result->epochs_run()) << "rank " << r;
    EXPECT_EQ(run.result->stopped_early(), first.result->stopped_early()) << "rank " << r;
    ExpectSameMap(run.result->val(), first.result->val(), absl::StrCat("rank ", r, " result val"));
    ExpectSameMap(run.result->final_train(), first.result->final_train(),
                  absl::StrCat("rank ", r, " result final_train"));
  }
}

bool Near(double expected, double actual, double tolerance) {
  return std::fabs(expected - actual) <= tolerance * (1.0 + std::fabs(expected));
}

void ExpectNearMap(const google::protobuf::Map<std::string, double>& expected,
                   const google::protobuf::Map<std::string, double>& actual, double tolerance,
                   const std::string& what) {
  ASSERT_EQ(expected.size(), actual.size()) << what;
  for (const auto& [key, value] : expected) {
    ASSERT_TRUE(actual.contains(key)) << what << " " << key;
    EXPECT_TRUE(Near(value, actual.at(key), tolerance))
        << what << " " << key << ": one rank " << value << ", data parallel " << actual.at(key);
  }
}

// Rank 0's metrics equal the one-rank run's within `tolerance` (relative).
void ExpectMatchesOneRank(const Reference& ref, const RankRun& run, double tolerance) {
  ASSERT_TRUE(ref.result.ok()) << ref.result.status();
  ASSERT_TRUE(run.result.ok()) << run.result.status();
  ASSERT_EQ(run.recorder.epochs.size(), ref.recorder.epochs.size());
  for (size_t e = 0; e < ref.recorder.epochs.size(); ++e) {
    const EpochMetrics& a = ref.recorder.epochs[e];
    const EpochMetrics& b = run.recorder.epochs[e];
    EXPECT_EQ(a.epoch(), b.epoch());
    EXPECT_EQ(a.batches(), b.batches());
    const std::string what = absl::StrCat("epoch ", e + 1);
    ExpectNearMap(a.train(), b.train(), tolerance, what + " train");
    ExpectNearMap(a.val(), b.val(), tolerance, what + " val");
  }
  EXPECT_EQ(run.result->best_epoch(), ref.result->best_epoch());
  EXPECT_EQ(run.result->epochs_run(), ref.result->epochs_run());
}

// The names and sizes of the model's state (weights, biases, running
// statistics), as Fit checkpoints them: "state.<name>".
std::vector<std::pair<std::string, size_t>> StateLayout(const JobSpec& spec,
                                                        const data::Dataset& data,
                                                        const data::FoldRows& rows) {
  FeaturePipeline pipeline;
  pipeline.Fit(spec.data(), data, rows.train);
  std::unique_ptr<Backend> backend = std::move(CreateCpuBackend()).value();
  Network network =
      std::move(Network::Create(backend.get(), pipeline.width(), spec.model())).value();
  std::vector<std::pair<std::string, size_t>> layout;
  for (const Parameter& p : network.state()) {
    layout.emplace_back("state." + p.name, static_cast<size_t>(p.value->size()));
  }
  return layout;
}

std::vector<std::vector<float>> ReadState(
    const std::string& path, const std::vector<std::pair<std::string, size_t>>& layout) {
  absl::StatusOr<CheckpointReader> reader = CheckpointReader::ReadFile(path);
  EXPECT_TRUE(reader.ok()) << reader.status();
  std::vector<std::vector<float>> state;
  for (const auto& [name, size] : layout) {
    state.emplace_back(size);
    if (reader.ok()) {
      EXPECT_TRUE(reader->GetFloats(name, state.back().data(), size).ok()) << path << " " << name;
    }
  }
  return state;
}

// The final weights: rank 0's last periodic checkpoint against the
// one-rank run's.
void ExpectSameWeights(const JobSpec& spec, const data::Dataset& data, const data::FoldRows& rows,
                       const std::string& one_rank_dir, const std::string& ranks_dir, int epoch,
                       double tolerance) {
  const auto layout = StateLayout(spec, data, rows);
  const std::string file = absl::StrFormat("/epoch-%06d.ckpt", epoch);
  const auto expected = ReadState(one_rank_dir + file, layout);
  const auto actual = ReadState(ranks_dir + file, layout);
  double largest = 0;
  for (size_t i = 0; i < layout.size(); ++i) {
    for (size_t j = 0; j < layout[i].second; ++j) {
      const double a = expected[i][j], b = actual[i][j];
      largest = std::max(largest, std::fabs(a - b));
      EXPECT_TRUE(Near(a, b, tolerance))
          << layout[i].first << "[" << j << "]: one rank " << a << ", data parallel " << b;
    }
  }
  std::printf("[dp] largest weight difference from one rank: %.3g\n", largest);
}

std::vector<std::vector<double>> ReadPredictions(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::vector<std::vector<double>> rows;
  EXPECT_TRUE(std::getline(in, line)) << path;  // header
  // The label column (class targets) is the class the probabilities choose,
  // and the true class the file's: compared through the probabilities.
  const std::vector<std::string> header = absl::StrSplit(line, ',');
  while (std::getline(in, line)) {
    std::vector<double> values;
    size_t column = 0;
    for (absl::string_view field : absl::StrSplit(line, ',')) {
      const std::string name = column < header.size() ? header[column] : "";
      ++column;
      if (name == "label" || absl::StartsWith(name, "true_")) continue;
      values.push_back(std::stod(std::string(field)));
    }
    rows.push_back(std::move(values));
  }
  return rows;
}

// Each rank predicts its share of the validation rows with its own weights:
// predictions.csv (written by rank 0) equal to one rank's shows that every
// rank holds the one-rank weights.
void ExpectSamePredictions(const std::string& one_rank_dir, const std::string& ranks_dir,
                           double tolerance) {
  const auto expected = ReadPredictions(one_rank_dir + "/predictions.csv");
  const auto actual = ReadPredictions(ranks_dir + "/predictions.csv");
  ASSERT_FALSE(expected.empty());
  ASSERT_EQ(expected.size(), actual.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    ASSERT_EQ(expected[i].size(), actual[i].size());
    EXPECT_EQ(expected[i][0], actual[i][0]) << "row id of prediction " << i;
    for (size_t j = 1; j < expected[i].size(); ++j) {
      EXPECT_TRUE(Near(expected[i][j], actual[i][j], tolerance))
          << "prediction " << i << " column " << j << ": one rank " << expected[i][j]
          << ", data parallel " << actual[i][j];
    }
  }
}

// Runs `spec` on one rank and on each of `rank_counts`, with periodic
// checkpoints and artifacts, and checks equivalence: metrics, weights,
// predictions; and identical reports on every rank.
void ExpectEquivalent(JobSpec spec, const data::Dataset& data, const data::FoldRows& rows,
                      const std::vector<int>& rank_counts, double tolerance,
                      int64_t bucket_bytes = int64_t{4} << 20) {
  spec.mutable_checkpoint()->set_every_epochs(1);
  ScratchDir one_ckpt, one_artifacts;
  FitOptions options;
  options.checkpoint_dir = one_ckpt.path();
  options.artifacts_dir = one_artifacts.path();
  std::unique_ptr<Reference> ref = RunOneRank(spec, data, rows, options);
  ASSERT_TRUE(ref->result.ok()) << ref->result.status();
  const int epochs = ref->result->epochs_run();
  for (int n : rank_counts) {
    SCOPED_TRACE(absl::StrCat(n, " ranks"));
    ScratchDir ckpt, artifacts;
    options.checkpoint_dir = ckpt.path();
    options.artifacts_dir = artifacts.path();
    options.allreduce_bucket_bytes = bucket_bytes;
    const auto runs = RunRanks(n, spec, data, rows, options);
    ExpectRanksAgree(runs);
    ExpectMatchesOneRank(*ref, *runs[0], tolerance);
    ExpectSameWeights(spec, data, rows, one_ckpt.path(), ckpt.path(), epochs, tolerance);
    if (!rows.val.empty()) {
      ExpectSamePredictions(one_artifacts.path(), artifacts.path(), tolerance);
      EXPECT_EQ(runs[0]->result->predictions_path(), artifacts.path() + "/predictions.csv");
      for (size_t r = 1; r < runs.size(); ++r) {
        EXPECT_TRUE(runs[r]->result->predictions_path().empty()) << "only rank 0 writes";
      }
    }
  }
}

// ----------------------------------------------------------------- tests

// Float rounding only: sums taken in another order, loss gradients scaled
// by the share's weight.
constexpr double kTolerance = 1e-5;

// A group of one rank takes the one-rank path (batch norm included).
TEST(DataParallelTest, OneRankGroupEqualsNoCommunicatorExactly) {
  for (const JobSpec& spec : {DataParallelIrisSpec(), IrisBatchNormSpec()}) {
    SCOPED_TRACE(spec.model().layers_size());
    const data::FoldRows rows = IrisFold0();
    std::unique_ptr<Reference> ref = RunOneRank(spec, Iris(), rows, {});
    const auto runs = RunRanks(1, spec, Iris(), rows, {});
    ASSERT_TRUE(ref->result.ok()) << ref->result.status();
    ASSERT_TRUE(runs[0]->result.ok()) << runs[0]->result.status();
    ASSERT_EQ(ref->recorder.epochs.size(), runs[0]->recorder.epochs.size());
    for (size_t e = 0; e < ref->recorder.epochs.size(); ++e) {
      ExpectSameMap(ref->recorder.epochs[e].train(), runs[0]->recorder.epochs[e].train(), "train");
      ExpectSameMap(ref->recorder.epochs[e].val(), runs[0]->recorder.epochs[e].val(), "val");
    }
  }
}

TEST(DataParallelTest, ClassificationWithAdamOnTwoAndThreeRanksEqualsOneRank) {
  // 3 ranks: shares of 6, 5, 5 rows; the last batch of 8 rows as 3, 3, 2.
  ExpectEquivalent(DataParallelIrisSpec(), Iris(), IrisFold0(), {2, 3}, kTolerance);
}

TEST(DataParallelTest, SmallBucketsSplitTensorsAndEqualOneRank) {
  // 64-float buckets: most tensors are summed in several pieces, and
  // pieces of a layer's weights go out while earlier layers still run
  // backward.
  JobSpec spec = DataParallelIrisSpec();
  spec.mutable_model()->clear_layers();
  AddDense(&spec, 24, traind::v1::RELU);
  AddDense(&spec, 12, traind::v1::TANH);
  AddDense(&spec, 3, traind::v1::LINEAR);
  ExpectEquivalent(spec, Iris(), IrisFold0(), {3}, kTolerance, /*bucket_bytes=*/256);
}

TEST(DataParallelTest, SgdMomentumUnevenSharesAndALastBatchSmallerThanTheRanks) {
  JobSpec spec = DataParallelIrisSpec();
  spec.mutable_optimizer()->clear_adam();
  spec.mutable_optimizer()->mutable_sgd()->set_learning_rate(0.05);
  spec.mutable_optimizer()->mutable_sgd()->set_momentum(0.9);
  spec.mutable_optimizer()->mutable_sgd()->set_nesterov(true);
  spec.mutable_training()->set_batch_size(10);  // 3 ranks: 4, 3, 3 rows
  // 121 training rows: the last batch has one row, so two of three ranks
  // have none.
  const data::FoldRows fold = IrisFold0();
  data::FoldRows rows;
  rows.train = fold.train;
  rows.train.push_back(fold.val[0]);
  rows.val.assign(fold.val.begin() + 1, fold.val.end());
  ASSERT_EQ(rows.train.size() % 10, 1u);
  ExpectEquivalent(spec, Iris(), rows, {2, 3}, kTolerance);
}

// Losses and predictions are read back from the backend in windows of at
// most 256 batches: 300 batches of 2 rows per epoch on 3 ranks (one rank
// has no rows in every batch) cross a window's end mid-epoch, and so do
// the 260 one-row validation chunks of each rank.
TEST(DataParallelTest, ManyBatchesPerEpochAcrossWindowsEqualOneRank) {
  JobSpec spec = DataParallelIrisSpec();
  spec.mutable_training()->set_batch_size(2);
  spec.mutable_training()->set_epochs(2);
  const data::FoldRows fold = IrisFold0();
  data::FoldRows rows;
  for (int repeat = 0; repeat < 5; ++repeat) {
    rows.train.insert(rows.train.end(), fold.train.begin(), fold.train.end());
  }
  for (int repeat = 0; repeat < 26; ++repeat) {
    rows.val.insert(rows.val.end(), fold.val.begin(), fold.val.end());
  }
  ASSERT_EQ(rows.train.size(), 600u);
  ASSERT_EQ(rows.val.size(), 780u);
  ExpectEquivalent(spec, Iris(), rows, {3}, kTolerance);
}

// Class weights with a zero and label smoothing: a share whose rows all
// have the zero-weight class weighs nothing, yet smoothing gives its rows a
// gradient, relative to the whole batch's weight.
TEST(DataParallelTest, ZeroWeightClassWithLabelSmoothingEqualsOneRank) {
  JobSpec spec = DataParallelIrisSpec();
  auto* ce = spec.mutable_loss()->mutable_softmax_cross_entropy();
  for (double w : {0.0, 1.0, 2.0}) ce->add_class_weights(w);
  ce->set_label_smoothing(0.3);
  spec.mutable_training()->set_batch_size(4);
  spec.mutable_training()->set_shuffle(false);
  // Batches of (setosa, setosa, versicolor, virginica): on 2 ranks, rank
  // 0's share is two setosa rows (weight 0).
  data::FoldRows rows;
  for (int64_t i = 0; i < 10; ++i) {
    for (int64_t r : {2 * i, 2 * i + 1, 50 + i, 100 + i}) rows.train.push_back(r);
  }
  for (int64_t i = 30; i < 40; ++i) {
    for (int64_t r : {i, 50 + i, 100 + i}) rows.val.push_back(r);
  }
  ASSERT_EQ(Iris().y[0], 0);
  ASSERT_EQ(Iris().y[50], 1);
  ASSERT_EQ(Iris().y[100], 2);
  ExpectEquivalent(spec, Iris(), rows, {2}, kTolerance);
}

TEST(DataParallelTest, RegressionWithClippingByNormEqualsOneRank) {
  const data::FoldRows rows =
      data::FoldSplit(data::KFold(Diabetes().rows, 5, /*shuffle=*/true, 3), 0);
  ExpectEquivalent(DiabetesSpec(), Diabetes(), rows, {2, 3}, kTolerance);
}

TEST(DataParallelTest, BinaryScoresForRocAucAndClippingByValueEqualOneRank) {
  const data::FoldRows rows =
      data::FoldSplit(data::StratifiedKFold(BreastCancer().y, 4, true, 11), 2);
  ExpectEquivalent(BreastCancerSpec(), BreastCancer(), rows, {2, 3}, kTolerance);
}

TEST(DataParallelTest, RefitWithoutValidationEqualsOneRank) {
  // No validation rows: the model checkpoint is the only artifact.
  data::FoldRows rows;
  for (int64_t i = 0; i < Iris().rows; ++i) rows.train.push_back(i);
  ExpectEquivalent(DataParallelIrisSpec(), Iris(), rows, {3}, kTolerance);
}

TEST(DataParallelTest, DropoutMasksAreDrawnByGlobalRow) {
  JobSpec spec = DataParallelIrisSpec();
  spec.mutable_model()->clear_layers();
  AddDense(&spec, 32, traind::v1::RELU);
  spec.mutable_model()->add_layers()->mutable_dropout()->set_rate(0.4);
  AddDense(&spec, 3, traind::v1::LINEAR);
  ExpectEquivalent(spec, Iris(), IrisFold0(), {2, 3}, kTolerance);
}

// Batch norm's statistics are summed across ranks: the model, its running
// statistics included, and the metrics equal one rank's.
TEST(DataParallelTest, BatchNormOnTwoAndThreeRanksEqualsOneRank) {
  ExpectEquivalent(IrisBatchNormSpec(), Iris(), IrisFold0(), {2, 3}, kTolerance);
}

TEST(DataParallelTest, BatchNormWithARankWithoutRowsEqualsOneRank) {
  // A first batch norm layer (whose dx is not needed), two batch norm
  // layers, small buckets. SGD: a one-row batch leaves only rounding noise
  // in the gradients before a batch norm layer, which Adam would scale up.
  JobSpec spec = IrisBatchNormSpec();
  spec.mutable_model()->clear_layers();
  spec.mutable_model()->add_layers()->mutable_batch_norm()->set_momentum(0.3);
  AddDense(&spec, 16, traind::v1::TANH);
  spec.mutable_model()->add_layers()->mutable_batch_norm();
  spec.mutable_model()->add_layers()->mutable_activation()->set_function(traind::v1::RELU);
  AddDense(&spec, 3, traind::v1::LINEAR);
  spec.mutable_optimizer()->clear_adam();
  spec.mutable_optimizer()->mutable_sgd()->set_learning_rate(0.05);
  spec.mutable_optimizer()->mutable_sgd()->set_momentum(0.9);
  // 121 training rows: the last batch has one row, so with 3 ranks two have
  // none (and with 2 ranks one).
  const data::FoldRows fold = IrisFold0();
  data::FoldRows rows;
  rows.train = fold.train;
  rows.train.push_back(fold.val[0]);
  rows.val.assign(fold.val.begin() + 1, fold.val.end());
  ASSERT_EQ(rows.train.size() % 10, 1u);
  ExpectEquivalent(spec, Iris(), rows, {2, 3}, kTolerance, /*bucket_bytes=*/256);
}

TEST(DataParallelTest, BatchNormAndDropoutEqualOneRank) {
  JobSpec spec = DataParallelIrisSpec();
  spec.mutable_model()->clear_layers();
  AddDense(&spec, 32, traind::v1::RELU);
  spec.mutable_model()->add_layers()->mutable_dropout()->set_rate(0.3);
  spec.mutable_model()->add_layers()->mutable_batch_norm();
  AddDense(&spec, 3, traind::v1::LINEAR);
  spec.mutable_training()->set_batch_size(14);  // 120 rows: a last batch of 8
  ExpectEquivalent(spec, Iris(), IrisFold0(), {2, 3}, kTolerance);
}

TEST(DataParallelTest, ObserverErrorOnOneRankFailsEveryRankPromptly) {
  JobSpec spec = DataParallelIrisSpec();
  spec.mutable_training()->set_epochs(3);
  // Mid-run, and after the last epoch (the others are then in the final
  // validation pass).
  for (int fail_at : {2, 3}) {
    SCOPED_TRACE(absl::StrCat("rank 1 fails at epoch ", fail_at));
    const auto runs =
        RunRanks(3, spec, Iris(), IrisFold0(), {},
                 [fail_at](int rank, testing::EpochRecorder* recorder, data::FoldRows*) {
                   if (rank == 1) recorder->fail_at_epoch = fail_at;
                 });
    EXPECT_EQ(runs[1]->result.status().code(), absl::StatusCode::kUnavailable);
    EXPECT_EQ(runs[1]->result.status().message(), "report failed");
    for (int r : {0, 2}) {
      const RankRun& run = *runs[static_cast<size_t>(r)];
      ASSERT_FALSE(run.result.ok()) << "rank " << r;
      EXPECT_THAT(std::string(run.result.status().message()), HasSubstr("rank 1"))
          << run.result.status();
      EXPECT_THAT(std::string(run.result.status().message()), HasSubstr("report failed"));
      EXPECT_LT(run.took, absl::Seconds(30)) << "rank " << r << " waited for the timeout";
      EXPECT_EQ(run.recorder.epochs.size(), static_cast<size_t>(fail_at)) << "rank " << r;
    }
  }
}

TEST(DataParallelTest, StopOnOneRankStopsEveryRankAfterTheSameBatchAndResumes) {
  JobSpec spec = DataParallelIrisSpec();
  spec.mutable_training()->set_epochs(3);
  ScratchDir ckpt;
  FitOptions options;
  options.checkpoint_dir = ckpt.path();
  // Rank 2 is asked to stop at its 11th poll: epoch 2, batch 3 (8 batches
  // per epoch).
  const auto stopped = RunRanks(3, spec, Iris(), IrisFold0(), options,
                                [](int rank, testing::EpochRecorder* recorder, data::FoldRows*) {
                                  if (rank == 2) recorder->stop_after_polls = 11;
                                });
  for (size_t r = 0; r < stopped.size(); ++r) {
    EXPECT_EQ(stopped[r]->result.status().code(), absl::StatusCode::kCancelled) << "rank " << r;
    EXPECT_EQ(stopped[r]->result.status().message(), "stopped on request at epoch 2, batch 3")
        << "rank " << r;
    EXPECT_EQ(stopped[r]->recorder.epochs.size(), 1u) << "rank " << r;
  }
  // Rank 0 wrote the checkpoint of epoch 1; every rank resumes from it and
  // ends as an uninterrupted run does.
  EXPECT_EQ(access((ckpt.path() + "/epoch-000001.ckpt").c_str(), F_OK), 0);
  const auto resumed = RunRanks(3, spec, Iris(), IrisFold0(), options);
  ExpectRanksAgree(resumed);
  ScratchDir fresh_ckpt;
  options.checkpoint_dir = fresh_ckpt.path();
  const auto uninterrupted = RunRanks(3, spec, Iris(), IrisFold0(), options);
  ASSERT_TRUE(uninterrupted[0]->result.ok()) << uninterrupted[0]->result.status();
  for (size_t r = 0; r < resumed.size(); ++r) {
    EXPECT_EQ(resumed[r]->recorder.resumed_after, 1) << "rank " << r;
    ASSERT_EQ(resumed[r]->recorder.epochs.size(), 2u) << "rank " << r;
  }
  for (size_t e = 0; e < 2; ++e) {
    ExpectSameMap(uninterrupted[0]->recorder.epochs[e + 1].train(),
                  resumed[0]->recorder.epochs[e].train(), absl::StrCat("epoch ", e + 2));
    ExpectSameMap(uninterrupted[0]->recorder.epochs[e + 1].val(),
                  resumed[0]->recorder.epochs[e].val(), absl::StrCat("epoch ", e + 2));
  }
}

TEST(DataParallelTest, DivergenceIsReportedByEveryRankAtTheSameBatch) {
  JobSpec spec = DataParallelIrisSpec();
  spec.mutable_data()->set_standardize(false);
  spec.mutable_optimizer()->clear_adam();
  spec.mutable_optimizer()->mutable_sgd()->set_learning_rate(1e30);
  std::unique_ptr<Reference> ref = RunOneRank(spec, Iris(), IrisFold0(), {});
  ASSERT_EQ(FailureKindOf(ref->result.status()), FailureKind::kDiverged);
  const auto runs = RunRanks(3, spec, Iris(), IrisFold0(), {});
  for (size_t r = 0; r < runs.size(); ++r) {
    EXPECT_EQ(FailureKindOf(runs[r]->result.status()), FailureKind::kDiverged)
        << "rank " << r << ": " << runs[r]->result.status();
    EXPECT_EQ(runs[r]->result.status().message(), ref->result.status().message());
  }
}

TEST(DataParallelTest, RanksGivenOtherRowsFailAndSayWhich) {
  const auto runs = RunRanks(3, DataParallelIrisSpec(), Iris(), IrisFold0(), {},
                             [](int rank, testing::EpochRecorder*, data::FoldRows* rows) {
                               if (rank == 2) std::swap(rows->train[0], rows->val[0]);
                             });
  for (size_t r = 0; r < runs.size(); ++r) {
    ASSERT_FALSE(runs[r]->result.ok()) << "rank " << r;
    EXPECT_THAT(std::string(runs[r]->result.status().message()), HasSubstr("rank 2"))
        << runs[r]->result.status();
    EXPECT_LT(runs[r]->took, absl::Seconds(30));
  }
  // Other validation rows, as many: their metrics, and so the early-stopping
  // decisions and collectives, would differ.
  const auto val_runs = RunRanks(2, DataParallelIrisSpec(), Iris(), IrisFold0(), {},
                                 [](int rank, testing::EpochRecorder*, data::FoldRows* rows) {
                                   if (rank == 1) rows->val[0] = rows->train[0];
                                 });
  for (size_t r = 0; r < val_runs.size(); ++r) {
    ASSERT_FALSE(val_runs[r]->result.ok()) << "rank " << r;
    EXPECT_THAT(std::string(val_runs[r]->result.status().message()), HasSubstr("rank 1"))
        << val_runs[r]->result.status();
  }
}

TEST(DataParallelTest, GpuSpecIsRefusedOnTheCpuBackend) {
  JobSpec spec = DataParallelIrisSpec();
  spec.mutable_resources()->set_device(traind::v1::GPU);
  spec.mutable_resources()->set_count(1);
  absl::StatusOr<FoldResult> result = Fit(spec, Iris(), IrisFold0(), 0, {}, nullptr);
  EXPECT_EQ(FailureKindOf(result.status()), FailureKind::kInvalidSpec);
  EXPECT_THAT(std::string(result.status().message()), HasSubstr("resources.device"));
  std::unique_ptr<Backend> cpu = std::move(CreateCpuBackend()).value();
  FitOptions options;
  options.backend = cpu.get();
  result = Fit(spec, Iris(), IrisFold0(), 0, options, nullptr);
  EXPECT_EQ(FailureKindOf(result.status()), FailureKind::kInvalidSpec);
  EXPECT_THAT(std::string(result.status().message()), HasSubstr("resources.device"));
  // The same spec on the CPU, with the given backend, trains.
  spec.clear_resources();
  result = Fit(spec, Iris(), IrisFold0(), 0, options, nullptr);
  EXPECT_TRUE(result.ok()) << result.status();
}

// Every rank is given the TensorBoard directory; rank 0 alone writes it:
// one file, every epoch once, the metrics every rank reported.
TEST(DataParallelTest, OnlyRankZeroWritesTensorBoardScalars) {
  traind::testing::TempDir tmp;
  FitOptions options;
  options.tensorboard_dir = tmp.Path("tensorboard/task-0");
  const auto runs = RunRanks(3, DataParallelIrisSpec(), Iris(), IrisFold0(), options);
  for (size_t r = 0; r < runs.size(); ++r) {
    ASSERT_TRUE(runs[r]->result.ok()) << "rank " << r << ": " << runs[r]->result.status();
    // A second writer would find the file locked and warn.
    EXPECT_TRUE(runs[r]->recorder.warnings.empty()) << "rank " << r;
  }
  const std::vector<std::string> files = traind::testing::EventFilesIn(options.tensorboard_dir);
  ASSERT_EQ(files.size(), 1u);
  const traind::testing::TfEventFile file =
      traind::testing::ParseTfEvents(traind::testing::ReadBytes(files[0]));
  EXPECT_EQ(file.error, "");
  ASSERT_FALSE(file.events.empty());
  EXPECT_EQ(file.events[0].file_version, "brain.Event:2");
  std::map<int64_t, std::map<std::string, float>> steps;
  for (size_t i = 1; i < file.events.size(); ++i) {
    const traind::testing::TfEvent& e = file.events[i];
    ASSERT_EQ(e.values.size(), 1u);
    EXPECT_TRUE(steps[e.step].emplace(e.values[0].first, e.values[0].second).second)
        << "step " << e.step << " " << e.values[0].first << " twice";
  }
  const std::vector<EpochMetrics>& reported = runs[0]->recorder.epochs;
  ASSERT_EQ(steps.size(), reported.size());
  for (const EpochMetrics& m : reported) {
    const std::map<std::string, float>& got = steps[m.epoch()];
    EXPECT_EQ(got.size(), static_cast<size_t>(m.train_size() + m.val_size() + 1));
    for (const auto& [k, v] : m.train()) {
      EXPECT_EQ(got.at("train/" + k), static_cast<float>(v)) << k;
    }
  }
}

}  // namespace
}  // namespace traind::engine
