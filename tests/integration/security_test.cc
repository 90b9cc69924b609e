// Security of the public API, end to end against the real traind: the
// authorization matrix (each role x each RPC), TLS and mutual TLS with
// certificates made at test time by openssl, the config file, and
// trainctl's TLS and token options. (Data-root confinement and limits:
// confinement_test.cc; the store and state directory: state_dir_test.cc.)
//
// Network: loopback TCP (port 0, the kernel picks) and unix sockets only.
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "grpcpp/generic/generic_stub.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "server/core/auth.h"
#include "spec/loader.h"
#include "tests/integration/testing/traind_process.h"

namespace traind::testing {
namespace {

using traind::v1::Job;

std::string ReadText(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A quick job: 2 folds of iris, few epochs.
const char* kViewerToken = "viewer-token-0123456789abcdef";
const char* kSubmitterToken = "submitter-token-0123456789abcdef";
const char* kAdminToken = "admin-token-0123456789abcdef";

std::string WriteTokens(const TempDir& dir) {
  using traind::server::Sha256Hex;
  return dir.Write(
      "tokens.yaml",
      absl::StrCat("tokens:\n", "  - {name: vera, role: viewer, sha256: ", Sha256Hex(kViewerToken),
                   "}\n", "  - {name: sam, role: submitter, sha256: ", Sha256Hex(kSubmitterToken),
                   "}\n", "  - {name: ada, role: admin, sha256: ", Sha256Hex(kAdminToken), "}\n"));
}

// The TCP address the daemon listens on (asked over the unix socket).
std::string TcpAddress(TraindProcess& d) {
  traind::v1::ServerInfo info;
  auto ctx = Ctx();
  grpc::Status s = d.stub()->GetServerInfo(ctx.get(), traind::v1::GetServerInfoRequest(), &info);
  EXPECT_TRUE(s.ok()) << s.error_message();
  for (const std::string& a : info.listen_addresses()) {
    if (a.rfind("unix:", 0) != 0) return a;
  }
  ADD_FAILURE() << "no TCP address in " << info.DebugString();
  return "";
}

std::unique_ptr<grpc::ClientContext> TokenCtx(const std::string& token, int seconds = 10) {
  auto ctx = Ctx(seconds);
  if (!token.empty()) ctx->AddMetadata("authorization", "Bearer " + token);
  return ctx;
}

std::shared_ptr<grpc::Channel> Channel(const std::string& address,
                                       std::shared_ptr<grpc::ChannelCredentials> creds) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 50);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 50);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 200);
  return grpc::CreateCustomChannel(address, creds, args);
}

// ---------------------------------------------------------------------------
// Authorization matrix
// ---------------------------------------------------------------------------

class AuthorizationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    daemon_ = std::make_unique<TraindProcess>(
        dir_.path() + "/state", std::vector<std::string>{"--cpu-slots=1", "--listen=127.0.0.1:0",
                                                         "--tokens-file=" + WriteTokens(dir_)});
    ASSERT_TRUE(daemon_->Start()) << daemon_->Log();
    tcp_ = traind::v1::TrainingService::NewStub(
        Channel(TcpAddress(*daemon_), grpc::InsecureChannelCredentials()));
  }
  void TearDown() override {
    daemon_->Stop();
    if (HasFailure()) std::cerr << "--- traind log ---\n" << daemon_->Log();
  }

  grpc::Status Submit(const std::string& token, Job* job) {
    traind::v1::SubmitJobRequest req;
    *req.mutable_spec() = IrisExampleSpec(2, 200);
    auto ctx = TokenCtx(token);
    return tcp_->SubmitJob(ctx.get(), req, job);
  }

  TempDir dir_;
  std::unique_ptr<TraindProcess> daemon_;
  std::unique_ptr<traind::v1::TrainingService::Stub> tcp_;
};

