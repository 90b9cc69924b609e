// Fit on the CUDA backend: with step graphs (the forward pass, loss and
// backward pass of a full batch recorded as a CUDA graph and replayed) a
// fold trains exactly as with the ops launched one by one, and both train
// as the CPU backend does within float rounding. Skipped without a GPU.
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "worker/engine/backend/cpu/cpu_backend.h"
#include "worker/engine/backend/cuda/cuda_backend.h"
#include "worker/engine/backend/cuda/cuda_status.h"
#include "worker/engine/fit.h"
#include "worker/engine/testing/epoch_recorder.h"

namespace traind::engine {
namespace {

using traind::v1::EpochMetrics;
using traind::v1::JobSpec;

// 4 classes, 16 features; the class is the largest of four sums of features
// (learnable), with a little label noise.
data::Dataset Synthetic(int64_t rows) {
  constexpr int64_t kFeatures = 16, kClasses = 4;
  data::Dataset d;
  d.rows = rows;
  d.features = kFeatures;
  d.x.resize(static_cast<size_t>(rows * kFeatures));
  uint32_t s = 12345;
  auto next = [&s] {
    s = s * 1664525u + 1013904223u;
    return static_cast<float>(s >> 8) / 16777216.0f - 0.5f;
  };
  for (float& v : d.x) v = next();
  d.y.resize(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    int32_t best = 0;
    float best_sum = -1e30f;
    for (int32_t c = 0; c < kClasses; ++c) {
      float sum = 0;
      for (int64_t f = c * 4; f < c * 4 + 4; ++f)
        sum += d.x[static_cast<size_t>(r * kFeatures + f)];
      if (sum > best_sum) {
        best_sum = sum;
        best = c;
      }
    }
    d.y[static_cast<size_t>(r)] = next() < -0.45f ? (best + 1) % kClasses : best;
  }
  d.target = data::TargetKind::kClasses;
  for (int64_t f = 0; f < kFeatures; ++f) d.feature_names.push_back(absl::StrCat("f", f));
  for (int64_t c = 0; c < kClasses; ++c) d.classes.push_back(absl::StrCat("c", c));
  d.lines.resize(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) d.lines[static_cast<size_t>(r)] = r + 2;
  d.path = "synthetic";
  return d;
}

JobSpec Spec(bool batch_norm, bool class_weights, bool dropout = false) {
  JobSpec spec;
  spec.set_seed(11);
  spec.mutable_data()->set_standardize(true);
  auto* l1 = spec.mutable_model()->add_layers()->mutable_dense();
  l1->set_units(64);
  l1->set_activation(traind::v1::RELU);
  if (batch_norm) spec.mutable_model()->add_layers()->mutable_batch_norm();
  auto* l2 = spec.mutable_model()->add_layers()->mutable_dense();
  l2->set_units(32);
  l2->set_activation(traind::v1::GELU);
  spec.mutable_model()->add_layers()->mutable_layer_norm();
  if (dropout) spec.mutable_model()->add_layers()->mutable_dropout()->set_rate(0.2);
  spec.mutable_model()->add_layers()->mutable_dense()->set_units(4);
  auto* ce = spec.mutable_loss()->mutable_softmax_cross_entropy();
  if (class_weights) {
    for (double w : {1.0, 2.0, 0.5, 1.5}) ce->add_class_weights(w);
    ce->set_label_smoothing(0.05);
  }
  spec.mutable_optimizer()->mutable_adam()->set_learning_rate(0.005);
  spec.mutable_training()->set_epochs(4);
  spec.mutable_training()->set_batch_size(32);
  spec.mutable_metrics()->add_train(traind::v1::ACCURACY);
  spec.mutable_metrics()->add_val(traind::v1::ACCURACY);
  return spec;
}

struct Run {
  absl::StatusOr<traind::v1::FoldResult> result = absl::UnknownError("not run");
  testing::EpochRecorder recorder;
};

std::unique_ptr<Run> FitOn(Backend* backend, const JobSpec& spec, const data::Dataset& data,
                           const data::FoldRows& rows, bool graphs) {
  auto run = std::make_unique<Run>();
  FitOptions options;
  options.backend = backend;
  options.step_graphs = graphs;
  run->result = Fit(spec, data, rows, 0, options, &run->recorder);
  return run;
}

class CudaFitTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string reason;
    if (cuda::DeviceCount(&reason) == 0) GTEST_SKIP() << reason;
  }
};

