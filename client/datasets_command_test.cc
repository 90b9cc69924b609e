// `trainctl datasets ...` and the uploads of `trainctl submit` against an
// in-process fake of traind's dataset RPCs, on a unix socket and on
// loopback TCP: what is sent, resumption, the checks of a download, and
// the spec submit sends. (Against the real daemon: tests/integration/
// datasets_test.cc.)

#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <openssl/evp.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "traind/v1/training_service.grpc.pb.h"

namespace traind::client {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;
using ::traind::v1::Dataset;

std::string Sha256Hex(const std::string& bytes) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int size = 0;
  EVP_Digest(bytes.data(), bytes.size(), digest, &size, EVP_sha256(), nullptr);
  return absl::BytesToHexString(absl::string_view(reinterpret_cast<const char*>(digest), size));
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// Datasets as traind keeps them, in memory: one owner, versions per name,
// partial uploads by digest.
class FakeDatasetService final : public v1::TrainingService::Service {
 public:
  grpc::Status SubmitJob(grpc::ServerContext*, const v1::SubmitJobRequest* req,
                         v1::Job* job) override {
    std::lock_guard<std::mutex> lock(mu_);
    submitted_.push_back(req->spec());
    job->set_id("job-1");
    *job->mutable_spec() = req->spec();
    job->set_state(v1::Job::QUEUED);
    return grpc::Status::OK;
  }

  grpc::Status PrepareDatasetUpload(grpc::ServerContext*,
                                    const v1::PrepareDatasetUploadRequest* req,
                                    v1::PrepareDatasetUploadResponse* resp) override {
    std::lock_guard<std::mutex> lock(mu_);
    ++prepares_;
    if (no_datasets_) return grpc::Status(grpc::StatusCode::UNIMPLEMENTED, "");
    if (deny_uploads_) {
      return grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                          "vera (viewer) may not call PrepareDatasetUpload");
    }
    for (const Dataset& d : datasets_) {
      if (d.sha256() != req->sha256()) continue;
      // Bytes traind holds: recorded under this name now, nothing sent.
      *resp->mutable_dataset() = d.name() == req->name() ? d : RecordLocked(*req, d.profile());
      return grpc::Status::OK;
    }
    resp->set_offset(static_cast<int64_t>(partial_[req->sha256()].size()));
    return grpc::Status::OK;
  }

