// Datasets over the API against a real traind on TCP with tokens: upload,
// nothing sent twice, versions, resuming after a cancelled call and after a
// kill -9 of traind, bad bytes, the size limit and the quota, roles and
// owners, a job trained on a dataset by name, and deletion of a dataset in
// use. Digests are computed here with OpenSSL; profile values by hand.
#include <openssl/sha.h>
#include <sys/wait.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "server/core/auth.h"
#include "tests/integration/testing/traind_process.h"
#include "tests/testing/temp_dir.h"

namespace traind::testing {
namespace {

using traind::v1::Dataset;
using traind::v1::Job;

const char* kViewer = "viewer-token-0123456789abcdef";
const char* kSam = "sam-token-0123456789abcdef";
const char* kBob = "bob-token-0123456789abcdef";
const char* kAdmin = "admin-token-0123456789abcdef";

std::string Sha256(const std::string& bytes) {
  unsigned char d[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size(), d);
  return absl::BytesToHexString(absl::string_view(reinterpret_cast<const char*>(d), sizeof(d)));
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::unique_ptr<grpc::ClientContext> As(const std::string& token, int seconds = 20) {
  auto ctx = Ctx(seconds);
  ctx->AddMetadata("authorization", "Bearer " + token);
  return ctx;
}

traind::v1::PrepareDatasetUploadRequest FileOf(const std::string& name, const std::string& bytes,
                                               const std::string& file_name = "iris.csv") {
  traind::v1::PrepareDatasetUploadRequest f;
  f.set_name(name);
  f.set_size_bytes(static_cast<int64_t>(bytes.size()));
  f.set_sha256(Sha256(bytes));
  f.set_file_name(file_name);
  return f;
}

class DatasetRpcTest : public ::testing::Test {
 protected:
  void SetUp() override {
    using traind::server::Sha256Hex;
    const std::string tokens = dir_.Write(
        "tokens.yaml",
        absl::StrCat("tokens:\n  - {name: vera, role: viewer, sha256: ", Sha256Hex(kViewer),
                     "}\n  - {name: sam, role: submitter, sha256: ", Sha256Hex(kSam),
                     "}\n  - {name: bob, role: submitter, sha256: ", Sha256Hex(kBob),
                     "}\n  - {name: ada, role: admin, sha256: ", Sha256Hex(kAdmin), "}\n"));
    // One dataset may hold 6000 bytes, an owner 9000 (iris.csv: 3867).
    const std::string config =
        dir_.Write("traind.yaml", absl::StrCat("cpu_slots: 1\ndata_roots: [", dir_.path(),
                                               "/roots]\ndatasets:\n  max_bytes: 6000\n"
                                               "  owner_quota_bytes: 9000\n"));
    std::filesystem::create_directories(dir_.path() + "/roots");
    daemon_ = std::make_unique<TraindProcess>(
        dir_.path() + "/state",
        std::vector<std::string>{"--config=" + config, "--listen=127.0.0.1:0",
                                 "--tokens-file=" + tokens});
    ASSERT_TRUE(daemon_->Start()) << daemon_->Log();
    Connect();
    iris_ = ReadFile(SourceDir() + "/examples/data/iris.csv");
    ASSERT_EQ(iris_.size(), 3867u);
  }
  void TearDown() override {
    if (daemon_) daemon_->Stop();
    if (HasFailure() && daemon_) std::cerr << "--- traind log ---\n" << daemon_->Log();
  }
  void Connect() {
    auto ctx = Ctx();
    ASSERT_TRUE(daemon_->stub()->GetServerInfo(ctx.get(), {}, &info_).ok());
    const traind::v1::ServerInfo& info = info_;
    for (const std::string& a : info.listen_addresses()) {
      if (!absl::StartsWith(a, "unix:")) {
        tcp_ = traind::v1::TrainingService::NewStub(
            grpc::CreateChannel(a, grpc::InsecureChannelCredentials()));
      }
    }
    ASSERT_NE(tcp_, nullptr);
  }

  grpc::Status Prepare(const std::string& token, const traind::v1::PrepareDatasetUploadRequest& f,
                       traind::v1::PrepareDatasetUploadResponse* resp) {
    auto ctx = As(token);
    return tcp_->PrepareDatasetUpload(ctx.get(), f, resp);
  }
  // Sends `bytes` from `offset` in chunks of `chunk`; with `stop_after` >= 0
  // cancels the call once that many bytes were sent.
  grpc::Status Send(const std::string& token, const traind::v1::PrepareDatasetUploadRequest& f,
                    const std::string& bytes, int64_t offset, Dataset* out, size_t chunk = 1000,
                    int64_t stop_after = -1) {
    auto ctx = As(token);
    auto writer = tcp_->UploadDataset(ctx.get(), out);
    traind::v1::UploadDatasetRequest m;
    *m.mutable_header()->mutable_file() = f;
    m.mutable_header()->set_offset(offset);
    writer->Write(m);
    for (size_t at = static_cast<size_t>(offset); at < bytes.size(); at += chunk) {
      if (stop_after >= 0 && static_cast<int64_t>(at) >= stop_after) {
        // Give traind the time to append what it read, then walk away.
        usleep(300000);
        ctx->TryCancel();
        return writer->Finish();
      }
      m.set_data(bytes.substr(at, chunk));
      if (!writer->Write(m)) break;
    }
    writer->WritesDone();
    return writer->Finish();
  }
  // Prepare, then send what is missing.
  grpc::Status Upload(const std::string& token, const std::string& name, const std::string& bytes,
                      Dataset* out, const std::string& file_name = "iris.csv") {
    traind::v1::PrepareDatasetUploadResponse p;
    grpc::Status s = Prepare(token, FileOf(name, bytes, file_name), &p);
    if (!s.ok()) return s;
    if (p.has_dataset()) {
      *out = p.dataset();
      return s;
    }
    return Send(token, FileOf(name, bytes, file_name), bytes, p.offset(), out);
  }
  std::vector<Dataset> List(const std::string& token) {
    traind::v1::ListDatasetsResponse r;
    auto ctx = As(token);
    EXPECT_TRUE(tcp_->ListDatasets(ctx.get(), {}, &r).ok());
    return {r.datasets().begin(), r.datasets().end()};
  }

  TempDir dir_;
  std::unique_ptr<TraindProcess> daemon_;
  std::unique_ptr<traind::v1::TrainingService::Stub> tcp_;
  std::string iris_;
  traind::v1::ServerInfo info_;
};

TEST_F(DatasetRpcTest, UploadProfilesAndStoresEachVersionOnce) {
  Dataset v1;
  ASSERT_TRUE(Upload(kSam, "iris", iris_, &v1).ok());
  EXPECT_EQ(v1.name(), "iris");
  EXPECT_EQ(v1.version(), 1);
  EXPECT_EQ(v1.owner(), "sam");
  EXPECT_EQ(v1.sha256(), Sha256(iris_));
  EXPECT_EQ(v1.size_bytes(), 3867);
  // The profile, by hand from the file: 150 rows, 5 columns, 50 of each class.
  ASSERT_EQ(v1.profile().rows(), 150);
  ASSERT_EQ(v1.profile().columns_size(), 5);
  const auto& species = v1.profile().columns(4);
  EXPECT_EQ(species.name(), "species");
  EXPECT_EQ(species.kind(), traind::v1::ColumnProfile::CATEGORICAL);
  ASSERT_EQ(species.value_counts_size(), 3);
  for (const auto& vc : species.value_counts()) EXPECT_EQ(vc.count(), 50) << vc.value();
  EXPECT_EQ(v1.profile().columns(0).kind(), traind::v1::ColumnProfile::NUMERIC);
  EXPECT_FLOAT_EQ(v1.profile().columns(0).min(), 4.3f);  // as the engine reads it
  EXPECT_FLOAT_EQ(v1.profile().columns(0).max(), 7.9f);

  // The same bytes again: traind answers at preparation, nothing to send,
  // and no new version.
  traind::v1::PrepareDatasetUploadResponse again;
  ASSERT_TRUE(Prepare(kSam, FileOf("iris", iris_), &again).ok());
  ASSERT_TRUE(again.has_dataset());
  EXPECT_EQ(again.dataset().version(), 1);
  // Other bytes under the name: version 2.
  const std::string fewer = iris_.substr(0, iris_.find("4.9,3,1.4"));  // header + 1 row
  Dataset v2;
  ASSERT_TRUE(Upload(kSam, "iris", fewer, &v2).ok());
  EXPECT_EQ(v2.version(), 2);
  EXPECT_EQ(v2.profile().rows(), 1);
  EXPECT_EQ(List(kSam).size(), 2u);
  EXPECT_TRUE(List(kBob).empty());     // bob sees his own only
  EXPECT_EQ(List(kAdmin).size(), 2u);  // an admin sees everyone's
  // Bob's upload of the same bytes is recorded for him without a transfer.
  traind::v1::PrepareDatasetUploadResponse bobs;
  ASSERT_TRUE(Prepare(kBob, FileOf("flowers", iris_), &bobs).ok());
  ASSERT_TRUE(bobs.has_dataset());
  EXPECT_EQ(bobs.dataset().owner(), "bob");
  EXPECT_EQ(bobs.dataset().profile().rows(), 150);

  // Downloaded, the bytes are the file's.
  traind::v1::GetDatasetRequest get;
  get.set_ref("iris:1");
  auto ctx = As(kSam);
  auto reader = tcp_->DownloadDataset(ctx.get(), get);
  std::string got;
  traind::v1::ArtifactChunk chunk;
  std::string sha;
  while (reader->Read(&chunk)) {
    got += chunk.data();
    if (!chunk.sha256().empty()) sha = chunk.sha256();
  }
  ASSERT_TRUE(reader->Finish().ok());
  EXPECT_EQ(got, iris_);
  EXPECT_EQ(sha, Sha256(iris_));
}

TEST_F(DatasetRpcTest, AnInterruptedUploadResumesAndADatasetIsWholeOrAbsent) {
  const auto file = FileOf("iris", iris_);
  Dataset d;
  // Cancelled after 2000 bytes: no dataset, the bytes held.
  grpc::Status s = Send(kSam, file, iris_, 0, &d, 500, 2000);
  EXPECT_FALSE(s.ok());
  EXPECT_TRUE(List(kSam).empty());
  traind::v1::PrepareDatasetUploadResponse p;
  ASSERT_TRUE(Prepare(kSam, file, &p).ok());
  EXPECT_FALSE(p.has_dataset());
  EXPECT_EQ(p.offset(), 2000);
  // A wrong offset is refused naming the bytes held.
  s = Send(kSam, file, iris_, 1000, &d);
  EXPECT_EQ(s.error_code(), grpc::FAILED_PRECONDITION);
  EXPECT_TRUE(absl::StrContains(s.error_message(), "holds 2000 bytes")) << s.error_message();

  // traind killed mid-upload (after 3000 bytes): after the restart there is
  // no dataset, and the upload continues from what traind holds: what the
  // file had (a kill loses the bytes still staged for the disk, up to a few
  // MiB, which the client sends again).
  s = Send(kSam, file, iris_, 2000, &d, 500, 3000);
  EXPECT_FALSE(s.ok());
  daemon_->Stop(SIGKILL);
  ASSERT_TRUE(daemon_->Start()) << daemon_->Log();
  Connect();
  EXPECT_TRUE(List(kSam).empty());
  ASSERT_TRUE(Prepare(kSam, file, &p).ok());
  EXPECT_GE(p.offset(), 2000);
  EXPECT_LE(p.offset(), 3000);
  ASSERT_TRUE(Send(kSam, file, iris_, p.offset(), &d).ok());
  EXPECT_EQ(d.sha256(), Sha256(iris_));
  EXPECT_EQ(d.profile().rows(), 150);
}

TEST_F(DatasetRpcTest, BadBytesLimitsAndRolesGetNamedErrorsAndStoreNothing) {
  Dataset d;
  // A ragged row: refused naming the client's file name and the line.
  const std::string bad = "a,b\n1,2\n3\n";
  grpc::Status s = Upload(kSam, "bad", bad, &d, "bad.csv");
  EXPECT_EQ(s.error_code(), grpc::INVALID_ARGUMENT);
  EXPECT_TRUE(absl::StrContains(s.error_message(), "bad.csv:3")) << s.error_message();
  EXPECT_FALSE(absl::StrContains(s.error_message(), "/state/")) << s.error_message();
  // Bytes that are not what the header declared.
  auto wrong = FileOf("wrong", iris_);
  wrong.set_sha256(Sha256("something else"));
  s = Send(kSam, wrong, iris_, 0, &d);
  EXPECT_EQ(s.error_code(), grpc::INVALID_ARGUMENT);
  EXPECT_TRUE(absl::StrContains(s.error_message(), Sha256(iris_))) << s.error_message();
  // Larger than datasets.max_bytes.
  const std::string big = "x\n" + std::string(7000, '1') + "\n";
  traind::v1::PrepareDatasetUploadResponse p;
  s = Prepare(kSam, FileOf("big", big), &p);
  EXPECT_EQ(s.error_code(), grpc::RESOURCE_EXHAUSTED);
  EXPECT_TRUE(absl::StrContains(s.error_message(), "datasets.max_bytes")) << s.error_message();
  // A viewer cannot upload.
  s = Prepare(kViewer, FileOf("iris", iris_), &p);
  EXPECT_EQ(s.error_code(), grpc::PERMISSION_DENIED);
  EXPECT_TRUE(List(kSam).empty());

  // The quota: 3867 + 3867 bytes fit in 9000, a third file does not.
  ASSERT_TRUE(Upload(kSam, "iris", iris_, &d).ok());
  const std::string other = iris_ + "5.0,3.0,1.0,0.1,setosa\n";
  ASSERT_TRUE(Upload(kSam, "iris2", other, &d).ok());
  const std::string third = iris_ + "5.1,3.1,1.1,0.1,setosa\n";
  s = Prepare(kSam, FileOf("iris3", third), &p);
  EXPECT_EQ(s.error_code(), grpc::RESOURCE_EXHAUSTED);
  EXPECT_TRUE(absl::StrContains(s.error_message(),
                                absl::StrCat("sam's datasets hold ", 3867 + other.size(),
                                             " of their 9000 bytes (datasets.owner_quota_bytes)")))
      << s.error_message();
  // The same bytes under another name take no more of it.
  ASSERT_TRUE(Upload(kSam, "iris-again", iris_, &d).ok());
  EXPECT_EQ(List(kSam).size(), 3u);

  // What a client needs to know ahead: the data roots and the limits.
  ASSERT_EQ(info_.data_roots_size(), 1);
  EXPECT_EQ(info_.data_roots(0), std::filesystem::canonical(dir_.path() + "/roots").string());
  EXPECT_EQ(info_.max_dataset_bytes(), 6000);
  EXPECT_EQ(info_.dataset_quota_bytes(), 9000);
  // A path that is not on the server says so and names the upload.
  traind::v1::SubmitJobRequest req;
  *req.mutable_spec() = IrisExampleSpec(2, 3);
  req.mutable_spec()->mutable_data()->set_path("/home/user/proj/customers.csv");
  Job job;
  auto ctx = As(kSam);
  s = tcp_->SubmitJob(ctx.get(), req, &job);
  EXPECT_EQ(s.error_code(), grpc::INVALID_ARGUMENT);
  EXPECT_TRUE(absl::StartsWith(s.error_message(),
                               "spec.data.path: /home/user/proj/customers.csv: no such file on the "
                               "traind server"))
      << s.error_message();
  EXPECT_TRUE(absl::StrContains(s.error_message(), "trainctl datasets upload"));
}

TEST_F(DatasetRpcTest, AJobTrainsOnADatasetByNameWhichStaysWhileTheJobRuns) {
  Dataset d;
  ASSERT_TRUE(Upload(kSam, "iris", iris_, &d).ok());
  // A spec naming the dataset, not a path: the job records the digest.
  traind::v1::SubmitJobRequest req;
  *req.mutable_spec() = IrisExampleSpec(2, 3000);
  req.mutable_spec()->mutable_data()->clear_path();
  req.mutable_spec()->mutable_data()->set_dataset("iris");
  Job job;
  auto ctx = As(kSam);
  ASSERT_TRUE(tcp_->SubmitJob(ctx.get(), req, &job).ok());
  EXPECT_EQ(job.spec().data().dataset_sha256(), Sha256(iris_));

  // In use by a job that has not finished: not deleted, by its owner.
  traind::v1::DeleteDatasetRequest del;
  del.set_ref("iris");
  traind::v1::DeleteDatasetResponse gone;
  ctx = As(kSam);
  grpc::Status s = tcp_->DeleteDataset(ctx.get(), del, &gone);
  EXPECT_EQ(s.error_code(), grpc::FAILED_PRECONDITION);
  EXPECT_TRUE(absl::StrContains(s.error_message(), job.id())) << s.error_message();
  // Another owner does not see it, and may not name sam's.
  ctx = As(kBob);
  s = tcp_->DeleteDataset(ctx.get(), del, &gone);
  EXPECT_EQ(s.error_code(), grpc::NOT_FOUND) << s.error_message();
  del.set_owner("sam");
  ctx = As(kBob);
  s = tcp_->DeleteDataset(ctx.get(), del, &gone);
  EXPECT_EQ(s.error_code(), grpc::PERMISSION_DENIED) << s.error_message();
  // A spec naming a dataset bob does not have.
  ctx = As(kBob);
  s = tcp_->SubmitJob(ctx.get(), req, &job);
  EXPECT_EQ(s.error_code(), grpc::NOT_FOUND);
  EXPECT_TRUE(absl::StartsWith(s.error_message(), "spec.data.dataset: bob has no dataset iris"))
      << s.error_message();

  // The job trains on the dataset's bytes; GetDataset lists it.
  traind::v1::CancelJobRequest cancel;
  cancel.set_job_id(job.id());
  Job cancelled;
  ctx = As(kSam);
  ASSERT_TRUE(tcp_->CancelJob(ctx.get(), cancel, &cancelled).ok());
  *req.mutable_spec() = IrisExampleSpec(2, 3);
  req.mutable_spec()->mutable_data()->clear_path();
  req.mutable_spec()->mutable_data()->set_dataset("sha256:" + Sha256(iris_));
  Job trained;
  ctx = As(kSam);
  ASSERT_TRUE(tcp_->SubmitJob(ctx.get(), req, &trained).ok());
  std::vector<traind::v1::JobEvent> events;
  ASSERT_TRUE(WatchAll(daemon_->stub(), trained.id(), 0, &events, 120).ok());
  trained = GetJob(daemon_->stub(), trained.id());
  EXPECT_EQ(trained.state(), Job::SUCCEEDED) << trained.DebugString();
  traind::v1::GetDatasetRequest get;
  get.set_ref("iris");
  Dataset with_jobs;
  ctx = As(kSam);
  ASSERT_TRUE(tcp_->GetDataset(ctx.get(), get, &with_jobs).ok());
  ASSERT_EQ(with_jobs.job_ids_size(), 2);
  EXPECT_EQ(with_jobs.job_ids(0), trained.id());  // newest first
  EXPECT_EQ(with_jobs.job_ids(1), job.id());

  // Predict scores a stored dataset by name.
  {
    traind::v1::PredictRequest header;
    header.mutable_header()->set_job_id(trained.id());
    header.mutable_header()->set_dataset("iris:1");
    traind::v1::PredictResponse predicted;
    auto pctx = As(kSam, 60);
    auto writer = tcp_->Predict(pctx.get(), &predicted);
    writer->Write(header);
    writer->WritesDone();
    grpc::Status ps = writer->Finish();
    ASSERT_TRUE(ps.ok()) << ps.error_message();
    EXPECT_EQ(predicted.rows(), 150);
  }

  // Both jobs finished: the dataset goes; the jobs stay readable.
  del.clear_owner();
  for (int i = 0; i < 100 && GetJob(daemon_->stub(), job.id()).state() != Job::CANCELLED; ++i) {
    usleep(50000);
  }
  ctx = As(kSam);
  ASSERT_TRUE(tcp_->DeleteDataset(ctx.get(), del, &gone).ok()) << daemon_->Log();
  ASSERT_EQ(gone.deleted_size(), 1);
  EXPECT_TRUE(List(kSam).empty());
  EXPECT_EQ(GetJob(daemon_->stub(), trained.id()).spec().data().dataset_sha256(), Sha256(iris_));
  EXPECT_FALSE(std::filesystem::exists(dir_.path() + "/state/datasets/objects/" + Sha256(iris_)));
}

// Retention: a dataset no stored job names goes once older than
// datasets.retention_age, one log line each; one a job names stays; an
// upload abandoned for datasets.abandoned_upload_age goes too.
TEST(DatasetRetentionTest, UnusedOldDatasetsAndAbandonedUploadsAreRemoved) {
  TempDir dir;
  const std::string config =
      dir.Write("traind.yaml", absl::StrCat("cpu_slots: 1\ndata_roots: [", SourceDir(),
                                            "]\ndatasets:\n  retention_age: 2s\n"
                                            "  abandoned_upload_age: 2s\n"
                                            "retention:\n  interval: 1s\n"));
  TraindProcess daemon(dir.path() + "/state", {"--config=" + config});
  ASSERT_TRUE(daemon.Start()) << daemon.Log();
  auto* stub = daemon.stub();
  const std::string iris = ReadFile(SourceDir() + "/examples/data/iris.csv");
  // Whole uploads over the unix socket (its caller, local, may upload);
  // with `cut`, only that many bytes, then the call is cancelled.
  auto upload = [&](const std::string& name, const std::string& bytes, size_t cut = 0) {
    traind::v1::PrepareDatasetUploadResponse p;
    auto ctx = Ctx();
    EXPECT_TRUE(stub->PrepareDatasetUpload(ctx.get(), FileOf(name, bytes), &p).ok());
    if (p.has_dataset()) return;
    Dataset d;
    auto up = Ctx();
    auto writer = stub->UploadDataset(up.get(), &d);
    traind::v1::UploadDatasetRequest m;
    *m.mutable_header()->mutable_file() = FileOf(name, bytes);
    m.mutable_header()->set_offset(p.offset());
    writer->Write(m);
    m.set_data(cut > 0 ? bytes.substr(0, cut) : bytes);
    writer->Write(m);
    if (cut > 0) {
      usleep(300000);
      up->TryCancel();
      writer->Finish();
      return;
    }
    writer->WritesDone();
    EXPECT_TRUE(writer->Finish().ok());
  };
  upload("old", iris);
  const std::string other = iris + "5.0,3.0,1.0,0.1,setosa\n";
  upload("used", other);
  const std::string partial = iris + "5.2,3.2,1.2,0.2,setosa\n";
  upload("partial", partial, 1000);
  traind::v1::PrepareDatasetUploadResponse held;
  {
    auto ctx = Ctx();
    ASSERT_TRUE(stub->PrepareDatasetUpload(ctx.get(), FileOf("partial", partial), &held).ok());
  }
  EXPECT_EQ(held.offset(), 1000);
  // A job names "used": it stays, whatever its age.
  traind::v1::JobSpec spec = IrisExampleSpec(2, 2);
  spec.mutable_data()->clear_path();
  spec.mutable_data()->set_dataset("used");
  absl::StatusOr<Job> job = SubmitJob(stub, spec);
  ASSERT_TRUE(job.ok()) << job.status();

  // The next sweeps remove "old" and the abandoned bytes (each once older
  // than 2 s: not always in the same sweep).
  std::vector<std::string> names;
  for (int i = 0; i < 100; ++i) {
    traind::v1::ListDatasetsResponse r;
    auto ctx = Ctx();
    ASSERT_TRUE(stub->ListDatasets(ctx.get(), {}, &r).ok());
    names.clear();
    for (const Dataset& d : r.datasets()) names.push_back(d.name());
    auto prepare = Ctx();
    ASSERT_TRUE(stub->PrepareDatasetUpload(prepare.get(), FileOf("partial", partial), &held).ok());
    if (names.size() == 1 && held.offset() == 0) break;
    usleep(100000);
  }
  EXPECT_EQ(names, std::vector<std::string>{"used"});
  EXPECT_EQ(held.offset(), 0);  // the abandoned bytes are gone
  const std::string log = daemon.Log();
  EXPECT_TRUE(absl::StrContains(log, "dataset removed by retention owner=local dataset=old:1"))
      << log;
  EXPECT_TRUE(absl::StrContains(log, "dataset uploads abandoned removed=1")) << log;
  EXPECT_FALSE(absl::StrContains(log, "dataset removed by retention owner=local dataset=used"))
      << log;
}

}  // namespace
}  // namespace traind::testing
