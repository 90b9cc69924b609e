// The backend a task trains on: given, or made by an injected factory; the
// device of a given one.
#include "worker/engine/fit/backend_factory.h"

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
#include "worker/engine/testing/graph_recording_backend.h"

namespace traind::engine {
namespace {

using traind::v1::JobSpec;

// Makes CPU backends, counting them, as another device kind would.
class CountingFactory : public BackendFactory {
 public:
  explicit CountingFactory(traind::v1::DeviceKind device) : device_(device) {}
  traind::v1::DeviceKind device() const override { return device_; }
  absl::StatusOr<std::unique_ptr<Backend>> Create(traind::v1::Precision precision) override {
    ++created;
    return CreateCpuBackend(precision);
  }
  int created = 0;

 private:
  traind::v1::DeviceKind device_;
};

JobSpec GpuSpec() {
  JobSpec spec;
  spec.mutable_resources()->set_device(traind::v1::GPU);
  return spec;
}

TEST(FitBackendFactoryTest, TheDeviceOfAGivenBackend) {
  std::unique_ptr<Backend> cpu = std::move(CreateCpuBackend()).value();
  EXPECT_EQ(DeviceOf(cpu.get()), traind::v1::CPU);
  // A decorator of the CPU backend under its name is a CPU backend.
  testing::FailingBackend wrapped(std::move(CreateCpuBackend()).value());
  EXPECT_EQ(DeviceOf(&wrapped), traind::v1::CPU);
  EXPECT_EQ(FailureKindOf(CheckBackendDevice(GpuSpec(), &wrapped, nullptr)),
            FailureKind::kInvalidSpec);
  // A stand-in computing in host memory is the device it says it is, whatever its name.
  std::unique_ptr<Backend> gpu_stand_in = testing::NewGraphRecordingBackend(
      std::move(CreateCpuBackend()).value(), "cpu-named stand-in", BackendDevice::kGpu);
  EXPECT_EQ(DeviceOf(gpu_stand_in.get()), traind::v1::GPU);
  EXPECT_TRUE(CheckBackendDevice(GpuSpec(), gpu_stand_in.get(), nullptr).ok());
  std::unique_ptr<Backend> cpu_stand_in = testing::NewGraphRecordingBackend(
      std::move(CreateCpuBackend()).value(), "recording", BackendDevice::kCpu);
  EXPECT_EQ(DeviceOf(cpu_stand_in.get()), traind::v1::CPU);
}

TEST(FitBackendFactoryTest, AGpuSpecIsRefusedBeforeACpuBackendIsMade) {
  CountingFactory cpu(traind::v1::CPU);
  absl::StatusOr<TaskBackend> chosen = ChooseBackend(GpuSpec(), nullptr, &cpu);
  EXPECT_EQ(FailureKindOf(chosen.status()), FailureKind::kInvalidSpec);
  EXPECT_THAT(std::string(chosen.status().message()), ::testing::HasSubstr("resources.device"));
  EXPECT_EQ(cpu.created, 0);
  CountingFactory gpu(traind::v1::GPU);
  chosen = ChooseBackend(GpuSpec(), nullptr, &gpu);
  ASSERT_TRUE(chosen.ok()) << chosen.status();
  EXPECT_EQ(gpu.created, 1);
  EXPECT_EQ(chosen->backend, chosen->owned.get());
  EXPECT_EQ(chosen->device, traind::v1::GPU);
  // Without a factory: the CPU backend's.
  chosen = ChooseBackend(JobSpec(), nullptr, nullptr);
  ASSERT_TRUE(chosen.ok()) << chosen.status();
  EXPECT_EQ(chosen->device, traind::v1::CPU);
}

TEST(FitBackendFactoryTest, FitTrainsOnTheInjectedFactorysBackend) {
  traind::v1::DataSpec data_spec;
  data_spec.set_path(std::string(TRAIND_SOURCE_DIR) + "/examples/data/iris.csv");
  data_spec.set_label("species");
  absl::StatusOr<data::Dataset> iris = data::LoadDataset(data_spec);
  ASSERT_TRUE(iris.ok()) << iris.status();
  JobSpec spec;
  spec.set_seed(1);
  spec.mutable_model()->add_layers()->mutable_dense()->set_units(3);
  spec.mutable_loss()->mutable_softmax_cross_entropy();
  spec.mutable_optimizer()->mutable_adam()->set_learning_rate(0.01);
  spec.mutable_training()->set_epochs(2);
  spec.mutable_training()->set_batch_size(32);
  const data::FoldRows rows = data::FoldSplit(data::StratifiedKFold(iris->y, 5, true, 1), 0);
  CountingFactory factory(traind::v1::CPU);
  FitOptions options;
  options.backend_factory = &factory;
  absl::StatusOr<traind::v1::FoldResult> result = Fit(spec, *iris, rows, 0, options, nullptr);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(factory.created, 1);
  EXPECT_EQ(result->epochs_run(), 2);
}

}  // namespace
}  // namespace traind::engine
