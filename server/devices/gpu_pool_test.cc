#include "server/devices/gpu_pool.h"

#include <fstream>

#include "gtest/gtest.h"
#include "server/testing/fake_device_probe.h"

namespace traind::server {
namespace {

constexpr int64_t kGiB = 1ll << 30;

TEST(GpuPoolTest, NoProbeMeansNoGpus) {
  GpuPool pool(nullptr, {});
  ASSERT_TRUE(pool.Init().ok());
  EXPECT_EQ(pool.Usable(), 0);
  EXPECT_FALSE(pool.Allocate(1, 0).has_value());
  EXPECT_FALSE(pool.unavailable().empty());
}

TEST(GpuPoolTest, AllocatesIdleGpusWithEnoughFreeMemory) {
  FakeDeviceProbe probe;
  probe.Set({FakeGpu("GPU-a", 80 * kGiB, 70 * kGiB), FakeGpu("GPU-b", 80 * kGiB, 1 * kGiB),
             FakeGpu("GPU-c", 80 * kGiB, 1 * kGiB)});
  GpuPool pool(&probe, {});
  ASSERT_TRUE(pool.Init().ok());
  EXPECT_EQ(pool.Usable(), 3);
  EXPECT_EQ(pool.MaxTotalBytes(), 80 * kGiB);
  // GPU-a has 10 GiB free: too little for 20 GiB.
  auto two = pool.Allocate(2, 20 * kGiB);
  ASSERT_TRUE(two.has_value());
  EXPECT_EQ(*two, (std::vector<int>{1, 2}));
  EXPECT_FALSE(pool.Allocate(3, 20 * kGiB).has_value());
  pool.MarkBusy(*two, 42);
  EXPECT_FALSE(pool.Allocate(1, 20 * kGiB).has_value());
  EXPECT_EQ(*pool.Allocate(1, 5 * kGiB), std::vector<int>{0});
}

TEST(GpuPoolTest, DrainsOnlyWhenTheWorkerIsGoneAndMemoryIsBack) {
  FakeDeviceProbe probe;
  probe.Set({FakeGpu("GPU-a", 80 * kGiB, kGiB / 2)});
  GpuPoolOptions o;
  o.drain_timeout = absl::Seconds(30);
  o.drain_tolerance_bytes = 256 << 20;
  GpuPool pool(&probe, o);
  ASSERT_TRUE(pool.Init().ok());
  pool.MarkBusy({0}, 42);
  probe.SetUsage(0, 30 * kGiB, {{42, 29 * kGiB}});
  absl::Time t0 = absl::FromUnixSeconds(1000);
  pool.Release({0}, t0);
  EXPECT_TRUE(pool.AnyDraining());

  // The process is still listed: draining.
  EXPECT_TRUE(pool.Refresh(t0 + absl::Seconds(1)).empty());
  EXPECT_EQ(pool.gpus()[0].state, GpuPool::State::kDraining);
  EXPECT_FALSE(pool.Allocate(1, 0).has_value());
  // The process is gone but its memory is not back yet.
  probe.SetUsage(0, 10 * kGiB, {});
  EXPECT_TRUE(pool.Refresh(t0 + absl::Seconds(2)).empty());
  EXPECT_EQ(pool.gpus()[0].state, GpuPool::State::kDraining);
  // Back within the tolerance of the 0.5 GiB baseline.
  probe.SetUsage(0, kGiB / 2 + (100 << 20), {});
  auto notes = pool.Refresh(t0 + absl::Seconds(3));
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_NE(notes[0].find("drained"), std::string::npos);
  EXPECT_EQ(pool.gpus()[0].state, GpuPool::State::kIdle);
  EXPECT_TRUE(pool.Allocate(1, 70 * kGiB).has_value());
}

TEST(GpuPoolTest, AGpuThatNeverDrainsBecomesUnhealthyAndIsNotUsed) {
  FakeDeviceProbe probe;
  probe.Set({FakeGpu("GPU-a", 80 * kGiB, kGiB / 2), FakeGpu("GPU-b", 40 * kGiB, kGiB / 2)});
  GpuPoolOptions o;
  o.drain_timeout = absl::Seconds(30);
  GpuPool pool(&probe, o);
  ASSERT_TRUE(pool.Init().ok());
  pool.MarkBusy({0}, 7);
  probe.SetUsage(0, 20 * kGiB, {});  // leaked memory, no process
  absl::Time t0 = absl::FromUnixSeconds(1000);
  pool.Release({0}, t0);
  EXPECT_TRUE(pool.Refresh(t0 + absl::Seconds(29)).empty());
  auto notes = pool.Refresh(t0 + absl::Seconds(30));
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_NE(notes[0].find("UNHEALTHY"), std::string::npos);
  EXPECT_EQ(pool.gpus()[0].state, GpuPool::State::kUnhealthy);
  EXPECT_NE(pool.gpus()[0].note.find("worker 7"), std::string::npos);
  EXPECT_EQ(pool.Usable(), 1);
  EXPECT_EQ(pool.MaxTotalBytes(), 40 * kGiB);
  // Even once its memory comes back, it stays out.
  probe.SetUsage(0, kGiB / 2, {});
  pool.Refresh(t0 + absl::Seconds(60));
  EXPECT_EQ(pool.gpus()[0].state, GpuPool::State::kUnhealthy);
  EXPECT_EQ(*pool.Allocate(1, 0), std::vector<int>{1});
}

TEST(GpuPoolTest, FileProbeReadsStatesAndNamesBadLines) {
  char tmpl[] = "/tmp/traind-gpus-XXXXXX";
  int fd = mkstemp(tmpl);
  close(fd);
  std::string path = tmpl;
  std::ofstream(path) << "# uuid total used processes\n"
                         "GPU-x 1000 100 12:50 13:25\n\nGPU-y 2000 0\n";
  auto probe = NewFileProbe(path);
  auto gpus = probe->Probe();
  ASSERT_TRUE(gpus.ok()) << gpus.status();
  ASSERT_EQ(gpus->size(), 2u);
  EXPECT_EQ((*gpus)[0].uuid, "GPU-x");
  EXPECT_EQ((*gpus)[0].total_bytes, 1000);
  ASSERT_EQ((*gpus)[0].processes.size(), 2u);
  EXPECT_EQ((*gpus)[0].processes[1].pid, 13);
  EXPECT_EQ((*gpus)[1].used_bytes, 0);
  std::ofstream(path) << "GPU-x 1000\n";
  auto bad = probe->Probe();
  EXPECT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find(":1:"), std::string::npos) << bad.status();
  unlink(path.c_str());
}

TEST(GpuPoolTest, NvmlProbeWithoutDriverSaysSo) {
  auto probe = NewNvmlProbe();
  if (probe->Unavailable().empty()) GTEST_SKIP() << "an NVIDIA driver is present";
  EXPECT_NE(probe->Unavailable().find("libnvidia-ml"), std::string::npos);
  auto gpus = probe->Probe();
  ASSERT_TRUE(gpus.ok());
  EXPECT_TRUE(gpus->empty());
}

}  // namespace
}  // namespace traind::server
