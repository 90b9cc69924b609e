// NcclCommunicator on the GPUs this machine has: a single-rank group, the
// missing-peer timeout and the abort path (skipped without a device); and
// the typing of NCCL's results (no device needed). (The
// N-rank == 1-rank equivalence of the fit loop is tested on the CPU with
// InProcessGroup; across processes by tests/gpu/run_device_checks.sh.)
#include "worker/engine/parallel/nccl_communicator.h"

#include <cstring>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "base/status.h"
#include "gtest/gtest.h"
#include "worker/engine/backend/cuda/cuda_raii.h"
#include "worker/engine/backend/cuda/cuda_status.h"

namespace traind::engine {
namespace {

class NcclCommunicatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string reason;
    if (cuda::DeviceCount(&reason) == 0) GTEST_SKIP() << reason;
    ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
    auto stream = cuda::Stream::Create();
    ASSERT_TRUE(stream.ok()) << stream.status();
    stream_ = std::move(*stream);
  }
  cuda::Stream stream_;
};

// How NCCL's results become the worker's failures; needs no device.
TEST(NcclStatusTest, ResultsAreTypedForTheScheduler) {
  EXPECT_TRUE(NcclStatus(ncclSuccess, "call").ok());
  EXPECT_TRUE(NcclStatus(ncclInProgress, "call").ok());  // non-blocking: not yet done
  // A peer that failed is not this rank's device: no failure kind, so the
  // worker reports a crash, which traind retries.
  const absl::Status remote = NcclStatus(ncclRemoteError, "ncclAllReduce");
  EXPECT_TRUE(absl::IsUnavailable(remote)) << remote;
  EXPECT_EQ(FailureKindOf(remote), FailureKind::kNone);
  EXPECT_NE(remote.message().find("ncclAllReduce"), absl::string_view::npos) << remote;
  EXPECT_NE(remote.message().find("a peer rank failed"), absl::string_view::npos) << remote;
  // Misuse of the library is this rank's device error, naming the call.
  const absl::Status misuse = NcclStatus(ncclInvalidArgument, "ncclCommInitRankConfig");
  EXPECT_EQ(FailureKindOf(misuse), FailureKind::kDeviceError) << misuse;
  EXPECT_NE(misuse.message().find("ncclCommInitRankConfig"), absl::string_view::npos) << misuse;
}

TEST_F(NcclCommunicatorTest, UniqueIdIs128Bytes) {
  auto id = NewNcclUniqueId();
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_EQ(id->size(), 128u);
}

TEST_F(NcclCommunicatorTest, SingleRankAllReduceIsIdentity) {
  auto id = NewNcclUniqueId();
  ASSERT_TRUE(id.ok()) << id.status();
  auto comm = NcclCommunicator::Create(*id, 0, 1, stream_.get());
  ASSERT_TRUE(comm.ok()) << comm.status();
  std::vector<float> host = {1.5f, -2.0f, 3.25f};
  auto buffer = cuda::DeviceBuffer::Allocate(host.size() * sizeof(float));
  ASSERT_TRUE(buffer.ok());
  ASSERT_EQ(cudaMemcpy(buffer->get(), host.data(), 12, cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_TRUE((*comm)->AllReduceSum(buffer->as<float>(), 3).ok());
  std::vector<float> back(3);
  ASSERT_EQ(cudaMemcpy(back.data(), buffer->get(), 12, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(back, host);
  std::vector<double> sums = {10.0, 0.25};
  ASSERT_TRUE((*comm)->AllReduceSum(sums.data(), 2).ok());
  EXPECT_EQ(sums, (std::vector<double>{10.0, 0.25}));
}

// A started reduction runs on the communicator's stream after what the
// backend's stream had enqueued, and the backend's later work after WaitAll
// comes after it: no host synchronization in between.
TEST_F(NcclCommunicatorTest, StartedReductionsAreOrderedWithTheBackendStream) {
  auto id = NewNcclUniqueId();
  ASSERT_TRUE(id.ok()) << id.status();
  auto comm = NcclCommunicator::Create(*id, 0, 1, stream_.get());
  ASSERT_TRUE(comm.ok()) << comm.status();
  constexpr size_t kCount = 1 << 20;
  std::vector<float> host(kCount);
  for (size_t i = 0; i < kCount; ++i) host[i] = static_cast<float>(i % 1000) - 500.0f;
  auto pinned = cuda::PinnedBuffer::Allocate(kCount * sizeof(float));
  auto buffer = cuda::DeviceBuffer::Allocate(kCount * sizeof(float));
  ASSERT_TRUE(pinned.ok() && buffer.ok());
  std::memcpy(pinned->get(), host.data(), kCount * sizeof(float));
  for (int round = 0; round < 3; ++round) {
    ASSERT_EQ(cudaMemsetAsync(buffer->get(), 0, kCount * sizeof(float), stream_.get()),
              cudaSuccess);
    ASSERT_EQ(cudaMemcpyAsync(buffer->get(), pinned->get(), kCount * sizeof(float),
                              cudaMemcpyHostToDevice, stream_.get()),
              cudaSuccess);
    ASSERT_TRUE((*comm)->StartAllReduceSum(buffer->as<float>(), kCount / 2).ok());
    ASSERT_TRUE((*comm)->StartAllReduceSum(buffer->as<float>() + kCount / 2, kCount / 2).ok());
    ASSERT_TRUE((*comm)->WaitAll().ok());
    std::vector<float> back(kCount);
    ASSERT_EQ(cudaMemcpyAsync(back.data(), buffer->get(), kCount * sizeof(float),
                              cudaMemcpyDeviceToHost, stream_.get()),
              cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(stream_.get()), cudaSuccess);
    ASSERT_EQ(back, host) << "round " << round;  // one rank: the sum is the input
  }
  EXPECT_TRUE((*comm)->WaitAll().ok());  // nothing started
}

TEST_F(NcclCommunicatorTest, MissingPeerFailsFastInsteadOfHanging) {
  auto id = NewNcclUniqueId();
  ASSERT_TRUE(id.ok()) << id.status();
  NcclCommunicatorOptions options;
  options.timeout = absl::Seconds(5);
  const absl::Time start = absl::Now();
  // Rank 0 of 2; rank 1 never comes.
  auto comm = NcclCommunicator::Create(*id, 0, 2, stream_.get(), options);
  ASSERT_FALSE(comm.ok());
  EXPECT_LT(absl::Now() - start, absl::Seconds(30));
  EXPECT_NE(comm.status().message().find("rank"), std::string::npos) << comm.status();
}

TEST_F(NcclCommunicatorTest, AbortFailsLaterCollectivesWithTheReason) {
  auto id = NewNcclUniqueId();
  ASSERT_TRUE(id.ok()) << id.status();
  auto comm = NcclCommunicator::Create(*id, 0, 1, stream_.get());
  ASSERT_TRUE(comm.ok()) << comm.status();
  (*comm)->Abort("rank 1 died");
  double x = 1;
  const absl::Status s = (*comm)->AllReduceSum(&x, 1);
  EXPECT_EQ(s.code(), absl::StatusCode::kAborted) << s;
  EXPECT_NE(s.message().find("rank 1 died"), std::string::npos) << s;
}

}  // namespace
}  // namespace traind::engine