  grpc::Status UploadDataset(grpc::ServerContext*, grpc::ServerReader<v1::UploadDatasetRequest>* r,
                             Dataset* out) override {
    v1::UploadDatasetRequest message;
    if (!r->Read(&message) || !message.has_header()) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "header first");
    }
    const v1::UploadDatasetRequest::Header header = message.header();
    const std::string sha = header.file().sha256();
    {
      std::lock_guard<std::mutex> lock(mu_);
      headers_.push_back(header);
      if (header.offset() != static_cast<int64_t>(partial_[sha].size())) {
        return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "wrong offset");
      }
    }
    int pieces = 0;
    while (r->Read(&message)) {
      std::lock_guard<std::mutex> lock(mu_);
      if (message.data().size() > (1u << 20)) {
        return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "piece over 1 MiB");
      }
      partial_[sha] += message.data();
      if (slow_) std::this_thread::sleep_for(std::chrono::milliseconds(60));
      if (++pieces == 1 && break_after_first_piece_) {
        break_after_first_piece_ = false;
        return grpc::Status(grpc::StatusCode::UNAVAILABLE, "connection reset");
      }
    }
    std::lock_guard<std::mutex> lock(mu_);
    const std::string bytes = partial_[sha];
    if (static_cast<int64_t>(bytes.size()) != header.file().size_bytes() ||
        Sha256Hex(bytes) != sha) {
      partial_.erase(sha);
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "SHA-256 mismatch");
    }
    partial_.erase(sha);
    stored_[sha] = bytes;
    v1::DatasetProfile profile;
    const std::vector<std::string> lines = absl::StrSplit(bytes, '\n', absl::SkipEmpty());
    profile.set_rows(static_cast<int64_t>(lines.size()) - 1);
    for (absl::string_view name : absl::StrSplit(lines[0], ',')) {
      profile.add_columns()->set_name(std::string(name));
    }
    *out = RecordLocked(header.file(), profile);
    return grpc::Status::OK;
  }

  grpc::Status ListDatasets(grpc::ServerContext*, const v1::ListDatasetsRequest* req,
                            v1::ListDatasetsResponse* resp) override {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = datasets_.rbegin(); it != datasets_.rend(); ++it) {
      if (!req->name().empty() && it->name() != req->name()) continue;
      Dataset* d = resp->add_datasets();
      *d = *it;
      d->clear_profile();
    }
    return grpc::Status::OK;
  }

  grpc::Status GetDataset(grpc::ServerContext*, const v1::GetDatasetRequest* req,
                          Dataset* out) override {
    std::lock_guard<std::mutex> lock(mu_);
    const Dataset* d = FindLocked(req->ref());
    if (d == nullptr) return grpc::Status(grpc::StatusCode::NOT_FOUND, "no dataset " + req->ref());
    *out = *d;
    out->add_job_ids("job-1");
    return grpc::Status::OK;
  }

  grpc::Status DeleteDataset(grpc::ServerContext*, const v1::DeleteDatasetRequest* req,
                             v1::DeleteDatasetResponse* resp) override {
    std::lock_guard<std::mutex> lock(mu_);
    const Dataset* d = FindLocked(req->ref());
    if (d == nullptr) return grpc::Status(grpc::StatusCode::NOT_FOUND, "no dataset " + req->ref());
    if (d->name() == "busy") {
      return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                          "dataset busy:1 is used by job job-1, which has not finished");
    }
    const std::string name = d->name();
    const int version = d->version();
    for (auto it = datasets_.begin(); it != datasets_.end();) {
      if (it->name() == name && (req->all_versions() || it->version() == version)) {
        *resp->add_deleted() = *it;
        it = datasets_.erase(it);
      } else {
        ++it;
      }
    }
    return grpc::Status::OK;
  }

  // The bytes in two messages; a dataset named "damaged" arrives with a
  // digest that is not its bytes'.
  grpc::Status DownloadDataset(grpc::ServerContext*, const v1::GetDatasetRequest* req,
                               grpc::ServerWriter<v1::ArtifactChunk>* writer) override {
    Dataset d;
    std::string bytes;
    {
      std::lock_guard<std::mutex> lock(mu_);
      download_refs_.push_back(req->ref());
      const Dataset* found = FindLocked(req->ref());
      if (found == nullptr) {
        return grpc::Status(grpc::StatusCode::NOT_FOUND, "no dataset " + req->ref());
      }
      d = *found;
      bytes = stored_[d.sha256()];
    }
    v1::ArtifactChunk chunk;
    chunk.mutable_artifact()->set_name(d.file_name());
    chunk.mutable_artifact()->set_size_bytes(static_cast<int64_t>(bytes.size()));
    const size_t half = bytes.size() / 2;
    chunk.set_data(bytes.substr(0, half));
    writer->Write(chunk);
    chunk.Clear();
    chunk.set_data(d.name() == "damaged" ? bytes.substr(half) + "x" : bytes.substr(half));
    chunk.set_sha256(Sha256Hex(bytes));
    writer->Write(chunk);
    return grpc::Status::OK;
  }

  // As a traind older than datasets: UNIMPLEMENTED.
  void NoDatasets() {
    std::lock_guard<std::mutex> lock(mu_);
    no_datasets_ = true;
  }
  // As for a viewer's token: PERMISSION_DENIED.
  void DenyUploads() {
    std::lock_guard<std::mutex> lock(mu_);
    deny_uploads_ = true;
  }
  // 60 ms a piece.
  void SlowDown() {
    std::lock_guard<std::mutex> lock(mu_);
    slow_ = true;
  }
  void BreakAfterFirstPiece() {
    std::lock_guard<std::mutex> lock(mu_);
    break_after_first_piece_ = true;
  }
  // traind holds the first `held` bytes of an earlier upload of `file`.
  void HoldPartial(const std::string& file, size_t held) {
    std::lock_guard<std::mutex> lock(mu_);
    partial_[Sha256Hex(file)] = file.substr(0, held);
  }
  void AddStored(const std::string& name, const std::string& bytes) {
    std::lock_guard<std::mutex> lock(mu_);
    v1::PrepareDatasetUploadRequest file;
    file.set_name(name);
    file.set_sha256(Sha256Hex(bytes));
    file.set_size_bytes(static_cast<int64_t>(bytes.size()));
    file.set_file_name(name + ".csv");
    stored_[file.sha256()] = bytes;
    RecordLocked(file, v1::DatasetProfile());
  }
  int prepares() {
    std::lock_guard<std::mutex> lock(mu_);
    return prepares_;
  }
  std::vector<v1::UploadDatasetRequest::Header> headers() {
    std::lock_guard<std::mutex> lock(mu_);
    return headers_;
  }
  std::string stored(const std::string& sha) {
    std::lock_guard<std::mutex> lock(mu_);
    return stored_[sha];
  }
  std::vector<v1::JobSpec> submitted() {
    std::lock_guard<std::mutex> lock(mu_);
    return submitted_;
  }
  std::vector<std::string> download_refs() {
    std::lock_guard<std::mutex> lock(mu_);
    return download_refs_;
  }

 private:
  Dataset RecordLocked(const v1::PrepareDatasetUploadRequest& file,
                       const v1::DatasetProfile& profile) {
    Dataset d;
    d.set_name(file.name());
    d.set_version(1);
    for (const Dataset& other : datasets_) {
      if (other.name() == file.name()) d.set_version(std::max(d.version(), other.version() + 1));
    }
    d.set_sha256(file.sha256());
    d.set_size_bytes(file.size_bytes());
    d.set_kind(Dataset::CSV);
    d.set_owner("me");
    d.set_file_name(file.file_name());
    *d.mutable_profile() = profile;
    datasets_.push_back(d);
    return d;
  }

  const Dataset* FindLocked(const std::string& ref) const {
    const Dataset* found = nullptr;
    for (const Dataset& d : datasets_) {
      const std::string with_version = absl::StrCat(d.name(), ":", d.version());
      if (ref == "sha256:" + d.sha256() || ref == with_version ||
          (ref == d.name() && (found == nullptr || found->version() < d.version()))) {
        found = &d;
      }
    }
    return found;
  }

  std::mutex mu_;
  std::vector<Dataset> datasets_;
  std::map<std::string, std::string> partial_, stored_;
  std::vector<v1::UploadDatasetRequest::Header> headers_;
  std::vector<v1::JobSpec> submitted_;
  std::vector<std::string> download_refs_;
  int prepares_ = 0;
  bool break_after_first_piece_ = false;
  bool slow_ = false;
  bool no_datasets_ = false;
  bool deny_uploads_ = false;
};

