// traind on a state directory whose disk fills up while a job trains: a
// tmpfs of its own (mounted in a mount namespace of the test process, which
// traind and its workers inherit, so nothing outlives the test).
#include <openssl/sha.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "tests/integration/testing/traind_process.h"
#include "tests/testing/full_disk.h"
#include "tests/testing/temp_dir.h"

namespace traind::testing {
namespace {

using traind::v1::Job;
using traind::v1::JobEvent;

std::string Sha256Hex(const std::string& bytes) {
  unsigned char d[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size(), d);
  return absl::BytesToHexString(absl::string_view(reinterpret_cast<const char*>(d), sizeof(d)));
}

traind::v1::ServerInfo Info(TraindProcess* d) {
  traind::v1::ServerInfo info;
  auto ctx = Ctx();
  EXPECT_TRUE(d->stub()->GetServerInfo(ctx.get(), traind::v1::GetServerInfoRequest(), &info).ok());
  return info;
}

// Polls GetServerInfo until the store is (not) writable; its store_error.
std::string AwaitStore(TraindProcess* d, bool writable) {
  std::string error;
  for (int i = 0; i < 3000; ++i) {
    error = Info(d).store_error();
    if (error.empty() == writable) break;
    usleep(10000);
  }
  return error;
}

TEST(DiskFullTest, TraindServesReadsRefusesNewJobsStopsInItsGraceAndLosesNothing) {
  TempDir dir;
  const std::string state = dir.path() + "/state";
  std::filesystem::create_directories(state);
  if (std::string why = MountSmallTmpfs(state, 32 << 20); !why.empty()) {
    GTEST_SKIP() << "needs a tmpfs of its own: " << why;
  }
  // (traind's log is on that disk too: lines written while it is full are lost.)
  const std::vector<std::string> args = {"--cpu-slots=1", "--stop-grace=5"};
  auto daemon = std::make_unique<TraindProcess>(state, args);
  ASSERT_TRUE(daemon->Start()) << daemon->Log();
  // Slow epochs (batches of 4 rows): the job trains through the test.
  traind::v1::JobSpec spec = IrisExampleSpec(2, 100000);
  spec.mutable_training()->set_batch_size(4);
  absl::StatusOr<Job> job = SubmitJob(daemon->stub(), spec);
  ASSERT_TRUE(job.ok()) << job.status();
  for (int i = 0; i < 3000 && GetJob(daemon->stub(), job->id()).tasks(0).epochs_done() < 3; ++i) {
    usleep(10000);
  }
  ASSERT_GE(GetJob(daemon->stub(), job->id()).tasks(0).epochs_done(), 3);

  // The disk fills: the worker's next reports find no space.
  ASSERT_GT(FillUp(state + "/filler"), 0);
  const std::string error = AwaitStore(daemon.get(), false);
  ASSERT_FALSE(error.empty()) << daemon->Log();
  EXPECT_TRUE(absl::StrContains(error, "disk is full")) << error;
  EXPECT_TRUE(absl::StrContains(error, "traind.db")) << error;
  // New jobs are refused, saying why; reads are served.
  absl::StatusOr<Job> refused = SubmitJob(daemon->stub(), IrisExampleSpec(2, 2));
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnavailable) << refused.status();
  EXPECT_TRUE(absl::StrContains(refused.status().message(), "cannot record new jobs"))
      << refused.status();
  EXPECT_EQ(GetJob(daemon->stub(), job->id()).state(), Job::RUNNING);
  traind::v1::ListJobsResponse list;
  {
    auto ctx = Ctx();
    ASSERT_TRUE(daemon->stub()->ListJobs(ctx.get(), traind::v1::ListJobsRequest(), &list).ok());
  }
  EXPECT_EQ(list.jobs_size(), 1);

  // Space returns: traind stores what waited and takes jobs again.
  std::filesystem::remove(state + "/filler");
  EXPECT_EQ(AwaitStore(daemon.get(), true), "");
  absl::StatusOr<Job> second = SubmitJob(daemon->stub(), IrisExampleSpec(2, 2));
  EXPECT_TRUE(second.ok()) << second.status();

  // Full again, and traind is stopped while it is: it ends within its grace
  // (what it could not store is dropped, as after a kill).
  ASSERT_GT(FillUp(state + "/filler"), 0);
  ASSERT_FALSE(AwaitStore(daemon.get(), false).empty());
  const absl::Time stop = absl::Now();
  const int status = daemon->Stop(SIGTERM);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  EXPECT_LT(absl::Now() - stop, absl::Seconds(5 + 3));

