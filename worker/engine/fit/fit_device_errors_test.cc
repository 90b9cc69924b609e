// Device errors reach Fit's caller: a host copy that fails while keeping the
// best state or writing a checkpoint fails the task (DeviceError), and no
// checkpoint is written from it.
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <utility>

#include "base/status.h"
#include "data/split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/engine/backend/cpu/cpu_backend.h"
#include "worker/engine/fit.h"
#include "worker/engine/testing/failing_backend.h"
#include "worker/engine/testing/iris.h"

namespace traind::engine {
namespace {

using ::testing::HasSubstr;
using traind::v1::FoldResult;
using traind::v1::JobSpec;

using testing::Iris;

JobSpec OneEpochSpec() {
  JobSpec spec;
  spec.set_seed(42);
  spec.mutable_data()->set_standardize(true);
  traind::v1::Dense* hidden = spec.mutable_model()->add_layers()->mutable_dense();
  hidden->set_units(8);
  hidden->set_activation(traind::v1::RELU);
  spec.mutable_model()->add_layers()->mutable_batch_norm();
  spec.mutable_model()->add_layers()->mutable_dense()->set_units(3);
  spec.mutable_loss()->mutable_softmax_cross_entropy();
  spec.mutable_optimizer()->mutable_adam()->set_learning_rate(0.01);
  spec.mutable_training()->set_epochs(1);
  spec.mutable_training()->set_batch_size(16);
  spec.mutable_cross_validation()->set_folds(5);
  return spec;
}

data::FoldRows Rows() {
  return data::FoldSplit(data::StratifiedKFold(Iris().y, 5, /*shuffle=*/true, 42), 0);
}

std::unique_ptr<testing::FailingBackend> NewFailingBackend() {
  return std::make_unique<testing::FailingBackend>(std::move(CreateCpuBackend()).value());
}

// The host copies of a run of `spec` with `options` that fails none.
int64_t CopiesOf(const JobSpec& spec, FitOptions options) {
  std::unique_ptr<testing::FailingBackend> backend = NewFailingBackend();
  options.backend = backend.get();
  absl::StatusOr<FoldResult> result = Fit(spec, Iris(), Rows(), 0, options, nullptr);
  EXPECT_TRUE(result.ok()) << result.status();
  return backend->copies_to_host();
}

std::string ScratchDir() {
  std::string pattern =
      (std::filesystem::temp_directory_path() / "traind_device_errors_XXXXXX").string();
  return mkdtemp(pattern.data()) != nullptr ? pattern : "";
}

TEST(FitDeviceErrorTest, AFailedCopyOfTheBestStateFailsTheTask) {
  const JobSpec plain = OneEpochSpec();
  JobSpec keep_best = plain;
  keep_best.mutable_early_stopping()->set_monitor("val.loss");
  keep_best.mutable_early_stopping()->set_restore_best(true);
  const int64_t training = CopiesOf(plain, {});
  // Keeping the best state copies it to the host after epoch 1.
  ASSERT_GT(CopiesOf(keep_best, {}), training);

  std::unique_ptr<testing::FailingBackend> backend = NewFailingBackend();
  backend->fail_copies_to_host_from(training + 1);
  FitOptions options;
  options.backend = backend.get();
  absl::StatusOr<FoldResult> result = Fit(keep_best, Iris(), Rows(), 0, options, nullptr);
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(FailureKindOf(result.status()), FailureKind::kDeviceError);
  EXPECT_THAT(std::string(result.status().message()), HasSubstr("injected device failure"));
}

TEST(FitDeviceErrorTest, AFailedCopyWritesNoCheckpoint) {
  JobSpec spec = OneEpochSpec();
  spec.mutable_checkpoint()->set_every_epochs(1);
  const int64_t training = CopiesOf(spec, {});
  const std::string dir = ScratchDir();
  ASSERT_FALSE(dir.empty());
  FitOptions options;
  options.checkpoint_dir = dir;
  // The checkpoint's copies come after training's.
  ASSERT_GT(CopiesOf(spec, options), training);
  std::filesystem::remove_all(dir);

  for (int64_t extra = 1; extra <= 2; ++extra) {
    SCOPED_TRACE(extra);
    std::unique_ptr<testing::FailingBackend> backend = NewFailingBackend();
    backend->fail_copies_to_host_from(training + extra);
    options.backend = backend.get();
    absl::StatusOr<FoldResult> result = Fit(spec, Iris(), Rows(), 0, options, nullptr);
    ASSERT_FALSE(result.ok());
    EXPECT_EQ(FailureKindOf(result.status()), FailureKind::kDeviceError);
    EXPECT_THAT(std::string(result.status().message()), HasSubstr("injected device failure"));
    EXPECT_FALSE(std::filesystem::exists(dir + "/epoch-000001.ckpt"));
    std::filesystem::remove_all(dir);
  }
}

}  // namespace
}  // namespace traind::engine