struct RunResult {
  int exit_code = -1;
  std::string out;
  std::string err;
};

class DatasetsCommandTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "trainctl_datasets_test_" + std::to_string(::getpid());
    ::mkdir(dir_.c_str(), 0700);
    unix_address_ = "unix:" + dir_ + "/traind.sock";
    grpc::ServerBuilder builder;
    builder.AddListeningPort(unix_address_, grpc::InsecureServerCredentials());
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    tcp_address_ = "127.0.0.1:" + std::to_string(port);
  }

  void TearDown() override {
    server_->Shutdown();
    std::system(("rm -rf '" + dir_ + "'").c_str());
  }

  // Runs trainctl with `args` (shell words) in dir_, over TCP unless `unix`.
  RunResult Run(const std::string& args, bool unix = false) {
    const std::string out = dir_ + "/out", err = dir_ + "/err";
    const std::string command =
        absl::StrCat("cd '", dir_, "' && ", TRAINCTL_PATH, " --address ",
                     unix ? unix_address_ : tcp_address_, " ", args, " >'", out, "' 2>'", err, "'");
    const int status = std::system(command.c_str());
    RunResult result;
    result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    result.out = ReadFile(out);
    result.err = ReadFile(err);
    return result;
  }

  std::string Write(const std::string& name, const std::string& text) {
    const std::string path = dir_ + "/" + name;
    std::ofstream(path, std::ios::binary) << text;
    return path;
  }

  // A CSV of about `bytes` bytes.
  static std::string Csv(size_t bytes) {
    std::string text = "a,b,label\n";
    for (int i = 0; text.size() < bytes; ++i) absl::StrAppend(&text, i, ",", i * 7 % 13, ",x\n");
    return text;
  }

  std::string dir_, unix_address_, tcp_address_;
  FakeDatasetService service_;
  std::unique_ptr<grpc::Server> server_;
};