// Metrics of `a` and `b` epoch by epoch: equal (exact) or, for the loss,
// within `loss_tolerance` (relative).
void ExpectSameEpochs(const Run& a, const Run& b, bool exact, double loss_tolerance,
                      const std::string& what) {
  ASSERT_EQ(a.recorder.epochs.size(), b.recorder.epochs.size()) << what;
  for (size_t e = 0; e < a.recorder.epochs.size(); ++e) {
    for (bool train : {true, false}) {
      const auto& x = train ? a.recorder.epochs[e].train() : a.recorder.epochs[e].val();
      const auto& y = train ? b.recorder.epochs[e].train() : b.recorder.epochs[e].val();
      for (const auto& [name, value] : x) {
        const std::string where =
            absl::StrCat(what, ": ", train ? "train " : "val ", name, ", epoch ", e + 1);
        if (exact) {
          EXPECT_EQ(y.at(name), value) << where;
        } else if (name == "loss") {
          EXPECT_NEAR(y.at(name), value, loss_tolerance * std::abs(value)) << where;
        }
      }
    }
  }
}

struct Config {
  const char* name;
  CudaBackendOptions options;
  double cpu_loss_tolerance;  // relative, against the CPU backend
};

std::vector<Config> Configs() {
  std::vector<Config> configs;
  configs.push_back({"fp32, cuBLASLt", CudaBackendOptions(), 2e-3});
  CudaBackendOptions plain;
  plain.use_cublaslt = false;
  configs.push_back({"fp32, cuBLAS", plain, 2e-3});
  CudaBackendOptions tf32;
  tf32.precision = GemmPrecision::kTf32;
  configs.push_back({"tf32", tf32, 5e-2});
  CudaBackendOptions bf16;
  bf16.precision = GemmPrecision::kBf16;
  configs.push_back({"bf16", bf16, 1e-1});
  return configs;
}

TEST_F(CudaFitTest, StepGraphsTrainExactlyAsOpsOneByOneAndAsTheCpu) {
  const data::Dataset data = Synthetic(1000);  // 25 batches of 32 per epoch, one of 8
  data::FoldRows rows;
  for (int64_t r = 0; r < 808; ++r) rows.train.push_back(r);
  for (int64_t r = 808; r < 1000; ++r) rows.val.push_back(r);
  for (const Config& config : Configs()) {
    for (bool batch_norm : {false, true}) {
      for (bool class_weights : {false, true}) {
        const std::string what = absl::StrCat(config.name, ", batch_norm ", batch_norm,
                                              ", class_weights ", class_weights);
        SCOPED_TRACE(what);
        const JobSpec spec = Spec(batch_norm, class_weights);
        auto graphs_backend = CreateCudaBackend(config.options);
        auto ops_backend = CreateCudaBackend(config.options);
        auto cpu_backend = CreateCpuBackend();
        ASSERT_TRUE(graphs_backend.ok() && ops_backend.ok() && cpu_backend.ok());
        auto graphs = FitOn(graphs_backend->get(), spec, data, rows, true);
        auto ops = FitOn(ops_backend->get(), spec, data, rows, false);
        auto cpu = FitOn(cpu_backend->get(), spec, data, rows, false);
        ASSERT_TRUE(graphs->result.ok()) << graphs->result.status();
        ASSERT_TRUE(ops->result.ok()) << ops->result.status();
        ASSERT_TRUE(cpu->result.ok()) << cpu->result.status();
        // The CUDA backend records every graph it is asked for: a warning
        // would mean the step ran op by op instead.
        EXPECT_TRUE(graphs->recorder.warnings.empty()) << graphs->recorder.warnings[0];
        ASSERT_EQ(ops->recorder.epochs.size(), 4u);
        // The same kernels with the same arguments: bit-identical.
        ExpectSameEpochs(*ops, *graphs, /*exact=*/true, 0, what + " graphs");
        ExpectSameEpochs(*cpu, *ops, /*exact=*/false, config.cpu_loss_tolerance, what + " CPU");
        // Training learned something (the comparison is not of noise).
        EXPECT_GT(ops->recorder.epochs.back().val().at("accuracy"), 0.6);
      }
    }
  }
}

// Dropout (no graph: a new mask every step) trains on the GPU as on the CPU:
// the masks are the same bits, and the evaluation passes copy on the device.
TEST_F(CudaFitTest, DropoutTrainsAsOnTheCpu) {
  const data::Dataset data = Synthetic(1000);
  data::FoldRows rows;
  for (int64_t r = 0; r < 808; ++r) rows.train.push_back(r);
  for (int64_t r = 808; r < 1000; ++r) rows.val.push_back(r);
  const JobSpec spec = Spec(/*batch_norm=*/false, /*class_weights=*/false, /*dropout=*/true);
  auto gpu_backend = CreateCudaBackend();
  auto cpu_backend = CreateCpuBackend();
  ASSERT_TRUE(gpu_backend.ok() && cpu_backend.ok());
  auto gpu = FitOn(gpu_backend->get(), spec, data, rows, true);
  auto cpu = FitOn(cpu_backend->get(), spec, data, rows, true);
  ASSERT_TRUE(gpu->result.ok()) << gpu->result.status();
  ASSERT_TRUE(cpu->result.ok()) << cpu->result.status();
  ExpectSameEpochs(*cpu, *gpu, /*exact=*/false, 2e-3, "dropout");
}

}  // namespace
}  // namespace traind::engine