  // The next start (with space again) has everything that was stored: the
  // job, its epochs in order with no gap, the second job.
  std::filesystem::remove(state + "/filler");
  daemon = std::make_unique<TraindProcess>(state, args);
  ASSERT_TRUE(daemon->Start()) << daemon->Log();
  EXPECT_EQ(Info(daemon.get()).store_error(), "");
  // The job is back (its stored epochs are checked below, from its events:
  // epochs_done may already be the next attempt's, 0 until it resumes).
  Job resumed = GetJob(daemon->stub(), job->id());
  EXPECT_EQ(resumed.id(), job->id());
  EXPECT_GE(resumed.tasks(0).attempts_size(), 1);
  {
    traind::v1::CancelJobRequest cancel;
    cancel.set_job_id(job->id());
    cancel.set_force(true);
    Job cancelled;
    auto ctx = Ctx();
    ASSERT_TRUE(daemon->stub()->CancelJob(ctx.get(), cancel, &cancelled).ok());
  }
  std::vector<JobEvent> events;
  ASSERT_TRUE(WatchAll(daemon->stub(), job->id(), 0, &events, 60).ok());
  std::map<int, int> last_epoch;  // per attempt of task 0
  for (size_t i = 0; i < events.size(); ++i) {
    EXPECT_EQ(events[i].sequence(), static_cast<int64_t>(i + 1));
    if (!events[i].has_epoch() || events[i].epoch().task() != 0) continue;
    const int attempt = events[i].epoch().attempt();
    const int epoch = events[i].epoch().epoch();
    if (last_epoch.count(attempt) > 0) {
      EXPECT_EQ(epoch, last_epoch[attempt] + 1);
    }
    last_epoch[attempt] = epoch;
  }
  EXPECT_GE(last_epoch[1], 3);
  EXPECT_EQ(GetJob(daemon->stub(), second->id()).id(), second->id());
  daemon->Stop();
  daemon.reset();
  umount2(state.c_str(), MNT_DETACH);
}

// An upload that meets a full disk is refused naming the state directory;
// what was stored stays whole, and the upload resumes once there is space.
TEST(DiskFullTest, AnUploadOnAFullDiskIsRefusedAndResumesOnceThereIsSpace) {
  TempDir dir;
  const std::string state = dir.path() + "/state";
  std::filesystem::create_directories(state);
  if (std::string why = MountSmallTmpfs(state, 32 << 20); !why.empty()) {
    GTEST_SKIP() << "needs a tmpfs of its own: " << why;
  }
  auto daemon = std::make_unique<TraindProcess>(state, std::vector<std::string>{"--cpu-slots=1"});
  ASSERT_TRUE(daemon->Start()) << daemon->Log();
  auto* stub = daemon->stub();
  // Uploads over the unix socket (its caller may upload), whole files.
  auto upload = [&](const std::string& name, const std::string& bytes,
                    traind::v1::Dataset* out) -> grpc::Status {
    traind::v1::PrepareDatasetUploadRequest f;
    f.set_name(name);
    f.set_size_bytes(static_cast<int64_t>(bytes.size()));
    f.set_sha256(Sha256Hex(bytes));
    traind::v1::PrepareDatasetUploadResponse p;
    auto ctx = Ctx();
    grpc::Status s = stub->PrepareDatasetUpload(ctx.get(), f, &p);
    if (!s.ok() || p.has_dataset()) return s;
    auto up = Ctx(60);
    auto writer = stub->UploadDataset(up.get(), out);
    traind::v1::UploadDatasetRequest m;
    *m.mutable_header()->mutable_file() = f;
    m.mutable_header()->set_offset(p.offset());
    writer->Write(m);
    for (size_t at = static_cast<size_t>(p.offset()); at < bytes.size(); at += 1 << 20) {
      m.set_data(bytes.substr(at, 1 << 20));
      if (!writer->Write(m)) break;
    }
    writer->WritesDone();
    return writer->Finish();
  };
  std::string small = "a,b\n";
  for (int i = 0; i < 1000; ++i) small += absl::StrCat(i, ",", i % 7, "\n");
  traind::v1::Dataset kept;
  ASSERT_TRUE(upload("kept", small, &kept).ok());

  // 8 MiB of rows on a full disk.
  std::string big = "a,b\n";
  while (big.size() < (8u << 20)) big += absl::StrCat(big.size(), ",", big.size() % 13, "\n");
  ASSERT_GT(FillUp(state + "/filler"), 0);
  traind::v1::Dataset d;
  grpc::Status s = upload("big", big, &d);
  EXPECT_EQ(s.error_code(), grpc::RESOURCE_EXHAUSTED) << s.error_message();
  EXPECT_TRUE(absl::StrContains(s.error_message(), "state directory")) << s.error_message();
  // Nothing half-made; what was stored is whole.
  traind::v1::ListDatasetsResponse list;
  {
    auto ctx = Ctx();
    ASSERT_TRUE(stub->ListDatasets(ctx.get(), {}, &list).ok());
  }
  ASSERT_EQ(list.datasets_size(), 1);
  EXPECT_EQ(list.datasets(0).name(), "kept");
  traind::v1::GetDatasetRequest get;
  get.set_ref("kept");
  std::string got;
  {
    auto ctx = Ctx();
    auto reader = stub->DownloadDataset(ctx.get(), get);
    traind::v1::ArtifactChunk chunk;
    while (reader->Read(&chunk)) got += chunk.data();
    ASSERT_TRUE(reader->Finish().ok());
  }
  EXPECT_EQ(got, small);

  // Space again: the upload goes on from the bytes traind holds.
  std::filesystem::remove(state + "/filler");
  ASSERT_TRUE(upload("big", big, &d).ok()) << daemon->Log();
  EXPECT_EQ(d.sha256(), Sha256Hex(big));
  EXPECT_GT(d.profile().rows(), 0);
}

}  // namespace
}  // namespace traind::testing
