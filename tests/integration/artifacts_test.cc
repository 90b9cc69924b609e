// Artifacts leave traind over the API (ListArtifacts, GetArtifact), jobs are
// deleted (DeleteJob, crash-safe) and retention deletes by itself: against
// the real traind binary.
#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/integration/testing/traind_process.h"
#include "tests/testing/temp_dir.h"

namespace traind::testing {
namespace {

namespace fs = std::filesystem;
using traind::v1::Artifact;
using traind::v1::Job;

std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A finished CV job with refit: 2 folds + the refit task.
Job RunRefitJob(TraindProcess& d, int epochs = 3) {
  traind::v1::JobSpec spec = IrisExampleSpec(2, epochs);
  spec.mutable_cross_validation()->set_refit(true);
  absl::StatusOr<Job> job = SubmitJob(d.stub(), spec);
  EXPECT_TRUE(job.ok()) << job.status();
  if (!job.ok()) return Job();
  std::vector<traind::v1::JobEvent> events;
  EXPECT_TRUE(WatchAll(d.stub(), job->id(), 0, &events).ok());
  Job done = GetJob(d.stub(), job->id());
  EXPECT_EQ(done.state(), Job::SUCCEEDED) << done.DebugString();
  return done;
}

grpc::Status List(TraindProcess& d, const std::string& job_id,
                  traind::v1::ListArtifactsResponse* out) {
  traind::v1::ListArtifactsRequest req;
  req.set_job_id(job_id);
  auto ctx = Ctx();
  return d.stub()->ListArtifacts(ctx.get(), req, out);
}

// GetArtifact read whole: the chunks' bytes, the first chunk's artifact and
// the last one's sha256.
struct Download {
  grpc::Status status;
  Artifact artifact;
  std::string bytes;
  std::string sha256;
  int chunks = 0;
};
Download Get(traind::v1::TrainingService::Stub* stub, const std::string& job_id,
             const std::string& name) {
  traind::v1::GetArtifactRequest req;
  req.set_job_id(job_id);
  req.set_name(name);
  auto ctx = Ctx(60);
  auto reader = stub->GetArtifact(ctx.get(), req);
  Download d;
  traind::v1::ArtifactChunk chunk;
  while (reader->Read(&chunk)) {
    if (d.chunks++ == 0) d.artifact = chunk.artifact();
    d.bytes += chunk.data();
    if (!chunk.sha256().empty()) d.sha256 = chunk.sha256();
  }
  d.status = reader->Finish();
  return d;
}

grpc::Status Delete(TraindProcess& d, const std::string& job_id, bool cancel,
                    traind::v1::DeleteJobResponse* out = nullptr) {
  traind::v1::DeleteJobRequest req;
  req.set_job_id(job_id);
  req.set_cancel(cancel);
  traind::v1::DeleteJobResponse resp;
  auto ctx = Ctx(60);
  grpc::Status s = d.stub()->DeleteJob(ctx.get(), req, &resp);
  if (out != nullptr) *out = resp;
  return s;
}

grpc::StatusCode GetJobCode(TraindProcess& d, const std::string& id) {
  traind::v1::GetJobRequest req;
  req.set_job_id(id);
  Job job;
  auto ctx = Ctx();
  grpc::Status s = d.stub()->GetJob(ctx.get(), req, &job);
  if (s.error_code() != grpc::StatusCode::OK && s.error_code() != grpc::StatusCode::NOT_FOUND) {
    ADD_FAILURE() << "GetJob " << id << ": " << s.error_code() << " " << s.error_message();
  }
  return s.error_code();
}

// Every regular file under `dir`, relative, with its size.
std::map<std::string, int64_t> FilesUnder(const std::string& dir) {
  std::map<std::string, int64_t> out;
  std::error_code ec;
  if (!fs::exists(dir, ec)) return out;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (e.is_regular_file() && !e.is_symlink()) {
      out[fs::path(e.path()).lexically_relative(dir).generic_string()] =
          static_cast<int64_t>(e.file_size());
    }
  }
  return out;
}

class ArtifactsTest : public ::testing::Test {
 protected:
  void TearDown() override {
    if (HasFailure() && daemon_ != nullptr) std::cerr << "--- traind log ---\n" << daemon_->Log();
  }
  void StartDaemon(std::vector<std::string> args = {"--cpu-slots=2"}) {
    daemon_ = std::make_unique<TraindProcess>(dir_.path() + "/state", args);
    ASSERT_TRUE(daemon_->Start()) << daemon_->Log();
  }
  std::string JobDirOf(const std::string& id) { return dir_.path() + "/state/jobs/" + id; }

