// Datasets end to end, as from a laptop: trainctl over TCP with TLS and a
// bearer token, in a directory that is not one of traind's data roots,
// against the real traind. `submit` uploads the spec's data file once and
// the job trains on exactly those bytes; `datasets upload|get|list|
// download|delete` work on what was stored.
//
// Network: loopback TCP (port 0, the kernel picks) and unix sockets only.
#include <openssl/evp.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "gtest/gtest.h"
#include "tests/integration/testing/traind_process.h"
#include "tests/testing/temp_dir.h"

namespace traind::testing {
namespace {

const char kToken[] = "submitter-token-0123456789abcdef";

std::string Sha256Hex(const std::string& bytes) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int size = 0;
  EVP_Digest(bytes.data(), bytes.size(), digest, &size, EVP_sha256(), nullptr);
  return absl::BytesToHexString(absl::string_view(reinterpret_cast<const char*>(digest), size));
}

std::string ReadText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

struct TrainctlRun {
  int exit_code = -1;
  std::string out;
  std::string err;
};

class DatasetsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string out;
    if (RunCommand("command -v openssl", &out) != 0) GTEST_SKIP() << "openssl is not installed";
    certs_ = dir_.Path("certs");
    work_ = dir_.Path("laptop");
    const std::string served = dir_.Path("served");
    for (const std::string& d : {certs_, work_, served}) std::filesystem::create_directories(d);
    ASSERT_TRUE(MakeCerts(&out)) << out;
    const std::string tokens =
        dir_.Write("tokens.yaml", absl::StrCat("tokens:\n  - {name: sam, role: submitter, sha256: ",
                                               Sha256Hex(kToken), "}\n"));
    // The only data root is `served`: the laptop directory is not one.
    daemon_ = std::make_unique<TraindProcess>(
        dir_.Path("state"),
        std::vector<std::string>{"--cpu-slots=2", "--listen=127.0.0.1:0", "--tokens-file=" + tokens,
                                 "--tls-cert=" + certs_ + "/server.pem",
                                 "--tls-key=" + certs_ + "/server.key", "--data-root=" + served});
    ASSERT_TRUE(daemon_->Start()) << daemon_->Log();
    tcp_address_ = TcpAddress();
    ASSERT_FALSE(tcp_address_.empty());

    // The laptop's copy of the iris data and spec (a relative data path).
    iris_ = ReadText(SourceDir() + "/examples/data/iris.csv");
    ASSERT_FALSE(iris_.empty());
    std::ofstream(work_ + "/iris.csv", std::ios::binary) << iris_;
    const std::string example = ReadText(SourceDir() + "/examples/iris-cv.yaml");
    const std::string spec =
        absl::StrReplaceAll(example, {{"path: examples/data/iris.csv", "path: iris.csv"}});
    ASSERT_NE(spec, example);
    std::ofstream(work_ + "/iris.yaml") << spec;
  }

  void TearDown() override {
    if (daemon_ == nullptr) return;
    daemon_->Stop();
    if (HasFailure()) std::cerr << "--- traind log ---\n" << daemon_->Log();
  }

  bool MakeCerts(std::string* log) {
    const std::string d = certs_;
    const std::string ec = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";
    const std::vector<std::string> commands = {
        "openssl req -x509 " + ec + " -days 2 -subj /CN=traind-test-ca -keyout " + d +
            "/ca.key -out " + d + "/ca.pem",
        "printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\\n' > " + d + "/san.ext",
        "openssl req " + ec + " -subj /CN=localhost -keyout " + d + "/server.key -out " + d +
            "/server.csr",
        "openssl x509 -req -days 2 -in " + d + "/server.csr -CA " + d + "/ca.pem -CAkey " + d +
            "/ca.key -CAcreateserial -extfile " + d + "/san.ext -out " + d + "/server.pem",
    };
    for (const std::string& c : commands) {
      if (RunCommand(c + " 2>&1", log) != 0) {
        *log = c + "\n" + *log;
        return false;
      }
    }
    return true;
  }

  // The TCP address traind listens on (asked over the unix socket).
  std::string TcpAddress() {
    traind::v1::ServerInfo info;
    auto ctx = Ctx();
    grpc::Status s =
        daemon_->stub()->GetServerInfo(ctx.get(), traind::v1::GetServerInfoRequest(), &info);
    EXPECT_TRUE(s.ok()) << s.error_message();
    for (const std::string& a : info.listen_addresses()) {
      if (a.rfind("unix:", 0) != 0) return a;
    }
    return "";
  }

  // trainctl `args` in the laptop directory, over TCP with TLS and the
  // token (over traind's unix socket with `unix`).
  TrainctlRun Trainctl(const std::string& args, bool unix = false) {
    const std::string err = dir_.Path("trainctl.err");
    const std::string connection = unix ? "--address " + daemon_->address()
                                        : absl::StrCat("--address ", tcp_address_, " --token ",
                                                       kToken, " --tls-ca ", certs_, "/ca.pem");
    TrainctlRun run;
    run.exit_code = RunCommand(absl::StrCat("cd '", work_, "' && ", BinDir(), "/trainctl ",
                                            connection, " ", args, " 2>'", err, "'"),
                               &run.out);
    run.err = ReadText(err);
    return run;
  }

  // The job id in `submit -o json` output.
  static std::string JobId(const std::string& json) {
    const std::string key = "\"id\": \"";
    const size_t at = json.find(key);
    if (at == std::string::npos) return "";
    const size_t start = at + key.size();
    return json.substr(start, json.find('"', start) - start);
  }

  TempDir dir_;
  std::string certs_, work_, tcp_address_, iris_;
  std::unique_ptr<TraindProcess> daemon_;
};