TEST_F(AuthorizationTest, EachRoleTimesEachRpc) {
  // A job of the admin, one of the submitter, submitted over TCP.
  Job ada_job, sam_job;
  ASSERT_TRUE(Submit(kAdminToken, &ada_job).ok());
  ASSERT_TRUE(Submit(kSubmitterToken, &sam_job).ok());
  EXPECT_EQ(ada_job.owner(), "ada");
  EXPECT_EQ(sam_job.owner(), "sam");

  // kNotFound: past authorization, the caller has no such thing.
  enum Expect { kAllowed, kDenied, kUnauthenticated, kNotFound };
  struct Role {
    std::string name;
    std::string token;
  };
  const std::vector<Role> roles = {{"none", ""},
                                   {"bad token", "not-a-token"},
                                   {"viewer", kViewerToken},
                                   {"submitter", kSubmitterToken},
                                   {"admin", kAdminToken}};
  using Call = std::function<grpc::Status(const std::string& token)>;
  auto* stub = tcp_.get();
  std::vector<std::pair<std::string, Call>> rpcs = {
      {"SubmitJob",
       [&](const std::string& t) {
         Job j;
         grpc::Status s = Submit(t, &j);
         if (s.ok()) {  // keep the daemon idle: cancel what was accepted
           traind::v1::CancelJobRequest c;
           c.set_job_id(j.id());
           c.set_force(true);
           auto ctx = TokenCtx(kAdminToken);
           stub->CancelJob(ctx.get(), c, &j);
         }
         return s;
       }},
      {"GetJob",
       [&](const std::string& t) {
         traind::v1::GetJobRequest r;
         r.set_job_id(ada_job.id());
         Job j;
         auto ctx = TokenCtx(t);
         return stub->GetJob(ctx.get(), r, &j);
       }},
      {"ListJobs",
       [&](const std::string& t) {
         traind::v1::ListJobsResponse r;
         auto ctx = TokenCtx(t);
         return stub->ListJobs(ctx.get(), traind::v1::ListJobsRequest(), &r);
       }},
      {"WatchJob",
       [&](const std::string& t) {
         traind::v1::WatchJobRequest r;
         r.set_job_id(ada_job.id());
         auto ctx = TokenCtx(t, 1);
         auto reader = stub->WatchJob(ctx.get(), r);
         traind::v1::JobEvent e;
         if (reader->Read(&e)) {
           ctx->TryCancel();
           reader->Finish();
           return grpc::Status::OK;
         }
         return reader->Finish();
       }},
      {"GetJobResult",
       [&](const std::string& t) {
         traind::v1::GetJobResultRequest r;
         r.set_job_id(ada_job.id());
         traind::v1::JobResult res;
         auto ctx = TokenCtx(t);
         return stub->GetJobResult(ctx.get(), r, &res);
       }},
      {"ListDevices",
       [&](const std::string& t) {
         traind::v1::ListDevicesResponse r;
         auto ctx = TokenCtx(t);
         return stub->ListDevices(ctx.get(), traind::v1::ListDevicesRequest(), &r);
       }},
      {"GetServerInfo",
       [&](const std::string& t) {
         traind::v1::ServerInfo r;
         auto ctx = TokenCtx(t);
         return stub->GetServerInfo(ctx.get(), traind::v1::GetServerInfoRequest(), &r);
       }},
      {"CancelJob (another's job)",
       [&](const std::string& t) {
         // A fresh admin job each time, so an allowed cancel is observable.
         Job victim;
         EXPECT_TRUE(Submit(kAdminToken, &victim).ok());
         traind::v1::CancelJobRequest r;
         r.set_job_id(victim.id());
         Job j;
         auto ctx = TokenCtx(t);
         grpc::Status s = stub->CancelJob(ctx.get(), r, &j);
         if (!s.ok()) {
           auto c2 = TokenCtx(kAdminToken);
           r.set_force(true);
           stub->CancelJob(c2.get(), r, &j);
         }
         return s;
       }},
      {"CancelJob (own job)",
       [&](const std::string& t) {
         Job own;
         grpc::Status submitted = Submit(t, &own);
         if (!submitted.ok()) return submitted;  // cannot own a job
         traind::v1::CancelJobRequest r;
         r.set_job_id(own.id());
         r.set_force(true);
         Job j;
         auto ctx = TokenCtx(t);
         return stub->CancelJob(ctx.get(), r, &j);
       }},
      {"ListArtifacts",
       [&](const std::string& t) {
         traind::v1::ListArtifactsRequest r;
         r.set_job_id(ada_job.id());
         traind::v1::ListArtifactsResponse res;
         auto ctx = TokenCtx(t);
         return stub->ListArtifacts(ctx.get(), r, &res);
       }},
      {"GetArtifact",
       [&](const std::string& t) {
         // Every job has its first attempt's log once its task started.
         traind::v1::GetArtifactRequest r;
         r.set_job_id(ada_job.id());
         r.set_name("task-0/attempt-1.log");
         auto ctx = TokenCtx(t);
         auto reader = stub->GetArtifact(ctx.get(), r);
         traind::v1::ArtifactChunk chunk;
         while (reader->Read(&chunk)) {
         }
         return reader->Finish();
       }},
      {"DeleteJob (another's job)",
       [&](const std::string& t) {
         Job victim;
         EXPECT_TRUE(Submit(kAdminToken, &victim).ok());
         traind::v1::DeleteJobRequest r;
         r.set_job_id(victim.id());
         r.set_cancel(true);
         traind::v1::DeleteJobResponse res;
         auto ctx = TokenCtx(t, 60);
         grpc::Status s = stub->DeleteJob(ctx.get(), r, &res);
         if (!s.ok()) {
           auto c2 = TokenCtx(kAdminToken, 60);
           stub->DeleteJob(c2.get(), r, &res);
         }
         return s;
       }},
      {"DeleteJob (own job)",
       [&](const std::string& t) {
         Job own;
         grpc::Status submitted = Submit(t, &own);
         if (!submitted.ok()) return submitted;  // cannot own a job
         traind::v1::DeleteJobRequest r;
         r.set_job_id(own.id());
         r.set_cancel(true);
         traind::v1::DeleteJobResponse res;
         auto ctx = TokenCtx(t, 60);
         return stub->DeleteJob(ctx.get(), r, &res);
       }},
      {"PrepareDatasetUpload + UploadDataset",
       [&](const std::string& t) {
         // Bytes of the caller's own ("m" for each role: one name per owner).
         const std::string bytes = absl::StrCat("a,b\n1,", t.size(), "\n");
         traind::v1::PrepareDatasetUploadRequest f;
         f.set_name("m");
         f.set_size_bytes(static_cast<int64_t>(bytes.size()));
         f.set_sha256(traind::server::Sha256Hex(bytes));
         traind::v1::PrepareDatasetUploadResponse p;
         auto ctx = TokenCtx(t);
         grpc::Status s = stub->PrepareDatasetUpload(ctx.get(), f, &p);
         if (!s.ok() || p.has_dataset()) return s;
         traind::v1::Dataset d;
         auto up_ctx = TokenCtx(t);
         auto writer = stub->UploadDataset(up_ctx.get(), &d);
         traind::v1::UploadDatasetRequest m;
         *m.mutable_header()->mutable_file() = f;
         writer->Write(m);
         m.set_data(bytes);
         writer->Write(m);
         writer->WritesDone();
         return writer->Finish();
       }},
      {"ListDatasets",
       [&](const std::string& t) {
         traind::v1::ListDatasetsResponse r;
         auto ctx = TokenCtx(t);
         return stub->ListDatasets(ctx.get(), traind::v1::ListDatasetsRequest(), &r);
       }},
      {"GetDataset (own)",
       [&](const std::string& t) {
         traind::v1::GetDatasetRequest r;
         r.set_ref("m");
         traind::v1::Dataset d;
         auto ctx = TokenCtx(t);
         return stub->GetDataset(ctx.get(), r, &d);
       }},
      {"GetDataset (the admin's, naming its owner)",
       [&](const std::string& t) {
         traind::v1::GetDatasetRequest r;
         r.set_ref("m");
         r.set_owner("ada");
         traind::v1::Dataset d;
         auto ctx = TokenCtx(t);
         return stub->GetDataset(ctx.get(), r, &d);
       }},
      {"DownloadDataset (own)",
       [&](const std::string& t) {
         traind::v1::GetDatasetRequest r;
         r.set_ref("m");
         auto ctx = TokenCtx(t);
         auto reader = stub->DownloadDataset(ctx.get(), r);
         traind::v1::ArtifactChunk chunk;
         while (reader->Read(&chunk)) {
         }
         return reader->Finish();
       }},
      {"DeleteDataset (own)",
       [&](const std::string& t) {
         traind::v1::DeleteDatasetRequest r;
         r.set_ref("m");
         traind::v1::DeleteDatasetResponse res;
         auto ctx = TokenCtx(t);
         return stub->DeleteDataset(ctx.get(), r, &res);
       }},
  };
  // Rows: roles; columns: RPCs.
  const std::map<std::string, std::vector<Expect>> expected = {
      // Submit Get List Watch Result Devices Info Cancel(other) Cancel(own)
      // ListArtifacts GetArtifact Delete(other) Delete(own)
      // Upload ListDatasets GetDataset(own) GetDataset(ada's) Download(own) DeleteDataset(own)
      {"none", std::vector<Expect>(19, kUnauthenticated)},
      {"bad token", std::vector<Expect>(19, kUnauthenticated)},
      {"viewer",
       {kDenied, kAllowed, kAllowed, kAllowed, kAllowed, kAllowed, kAllowed, kDenied, kDenied,
        kAllowed, kAllowed, kDenied, kDenied, kDenied, kAllowed, kNotFound, kDenied, kNotFound,
        kDenied}},
      {"submitter",
       {kAllowed, kAllowed, kAllowed, kAllowed, kAllowed, kAllowed, kAllowed, kDenied, kAllowed,
        kAllowed, kAllowed, kDenied, kAllowed, kAllowed, kAllowed, kAllowed, kDenied, kAllowed,
        kAllowed}},
      {"admin",
       {kAllowed, kAllowed, kAllowed, kAllowed, kAllowed, kAllowed, kAllowed, kAllowed, kAllowed,
        kAllowed, kAllowed, kAllowed, kAllowed, kAllowed, kAllowed, kAllowed, kAllowed, kAllowed,
        kAllowed}},
  };
  for (const Role& role : roles) {
    for (size_t i = 0; i < rpcs.size(); ++i) {
      const int before = JobCount(daemon_->stub());
      grpc::Status s = rpcs[i].second(role.token);
      const Expect want = expected.at(role.name)[i];
      const std::string where = absl::StrCat(role.name, " x ", rpcs[i].first, ": ", s.error_code(),
                                             " ", s.error_message());
      switch (want) {
        case kAllowed:
          EXPECT_NE(s.error_code(), grpc::StatusCode::PERMISSION_DENIED) << where;
          EXPECT_NE(s.error_code(), grpc::StatusCode::UNAUTHENTICATED) << where;
          EXPECT_TRUE(s.ok()) << where;
          break;
        case kDenied:
          EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED) << where;
          break;
        case kUnauthenticated:
          EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED) << where;
          break;
        case kNotFound:
          EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND) << where;
          break;
      }
      if (rpcs[i].first == "SubmitJob" && want != kAllowed) {
        EXPECT_EQ(JobCount(daemon_->stub()), before) << where << ": nothing stored";
      }
    }
  }
}