  TempDir dir_;
  std::unique_ptr<TraindProcess> daemon_;
};

TEST_F(ArtifactsTest, ListsEveryFileOfTheJobWithItsKindTaskAndSize) {
  StartDaemon();
  const Job job = RunRefitJob(*daemon_);
  traind::v1::ListArtifactsResponse list;
  ASSERT_TRUE(List(*daemon_, job.id(), &list).ok());
  std::map<std::string, Artifact> by_name;
  for (const Artifact& a : list.artifacts()) by_name[a.name()] = a;
  // Every regular file of the job's directory is listed, with its size.
  const std::map<std::string, int64_t> files = FilesUnder(JobDirOf(job.id()));
  ASSERT_FALSE(files.empty());
  for (const auto& [name, size] : files) {
    ASSERT_TRUE(by_name.count(name)) << name;
    EXPECT_EQ(by_name[name].size_bytes(), size) << name;
  }
  // What a user looks for, by kind and task.
  ASSERT_TRUE(by_name.count("predictions.csv"));
  EXPECT_EQ(by_name["predictions.csv"].kind(), Artifact::PREDICTIONS);
  EXPECT_EQ(by_name["predictions.csv"].task(), -1);
  for (int t = 0; t < 2; ++t) {
    const std::string p = absl::StrCat("task-", t, "/predictions.csv");
    ASSERT_TRUE(by_name.count(p)) << p;
    EXPECT_EQ(by_name[p].kind(), Artifact::PREDICTIONS);
    EXPECT_EQ(by_name[p].task(), t);
    const std::string log = absl::StrCat("task-", t, "/attempt-1.log");
    ASSERT_TRUE(by_name.count(log)) << log;
    EXPECT_EQ(by_name[log].kind(), Artifact::LOG);
  }
  // The refit task (2) has its model under its own name and the job's.
  ASSERT_TRUE(by_name.count("task-2/model.ckpt"));
  EXPECT_EQ(by_name["task-2/model.ckpt"].kind(), Artifact::MODEL);
  ASSERT_TRUE(by_name.count("model.ckpt"));
  EXPECT_EQ(by_name["model.ckpt"].task(), 2);
  EXPECT_EQ(by_name["model.ckpt"].size_bytes(), by_name["task-2/model.ckpt"].size_bytes());
  bool tensorboard = false;
  for (const auto& [name, a] : by_name) {
    if (absl::StartsWith(name, "tensorboard/task-1/")) {
      tensorboard = true;
      EXPECT_EQ(a.kind(), Artifact::TENSORBOARD);
      EXPECT_EQ(a.task(), 1);
    }
  }
  EXPECT_TRUE(tensorboard);
  // Sorted by name.
  for (int i = 1; i < list.artifacts_size(); ++i) {
    EXPECT_LT(list.artifacts(i - 1).name(), list.artifacts(i).name());
  }
}

TEST_F(ArtifactsTest, DownloadsAreTheFilesBytesWithTheirSizeAndSha256) {
  StartDaemon();
  const Job job = RunRefitJob(*daemon_);
  for (const std::string name :
       {"predictions.csv", "task-0/predictions.csv", "model.ckpt", "task-1/attempt-1.log"}) {
    SCOPED_TRACE(name);
    const std::string path =
        JobDirOf(job.id()) + "/" + (name == "model.ckpt" ? "task-2/model.ckpt" : name);
    const std::string expected = ReadBytes(path);
    ASSERT_FALSE(expected.empty());
    Download d = Get(daemon_->stub(), job.id(), name);
    ASSERT_TRUE(d.status.ok()) << d.status.error_message();
    EXPECT_EQ(d.bytes, expected);
    EXPECT_EQ(d.artifact.name(), name);
    EXPECT_EQ(d.artifact.size_bytes(), static_cast<int64_t>(expected.size()));
    // sha256sum (coreutils) as the independent digest.
    std::string out;
    ASSERT_EQ(RunCommand("sha256sum " + path, &out), 0);
    EXPECT_EQ(d.sha256, out.substr(0, 64));
  }
  // A file larger than one chunk arrives in several, whole.
  const std::string big_path = JobDirOf(job.id()) + "/task-0/notes.bin";
  std::string big(3 * (1 << 20) + 12345, '\0');
  std::mt19937 rng(7);
  for (char& c : big) c = static_cast<char>(rng());
  std::ofstream(big_path, std::ios::binary) << big;
  Download d = Get(daemon_->stub(), job.id(), "task-0/notes.bin");
  ASSERT_TRUE(d.status.ok()) << d.status.error_message();
  EXPECT_EQ(d.chunks, 4);
  EXPECT_TRUE(d.bytes == big);
  EXPECT_EQ(d.artifact.kind(), Artifact::OTHER);
}

TEST_F(ArtifactsTest, NothingOutsideTheJobDirectoryCanBeNamed) {
  StartDaemon();
  const Job job = RunRefitJob(*daemon_, 2);
  // A link planted in the job's directory, to the store and to a directory.
  fs::create_symlink(dir_.path() + "/state/traind.db", JobDirOf(job.id()) + "/task-0/db.csv");
  fs::create_directories(dir_.path() + "/outside");
  std::ofstream(dir_.path() + "/outside/secret.txt") << "secret";
  fs::create_directory_symlink(dir_.path() + "/outside", JobDirOf(job.id()) + "/linked");
  traind::v1::ListArtifactsResponse list;
  ASSERT_TRUE(List(*daemon_, job.id(), &list).ok());
  for (const Artifact& a : list.artifacts()) {
    EXPECT_NE(a.name(), "task-0/db.csv");
    EXPECT_FALSE(absl::StartsWith(a.name(), "linked")) << a.name();
  }
  for (const std::string name :
       {"../../traind.db", "/etc/passwd", "task-0/../../../traind.db", "task-0/db.csv",
        "linked/secret.txt", "./predictions.csv", "task-0//predictions.csv", "task-9/model.ckpt"}) {
    Download d = Get(daemon_->stub(), job.id(), name);
    EXPECT_EQ(d.status.error_code(), grpc::StatusCode::NOT_FOUND) << name;
    EXPECT_TRUE(d.bytes.empty()) << name;
    EXPECT_NE(d.status.error_message().find(job.id()), std::string::npos)
        << d.status.error_message();
  }
  EXPECT_EQ(Get(daemon_->stub(), job.id(), "").status.error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(Get(daemon_->stub(), "no-such-job", "predictions.csv").status.error_code(),
            grpc::StatusCode::NOT_FOUND);
  traind::v1::ListArtifactsResponse none;
  EXPECT_EQ(List(*daemon_, "no-such-job", &none).error_code(), grpc::StatusCode::NOT_FOUND);
}

// A job with thousands of files is listed in pages (one reply of 60,000
// came near gRPC's 4 MiB limit), by name, each exactly once; a download
// looks at its own path only, and trainctl follows the pages.
TEST_F(ArtifactsTest, ManyFilesAreListedInPages) {
  StartDaemon();
  const Job job = RunRefitJob(*daemon_, 2);
  traind::v1::ListArtifactsResponse before;
  ASSERT_TRUE(List(*daemon_, job.id(), &before).ok());
  fs::create_directories(JobDirOf(job.id()) + "/extra");
  for (int i = 0; i < 2500; ++i) {
    std::ofstream(JobDirOf(job.id()) + "/extra/f-" + std::to_string(i) + ".txt") << i;
  }
  std::vector<std::string> names;
  traind::v1::ListArtifactsRequest req;
  req.set_job_id(job.id());
  int pages = 0;
  do {
    traind::v1::ListArtifactsResponse page;
    auto ctx = Ctx();
    ASSERT_TRUE(daemon_->stub()->ListArtifacts(ctx.get(), req, &page).ok());
    EXPECT_LE(page.artifacts_size(), 1000);
    for (const Artifact& a : page.artifacts()) names.push_back(a.name());
    req.set_page_token(page.next_page_token());
    ++pages;
  } while (!req.page_token().empty() && pages < 10);
  EXPECT_EQ(pages, 3);
  EXPECT_EQ(names.size(), static_cast<size_t>(before.artifacts_size()) + 2500);
  EXPECT_TRUE(std::is_sorted(names.begin(), names.end()));
  EXPECT_EQ(std::adjacent_find(names.begin(), names.end()), names.end()) << "a name twice";
  // page_size, and tokens ListArtifacts did not make.
  req.set_page_token("");
  req.set_page_size(10001);
  traind::v1::ListArtifactsResponse bad;
  auto c1 = Ctx();
  grpc::Status s = daemon_->stub()->ListArtifacts(c1.get(), req, &bad);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(s.error_message(), "page_size: from 0 (the default, 1000) to 10000, got 10001");
  req.set_page_size(0);
  req.set_page_token("!!not-base64!!");
  auto c2 = Ctx();
  s = daemon_->stub()->ListArtifacts(c2.get(), req, &bad);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(s.error_message(), "page_token: not a token ListArtifacts returned");
  // A download among them; the refit's model under the job's name.
  Download d = Get(daemon_->stub(), job.id(), "extra/f-1234.txt");
  ASSERT_TRUE(d.status.ok()) << d.status.error_message();
  EXPECT_EQ(d.bytes, "1234");
  EXPECT_EQ(d.artifact.name(), "extra/f-1234.txt");
  d = Get(daemon_->stub(), job.id(), "model.ckpt");
  ASSERT_TRUE(d.status.ok()) << d.status.error_message();
  EXPECT_EQ(d.artifact.name(), "model.ckpt");
  EXPECT_EQ(d.artifact.task(), 2);
  // trainctl lists every page.
  std::string out;
  ASSERT_EQ(RunCommand(BinDir() + "/trainctl --address " + daemon_->address() + " artifacts " +
                           job.id() + " 2>&1",
                       &out),
            0)
      << out;
  EXPECT_NE(out.find("extra/f-999.txt"), std::string::npos);
  EXPECT_NE(out.find("extra/f-2499.txt"), std::string::npos);
}

TEST_F(ArtifactsTest, DeleteRemovesTheJobItsEventsAndItsFiles) {
  StartDaemon();
  const Job keep = RunRefitJob(*daemon_, 2);
  const Job job = RunRefitJob(*daemon_, 2);
  const int64_t files_bytes = [&] {
    int64_t n = 0;
    for (const auto& [name, size] : FilesUnder(JobDirOf(job.id()))) n += size;
    return n;
  }();
  traind::v1::DeleteJobResponse resp;
  ASSERT_TRUE(Delete(*daemon_, job.id(), false, &resp).ok());
  EXPECT_EQ(resp.freed_bytes(), files_bytes);
  EXPECT_EQ(GetJobCode(*daemon_, job.id()), grpc::StatusCode::NOT_FOUND);
  EXPECT_FALSE(fs::exists(JobDirOf(job.id())));
  std::vector<traind::v1::JobEvent> events;
  EXPECT_EQ(WatchAll(daemon_->stub(), job.id(), 0, &events).error_code(),
            grpc::StatusCode::NOT_FOUND);
  traind::v1::ListJobsResponse listed;
  auto ctx = Ctx();
  ASSERT_TRUE(daemon_->stub()->ListJobs(ctx.get(), traind::v1::ListJobsRequest(), &listed).ok());
  ASSERT_EQ(listed.jobs_size(), 1);
  EXPECT_EQ(listed.jobs(0).id(), keep.id());
  // Deleting it again: NOT_FOUND. The other job is untouched.
  EXPECT_EQ(Delete(*daemon_, job.id(), false).error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(GetJob(daemon_->stub(), keep.id()).state(), Job::SUCCEEDED);
  Download d = Get(daemon_->stub(), keep.id(), "predictions.csv");
  EXPECT_TRUE(d.status.ok());
  // After a restart the store agrees: the job stays gone, the other whole.
  daemon_->Stop();
  StartDaemon();
  EXPECT_EQ(GetJobCode(*daemon_, job.id()), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(GetJob(daemon_->stub(), keep.id()).state(), Job::SUCCEEDED);
}

TEST_F(ArtifactsTest, ARunningJobIsDeletedOnlyWithCancel) {
  StartDaemon();
  absl::StatusOr<Job> job = SubmitJob(daemon_->stub(), IrisExampleSpec(2, 100000));
  ASSERT_TRUE(job.ok()) << job.status();
  grpc::Status refused = Delete(*daemon_, job->id(), false);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(refused.error_message().find("cancel"), std::string::npos) << refused.error_message();
  EXPECT_NE(GetJob(daemon_->stub(), job->id()).state(), Job::STATE_UNSPECIFIED);
  ASSERT_TRUE(Delete(*daemon_, job->id(), true).ok());
  EXPECT_EQ(GetJobCode(*daemon_, job->id()), grpc::StatusCode::NOT_FOUND);
  EXPECT_FALSE(fs::exists(JobDirOf(job->id())));
  // No worker of it is left running: the next job runs at once.
  const Job next = RunRefitJob(*daemon_, 2);
  EXPECT_EQ(next.state(), Job::SUCCEEDED);
}

// A kill -9 at any moment of a delete leaves the job whole or gone: never
// rows without files, files without rows, or a store traind refuses.
TEST_F(ArtifactsTest, KillDuringDeleteLeavesTheJobWholeOrGone) {
  StartDaemon();
  std::vector<Job> jobs;
  for (int i = 0; i < 4; ++i) jobs.push_back(RunRefitJob(*daemon_, 2));
  int whole = 0, gone = 0;
  for (size_t i = 0; i < jobs.size(); ++i) {
    const Job& job = jobs[i];
    const std::map<std::string, int64_t> before = FilesUnder(JobDirOf(job.id()));
    // Delete on another thread; kill traind after a delay that moves
    // through the delete's steps.
    std::thread deleter([&] { Delete(*daemon_, job.id(), false); });
    std::this_thread::sleep_for(std::chrono::microseconds(i == 0 ? 0 : 300 * (1 << (2 * i))));
    kill(daemon_->pid(), SIGKILL);
    deleter.join();
    daemon_->Stop();
    StartDaemon();
    const grpc::StatusCode code = GetJobCode(*daemon_, job.id());
    if (code == grpc::StatusCode::OK) {
      ++whole;
      EXPECT_EQ(FilesUnder(JobDirOf(job.id())), before) << job.id();
      Download d = Get(daemon_->stub(), job.id(), "predictions.csv");
      EXPECT_TRUE(d.status.ok()) << d.status.error_message();
    } else {
      ++gone;
      EXPECT_EQ(code, grpc::StatusCode::NOT_FOUND);
      EXPECT_FALSE(fs::exists(JobDirOf(job.id())));
    }
    for (const auto& e : fs::directory_iterator(dir_.path() + "/state/jobs")) {
      EXPECT_FALSE(absl::StartsWith(e.path().filename().string(), ".deleted-")) << e.path();
    }
  }
  std::cerr << "kill during delete: " << whole << " whole, " << gone << " gone\n";
  // Any job that survived can still be deleted.
  for (const Job& job : jobs) {
    if (GetJobCode(*daemon_, job.id()) == grpc::StatusCode::OK) {
      EXPECT_TRUE(Delete(*daemon_, job.id(), false).ok());
    }
  }
}

// The two halves of an interrupted delete, set up by hand: files moved
// aside while the store still has the job come back; files moved aside of a
// job the store has forgotten go.
TEST_F(ArtifactsTest, StartFinishesInterruptedDeletes) {
  StartDaemon();
  const Job kept = RunRefitJob(*daemon_, 2);
  const Job forgotten = RunRefitJob(*daemon_, 2);
  const std::map<std::string, int64_t> files = FilesUnder(JobDirOf(kept.id()));
  const std::map<std::string, int64_t> forgotten_files = FilesUnder(JobDirOf(forgotten.id()));
  ASSERT_TRUE(Delete(*daemon_, forgotten.id(), false).ok());
  daemon_->Stop();
  const std::string jobs = dir_.path() + "/state/jobs/";
  fs::rename(jobs + kept.id(), jobs + ".deleted-" + kept.id());
  fs::create_directories(jobs + ".deleted-" + forgotten.id() + "/task-0");
  std::ofstream(jobs + ".deleted-" + forgotten.id() + "/task-0/predictions.csv") << "row\n";
  StartDaemon();
  EXPECT_EQ(FilesUnder(JobDirOf(kept.id())), files);
  EXPECT_TRUE(Get(daemon_->stub(), kept.id(), "predictions.csv").status.ok());
  EXPECT_FALSE(fs::exists(jobs + ".deleted-" + kept.id()));
  EXPECT_FALSE(fs::exists(jobs + ".deleted-" + forgotten.id()));
  EXPECT_FALSE(fs::exists(JobDirOf(forgotten.id())));
  EXPECT_NE(daemon_->Log().find("job delete undone job=" + kept.id()), std::string::npos);
  (void)forgotten_files;
}

TEST_F(ArtifactsTest, DeletedJobsGiveTheirSpaceBack) {
  StartDaemon();
  std::vector<Job> jobs;
  for (int i = 0; i < 3; ++i) jobs.push_back(RunRefitJob(*daemon_, 30));
  traind::v1::ServerInfo info;
  {
    auto ctx = Ctx();
    ASSERT_TRUE(
        daemon_->stub()->GetServerInfo(ctx.get(), traind::v1::GetServerInfoRequest(), &info).ok());
  }
  const int64_t before = info.state_dir_bytes();
  EXPECT_GT(before, 0);
  for (const Job& job : jobs) ASSERT_TRUE(Delete(*daemon_, job.id(), false).ok());
  auto ctx = Ctx();
  ASSERT_TRUE(
      daemon_->stub()->GetServerInfo(ctx.get(), traind::v1::GetServerInfoRequest(), &info).ok());
  EXPECT_LT(info.state_dir_bytes(), before);
  // What GetServerInfo says is what is on disk (the store with its WAL,
  // and every file under the state directory).
  int64_t on_disk = 0;
  for (const auto& e : fs::recursive_directory_iterator(dir_.path() + "/state")) {
    struct stat st;
    if (lstat(e.path().c_str(), &st) == 0 && S_ISREG(st.st_mode)) on_disk += st.st_size;
  }
  EXPECT_NEAR(static_cast<double>(info.state_dir_bytes()), static_cast<double>(on_disk),
              0.05 * static_cast<double>(on_disk) + 65536);
}

TEST_F(ArtifactsTest, RetentionKeepsTheNewestFinishedJobs) {
  const std::string config = dir_.path() + "/traind.yaml";
  std::ofstream(config) << "retention: {max_finished_jobs: 2, interval: 1s}\n";
  StartDaemon({"--cpu-slots=2", "--config=" + config, "--data-root=" + SourceDir()});
  std::vector<Job> jobs;
  for (int i = 0; i < 4; ++i) jobs.push_back(RunRefitJob(*daemon_, 2));
  // Within a few passes only the two newest are left.
  // (A pass deletes newest first: wait for both lines.)
  auto logged = [&](const Job& j) {
    return daemon_->Log().find("job deleted by retention job=" + j.id()) != std::string::npos;
  };
  for (int i = 0; i < 100 && !(logged(jobs[0]) && logged(jobs[1])); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_EQ(GetJobCode(*daemon_, jobs[0].id()), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(GetJobCode(*daemon_, jobs[1].id()), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(GetJobCode(*daemon_, jobs[2].id()), grpc::StatusCode::OK);
  EXPECT_EQ(GetJobCode(*daemon_, jobs[3].id()), grpc::StatusCode::OK);
  EXPECT_FALSE(fs::exists(JobDirOf(jobs[0].id())));
  const std::string log = daemon_->Log();
  EXPECT_NE(
      log.find("job deleted by retention job=" + jobs[0].id() + " reason=max_finished_jobs=2"),
      std::string::npos)
      << log;
}

TEST_F(ArtifactsTest, RetentionByAgeAppliesAtStart) {
  StartDaemon();
  const Job old = RunRefitJob(*daemon_, 2);
  daemon_->Stop();
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  const std::string config = dir_.path() + "/traind.yaml";
  std::ofstream(config) << "retention:\n  max_age: 1s\n";
  StartDaemon({"--cpu-slots=2", "--config=" + config, "--data-root=" + SourceDir()});
  // The pass logs each job once its delete has finished.
  const std::string logged = "job deleted by retention job=" + old.id() + " reason=max_age=1s";
  for (int i = 0; i < 100 && daemon_->Log().find(logged) == std::string::npos; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_NE(daemon_->Log().find(logged), std::string::npos) << daemon_->Log();
  EXPECT_EQ(GetJobCode(*daemon_, old.id()), grpc::StatusCode::NOT_FOUND);
}

TEST_F(ArtifactsTest, TrainctlListsDownloadsAndDeletes) {
  StartDaemon();
  const Job job = RunRefitJob(*daemon_, 2);
  const std::string trainctl = BinDir() + "/trainctl --address " + daemon_->address();
  std::string out;
  ASSERT_EQ(RunCommand(trainctl + " artifacts " + job.id(), &out), 0) << out;
  EXPECT_NE(out.find("NAME"), std::string::npos) << out;
  EXPECT_NE(out.find("task-0/predictions.csv"), std::string::npos) << out;
  EXPECT_NE(out.find("predictions"), std::string::npos) << out;
  const std::string saved = dir_.path() + "/oof.csv";
  ASSERT_EQ(
      RunCommand(trainctl + " download " + job.id() + " predictions.csv -O " + saved + " 2>&1",
                 &out),
      0)
      << out;
  EXPECT_NE(out.find("SHA-256 checked"), std::string::npos) << out;
  EXPECT_EQ(ReadBytes(saved), ReadBytes(JobDirOf(job.id()) + "/predictions.csv"));
  EXPECT_FALSE(fs::exists(saved + ".part"));
  ASSERT_EQ(RunCommand(trainctl + " download " + job.id() + " task-1/predictions.csv -O -", &out),
            0);
  EXPECT_EQ(out, ReadBytes(JobDirOf(job.id()) + "/task-1/predictions.csv"));
  EXPECT_EQ(RunCommand(trainctl + " download " + job.id() + " ../traind.db -O - 2>&1", &out), 6);
  EXPECT_NE(out.find("no artifact"), std::string::npos) << out;
  ASSERT_EQ(RunCommand(trainctl + " info", &out), 0) << out;
  EXPECT_NE(out.find("state_dir_size:"), std::string::npos) << out;
  ASSERT_EQ(RunCommand(trainctl + " delete " + job.id(), &out), 0) << out;
  EXPECT_NE(out.find("deleted job " + job.id()), std::string::npos) << out;
  EXPECT_EQ(RunCommand(trainctl + " get " + job.id() + " 2>&1", &out), 6) << out;
}

// -O names a directory, a symbolic link or a FIFO: the file lands inside the
// directory, the link's target is replaced (the link stays a link), and the
// FIFO is written to (never replaced by a regular file, as /dev/null must not
// be either).
TEST_F(ArtifactsTest, TrainctlDownloadWritesIntoDirectoriesLinksAndFifos) {
  StartDaemon();
  const Job job = RunRefitJob(*daemon_, 2);
  const std::string trainctl = BinDir() + "/trainctl --address " + daemon_->address();
  const std::string expected = ReadBytes(JobDirOf(job.id()) + "/task-0/predictions.csv");
  ASSERT_FALSE(expected.empty());
  const std::string download = trainctl + " download " + job.id() + " task-0/predictions.csv -O ";
  std::string out;

  const std::string into = dir_.path() + "/into";
  fs::create_directory(into);
  ASSERT_EQ(RunCommand(download + into + " 2>&1", &out), 0) << out;
  EXPECT_EQ(ReadBytes(into + "/predictions.csv"), expected);
  EXPECT_NE(out.find("to " + into + "/predictions.csv"), std::string::npos) << out;
  fs::create_directory(into + "/sub");
  fs::create_directory(into + "/sub/predictions.csv");
  EXPECT_EQ(RunCommand(download + into + "/sub 2>&1", &out), 2) << out;  // bad argument
  EXPECT_NE(out.find(into + "/sub/predictions.csv: is a directory"), std::string::npos) << out;

  const std::string real = dir_.path() + "/real.csv";
  const std::string link = dir_.path() + "/link.csv";
  { std::ofstream(real) << "old\n"; }
  fs::create_symlink(real, link);
  ASSERT_EQ(RunCommand(download + link + " 2>&1", &out), 0) << out;
  EXPECT_TRUE(fs::is_symlink(fs::symlink_status(link)));
  EXPECT_EQ(ReadBytes(real), expected);
  EXPECT_FALSE(fs::exists(real + ".part"));
  EXPECT_FALSE(fs::exists(link + ".part"));

  const std::string fifo = dir_.path() + "/fifo";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  std::string received;
  std::thread reader([&] { received = ReadBytes(fifo); });
  const int rc = RunCommand(download + fifo + " 2>&1", &out);
  reader.join();
  EXPECT_EQ(rc, 0) << out;
  EXPECT_EQ(received, expected);
  EXPECT_TRUE(fs::is_fifo(fs::status(fifo)));
  EXPECT_FALSE(fs::exists(fifo + ".part"));
}

}  // namespace
}  // namespace traind::testing