TEST_F(DatasetsTest, SubmitFromALaptopUploadsTheDataOnceAndTrainsOnIt) {
  const std::string sha = Sha256Hex(iris_);
  TrainctlRun r = Trainctl(
      "submit iris.yaml --set cross_validation.folds=2 --set training.epochs=5 --wait -o json");
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  EXPECT_NE(r.err.find("trainctl: uploaded iris.csv as iris:1 ("), std::string::npos) << r.err;
  const std::string id = JobId(r.out);
  ASSERT_FALSE(id.empty()) << r.out;
  traind::v1::Job job = GetJob(daemon_->stub(), id);
  EXPECT_EQ(job.state(), traind::v1::Job::SUCCEEDED);
  EXPECT_EQ(job.owner(), "sam");
  EXPECT_EQ(job.spec().data().dataset_sha256(), sha);
  EXPECT_NE(r.out.find("\"dataset_sha256\": \"" + sha + "\""), std::string::npos) << r.out;

  // The same file again: traind has it, nothing is sent.
  r = Trainctl(
      "submit iris.yaml --set cross_validation.folds=2 --set training.epochs=5 --wait -o json");
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  EXPECT_NE(r.err.find("trainctl: iris.csv: traind already has it (iris:1)"), std::string::npos)
      << r.err;
  EXPECT_EQ(r.err.find("trainctl: uploaded"), std::string::npos) << r.err;
  job = GetJob(daemon_->stub(), JobId(r.out));
  EXPECT_EQ(job.state(), traind::v1::Job::SUCCEEDED);
  EXPECT_EQ(job.spec().data().dataset_sha256(), sha);

  // `datasets get` names both jobs.
  r = Trainctl("datasets get iris:1");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find(id), std::string::npos) << r.out;

  // Over the unix socket nothing is uploaded: the path goes to traind as it
  // is, and the laptop directory is outside its data roots.
  r = Trainctl("submit iris.yaml", /*unix=*/true);
  EXPECT_EQ(r.exit_code, 5) << r.err << r.out;
  EXPECT_EQ(r.err.find("trainctl: uploaded"), std::string::npos) << r.err;
}

TEST_F(DatasetsTest, UploadVersionsProfileAndDownload) {
  TrainctlRun r = Trainctl("datasets upload iris.csv");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("dataset:  iris:1\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("sha256:   " + Sha256Hex(iris_) + "\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("rows:     150\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("columns:  5: sepal_length, sepal_width, petal_length, petal_width, "
                       "species\n"),
            std::string::npos)
      << r.out;

  r = Trainctl("datasets upload iris.csv");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err, "trainctl: already stored, nothing sent\n");
  EXPECT_NE(r.out.find("dataset:  iris:1\n"), std::string::npos) << r.out;

  // Changed bytes under the same name: version 2.
  const std::string changed = iris_ + "5.0,3.0,1.5,0.2,setosa\n";
  std::ofstream(work_ + "/iris.csv", std::ios::binary | std::ios::trunc) << changed;
  r = Trainctl("datasets upload iris.csv");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("dataset:  iris:2\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("rows:     151\n"), std::string::npos) << r.out;

  r = Trainctl("datasets get iris:1");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("rows:     150\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\nCOLUMN "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\nspecies "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("setosa 50"), std::string::npos) << r.out;
  r = Trainctl("datasets get iris -o json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("\"version\": 2"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\"sha256\": \"" + Sha256Hex(changed) + "\""), std::string::npos) << r.out;

  r = Trainctl("datasets list");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out.rfind("NAME ", 0), 0u) << r.out;
  EXPECT_NE(r.out.find(Sha256Hex(iris_).substr(0, 12)), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(Sha256Hex(changed).substr(0, 12)), std::string::npos) << r.out;

  r = Trainctl("datasets download iris:1 -O first.csv");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(ReadText(work_ + "/first.csv"), iris_);

  r = Trainctl("datasets get nope");
  EXPECT_EQ(r.exit_code, 6) << r.err;  // not found
}

TEST_F(DatasetsTest, ADatasetAnUnfinishedJobUsesIsNotDeleted) {
  TrainctlRun r = Trainctl(
      "submit iris.yaml --set cross_validation.folds=2 --set training.epochs=100000 -o json");
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  const std::string id = JobId(r.out);
  ASSERT_FALSE(id.empty()) << r.out;

  r = Trainctl("datasets delete iris");
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_EQ(r.err.rfind("trainctl: ", 0), 0u) << r.err;
  {
    traind::v1::DeleteDatasetRequest req;
    req.set_ref("iris");
    req.set_owner("sam");  // the unix socket's caller is the local admin
    traind::v1::DeleteDatasetResponse resp;
    auto ctx = Ctx();
    grpc::Status s = daemon_->stub()->DeleteDataset(ctx.get(), req, &resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << s.error_message();
  }
  r = Trainctl("datasets get iris");
  EXPECT_EQ(r.exit_code, 0) << r.err;

  // Once the job has ended, the dataset may go.
  traind::v1::CancelJobRequest cancel;
  cancel.set_job_id(id);
  cancel.set_force(true);
  traind::v1::Job job;
  auto ctx = Ctx();
  ASSERT_TRUE(daemon_->stub()->CancelJob(ctx.get(), cancel, &job).ok());
  std::vector<traind::v1::JobEvent> events;
  ASSERT_TRUE(WatchAll(daemon_->stub(), id, 0, &events).ok());
  EXPECT_EQ(GetJob(daemon_->stub(), id).state(), traind::v1::Job::CANCELLED);
  r = Trainctl("datasets delete iris");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out.rfind("deleted iris:1 (", 0), 0u) << r.out;
}

}  // namespace
}  // namespace traind::testing