TEST_F(AuthorizationTest, UnixSocketIsTheLocalAdmin) {
  traind::v1::SubmitJobRequest req;
  *req.mutable_spec() = IrisExampleSpec(2, 2);
  Job job;
  auto ctx = Ctx();
  ASSERT_TRUE(daemon_->stub()->SubmitJob(ctx.get(), req, &job).ok());
  EXPECT_EQ(job.owner(), "local");
  // A submitter cannot cancel local's job; the unix socket can cancel sam's.
  traind::v1::CancelJobRequest c;
  c.set_job_id(job.id());
  Job out;
  auto c1 = TokenCtx(kSubmitterToken);
  grpc::Status denied = tcp_->CancelJob(c1.get(), c, &out);
  EXPECT_EQ(denied.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_NE(denied.error_message().find("sam"), std::string::npos) << denied.error_message();
  Job sams;
  ASSERT_TRUE(Submit(kSubmitterToken, &sams).ok());
  c.set_job_id(sams.id());
  auto c2 = Ctx();
  EXPECT_TRUE(daemon_->stub()->CancelJob(c2.get(), c, &out).ok());
}

// Predict writes its output into the job as an artifact: only the job's
// owner (or an admin) may run it, as Cancel and Delete; another submitter
// is refused at the header, before any upload, and the job gains nothing.
TEST_F(AuthorizationTest, PredictNeedsTheJobsOwnerOrAnAdmin) {
  Job ada_job, sam_job;
  ASSERT_TRUE(Submit(kAdminToken, &ada_job).ok());
  ASSERT_TRUE(Submit(kSubmitterToken, &sam_job).ok());
  auto predict = [&](const std::string& token, const std::string& job_id) {
    auto ctx = TokenCtx(token, 60);
    traind::v1::PredictResponse resp;
    auto writer = tcp_->Predict(ctx.get(), &resp);
    traind::v1::PredictRequest header;
    header.mutable_header()->set_job_id(job_id);
    writer->Write(header);
    traind::v1::PredictRequest csv;
    csv.set_csv("sepal_length,sepal_width,petal_length,petal_width\n5.1,3.5,1.4,0.2\n");
    writer->Write(csv);
    writer->WritesDone();
    return writer->Finish();
  };
  const grpc::Status denied = predict(kSubmitterToken, ada_job.id());
  EXPECT_EQ(denied.error_code(), grpc::StatusCode::PERMISSION_DENIED) << denied.error_message();
  EXPECT_EQ(denied.error_message(),
            absl::StrCat("sam (submitter) may not predict with job ", ada_job.id(),
                         " of ada: a submitter predicts with only its own jobs"));
  EXPECT_EQ(predict(kViewerToken, sam_job.id()).error_code(), grpc::StatusCode::PERMISSION_DENIED);
  // The owner and an admin get past authorization (the job may have no
  // model yet: any answer but a refusal).
  for (const auto& [token, job] :
       {std::pair{kSubmitterToken, sam_job.id()}, std::pair{kAdminToken, sam_job.id()}}) {
    const grpc::Status s = predict(token, job);
    EXPECT_NE(s.error_code(), grpc::StatusCode::PERMISSION_DENIED) << s.error_message();
    EXPECT_NE(s.error_code(), grpc::StatusCode::UNAUTHENTICATED) << s.error_message();
  }
  EXPECT_FALSE(std::filesystem::exists(dir_.path() + "/state/jobs/" + ada_job.id() + "/predict"));
  // A negative task is refused, not taken as "the refit model".
  {
    auto ctx = TokenCtx(kSubmitterToken, 60);
    traind::v1::PredictResponse resp;
    auto writer = tcp_->Predict(ctx.get(), &resp);
    traind::v1::PredictRequest header;
    header.mutable_header()->set_job_id(sam_job.id());
    header.mutable_header()->set_task(-5);
    writer->Write(header);
    writer->WritesDone();
    const grpc::Status s = writer->Finish();
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_EQ(s.error_message(),
              "header.task: a task number (>= 0), got -5; unset for the refit model");
  }
  for (const Job& j : {ada_job, sam_job}) {
    traind::v1::CancelJobRequest c;
    c.set_job_id(j.id());
    c.set_force(true);
    Job out;
    auto ctx = Ctx();
    daemon_->stub()->CancelJob(ctx.get(), c, &out);
  }
}

TEST_F(AuthorizationTest, HealthNeedsNoToken) {
  auto channel = Channel(TcpAddress(*daemon_), grpc::InsecureChannelCredentials());
  // grpc.health.v1.HealthCheckRequest{} is the empty message.
  grpc::Status status = RawUnaryCall(channel, "/grpc.health.v1.Health/Check", "");
  EXPECT_TRUE(status.ok()) << status.error_message();
}

// trainctl: token options and exit code 5.
TEST_F(AuthorizationTest, TrainctlTokensAndExitCodes) {
  const std::string address = TcpAddress(*daemon_);
  const std::string token_file = dir_.Write("viewer.token", std::string(kViewerToken) + "\n");
  const std::string trainctl = BinDir() + "/trainctl --address " + address;
  std::string out;
  EXPECT_EQ(RunCommand(trainctl + " info -o json 2>&1", &out), 5) << out;
  EXPECT_NE(out.find("bearer token"), std::string::npos) << out;
  // TLS to this plaintext port: the handshake fails, and trainctl says why.
  EXPECT_EQ(
      RunCommand(trainctl + " --tls --timeout 3 --token-file " + token_file + " info 2>&1", &out),
      4)
      << out;
  EXPECT_NE(out.find("if traind serves plaintext on this address, leave out --tls"),
            std::string::npos)
      << out;
  EXPECT_EQ(RunCommand(trainctl + " --token-file " + token_file + " list -o json", &out), 0) << out;
  EXPECT_EQ(
      RunCommand("TRAIND_TOKEN=" + std::string(kViewerToken) + " " + trainctl + " info -o json",
                 &out),
      0)
      << out;
  EXPECT_NE(out.find("\"version\""), std::string::npos) << out;
  // A viewer may not submit: exit 5, the server's message.
  EXPECT_EQ(RunCommand(trainctl + " --token-file " + token_file + " submit " + SourceDir() +
                           "/examples/iris-cv.yaml 2>&1",
                       &out),
            5)
      << out;
  EXPECT_NE(out.find("trainctl: vera (viewer) may not call SubmitJob"), std::string::npos) << out;
  EXPECT_EQ(RunCommand(trainctl + " --token bogus info 2>&1", &out), 5) << out;
  EXPECT_NE(out.find("invalid token"), std::string::npos) << out;
}

// ---------------------------------------------------------------------------
// TLS and mutual TLS
// ---------------------------------------------------------------------------

// A CA, a server certificate for 127.0.0.1/localhost, a client certificate
// from the CA, and a client certificate from another ("rogue") CA.
class Certs {
 public:
  explicit Certs(const std::string& dir) : dir_(dir) {}
  bool Make(std::string* log) {
    const std::string d = dir_;
    const std::string ec = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";
    std::vector<std::string> cmds = {
        "openssl req -x509 " + ec + " -days 2 -subj /CN=traind-test-ca -keyout " + d +
            "/ca.key -out " + d + "/ca.pem",
        "openssl req -x509 " + ec + " -days 2 -subj /CN=rogue-ca -keyout " + d +
            "/rogue.key -out " + d + "/rogue.pem",
        "printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\\n' > " + d + "/san.ext",
        "openssl req " + ec + " -subj /CN=localhost -keyout " + d + "/server.key -out " + d +
            "/server.csr",
        "openssl x509 -req -days 2 -in " + d + "/server.csr -CA " + d + "/ca.pem -CAkey " + d +
            "/ca.key -CAcreateserial -extfile " + d + "/san.ext -out " + d + "/server.pem",
        "openssl req " + ec + " -subj /CN=client -keyout " + d + "/client.key -out " + d +
            "/client.csr",
        "openssl x509 -req -days 2 -in " + d + "/client.csr -CA " + d + "/ca.pem -CAkey " + d +
            "/ca.key -CAcreateserial -out " + d + "/client.pem",
        "openssl req " + ec + " -subj /CN=rogue-client -keyout " + d + "/rogue-client.key -out " +
            d + "/rogue-client.csr",
        "openssl x509 -req -days 2 -in " + d + "/rogue-client.csr -CA " + d + "/rogue.pem -CAkey " +
            d + "/rogue.key -CAcreateserial -out " + d + "/rogue-client.pem",
    };
    for (const std::string& c : cmds) {
      std::string out;
      if (RunCommand(c + " 2>&1", &out) != 0) {
        *log = c + "\n" + out;
        return false;
      }
    }
    return true;
  }
  std::string Path(const std::string& name) const { return dir_ + "/" + name; }
  std::string Pem(const std::string& name) const { return ReadText(Path(name)); }

 private:
  std::string dir_;
};

class TlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string out;
    if (RunCommand("command -v openssl", &out) != 0) GTEST_SKIP() << "openssl is not installed";
    std::filesystem::create_directories(dir_.path() + "/certs");
    certs_ = std::make_unique<Certs>(dir_.path() + "/certs");
    ASSERT_TRUE(certs_->Make(&out)) << out;
  }
  void TearDown() override {
    if (daemon_ && HasFailure()) std::cerr << "--- traind log ---\n" << daemon_->Log();
  }

  void StartDaemon(bool mutual) {
    std::vector<std::string> args = {"--listen=127.0.0.1:0", "--tokens-file=" + WriteTokens(dir_),
                                     "--tls-cert=" + certs_->Path("server.pem"),
                                     "--tls-key=" + certs_->Path("server.key")};
    if (mutual) args.push_back("--tls-client-ca=" + certs_->Path("ca.pem"));
    daemon_ = std::make_unique<TraindProcess>(dir_.path() + "/state", args);
    ASSERT_TRUE(daemon_->Start()) << daemon_->Log();
    address_ = TcpAddress(*daemon_);
  }

  // GetServerInfo over TCP with `creds` and the viewer token.
  grpc::Status Info(std::shared_ptr<grpc::ChannelCredentials> creds) {
    auto stub = traind::v1::TrainingService::NewStub(Channel(address_, creds));
    traind::v1::ServerInfo info;
    auto ctx = TokenCtx(kViewerToken, 5);
    return stub->GetServerInfo(ctx.get(), traind::v1::GetServerInfoRequest(), &info);
  }

  // GET /api/v1/info over HTTPS with the viewer token, trusting `ca` and
  // presenting `cert` (if given): the HTTP status, or -1 when no TLS
  // session came about.
  int HttpsInfo(const std::string& ca, const std::string& cert = "", const std::string& key = "") {
    // A refused handshake closes the socket under OpenSSL's writes: an
    // EPIPE to report, not a signal that ends the test.
    signal(SIGPIPE, SIG_IGN);
    traind::v1::ServerInfo info;
    auto ctx = Ctx();
    EXPECT_TRUE(daemon_->stub()->GetServerInfo(ctx.get(), {}, &info).ok());
    EXPECT_TRUE(absl::StartsWith(info.http_url(), "https://127.0.0.1:")) << info.http_url();
    const int port = std::stoi(info.http_url().substr(info.http_url().rfind(':') + 1));
    std::unique_ptr<httplib::SSLClient> c =
        cert.empty() ? std::make_unique<httplib::SSLClient>("127.0.0.1", port)
                     : std::make_unique<httplib::SSLClient>("127.0.0.1", port, certs_->Path(cert),
                                                            certs_->Path(key));
    c->set_ca_cert_path(certs_->Path(ca).c_str());
    c->enable_server_certificate_verification(true);
    c->set_connection_timeout(5, 0);
    httplib::Result r =
        c->Get("/api/v1/info", {{"Authorization", absl::StrCat("Bearer ", kViewerToken)}});
    return r ? r->status : -1;
  }

  std::shared_ptr<grpc::ChannelCredentials> Ssl(const std::string& ca, const std::string& cert,
                                                const std::string& key) {
    grpc::SslCredentialsOptions o;
    o.pem_root_certs = certs_->Pem(ca);
    if (!cert.empty()) {
      o.pem_cert_chain = certs_->Pem(cert);
      o.pem_private_key = certs_->Pem(key);
    }
    return grpc::SslCredentials(o);
  }

  TempDir dir_;
  std::unique_ptr<Certs> certs_;
  std::unique_ptr<TraindProcess> daemon_;
  std::string address_;
};

