#include "server/scheduler/placement.h"

#include <memory>
#include <string>

#include "gtest/gtest.h"
#include "server/testing/fake_device_probe.h"

namespace traind::server {
namespace {

using traind::v1::JobSpec;

JobSpec CpuJob() { return JobSpec(); }

JobSpec GpuJob(int count) {
  JobSpec spec;
  spec.mutable_resources()->set_device(traind::v1::GPU);
  spec.mutable_resources()->set_count(count);
  return spec;
}

bool HasEnv(const LaunchRequest& r, const std::string& entry) {
  for (const std::string& e : r.env) {
    if (e == entry) return true;
  }
  return false;
}

class PlacementTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // Two 80 GB GPUs on this machine.
    probe_.Set({FakeGpu("GPU-a", 80LL << 30, 0), FakeGpu("GPU-b", 80LL << 30, 0)});
    ASSERT_TRUE(pool_.Init().ok());
  }
  FakeDeviceProbe probe_;
  GpuPool pool_{&probe_, GpuPoolOptions()};
  FakeDeviceProbe no_gpus_probe_;
  GpuPool no_gpus_{&no_gpus_probe_, GpuPoolOptions()};
  const std::unique_ptr<Placement> local_ = Placement::Local(/*cpu_slots=*/2, true);
  const std::unique_ptr<Placement> local_cpu_only_ = Placement::Local(2, false);
  const std::unique_ptr<Placement> cluster_ = Placement::Cluster(/*cpu_slots=*/3, 4);
};

// Each decision on this machine and in a cluster (placement.h's table).
TEST_F(PlacementTest, WhoPlacesATask) {
  EXPECT_TRUE(local_->PicksGpus(GpuJob(1)));
  EXPECT_FALSE(local_->PicksGpus(CpuJob()));
  EXPECT_FALSE(cluster_->PicksGpus(GpuJob(1))) << "the cluster picks its GPUs";
  EXPECT_FALSE(cluster_->PicksGpus(CpuJob()));
  EXPECT_TRUE(local_->SlotFree(1));
  EXPECT_FALSE(local_->SlotFree(2));
  EXPECT_TRUE(cluster_->SlotFree(2));
  EXPECT_FALSE(cluster_->SlotFree(3)) << "cpu_slots bounds the tasks handed to the cluster";
}

TEST_F(PlacementTest, UsableGpus) {
  std::string why;
  EXPECT_EQ(local_->UsableGpus(pool_, &why), 2);
  EXPECT_EQ(why, "");
  EXPECT_EQ(local_cpu_only_->UsableGpus(pool_, &why), 0);
  EXPECT_EQ(why, "traind-worker has no GPU backend (built without CUDA)");
  EXPECT_EQ(cluster_->UsableGpus(no_gpus_, &why), 4) << "as many as a node has";
  EXPECT_EQ(Placement::Cluster(3, 0)->UsableGpus(no_gpus_, &why), 0);
  EXPECT_EQ(why, "the cluster has no GPUs (slurm.gpus_per_node is 0)");
}

TEST_F(PlacementTest, SubmitChecks) {
  EXPECT_TRUE(local_->CheckGpuJob(GpuJob(2), 1 << 30, pool_).ok());
  absl::Status too_many = local_->CheckGpuJob(GpuJob(3), 1 << 30, pool_);
  EXPECT_EQ(too_many.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(too_many.message(),
            "spec.resources.count: 3 GPUs per task, but this server has 2 usable");
  absl::Status too_big = local_->CheckGpuJob(GpuJob(1), 81LL << 30, pool_);
  EXPECT_EQ(too_big.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(cluster_->CheckGpuJob(GpuJob(4), 1LL << 40, no_gpus_).ok())
      << "the cluster's nodes are not this machine's";
  EXPECT_EQ(cluster_->CheckGpuJob(GpuJob(5), 0, no_gpus_).message(),
            "spec.resources.count: 5 GPUs per task, but the cluster's nodes have 4 "
            "(slurm.gpus_per_node)");
}

TEST_F(PlacementTest, RanksAndDevices) {
  EXPECT_EQ(local_->Ranks(CpuJob(), 0), 1);
  EXPECT_EQ(local_->Ranks(GpuJob(2), 2), 2) << "one process per GPU";
  EXPECT_EQ(cluster_->Ranks(CpuJob(), 0), 1);
  EXPECT_EQ(cluster_->Ranks(GpuJob(2), 0), 2);

  LaunchRequest local_gpu;
  local_->SetDevices(GpuJob(2), "GPU-a,GPU-b", &local_gpu);
  EXPECT_TRUE(HasEnv(local_gpu, "CUDA_VISIBLE_DEVICES=GPU-a,GPU-b"));
  EXPECT_EQ(local_gpu.gpus, 0);
  LaunchRequest local_cpu;
  local_->SetDevices(CpuJob(), "", &local_cpu);
  EXPECT_TRUE(HasEnv(local_cpu, "CUDA_VISIBLE_DEVICES=")) << "a CPU task sees no GPU";
  LaunchRequest cluster_gpu;
  cluster_->SetDevices(GpuJob(2), "", &cluster_gpu);
  EXPECT_EQ(cluster_gpu.gpus, 2);
  EXPECT_TRUE(cluster_gpu.env.empty()) << "it sees the GPUs the cluster gave it";
  LaunchRequest cluster_cpu;
  cluster_->SetDevices(CpuJob(), "", &cluster_cpu);
  EXPECT_EQ(cluster_cpu.gpus, 0);
  EXPECT_TRUE(HasEnv(cluster_cpu, "CUDA_VISIBLE_DEVICES="));
}

TEST_F(PlacementTest, Lifetimes) {
  EXPECT_FALSE(local_->WorkersOutliveTraind());
  EXPECT_FALSE(local_->HandlesAreClusterJobs());
  EXPECT_STREQ(local_->HandleName(), "pid");
  EXPECT_TRUE(cluster_->WorkersOutliveTraind());
  EXPECT_TRUE(cluster_->HandlesAreClusterJobs());
  EXPECT_STREQ(cluster_->HandleName(), "slurm_job");
}

}  // namespace
}  // namespace traind::server
