// Security of the public API, end to end against the real traind: the
// authorization matrix (each role x each RPC), TLS and mutual TLS with
// certificates made at test time by openssl, data-root confinement,
// limits, and trainctl's TLS and token options.
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
#include "server/api/auth.h"
#include "spec/loader.h"
#include "tests/integration/daemon.h"

namespace traind::testing {
namespace {

// Calls `method` with `bytes` as the request, whatever they are, and waits.
grpc::Status RawUnaryCall(std::shared_ptr<grpc::Channel> channel, const std::string& method,
                          const std::string& bytes) {
  grpc::GenericStub generic(channel);
  grpc::Slice slice(bytes);
  grpc::ByteBuffer request(&slice, 1), response;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  grpc::Status status;
  generic.UnaryCall(&ctx, method, grpc::StubOptions(), &request, &response, [&](grpc::Status st) {
    std::lock_guard<std::mutex> l(mu);
    status = st;
    done = true;
    cv.notify_one();
  });
  std::unique_lock<std::mutex> l(mu);
  cv.wait(l, [&] { return done; });
  return status;
}

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
std::string TcpAddress(Daemon& d) {
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

int JobCount(Daemon& d) {
  traind::v1::ListJobsResponse resp;
  auto ctx = Ctx();
  EXPECT_TRUE(d.stub()->ListJobs(ctx.get(), traind::v1::ListJobsRequest(), &resp).ok());
  return resp.jobs_size();
}

// ---------------------------------------------------------------------------
// Authorization matrix
// ---------------------------------------------------------------------------

class AuthorizationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    daemon_ = std::make_unique<Daemon>(
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
  std::unique_ptr<Daemon> daemon_;
  std::unique_ptr<traind::v1::TrainingService::Stub> tcp_;
};

TEST_F(AuthorizationTest, EachRoleTimesEachRpc) {
  // A job of the admin, one of the submitter, submitted over TCP.
  Job ada_job, sam_job;
  ASSERT_TRUE(Submit(kAdminToken, &ada_job).ok());
  ASSERT_TRUE(Submit(kSubmitterToken, &sam_job).ok());
  EXPECT_EQ(ada_job.owner(), "ada");
  EXPECT_EQ(sam_job.owner(), "sam");

  enum Expect { kAllowed, kDenied, kUnauthenticated };
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
  };
  // Rows: roles; columns: RPCs.
  const std::map<std::string, std::vector<Expect>> expected = {
      // Submit Get List Watch Result Devices Info Cancel(other) Cancel(own)
      // ListArtifacts GetArtifact Delete(other) Delete(own)
      {"none", std::vector<Expect>(13, kUnauthenticated)},
      {"bad token", std::vector<Expect>(13, kUnauthenticated)},
      {"viewer",
       {kDenied, kAllowed, kAllowed, kAllowed, kAllowed, kAllowed, kAllowed, kDenied, kDenied,
        kAllowed, kAllowed, kDenied, kDenied}},
      {"submitter",
       {kAllowed, kAllowed, kAllowed, kAllowed, kAllowed, kAllowed, kAllowed, kDenied, kAllowed,
        kAllowed, kAllowed, kDenied, kAllowed}},
      {"admin",
       {kAllowed, kAllowed, kAllowed, kAllowed, kAllowed, kAllowed, kAllowed, kAllowed, kAllowed,
        kAllowed, kAllowed, kAllowed, kAllowed}},
  };
  for (const Role& role : roles) {
    for (size_t i = 0; i < rpcs.size(); ++i) {
      const int before = JobCount(*daemon_);
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
      }
      if (rpcs[i].first == "SubmitJob" && want != kAllowed) {
        EXPECT_EQ(JobCount(*daemon_), before) << where << ": nothing stored";
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
    daemon_ = std::make_unique<Daemon>(dir_.path() + "/state", args);
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
  std::unique_ptr<Daemon> daemon_;
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
  Daemon d(dir.path() + "/state", {"--config=" + config, "--cpu-slots=4"});
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

// ---------------------------------------------------------------------------
// Data confinement and limits (over the unix socket: the local admin)
// ---------------------------------------------------------------------------

class ConfinementTest : public ::testing::Test {
 protected:
  void SetUp() override {
    namespace fs = std::filesystem;
    root_ = dir_.path() + "/data";
    fs::create_directories(root_ + "/sub");
    fs::create_directories(dir_.path() + "/outside");
    fs::copy_file(SourceDir() + "/examples/data/iris.csv", root_ + "/sub/iris.csv");
    fs::copy_file(SourceDir() + "/examples/data/iris.csv", dir_.path() + "/outside/iris.csv");
    fs::create_symlink(dir_.path() + "/outside/iris.csv", root_ + "/out-link.csv");
    fs::create_symlink(dir_.path() + "/outside", root_ + "/out-dir");
    fs::create_symlink(root_ + "/sub/iris.csv", root_ + "/in-link.csv");
    daemon_ = std::make_unique<Daemon>(
        dir_.path() + "/state",
        std::vector<std::string>{"--cpu-slots=1", "--data-root=" + root_,
                                 "--max-request-bytes=65536", "--max-queued-jobs-per-user=1",
                                 "--max-layers=8", "--max-units=512", "--max-epochs=100000",
                                 "--max-batches=1000000", "--max-tasks=20", "--max-rows=1000",
                                 "--max-columns=10"});
    ASSERT_TRUE(daemon_->Start()) << daemon_->Log();
  }
  void TearDown() override {
    daemon_->Stop();
    if (HasFailure()) std::cerr << "--- traind log ---\n" << daemon_->Log();
  }

  grpc::Status Submit(const traind::v1::JobSpec& spec, Job* job) {
    traind::v1::SubmitJobRequest req;
    *req.mutable_spec() = spec;
    auto ctx = Ctx();
    return daemon_->stub()->SubmitJob(ctx.get(), req, job);
  }
  void CancelAll() {
    traind::v1::ListJobsResponse resp;
    auto ctx = Ctx();
    daemon_->stub()->ListJobs(ctx.get(), {}, &resp);
    for (const Job& j : resp.jobs()) {
      traind::v1::CancelJobRequest c;
      c.set_job_id(j.id());
      c.set_force(true);
      Job out;
      auto cc = Ctx();
      daemon_->stub()->CancelJob(cc.get(), c, &out);
    }
  }

  TempDir dir_;
  std::string root_;
  std::unique_ptr<Daemon> daemon_;
};

TEST_F(ConfinementTest, PathEscapesAreDeniedNamingThePath) {
  const std::string outside = dir_.path() + "/outside/iris.csv";
  const std::vector<std::string> escapes = {
      root_ + "/../outside/iris.csv",           // ..
      root_ + "/sub/../../outside/iris.csv",    // .. deeper
      outside,                                  // absolute, outside the roots
      SourceDir() + "/examples/data/iris.csv",  // another real dataset, not a root here
      root_ + "/out-link.csv",                  // a symlink pointing out
      root_ + "/out-dir/iris.csv",              // through a symlinked directory
  };
  const int before = JobCount(*daemon_);
  for (const std::string& path : escapes) {
    traind::v1::JobSpec spec = IrisExampleSpec(2, 2);
    spec.mutable_data()->set_path(path);
    Job job;
    grpc::Status s = Submit(spec, &job);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED)
        << path << ": " << s.error_message();
    EXPECT_EQ(s.error_message().rfind("spec.data.path: " + path, 0), 0u) << s.error_message();
  }
  // validation_path is confined as well.
  traind::v1::JobSpec spec = IrisExampleSpec(2, 2);
  spec.mutable_data()->set_path(root_ + "/sub/iris.csv");
  spec.mutable_cross_validation()->Clear();
  spec.mutable_cross_validation()->set_validation_path(root_ + "/out-link.csv");
  Job job;
  grpc::Status s = Submit(spec, &job);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED) << s.error_message();
  EXPECT_EQ(JobCount(*daemon_), before) << "nothing stored";

  // Inside: a plain path and a symlink that stays inside; the job records
  // the resolved path.
  for (const std::string& path : {root_ + "/sub/iris.csv", root_ + "/in-link.csv"}) {
    traind::v1::JobSpec ok = IrisExampleSpec(2, 2);
    ok.mutable_data()->set_path(path);
    Job accepted;
    grpc::Status s2 = Submit(ok, &accepted);
    ASSERT_TRUE(s2.ok()) << path << ": " << s2.error_message();
    EXPECT_EQ(accepted.spec().data().path(), root_ + "/sub/iris.csv");
    std::vector<traind::v1::JobEvent> events;
    WatchAll(daemon_->stub(), accepted.id(), 0, &events);
  }
}

TEST_F(ConfinementTest, OversizedAndMalformedRequestsAreRefusedAndNothingIsStored) {
  const int before = JobCount(*daemon_);
  {  // Data over limits.max_rows and limits.max_columns.
    std::ofstream long_csv(root_ + "/long.csv");
    long_csv << "a,species\n";
    for (int i = 0; i < 1001; ++i) long_csv << i << "," << (i % 3) << "\n";
    std::ofstream wide_csv(root_ + "/wide.csv");
    wide_csv << "c0,c1,c2,c3,c4,c5,c6,c7,c8,c9,species\n";
    for (int i = 0; i < 10; ++i) wide_csv << "1,2,3,4,5,6,7,8,9,10," << (i % 3) << "\n";
  }
  traind::v1::JobSpec spec = IrisExampleSpec(2, 2);
  spec.mutable_data()->set_path(root_ + "/sub/iris.csv");

  // Larger than limits.max_request_bytes.
  traind::v1::JobSpec big = spec;
  big.set_name(std::string(100000, 'x'));
  Job job;
  grpc::Status s = Submit(big, &job);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << s.error_message();

  // Spec sizes.
  struct Case {
    std::function<void(traind::v1::JobSpec*)> mutate;
    std::string prefix;
  };
  for (const Case& c : std::vector<Case>{
           {[](auto* sp) {
              for (int i = 0; i < 8; ++i) sp->mutable_model()->add_layers()->mutable_dropout();
            },
            "spec.model.layers: 10 layers"},
           {[](auto* sp) {
              sp->mutable_model()->mutable_layers(0)->mutable_dense()->set_units(513);
            },
            "spec.model.layers[0].dense.units: 513"},
           {[](auto* sp) { sp->mutable_training()->set_epochs(100001); },
            "spec.training.epochs: 100001"},
           // batches walk around neither max_batches nor max_epochs: 75
           // training rows (2 folds) in batches of 16 are 5 batches an epoch.
           {[](auto* sp) {
              sp->mutable_training()->clear_epochs();
              sp->mutable_training()->set_batches(4611686018427387904);
            },
            "spec.training.batches: 4611686018427387904 batches, more than this traind allows "
            "(1000000, limits.max_batches)"},
           {[](auto* sp) {
              sp->mutable_training()->clear_epochs();
              sp->mutable_training()->set_batches(500001);
            },
            "spec.training.batches: 500001 batches are 100001 epochs of 5 batches (75 training "
            "rows, batch_size 16), more than this traind allows (100000, limits.max_epochs)"},
           {[](auto* sp) {
              sp->mutable_cross_validation()->set_folds(7);
              sp->mutable_cross_validation()->set_repeats(3);
            },
            "spec.cross_validation: 7 folds × 3 repeats = 21 tasks, more than this traind allows "
            "(20, limits.max_tasks)"},
           {[this](auto* sp) { sp->mutable_data()->set_path(root_ + "/long.csv"); },
            "spec.data.path: " + root_ +
                "/long.csv has 1001 rows, more than this traind allows "
                "(1000, limits.max_rows)"},
           {[this](auto* sp) { sp->mutable_data()->set_path(root_ + "/wide.csv"); },
            "spec.data.path: " + root_ +
                "/wide.csv has 11 columns, more than this traind "
                "allows (10, limits.max_columns)"},
       }) {
    traind::v1::JobSpec bad = spec;
    c.mutate(&bad);
    grpc::Status b = Submit(bad, &job);
    EXPECT_EQ(b.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << b.error_message();
    EXPECT_EQ(b.error_message().rfind(c.prefix, 0), 0u) << b.error_message();
  }
  // At the limits: accepted.
  traind::v1::JobSpec at = spec;
  at.mutable_training()->clear_epochs();
  at.mutable_training()->set_batches(10);
  at.mutable_cross_validation()->set_folds(5);
  at.mutable_cross_validation()->set_repeats(4);
  Job accepted;
  grpc::Status a = Submit(at, &accepted);
  EXPECT_TRUE(a.ok()) << a.error_message();
  CancelAll();
  const int accepted_jobs = a.ok() ? 1 : 0;

  // Bytes that are no SubmitJobRequest.
  const std::string garbage = "\x0a\xff\xff\xff\xff\x0f garbage";
  grpc::Status status =
      RawUnaryCall(daemon_->channel(), "/traind.v1.TrainingService/SubmitJob", garbage);
  EXPECT_FALSE(status.ok());
  EXPECT_NE(status.error_code(), grpc::StatusCode::UNAVAILABLE) << status.error_message();
  // gRPC answers a request it cannot parse before traind sees it, with
  // UNIMPLEMENTED and no message (gRPC C++ 1.51's callback API), for every
  // method, unary or streaming: documented in docs/operations.md (Limits).
  // A truncated message is refused the same way; a valid one is served.
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNIMPLEMENTED) << status.error_message();
  for (const char* method :
       {"/traind.v1.TrainingService/GetJob", "/traind.v1.TrainingService/WatchJob",
        "/traind.v1.TrainingService/CancelJob"}) {
    for (const std::string& bytes : {garbage, std::string("\x0a\x05")}) {
      grpc::Status st = RawUnaryCall(daemon_->channel(), method, bytes);
      EXPECT_EQ(st.error_code(), grpc::StatusCode::UNIMPLEMENTED)
          << method << ": " << st.error_message();
    }
  }
  traind::v1::GetJobRequest get;
  get.set_job_id("nope");
  grpc::Status valid = RawUnaryCall(daemon_->channel(), "/traind.v1.TrainingService/GetJob",
                                    get.SerializeAsString());
  EXPECT_EQ(valid.error_code(), grpc::StatusCode::NOT_FOUND) << valid.error_message();

  // An absurd idempotency key.
  traind::v1::SubmitJobRequest req;
  *req.mutable_spec() = spec;
  req.set_idempotency_key(std::string(200, 'k'));
  auto ictx = Ctx();
  EXPECT_EQ(daemon_->stub()->SubmitJob(ictx.get(), req, &job).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);

  EXPECT_EQ(JobCount(*daemon_), before + accepted_jobs) << "nothing stored";
  // The daemon still serves.
  Job ok;
  grpc::Status fine = Submit(spec, &ok);
  EXPECT_TRUE(fine.ok()) << fine.error_message();
  CancelAll();
}

TEST_F(ConfinementTest, QueuedJobsPerUserAreLimited) {
  traind::v1::JobSpec slow = IrisExampleSpec(2, 100000);
  slow.mutable_data()->set_path(root_ + "/sub/iris.csv");
  Job first, second, third;
  ASSERT_TRUE(Submit(slow, &first).ok());
  // Wait for the first to start (it then no longer counts as queued).
  for (int i = 0; i < 200; ++i) {
    traind::v1::GetJobRequest g;
    g.set_job_id(first.id());
    auto ctx = Ctx();
    daemon_->stub()->GetJob(ctx.get(), g, &first);
    if (first.state() != Job::QUEUED) break;
    usleep(50000);
  }
  ASSERT_NE(first.state(), Job::QUEUED);
  ASSERT_TRUE(Submit(slow, &second).ok());  // waits behind the first: queued
  grpc::Status s = Submit(slow, &third);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << s.error_message();
  EXPECT_NE(s.error_message().find("local"), std::string::npos) << s.error_message();
  EXPECT_NE(s.error_message().find("max_queued_jobs_per_user"), std::string::npos);
  CancelAll();
}

// A client that retries a submit (its answer was lost) with the same
// idempotency key gets the job its first try created, even though that job
// filled the owner's queue; a new key is still refused.
TEST_F(ConfinementTest, IdempotentRetryAtTheQueueLimitReturnsTheJob) {
  traind::v1::JobSpec slow = IrisExampleSpec(2, 100000);
  slow.mutable_data()->set_path(root_ + "/sub/iris.csv");
  Job first;
  ASSERT_TRUE(Submit(slow, &first).ok());
  for (int i = 0; i < 200; ++i) {  // started: no longer queued
    first = GetJob(daemon_->stub(), first.id());
    if (first.state() != Job::QUEUED) break;
    usleep(50000);
  }
  ASSERT_NE(first.state(), Job::QUEUED);
  absl::StatusOr<Job> queued = SubmitJob(daemon_->stub(), slow, "retry-me");
  ASSERT_TRUE(queued.ok()) << queued.status();
  ASSERT_EQ(queued->state(), Job::QUEUED);
  for (int i = 0; i < 3; ++i) {
    absl::StatusOr<Job> retry = SubmitJob(daemon_->stub(), slow, "retry-me");
    ASSERT_TRUE(retry.ok()) << retry.status();
    EXPECT_EQ(retry->id(), queued->id());
  }
  // The retry's spec is not validated again: its answer is the job, even
  // where the spec would now be refused.
  traind::v1::JobSpec changed = slow;
  changed.mutable_training()->set_epochs(100001);
  absl::StatusOr<Job> retry = SubmitJob(daemon_->stub(), changed, "retry-me");
  ASSERT_TRUE(retry.ok()) << retry.status();
  EXPECT_EQ(retry->id(), queued->id());
  absl::StatusOr<Job> fresh = SubmitJob(daemon_->stub(), slow, "another-key");
  EXPECT_EQ(fresh.status().code(), absl::StatusCode::kResourceExhausted) << fresh.status();
  EXPECT_NE(fresh.status().message().find("limits.max_queued_jobs_per_user"), std::string::npos)
      << fresh.status();
  CancelAll();
}

}  // namespace
}  // namespace traind::testing

namespace traind::testing {
namespace {

// ---------------------------------------------------------------------------
// A damaged or lost job store: traind refuses to start, naming the file
// ---------------------------------------------------------------------------

class StoreIntegrityTest : public ::testing::Test {
 protected:
  void SetUp() override {
    state_ = dir_.path() + "/state";
    db_ = state_ + "/traind.db";
    Daemon d(state_);
    ASSERT_TRUE(d.Start()) << d.Log();
    for (int i = 0; i < 3; ++i) {  // a few jobs: a store of several pages
      absl::StatusOr<traind::v1::Job> job = SubmitJob(d.stub(), IrisExampleSpec(2, 2));
      ASSERT_TRUE(job.ok()) << job.status();
      std::vector<traind::v1::JobEvent> events;
      ASSERT_TRUE(WatchAll(d.stub(), job->id(), 0, &events).ok());
    }
    ASSERT_EQ(d.Stop(), 0) << d.Log();
    ASSERT_TRUE(std::filesystem::exists(state_ + "/jobs"));
  }