TEST_F(DatasetsCommandTest, UploadSendsTheFileOnceInPiecesOfAMebibyte) {
  const std::string csv = Csv(2'500'000);
  Write("Sales Report.csv", csv);
  RunResult r = Run("datasets upload 'Sales Report.csv'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err, "");  // not a terminal: no progress line
  EXPECT_THAT(r.out, StartsWith("dataset:  Sales-Report:1\nsha256:   " + Sha256Hex(csv) + "\n"));
  EXPECT_THAT(r.out, HasSubstr("size:     2.5 MB (" + std::to_string(csv.size()) + " bytes)\n"));
  EXPECT_THAT(r.out, HasSubstr("columns:  3: a, b, label\n"));
  ASSERT_EQ(service_.headers().size(), 1u);
  const v1::UploadDatasetRequest::Header header = service_.headers()[0];
  EXPECT_EQ(header.offset(), 0);
  EXPECT_EQ(header.file().name(), "Sales-Report");
  EXPECT_EQ(header.file().file_name(), "Sales Report.csv");
  EXPECT_EQ(header.file().kind(), Dataset::CSV);
  EXPECT_EQ(header.file().size_bytes(), static_cast<int64_t>(csv.size()));
  EXPECT_EQ(service_.stored(Sha256Hex(csv)), csv);

  // The same bytes again: nothing sent.
  r = Run("datasets upload 'Sales Report.csv' -o json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err, "trainctl: already stored, nothing sent\n");
  EXPECT_THAT(r.out, HasSubstr("\"version\": 1"));
  EXPECT_EQ(service_.headers().size(), 1u);

  // Other bytes under a name: its next version.
  Write("other.csv", Csv(100));
  r = Run("datasets upload other.csv --name Sales-Report");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, StartsWith("dataset:  Sales-Report:2\n"));
}

TEST_F(DatasetsCommandTest, ATerminalSeesAProgressLine) {
  if (std::system("command -v script >/dev/null && command -v stty >/dev/null") != 0) {
    GTEST_SKIP() << "no script(1) to give trainctl a terminal";
  }
  const std::string csv = Csv(6'000'000);
  Write("big.csv", csv);
  service_.SlowDown();
  // stdout and stderr on one pseudo-terminal of 80 columns.
  const std::string command = absl::StrCat(
      "cd '", dir_, "' && TERM=xterm script -qec \"stty cols 80; ", TRAINCTL_PATH, " --address ",
      tcp_address_, " datasets upload big.csv\" /dev/null >'", dir_, "/tty' 2>&1");
  ASSERT_EQ(std::system(command.c_str()), 0) << ReadFile(dir_ + "/tty");
  const std::string tty = ReadFile(dir_ + "/tty");
  // At least the line of the last byte sent.
  EXPECT_THAT(tty, HasSubstr("\rbig.csv  [########"));
  EXPECT_THAT(tty, HasSubstr("]  100%  6.0/6.0 MB  "));
  EXPECT_THAT(tty, HasSubstr(" MB/s  ETA 0:00\033[K"));
  EXPECT_THAT(tty, HasSubstr("\r\033[K"));  // erased before the dataset is printed
  EXPECT_THAT(tty, HasSubstr("dataset:  big:1"));
  const std::vector<std::string> frames = absl::StrSplit(tty, '\r');
  for (const std::string& frame : frames) {
    const std::string line = frame.substr(0, frame.find("\033[K"));
    if (absl::StartsWith(line, "big.csv")) {
      EXPECT_LE(line.size(), 79u) << line;
    }
  }
}

TEST_F(DatasetsCommandTest, ABrokenUploadResumesWhereTraindStopped) {
  const std::string csv = Csv(3'000'000);
  Write("big.csv", csv);
  service_.BreakAfterFirstPiece();
  RunResult r = Run("datasets upload big.csv");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr("trainctl: big.csv: upload interrupted ("));
  EXPECT_THAT(r.err,
              HasSubstr("trainctl: big.csv: resuming at 1048576 bytes (1.0 MB of 3.0 MB)\n"));
  ASSERT_EQ(service_.headers().size(), 2u);
  EXPECT_EQ(service_.headers()[1].offset(), 1 << 20);
  EXPECT_EQ(service_.stored(Sha256Hex(csv)), csv);
  EXPECT_THAT(r.out, StartsWith("dataset:  big:1\n"));
}