TEST_F(TlsTest, ServerTls) {
  StartDaemon(/*mutual=*/false);
  grpc::Status ok = Info(Ssl("ca.pem", "", ""));
  EXPECT_TRUE(ok.ok()) << ok.error_message();
  // Plaintext against a TLS port: no handshake.
  EXPECT_EQ(Info(grpc::InsecureChannelCredentials()).error_code(), grpc::StatusCode::UNAVAILABLE);
  // A client that trusts another CA refuses the server.
  EXPECT_EQ(Info(Ssl("rogue.pem", "", "")).error_code(), grpc::StatusCode::UNAVAILABLE);
  // TLS does not replace the token.
  auto stub = traind::v1::TrainingService::NewStub(Channel(address_, Ssl("ca.pem", "", "")));
  traind::v1::ServerInfo info;
  auto ctx = Ctx(5);
  EXPECT_EQ(stub->GetServerInfo(ctx.get(), traind::v1::GetServerInfoRequest(), &info).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  // The unix socket is unchanged.
  traind::v1::ServerInfo local;
  auto lctx = Ctx();
  EXPECT_TRUE(daemon_->stub()->GetServerInfo(lctx.get(), {}, &local).ok());

  // trainctl over TLS.
  const std::string trainctl =
      BinDir() + "/trainctl --address " + address_ + " --token " + kViewerToken;
  std::string out;
  EXPECT_EQ(
      RunCommand(trainctl + " --tls-ca " + certs_->Path("ca.pem") + " info -o json 2>&1", &out), 0)
      << out;
  EXPECT_EQ(RunCommand(trainctl + " --timeout 3 info 2>&1", &out), 4)
      << "plaintext to a TLS port is unreachable: " << out;
  EXPECT_NE(out.find("if it serves TLS on this address, add --tls"), std::string::npos) << out;

  // The HTTP side door serves TLS with the same certificate.
  EXPECT_EQ(HttpsInfo("ca.pem"), 200);
  EXPECT_EQ(HttpsInfo("rogue.pem"), -1) << "a client that trusts another CA refuses the server";
  traind::v1::ServerInfo info2;
  auto ctx2 = Ctx();
  ASSERT_TRUE(daemon_->stub()->GetServerInfo(ctx2.get(), {}, &info2).ok());
  httplib::Client plain("127.0.0.1",
                        std::stoi(info2.http_url().substr(info2.http_url().rfind(':') + 1)));
  plain.set_connection_timeout(3, 0);
  plain.set_read_timeout(3, 0);
  httplib::Result r = plain.Get("/healthz");
  EXPECT_FALSE(r && r->status == 200) << "plaintext HTTP to the TLS port";
}

TEST_F(TlsTest, MutualTls) {
  StartDaemon(/*mutual=*/true);
  grpc::Status ok = Info(Ssl("ca.pem", "client.pem", "client.key"));
  EXPECT_TRUE(ok.ok()) << ok.error_message();
  EXPECT_EQ(Info(Ssl("ca.pem", "", "")).error_code(), grpc::StatusCode::UNAVAILABLE)
      << "no client certificate";
  EXPECT_EQ(Info(Ssl("ca.pem", "rogue-client.pem", "rogue-client.key")).error_code(),
            grpc::StatusCode::UNAVAILABLE)
      << "a client certificate from another CA";
  const std::string trainctl = BinDir() + "/trainctl --address " + address_ + " --token " +
                               kViewerToken + " --tls-ca " + certs_->Path("ca.pem");
  std::string out;
  EXPECT_EQ(RunCommand(trainctl + " --tls-cert " + certs_->Path("client.pem") + " --tls-key " +
                           certs_->Path("client.key") + " health 2>&1",
                       &out),
            0)
      << out;
  EXPECT_EQ(RunCommand(trainctl + " --timeout 3 info 2>&1", &out), 4) << out;

  EXPECT_EQ(HttpsInfo("ca.pem", "client.pem", "client.key"), 200);
  EXPECT_EQ(HttpsInfo("ca.pem"), -1) << "HTTPS without a client certificate";
  EXPECT_EQ(HttpsInfo("ca.pem", "rogue-client.pem", "rogue-client.key"), -1)
      << "a client certificate from another CA";
}

// A TLS file that cannot serve is refused at start naming the setting and
// the file (gRPC's own error said only "cannot listen on 127.0.0.1:PORT").
TEST_F(TlsTest, BadTlsFilesAreNamed) {
  const std::string garbage = dir_.Write("garbage.key", "not a key\n");
  const std::string cert = certs_->Path("server.pem");
  const std::string key = certs_->Path("server.key");
  const std::string dir = dir_.path() + "/certs";
  struct Case {
    std::string cert, key, ca, want;
  };
  for (const Case& c : std::vector<Case>{
           {cert, garbage, "", "tls.key: " + garbage + ": not a PEM private key"},
           {cert, certs_->Path("rogue-client.key"), "",
            "tls.key: " + certs_->Path("rogue-client.key") + " is not the key of tls.cert " + cert},
           {cert, dir, "", "tls.key: " + dir + " is not a regular file"},
           {garbage, key, "", "tls.cert: " + garbage + ": no PEM certificate in it"},
           {cert, key, garbage, "tls.client_ca: " + garbage + ": no PEM certificate in it"},
           {cert, dir + "/missing.key", "", "tls.key: " + dir + "/missing.key: No such file"}}) {
    std::string out;
    const int code = RunCommand(
        absl::StrCat(BinDir(), "/traind --state-dir ", dir_.path(),
                     "/bad-state --listen 127.0.0.1:0 --http-listen off --tls-cert ", c.cert,
                     " --tls-key ", c.key, c.ca.empty() ? "" : " --tls-client-ca " + c.ca, " 2>&1"),
        &out);
    EXPECT_NE(code, 0) << out;
    EXPECT_NE(out.find(c.want), std::string::npos) << c.want << "\n" << out;
    EXPECT_EQ(out.find("cannot listen"), std::string::npos) << out;
  }
}

TEST(TlsConfigTest, NonLoopbackPlaintextRefusesToStart) {
  TempDir dir;
  std::string out;
  int code = RunCommand(
      BinDir() + "/traind --state-dir " + dir.path() + "/state --listen 0.0.0.0:0 2>&1", &out);
  EXPECT_EQ(code, 2) << out;
  EXPECT_NE(out.find("0.0.0.0:0 is not a loopback address"), std::string::npos) << out;
  EXPECT_NE(out.find("--insecure"), std::string::npos) << out;
}

TEST(ConfigFileTest, UnknownKeyIsRefusedNamingFileAndLine) {
  TempDir dir;
  std::string config = dir.Write("traind.yaml", "cpu_slots: 1\nlimits:\n  max_layerz: 3\n");
  std::string out;
  int code = RunCommand(
      BinDir() + "/traind --config " + config + " --state-dir " + dir.path() + "/state 2>&1", &out);
  EXPECT_EQ(code, 2) << out;
  EXPECT_NE(out.find(config + ":3: limits.max_layerz: unknown key"), std::string::npos) << out;
}

TEST(ConfigFileTest, ConfigFileIsReadAndFlagsOverrideIt) {
  TempDir dir;
  std::string config =
      dir.Write("traind.yaml", absl::StrCat("cpu_slots: 3\nworker_threads: 2\ndata_roots: [",
                                            SourceDir(), "]\nlimits: {max_layers: 5}\n"));
  TraindProcess d(dir.path() + "/state", {"--config=" + config, "--cpu-slots=4"});
  ASSERT_TRUE(d.Start()) << d.Log();
  traind::v1::ServerInfo info;
  auto ctx = Ctx();
  ASSERT_TRUE(d.stub()->GetServerInfo(ctx.get(), {}, &info).ok());
  EXPECT_EQ(info.cpu_slots(), 4) << "the flag wins";
  EXPECT_EQ(info.worker_threads(), 2) << "from the file";
  traind::v1::SubmitJobRequest req;
  *req.mutable_spec() = IrisExampleSpec(2, 2);
  for (int i = 0; i < 5; ++i) req.mutable_spec()->mutable_model()->add_layers()->mutable_dropout();
  Job job;
  auto c2 = Ctx();
  grpc::Status s = d.stub()->SubmitJob(c2.get(), req, &job);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("limits.max_layers"), std::string::npos) << s.error_message();
}

}  // namespace
}  // namespace traind::testing