  // Starts traind on the state directory; expects it to refuse (exit code
  // != 0) with a message naming the database file. Returns the log.
  std::string ExpectRefused() {
    std::filesystem::remove(state_ + "/traind.log");
    Daemon d(state_);
    EXPECT_FALSE(d.Start()) << d.Log();
    EXPECT_GT(d.exit_code(), 0) << d.Log();
    const std::string log = d.Log();
    EXPECT_NE(log.find(db_), std::string::npos) << log;
    EXPECT_EQ(log.find("traind ready"), std::string::npos) << log;
    return log;
  }

  TempDir dir_;
  std::string state_, db_;
};

TEST_F(StoreIntegrityTest, AHealthyStoreStartsAndKeepsItsJobs) {
  Daemon d(state_);
  ASSERT_TRUE(d.Start()) << d.Log();
  EXPECT_EQ(JobCount(d), 3);
  EXPECT_NE(d.Log().find("store checked path=" + db_), std::string::npos) << d.Log();
}

TEST_F(StoreIntegrityTest, AnEmptyStoreBesideJobArtifactsIsRefused) {
  for (bool remove : {false, true}) {
    if (remove) {
      std::filesystem::remove(db_);  // deleted, not truncated: a new store
    } else {
      std::filesystem::resize_file(db_, 0);  // truncate -s 0
    }
    std::filesystem::remove(db_ + "-wal");
    std::filesystem::remove(db_ + "-shm");
    const std::string log = ExpectRefused();
    EXPECT_NE(log.find("holds no jobs, but " + state_ + "/jobs holds the artifacts of 3"),
              std::string::npos)
        << log;
    EXPECT_NE(log.find("restore " + db_ + " from a backup"), std::string::npos) << log;
  }
  // Moved aside as the message says: traind starts, empty.
  std::filesystem::rename(state_ + "/jobs", state_ + "/jobs.orphaned");
  Daemon d(state_);
  ASSERT_TRUE(d.Start()) << d.Log();
  EXPECT_EQ(JobCount(d), 0);
}

TEST_F(StoreIntegrityTest, OverwrittenPagesAreRefusedAtStart) {
  // Random bytes over the pages after the first (the schema page stays
  // readable, so only the check finds the damage).
  const auto size = std::filesystem::file_size(db_);
  ASSERT_GT(size, 8192u) << "a store of several pages";
  {
    std::fstream f(db_, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(4096);
    uint32_t x = 12345;
    for (uint64_t i = 4096; i < size; ++i) {
      x = x * 1664525u + 1013904223u;
      f.put(static_cast<char>(x >> 24));
    }
  }
  const std::string log = ExpectRefused();
  EXPECT_NE(log.find("the job store is damaged (quick_check: "), std::string::npos) << log;
  EXPECT_NE(log.find("mv " + db_ + " " + db_ + ".damaged"), std::string::npos) << log;
}

TEST_F(StoreIntegrityTest, AFileThatIsNoDatabaseIsRefused) {
  {
    std::ofstream f(db_, std::ios::trunc);
    for (int i = 0; i < 100; ++i) f << "this is a text file, not an SQLite database\n";
  }
  const std::string log = ExpectRefused();
  EXPECT_NE(log.find("file is not a database"), std::string::npos) << log;
}

// ---------------------------------------------------------------------------
// File modes in the state directory, whatever the umask
// ---------------------------------------------------------------------------

struct UmaskGuard {
  explicit UmaskGuard(mode_t m) : old(umask(m)) {}
  ~UmaskGuard() { umask(old); }
  mode_t old;
};

mode_t ModeOf(const std::string& path) {
  struct stat st;
  EXPECT_EQ(lstat(path.c_str(), &st), 0) << path;
  return st.st_mode & 07777;
}

// Runs a job to its end on a state directory made under `mask`, then
// checks every mode traind and its workers left there.
void ExpectModes(mode_t mask, const std::vector<std::string>& extra, mode_t dir_mode) {
  const mode_t file_mode = dir_mode & 0666;
  UmaskGuard guard(mask);
  TempDir dir;
  const std::string state = dir.path() + "/state";
  Daemon d(state, extra);
  ASSERT_TRUE(d.Start()) << d.Log();
  absl::StatusOr<traind::v1::Job> job = SubmitJob(d.stub(), IrisExampleSpec(2, 2));
  ASSERT_TRUE(job.ok()) << job.status();
  std::vector<traind::v1::JobEvent> events;
  ASSERT_TRUE(WatchAll(d.stub(), job->id(), 0, &events).ok());
  SCOPED_TRACE(absl::StrCat("umask ", mask));
  EXPECT_EQ(ModeOf(state), dir_mode);
  for (const char* f : {"traind.db", "traind.db-wal", "traind.db-shm", "traind.lock"}) {
    EXPECT_EQ(ModeOf(state + "/" + f), file_mode) << f;
  }
  EXPECT_EQ(ModeOf(state + "/worker.sock"), 0600);
  EXPECT_EQ(ModeOf(state + "/traind.sock"), 0660) << "documented: the group may use it";
  EXPECT_EQ(ModeOf(state + "/jobs"), dir_mode);
  int files = 0;
  for (const auto& e : std::filesystem::recursive_directory_iterator(state + "/jobs")) {
    if (e.is_directory()) {
      EXPECT_EQ(ModeOf(e.path().string()), dir_mode) << e.path();
    } else {
      EXPECT_EQ(ModeOf(e.path().string()), file_mode) << e.path();
      ++files;
    }
  }
  EXPECT_GT(files, 2) << "logs, TensorBoard files, results";
}

TEST(StateModesTest, PrivateUnderUmask022And000) {
  ExpectModes(022, {}, 0700);
  ExpectModes(0, {}, 0700);
}

TEST(StateModesTest, GroupReadableWhenConfigured) {
  ExpectModes(0, {"--state-dir-mode=0750"}, 0750);
}

TEST(StateModesTest, ModesOpenToOthersAreRefused) {
  TempDir dir;
  Daemon d(dir.path() + "/state", {"--state-dir-mode=0755"});
  EXPECT_FALSE(d.Start());
  EXPECT_EQ(d.exit_code(), 2) << d.Log();
  EXPECT_NE(d.Log().find("--state-dir-mode: \"0755\""), std::string::npos) << d.Log();
}

}  // namespace
}  // namespace traind::testing