TEST_F(DatasetsCommandTest, ARunAfterAnInterruptedOneResumes) {
  const std::string csv = Csv(1'500'000);
  Write("half.csv", csv);
  service_.HoldPartial(csv, 700'000);
  RunResult r = Run("datasets upload half.csv");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err, "trainctl: half.csv: resuming at 700000 bytes (700.0 kB of 1.5 MB)\n");
  ASSERT_EQ(service_.headers().size(), 1u);
  EXPECT_EQ(service_.headers()[0].offset(), 700'000);
  EXPECT_EQ(service_.stored(Sha256Hex(csv)), csv);
}

TEST_F(DatasetsCommandTest, UploadErrors) {
  RunResult r = Run("datasets upload missing.csv");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, StartsWith("trainctl: missing.csv: "));
  Write("x.csv", "a\n1\n");
  r = Run("datasets upload x.csv --name '.bad'");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, StartsWith("trainctl: --name .bad: a dataset name is"));
  r = Run("datasets upload .");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.err, "trainctl: .: not a regular file\n");
  r = Run("datasets");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(service_.prepares(), 0);
}

TEST_F(DatasetsCommandTest, ListGetDelete) {
  service_.AddStored("iris", "a,b\n1,2\n");
  service_.AddStored("iris", "a,b\n1,3\n");
  service_.AddStored("busy", "a\n1\n");
  RunResult r = Run("datasets list", /*unix=*/true);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, StartsWith("NAME  VERSION  SIZE  CREATED  SHA256        FILE\n"
                                "busy        1   4 B  -        "));
  r = Run("datasets list iris -o json", true);
  EXPECT_THAT(r.out, HasSubstr("\"version\": 2"));
  EXPECT_THAT(r.out, Not(HasSubstr("busy")));

  r = Run("datasets get iris", true);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, StartsWith("dataset:  iris:2\n"));
  EXPECT_THAT(r.out, HasSubstr("jobs that used it (1):\n  job-1\n"));
  r = Run("datasets get nope", true);
  EXPECT_EQ(r.exit_code, 6);
  EXPECT_EQ(r.err, "trainctl: no dataset nope\n");

  r = Run("datasets delete busy", true);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.err, "trainctl: dataset busy:1 is used by job job-1, which has not finished\n");
  r = Run("datasets delete iris:1", true);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "deleted iris:1 (8 B)\n");
  service_.AddStored("iris", "a,b\n1,4\n");
  r = Run("datasets delete iris --all-versions -o yaml", true);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("version: 3"));
  EXPECT_EQ(Run("datasets list iris", true).out, "no datasets\n");
}

TEST_F(DatasetsCommandTest, DownloadChecksTheBytes) {
  const std::string csv = Csv(5000);
  service_.AddStored("iris", csv);
  RunResult r = Run("datasets download iris");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(ReadFile(dir_ + "/iris-1.csv"), csv);
  EXPECT_THAT(r.err, HasSubstr("trainctl: saved dataset iris:1 to iris-1.csv (5.0 kB, SHA-256 "
                               "checked)\n"));
  // By digest, whichever version the name meant.
  EXPECT_EQ(service_.download_refs().back(), "sha256:" + Sha256Hex(csv));

  r = Run("datasets download iris:1 -O copy.csv");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(ReadFile(dir_ + "/copy.csv"), csv);
  r = Run("datasets download iris -O -");
  EXPECT_EQ(r.out, csv);

  service_.AddStored("damaged", csv + "more");
  r = Run("datasets download damaged -O damaged.csv");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("arrived damaged"));
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/damaged.csv"));
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/damaged.csv.part"));
}

const char kSpec[] =
    "name: iris\n"
    "data: {path: iris.csv, label: species}\n"
    "cross_validation: {folds: 2, validation_path: holdout.csv}\n";

TEST_F(DatasetsCommandTest, SubmitOverTcpUploadsTheDataFiles) {
  const std::string csv = Csv(3000), holdout = Csv(200);
  Write("iris.csv", csv);
  Write("holdout.csv", holdout);
  Write("spec.yaml", kSpec);
  RunResult r = Run("submit spec.yaml --set training.epochs=3");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err,
            "trainctl: uploaded iris.csv as iris:1 (3.0 kB)\n"
            "trainctl: uploaded holdout.csv as holdout:1 (" +
                std::to_string(holdout.size()) + " B)\n");
  ASSERT_EQ(service_.submitted().size(), 1u);
  v1::JobSpec sent = service_.submitted()[0];
  EXPECT_EQ(sent.data().path(), "");
  EXPECT_EQ(sent.data().dataset(), "sha256:" + Sha256Hex(csv));
  EXPECT_EQ(sent.data().label(), "species");
  EXPECT_EQ(sent.cross_validation().validation_path(), "");
  EXPECT_EQ(sent.cross_validation().validation_dataset(), "sha256:" + Sha256Hex(holdout));
  EXPECT_EQ(sent.training().epochs(), 3);

  // Again: nothing sent.
  r = Run("submit spec.yaml");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err,
            "trainctl: iris.csv: traind already has it (iris:1)\n"
            "trainctl: holdout.csv: traind already has it (holdout:1)\n");
  EXPECT_EQ(service_.headers().size(), 2u);
  EXPECT_EQ(service_.submitted()[1].data().dataset(), "sha256:" + Sha256Hex(csv));

  // --set chooses the file before it is uploaded.
  const std::string other = Csv(1000);
  std::filesystem::create_directories(dir_ + "/sub");
  Write("sub/other data.csv", other);
  r =
      Run("submit spec.yaml --set 'data.path=sub/other data.csv' --set "
          "cross_validation.validation_path=");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err, "trainctl: uploaded sub/other data.csv as other-data:1 (1.0 kB)\n");
  EXPECT_EQ(service_.submitted()[2].data().dataset(), "sha256:" + Sha256Hex(other));
  EXPECT_EQ(service_.submitted()[2].cross_validation().validation_dataset(), "");
}

TEST_F(DatasetsCommandTest, SubmitLeavesPathsAloneOverUnixWithNoUploadOrNoFile) {
  Write("iris.csv", Csv(300));
  Write("spec.yaml", kSpec);  // holdout.csv does not exist here
  RunResult r = Run("submit spec.yaml", /*unix=*/true);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err, "");
  EXPECT_EQ(service_.submitted()[0].data().path(), "iris.csv");
  EXPECT_EQ(service_.submitted()[0].data().dataset(), "");

  r = Run("submit spec.yaml --no-upload");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(service_.submitted()[1].data().path(), "iris.csv");
  EXPECT_EQ(service_.prepares(), 0);

  // Over TCP the file here is uploaded; the one that is not here is left
  // for traind to find, as is a directory.
  std::filesystem::create_directories(dir_ + "/holdout.csv.d");
  r = Run("submit spec.yaml --set cross_validation.validation_path=holdout.csv.d");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(service_.submitted()[2].data().path(), "");
  EXPECT_EQ(service_.submitted()[2].cross_validation().validation_path(), "holdout.csv.d");
  r = Run("submit spec.yaml");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(service_.submitted()[3].cross_validation().validation_path(), "holdout.csv");
  EXPECT_EQ(service_.submitted()[3].cross_validation().validation_dataset(), "");

  // A spec that names a dataset keeps it.
  r = Run("submit spec.yaml --set data.dataset=iris:1");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(service_.submitted()[4].data().dataset(), "iris:1");
  EXPECT_EQ(service_.submitted()[4].data().path(), "iris.csv");
}

TEST_F(DatasetsCommandTest, SubmitToATraindWithoutDatasetsSendsThePath) {
  Write("iris.csv", Csv(300));
  Write("spec.yaml", kSpec);
  service_.NoDatasets();
  RunResult r = Run("submit spec.yaml");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err, "trainctl: iris.csv: this traind takes no uploads; it reads the path itself\n");
  EXPECT_EQ(service_.submitted()[0].data().path(), "iris.csv");
  EXPECT_EQ(service_.submitted()[0].data().dataset(), "");
}

TEST_F(DatasetsCommandTest, SubmitByACallerWhoMayNotUploadLeavesItToTraind) {
  Write("iris.csv", Csv(300));
  Write("spec.yaml", kSpec);
  service_.DenyUploads();
  RunResult r = Run("submit spec.yaml");
  ASSERT_EQ(r.exit_code, 0) << r.err;  // this fake takes the submit
  EXPECT_EQ(r.err, "");
  EXPECT_EQ(service_.submitted()[0].data().path(), "iris.csv");
  // `datasets upload` says why.
  r = Run("datasets upload iris.csv");
  EXPECT_EQ(r.exit_code, 5);
  EXPECT_EQ(r.err, "trainctl: vera (viewer) may not call PrepareDatasetUpload\n");
}

}  // namespace
}  // namespace traind::client
