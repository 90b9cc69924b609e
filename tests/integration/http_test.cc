// The HTTP side door of a real traind: the JSON API against gRPC's answers,
// server-sent events (complete, resumable), the security of the TCP port,
// browser sessions, /metrics through promtool, health and readiness.
#include <cstdio>
#include <fstream>
#include <iterator>
#include <limits>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "google/protobuf/util/json_util.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "server/core/auth.h"
#include "spec/loader.h"
#include "tests/integration/testing/traind_process.h"
#include "tests/testing/procfs.h"

namespace traind::testing {
namespace {

using google::protobuf::util::JsonStringToMessage;
using google::protobuf::util::MessageDifferencer;
using traind::v1::Job;
using traind::v1::JobEvent;

const char* kViewerToken = "http-viewer-token-0123456789";
const char* kAdminToken = "http-admin-token-0123456789";

std::string Tokens(const TempDir& dir) {
  using traind::server::Sha256Hex;
  return dir.Write(
      "tokens.yaml",
      absl::StrCat("tokens:\n  - {name: vera, role: viewer, sha256: ", Sha256Hex(kViewerToken),
                   "}\n  - {name: ada, role: admin, sha256: ", Sha256Hex(kAdminToken), "}\n"));
}

// The server-sent events of a response body: (id, event, data).
struct Sse {
  std::string id, event, data;
};
std::vector<Sse> ParseSse(const std::string& body) {
  std::vector<Sse> out;
  Sse cur;
  for (absl::string_view line : absl::StrSplit(body, '\n')) {
    if (line.empty()) {
      if (!cur.data.empty() || !cur.id.empty()) out.push_back(cur);
      cur = Sse();
    } else if (absl::ConsumePrefix(&line, "id: ")) {
      cur.id = std::string(line);
    } else if (absl::ConsumePrefix(&line, "event: ")) {
      cur.event = std::string(line);
    } else if (absl::ConsumePrefix(&line, "data: ")) {
      cur.data += std::string(line);
    }
  }
  return out;
}

class HttpTest : public ::testing::Test {
 protected:
  void SetUp() override {
    daemon_ = std::make_unique<TraindProcess>(
        dir_.path() + "/state",
        std::vector<std::string>{"--cpu-slots=2", "--http-listen=127.0.0.1:0",
                                 "--tokens-file=" + Tokens(dir_)});
    ASSERT_TRUE(daemon_->Start()) << daemon_->Log();
    traind::v1::ServerInfo info;
    auto ctx = Ctx();
    ASSERT_TRUE(
        daemon_->stub()->GetServerInfo(ctx.get(), traind::v1::GetServerInfoRequest(), &info).ok());
    url_ = info.http_url();
    ASSERT_TRUE(absl::StartsWith(url_, "http://127.0.0.1:")) << url_;
    int port = 0;
    ASSERT_TRUE(absl::SimpleAtoi(url_.substr(url_.rfind(':') + 1), &port));
    client_ = std::make_unique<httplib::Client>("127.0.0.1", port);
    client_->set_read_timeout(60, 0);
  }
  void TearDown() override {
    daemon_->Stop();
    if (HasFailure()) std::cerr << "--- traind log ---\n" << daemon_->Log();
  }

  httplib::Result Get(const std::string& path, const char* token = kViewerToken,
                      httplib::Headers headers = {}) {
    if (token != nullptr) headers.emplace("Authorization", absl::StrCat("Bearer ", token));
    return client_->Get(path.c_str(), headers);
  }

  Job RunJob(int folds, int epochs) {
    absl::StatusOr<Job> job = SubmitJob(daemon_->stub(), IrisExampleSpec(folds, epochs));
    EXPECT_TRUE(job.ok()) << job.status();
    std::vector<JobEvent> events;
    EXPECT_TRUE(WatchAll(daemon_->stub(), job->id(), 0, &events).ok());
    return GetJob(daemon_->stub(), job->id());
  }

  TempDir dir_;
  std::unique_ptr<TraindProcess> daemon_;
  std::string url_;
  std::unique_ptr<httplib::Client> client_;
};

TEST_F(HttpTest, JsonIsTheSameMessageGrpcReturns) {
  const Job grpc_job = RunJob(2, 3);
  httplib::Result r = Get("/api/v1/jobs/" + grpc_job.id());
  ASSERT_TRUE(r) << httplib::to_string(r.error());
  EXPECT_EQ(r->status, 200);
  EXPECT_TRUE(absl::StartsWith(r->get_header_value("Content-Type"), "application/json"));
  Job http_job;
  ASSERT_TRUE(JsonStringToMessage(r->body, &http_job).ok()) << r->body;
  EXPECT_TRUE(MessageDifferencer::Equals(grpc_job, http_job));
  EXPECT_NE(r->body.find("\"state\":\"SUCCEEDED\""), std::string::npos);

  r = Get("/api/v1/jobs/" + grpc_job.id() + "/result");
  ASSERT_TRUE(r);
  traind::v1::JobResult result;
  ASSERT_TRUE(JsonStringToMessage(r->body, &result).ok()) << r->body;
  EXPECT_TRUE(MessageDifferencer::Equals(grpc_job.result(), result));
  EXPECT_EQ(result.folds_size(), 2);

  r = Get("/api/v1/jobs?state=succeeded&page_size=10");
  ASSERT_TRUE(r);
  traind::v1::ListJobsResponse list;
  ASSERT_TRUE(JsonStringToMessage(r->body, &list).ok()) << r->body;
  ASSERT_EQ(list.jobs_size(), 1);
  EXPECT_EQ(list.jobs(0).id(), grpc_job.id());
  r = Get("/api/v1/jobs?state=running");
  ASSERT_TRUE(r);
  ASSERT_TRUE(JsonStringToMessage(r->body, &list).ok()) << r->body;
  EXPECT_EQ(list.jobs_size(), 0);

  r = Get("/api/v1/info");
  ASSERT_TRUE(r);
  traind::v1::ServerInfo info;
  ASSERT_TRUE(JsonStringToMessage(r->body, &info).ok()) << r->body;
  EXPECT_EQ(info.http_url(), url_);
  EXPECT_EQ(info.cpu_slots(), 2);
  r = Get("/api/v1/devices");
  ASSERT_TRUE(r);
  traind::v1::ListDevicesResponse devices;
  ASSERT_TRUE(JsonStringToMessage(r->body, &devices).ok()) << r->body;
  ASSERT_GE(devices.devices_size(), 1);
  EXPECT_EQ(devices.devices(0).id(), "cpu");
}

// Bodies are compressed with gzip when asked, never with brotli (ten times
// the cost of the answer at the settings HTTP libraries use); a finished
// job's JSON is the same on every read (it is rendered once).
TEST_F(HttpTest, CompressionAndFinishedJobsJson) {
  const Job job = RunJob(2, 2);
  client_->set_decompress(false);
  httplib::Result r = Get("/metrics", kViewerToken, {{"Accept-Encoding", "br"}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_FALSE(r->has_header("Content-Encoding")) << r->get_header_value("Content-Encoding");
  EXPECT_NE(r->body.find("traind_jobs_submitted_total"), std::string::npos);
  r = Get("/metrics", kViewerToken, {{"Accept-Encoding", "gzip, deflate, br"}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->get_header_value("Content-Encoding"), "gzip");
  client_->set_decompress(true);
  std::string first;
  for (int i = 0; i < 3; ++i) {
    r = Get("/api/v1/jobs/" + job.id());
    ASSERT_TRUE(r);
    if (i == 0) first = r->body;
    EXPECT_EQ(r->body, first);
  }
  Job parsed;
  ASSERT_TRUE(JsonStringToMessage(first, &parsed).ok());
  EXPECT_TRUE(MessageDifferencer::Equals(parsed, job));
}

// A burst of connections (a dashboard's event streams) must not overflow
// the listen backlog (a library's default can be 5), and a dropped connect is retried
// by the client only after 1, 3, 7 s. traind sets the system's maximum.
TEST_F(HttpTest, TheListenBacklogHoldsABurstOfConnections) {
  const std::string port = url_.substr(url_.rfind(':') + 1);
  std::string out;
  ASSERT_EQ(RunCommand("ss -ltnH 'sport = :" + port + "'", &out), 0) << out;
  std::vector<std::string> fields = absl::StrSplit(out, ' ', absl::SkipEmpty());
  ASSERT_GE(fields.size(), 3u) << out;
  int backlog = 0;
  ASSERT_TRUE(absl::SimpleAtoi(fields[2], &backlog)) << out;
  EXPECT_GE(backlog, 128) << out;
}

TEST_F(HttpTest, ErrorsAreJsonWithTheirHttpStatus) {
  httplib::Result r = Get("/api/v1/jobs/no-such-job");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 404);
  EXPECT_NE(r->body.find("\"status\":\"NOT_FOUND\""), std::string::npos) << r->body;
  r = Get("/api/v1/jobs?state=DONE");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  EXPECT_NE(r->body.find("state: \\\"DONE\\\" is not a job state"), std::string::npos) << r->body;
  r = Get("/api/v1/jobs/no-such-job/events");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 404);
  r = Get("/api/v1/nothing");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 404);
  EXPECT_NE(r->body.find("no such path: /api/v1/nothing"), std::string::npos) << r->body;
  // Read-only: nothing but GET (and the session's POSTs) is served.
  httplib::Headers h = {{"Authorization", absl::StrCat("Bearer ", kAdminToken)}};
  r = client_->Delete("/api/v1/jobs/x", h);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 405);
  r = client_->Post("/api/v1/jobs", h, "{}", "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 405);
}

TEST_F(HttpTest, TheSecurityOfTheTcpPort) {
  for (const char* path : {"/api/v1/info", "/api/v1/jobs", "/metrics", "/api/v1/session"}) {
    httplib::Result r = Get(path, nullptr);
    ASSERT_TRUE(r) << path;
    EXPECT_EQ(r->status, 401) << path;
    EXPECT_EQ(r->get_header_value("WWW-Authenticate"), "Bearer realm=\"traind\"") << path;
    r = Get(path, "wrong-token");
    ASSERT_TRUE(r) << path;
    EXPECT_EQ(r->status, 401) << path << ": " << r->body;
    r = Get(path, kViewerToken);
    ASSERT_TRUE(r) << path;
    EXPECT_EQ(r->status, 200) << path << ": " << r->body;
  }
  // No CORS unless asked for; health needs no token and says nothing else.
  httplib::Result r = Get("/api/v1/info", kViewerToken, {{"Origin", "https://evil.example"}});
  ASSERT_TRUE(r);
  EXPECT_FALSE(r->has_header("Access-Control-Allow-Origin"));
  r = Get("/healthz", nullptr);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, "ok\n");
  r = Get("/readyz", nullptr);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  // Tokens never reach the log.
  EXPECT_EQ(daemon_->Log().find(kViewerToken), std::string::npos);
}

TEST_F(HttpTest, BrowserSessionsFromALoginLinkOrAToken) {
  // trainctl dashboard's RPC, as the viewer over TCP... here over the unix
  // socket (the admin "local").
  traind::v1::DashboardLogin login;
  auto ctx = Ctx();
  ASSERT_TRUE(
      daemon_->stub()
          ->CreateDashboardLogin(ctx.get(), traind::v1::CreateDashboardLoginRequest(), &login)
          .ok());
  ASSERT_TRUE(absl::StartsWith(login.url(), url_ + "/login?ticket=")) << login.url();
  const std::string path = login.url().substr(url_.size());
  httplib::Result r = Get(path, nullptr);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 303);
  EXPECT_EQ(r->get_header_value("Location"), "/");
  const std::string set_cookie = r->get_header_value("Set-Cookie");
  EXPECT_TRUE(absl::StartsWith(set_cookie, "traind_session=")) << set_cookie;
  EXPECT_NE(set_cookie.find("HttpOnly"), std::string::npos) << set_cookie;
  EXPECT_NE(set_cookie.find("SameSite=Strict"), std::string::npos) << set_cookie;
  const std::string cookie = set_cookie.substr(0, set_cookie.find(';'));
  r = Get("/api/v1/session", nullptr, {{"Cookie", cookie}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_NE(r->body.find("\"name\":\"local\""), std::string::npos) << r->body;
  r = Get("/api/v1/jobs", nullptr, {{"Cookie", cookie}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  // The link works once.
  r = Get(path, nullptr);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 303);
  EXPECT_EQ(r->get_header_value("Location"), "/?login=expired");
  EXPECT_FALSE(r->has_header("Set-Cookie"));
  // The ticket is not in the log.
  EXPECT_EQ(daemon_->Log().find(path.substr(path.find('=') + 1)), std::string::npos);

  // A token exchanged for a session; logout ends it.
  r = client_->Post("/api/v1/session", absl::StrCat("{\"token\":\"", kViewerToken, "\"}"),
                    "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body;
  EXPECT_NE(r->body.find("\"role\":\"viewer\""), std::string::npos) << r->body;
  const std::string c2 =
      r->get_header_value("Set-Cookie").substr(0, r->get_header_value("Set-Cookie").find(';'));
  r = Get("/api/v1/info", nullptr, {{"Cookie", c2}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  r = client_->Post("/api/v1/session/logout", httplib::Headers{{"Cookie", c2}}, "", "text/plain");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 204);
  r = Get("/api/v1/info", nullptr, {{"Cookie", c2}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 401);
  r = client_->Post("/api/v1/session", "{\"token\":\"nope\"}", "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 401);
  r = client_->Post("/api/v1/session", "token=nope", "application/x-www-form-urlencoded");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 415);
  // The page's shell is served to anyone (it holds no data), the dygraphs
  // library from traind itself.
  r = Get("/", nullptr);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_TRUE(absl::StartsWith(r->get_header_value("Content-Type"), "text/html"));
  EXPECT_NE(r->get_header_value("Content-Security-Policy").find("default-src 'self'"),
            std::string::npos);
  r = Get("/assets/dygraph.min.js", nullptr);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_GT(r->body.size(), 100000u);
}

TEST_F(HttpTest, TrainctlDashboardPrintsAWorkingLoginLink) {
  std::string out;
  ASSERT_EQ(RunCommand(BinDir() + "/trainctl --address " + daemon_->address() + " dashboard", &out),
            0)
      << out;
  const size_t at = out.find(url_ + "/login?ticket=");
  ASSERT_NE(at, std::string::npos) << out;
  std::string link = out.substr(at);
  link = link.substr(0, link.find_first_of(" \n"));
  httplib::Result r = Get(link.substr(url_.size()), nullptr);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 303);
  EXPECT_TRUE(absl::StartsWith(r->get_header_value("Set-Cookie"), "traind_session="));
  ASSERT_EQ(RunCommand(BinDir() + "/trainctl --address " + daemon_->address() + " info", &out), 0);
  EXPECT_NE(out.find("http:            " + url_ + "\n"), std::string::npos) << out;

  // With a job: the link lands on its page; an unknown job is refused
  // before any link is made (exit 6).
  const Job job = RunJob(2, 1);
  ASSERT_EQ(
      RunCommand(BinDir() + "/trainctl --address " + daemon_->address() + " dashboard " + job.id(),
                 &out),
      0)
      << out;
  link = out.substr(out.find(url_ + "/login?ticket="));
  link = link.substr(0, link.find_first_of(" \n"));
  EXPECT_TRUE(absl::EndsWith(link, "&job=" + job.id())) << link;
  r = Get(link.substr(url_.size()), nullptr);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 303);
  EXPECT_EQ(r->get_header_value("Location"), "/#/jobs/" + job.id());
  EXPECT_EQ(RunCommand(BinDir() + "/trainctl --address " + daemon_->address() +
                           " dashboard 0000deadbeef 2>&1",
                       &out),
            6)
      << out;
  // Only a job id goes into the redirect: anything else lands on "/".
  for (const std::string bad : {"https:%2F%2Fevil.example", "..%2F..", "a%20b", "%23x"}) {
    traind::v1::DashboardLogin login;
    auto ctx = Ctx();
    ASSERT_TRUE(
        daemon_->stub()
            ->CreateDashboardLogin(ctx.get(), traind::v1::CreateDashboardLoginRequest(), &login)
            .ok());
    r = Get(login.url().substr(url_.size()) + "&job=" + bad, nullptr);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 303);
    EXPECT_EQ(r->get_header_value("Location"), "/") << bad;
  }
}

// A job's files over HTTP: the list, each file's bytes (streamed, with its
// length and an attachment name), HEAD; only what the list names.
TEST_F(HttpTest, ArtifactsAreListedAndDownloaded) {
  const Job job = RunJob(2, 2);
  httplib::Result r = Get("/api/v1/jobs/" + job.id() + "/artifacts");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  traind::v1::ListArtifactsResponse list;
  ASSERT_TRUE(JsonStringToMessage(r->body, &list).ok()) << r->body;
  std::set<std::string> names;
  for (const auto& a : list.artifacts()) names.insert(a.name());
  ASSERT_TRUE(names.count("predictions.csv")) << r->body;
  ASSERT_TRUE(names.count("task-1/model.ckpt")) << r->body;
  const std::string job_dir = dir_.path() + "/state/jobs/" + job.id();
  for (const std::string name : {"predictions.csv", "task-1/model.ckpt"}) {
    std::ifstream in(job_dir + "/" + name, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    ASSERT_FALSE(bytes.empty()) << name;
    r = Get("/api/v1/jobs/" + job.id() + "/artifact?name=" + name);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200) << name;
    EXPECT_EQ(r->body, bytes) << name;
    EXPECT_EQ(r->get_header_value("Content-Length"), std::to_string(bytes.size()));
    EXPECT_EQ(r->get_header_value("Content-Type"), "application/octet-stream");
    EXPECT_TRUE(absl::StartsWith(r->get_header_value("Content-Disposition"),
                                 "attachment; filename=\"" + job.id() + "-"))
        << r->get_header_value("Content-Disposition");
    r = client_->Head(("/api/v1/jobs/" + job.id() + "/artifact?name=" + name).c_str(),
                      {{"Authorization", absl::StrCat("Bearer ", kViewerToken)}});
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200);
    EXPECT_EQ(r->get_header_value("Content-Length"), std::to_string(bytes.size()));
    EXPECT_TRUE(r->body.empty());
  }
  // The connection serves the next request after a file.
  r = Get("/api/v1/jobs/" + job.id() + "/artifacts");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  // A large file streams: traind's memory does not grow with it.
  const std::string big = job_dir + "/task-1/model.ckpt";
  constexpr size_t kBig = size_t{48} << 20;
  {
    std::ofstream out(big, std::ios::binary | std::ios::trunc);
    std::string block(1 << 20, '\0');
    for (size_t i = 0; i < kBig / block.size(); ++i) {
      for (size_t k = 0; k < block.size(); k += 4096) block[k] = static_cast<char>(i + k / 4096);
      out.write(block.data(), static_cast<std::streamsize>(block.size()));
    }
  }
  const int pid = daemon_->pid();
  const int64_t idle = ProcStatusKiB(pid, "VmRSS");
  { std::ofstream(absl::StrCat("/proc/", pid, "/clear_refs")) << "5"; }  // VmHWM := VmRSS
  size_t received = 0;
  uint64_t sum = 0;
  r = client_->Get(("/api/v1/jobs/" + job.id() + "/artifact?name=task-1/model.ckpt").c_str(),
                   {{"Authorization", absl::StrCat("Bearer ", kViewerToken)}},
                   [&](const char* data, size_t n) {
                     for (size_t k = 0; k < n; ++k) {
                       if ((received + k) % 4096 == 0) sum += static_cast<unsigned char>(data[k]);
                     }
                     received += n;
                     return true;
                   });
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(received, kBig);
  uint64_t expected_sum = 0;
  for (size_t i = 0; i < kBig >> 20; ++i) {
    for (size_t k = 0; k < (1u << 20); k += 4096) {
      expected_sum += static_cast<unsigned char>(static_cast<char>(i + k / 4096));
    }
  }
  EXPECT_EQ(sum, expected_sum);
  EXPECT_LE(ProcStatusKiB(pid, "VmHWM") - idle, 16 * 1024) << "idle " << idle << " KiB";
  // Only listed names; the name is required; the job must exist; a token too.
  for (const std::string bad :
       {"..%2Ftraind.db", "..%2F..%2Fetc%2Fpasswd", "task-9%2Fmodel.ckpt", "%2Fetc%2Fpasswd"}) {
    r = Get("/api/v1/jobs/" + job.id() + "/artifact?name=" + bad);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 404) << bad << ": " << r->body;
  }
  r = Get("/api/v1/jobs/" + job.id() + "/artifact");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400) << r->body;
  r = Get("/api/v1/jobs/000000000000/artifacts");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 404) << r->body;
  r = Get("/api/v1/jobs/" + job.id() + "/artifact?name=predictions.csv", nullptr);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 401);
}

TEST_F(HttpTest, EventsStreamEveryFoldAndResume) {
  const Job job = RunJob(3, 4);
  std::vector<JobEvent> grpc_events;
  ASSERT_TRUE(WatchAll(daemon_->stub(), job.id(), 0, &grpc_events).ok());
  httplib::Result r = Get("/api/v1/jobs/" + job.id() + "/events");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_TRUE(absl::StartsWith(r->get_header_value("Content-Type"), "text/event-stream"));
  std::vector<Sse> sse = ParseSse(r->body);
  ASSERT_EQ(sse.size(), grpc_events.size());
  std::set<int> tasks_with_epochs;
  for (size_t i = 0; i < sse.size(); ++i) {
    EXPECT_EQ(sse[i].id, absl::StrCat(grpc_events[i].sequence()));
    EXPECT_EQ(sse[i].event, "job");
    JobEvent e;
    ASSERT_TRUE(JsonStringToMessage(sse[i].data, &e).ok()) << sse[i].data;
    EXPECT_TRUE(MessageDifferencer::Equals(e, grpc_events[i])) << i;
    if (e.has_epoch()) tasks_with_epochs.insert(e.epoch().task());
  }
  EXPECT_EQ(tasks_with_epochs, (std::set<int>{0, 1, 2}));
  EXPECT_TRUE(grpc_events.back().last());
  // Resume after event 5, by Last-Event-ID and by ?after=.
  for (auto [path, headers] :
       {std::pair{"/api/v1/jobs/" + job.id() + "/events", httplib::Headers{{"Last-Event-ID", "5"}}},
        std::pair{"/api/v1/jobs/" + job.id() + "/events?after=5", httplib::Headers{}}}) {
    r = Get(path, kViewerToken, headers);
    ASSERT_TRUE(r);
    std::vector<Sse> rest = ParseSse(r->body);
    ASSERT_EQ(rest.size(), grpc_events.size() - 5) << path;
    EXPECT_EQ(rest.front().id, "6");
  }
  // After the last event: an empty stream that ends at once.
  r = Get("/api/v1/jobs/" + job.id() + "/events", kViewerToken,
          {{"Last-Event-ID", absl::StrCat(grpc_events.back().sequence())}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_TRUE(ParseSse(r->body).empty()) << r->body;
  r = Get("/api/v1/jobs/" + job.id() + "/events?after=-1");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  // Past the last event: no later event would come, the stream would never
  // end. Refused, over HTTP and over gRPC (INT64_MAX too, which would
  // overflow a cursor + 1).
  const int64_t last = grpc_events.back().sequence();
  r = Get("/api/v1/jobs/" + job.id() + "/events", kViewerToken,
          {{"Last-Event-ID", absl::StrCat(last + 1)}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  EXPECT_NE(r->body.find(
                absl::StrCat("Last-Event-ID: ", last + 1, " is past the job's last event, ", last)),
            std::string::npos)
      << r->body;
  for (int64_t after : {last + 1, std::numeric_limits<int64_t>::max()}) {
    std::vector<traind::v1::JobEvent> none;
    const grpc::Status past = WatchAll(daemon_->stub(), job.id(), after, &none);
    EXPECT_EQ(past.error_code(), grpc::StatusCode::OUT_OF_RANGE) << past.error_message();
    EXPECT_EQ(past.error_message(),
              absl::StrCat("after_sequence: ", after, " is past the job's last event, ", last));
    EXPECT_TRUE(none.empty());
  }
}

TEST_F(HttpTest, ALiveStreamGetsEventsAsTheyHappen) {
  // A job far longer than the test: its epochs must arrive while it runs.
  // Once one has, the job is cancelled, and the stream ends after the
  // cancellation's terminal event.
  absl::StatusOr<Job> job = SubmitJob(daemon_->stub(), IrisExampleSpec(2, 100000));
  ASSERT_TRUE(job.ok());
  std::string body;
  int chunks = 0;
  bool saw_epoch_while_running = false;
  bool cancelled = false;
  httplib::Headers h = {{"Authorization", absl::StrCat("Bearer ", kViewerToken)}};
  httplib::Result r = client_->Get(
      ("/api/v1/jobs/" + job->id() + "/events").c_str(), h, [&](const char* data, size_t n) {
        body.append(data, n);
        ++chunks;
        if (!cancelled && absl::StrContains(body, "\"epoch\":{")) {
          saw_epoch_while_running = GetJob(daemon_->stub(), job->id()).state() == Job::RUNNING;
          traind::v1::CancelJobRequest req;
          req.set_job_id(job->id());
          Job out;
          auto ctx = Ctx();
          cancelled = daemon_->stub()->CancelJob(ctx.get(), req, &out).ok();
        }
        return true;
      });
  ASSERT_TRUE(r) << httplib::to_string(r.error()) << " after " << chunks << " chunks: " << body;
  EXPECT_TRUE(cancelled);
  EXPECT_TRUE(saw_epoch_while_running);
  EXPECT_GT(chunks, 1);
  std::vector<Sse> sse = ParseSse(body);
  ASSERT_FALSE(sse.empty());
  JobEvent last;
  ASSERT_TRUE(JsonStringToMessage(sse.back().data, &last).ok());
  EXPECT_TRUE(last.last());
  EXPECT_EQ(last.job_state().state(), Job::CANCELLED);
  // Sequences 1, 2, 3, ... without a gap or a repeat.
  for (size_t i = 0; i < sse.size(); ++i) EXPECT_EQ(sse[i].id, absl::StrCat(i + 1));
}

TEST_F(HttpTest, MetricsPassPromtoolAndCountWhatHappened) {
  const Job job = RunJob(3, 2);
  httplib::Result r = Get("/metrics");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_TRUE(absl::StartsWith(r->get_header_value("Content-Type"), "text/plain; version=0.0.4"));
  const std::string file = dir_.Write("metrics.txt", r->body);
  std::string out;
  const int rc = RunCommand("promtool check metrics < " + file + " 2>&1", &out);
  ASSERT_NE(rc, 127) << "promtool is not installed (./deploy/install-deps.sh installs prometheus)";
  EXPECT_EQ(rc, 0) << out << "\n" << r->body;
  std::map<std::string, double> samples;
  std::istringstream in(r->body);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    const size_t space = line.rfind(' ');
    samples[line.substr(0, space)] = std::stod(line.substr(space + 1));
  }
  EXPECT_EQ(samples["traind_jobs_submitted_total"], 1);
  EXPECT_EQ(samples["traind_jobs_finished_total{state=\"succeeded\"}"], 1);
  EXPECT_EQ(samples["traind_attempts_started_total"], 3);
  EXPECT_EQ(samples["traind_queue_wait_seconds_count"], 3);
  EXPECT_EQ(samples["traind_worker_start_seconds_count"], 3);
  EXPECT_EQ(samples["traind_epoch_seconds_count"], 6);
  EXPECT_EQ(samples["traind_jobs{state=\"succeeded\"}"], 1);
  EXPECT_EQ(samples["traind_tasks{state=\"succeeded\"}"], 3);
  EXPECT_EQ(samples["traind_cpu_slots"], 2);
  EXPECT_EQ(samples["traind_cpu_slots_busy"], 0);
  EXPECT_GT(samples["traind_store_commit_seconds_count"], 0);
  EXPECT_EQ(samples["traind_store_writable"], 1);
  EXPECT_EQ(samples.count("traind_build_info{version=\"" TRAIND_TEST_VERSION "\"}"), 1u);
  for (const auto& [name, value] : samples) {
    EXPECT_EQ(name.find(job.id()), std::string::npos) << "no job ids as labels: " << name;
  }
}

TEST_F(HttpTest, SigtermEndsOpenStreamsAndTraindWithinItsGrace) {
  // A job that waits forever in the queue behind a long one, watched.
  absl::StatusOr<Job> running = SubmitJob(daemon_->stub(), IrisExampleSpec(2, 100000));
  ASSERT_TRUE(running.ok());
  std::atomic<bool> ended{false};
  std::thread watcher([&] {
    httplib::Client c("127.0.0.1", std::stoi(url_.substr(url_.rfind(':') + 1)));
    c.set_read_timeout(60, 0);
    httplib::Headers h = {{"Authorization", absl::StrCat("Bearer ", kViewerToken)}};
    c.Get(("/api/v1/jobs/" + running->id() + "/events").c_str(), h,
          [](const char*, size_t) { return true; });
    ended = true;
  });
  absl::SleepFor(absl::Milliseconds(500));
  const auto start = std::chrono::steady_clock::now();
  // Waited for longer than the bound: a stop that takes the whole grace is
  // measured, not killed.
  const int status = daemon_->Stop(SIGTERM, std::chrono::seconds(30));
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  watcher.join();
  EXPECT_TRUE(ended);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  EXPECT_LT(seconds, 12.0) << "stop_grace is 10 s";
}

TEST(HttpListenTest, AnAddressInUseIsAnErrorUnlessItIsTheDefault) {
  TempDir dir;
  // Hold a port.
  httplib::Server holder;
  const int port = holder.bind_to_any_port("127.0.0.1");
  ASSERT_GT(port, 0);
  TraindProcess asked(dir.path() + "/a", {"--http-listen=127.0.0.1:" + std::to_string(port)});
  EXPECT_FALSE(asked.Start());
  EXPECT_NE(asked.Log().find("cannot listen"), std::string::npos) << asked.Log();
  TraindProcess bad(dir.path() + "/b", {"--http-listen=0.0.0.0:0"});
  EXPECT_FALSE(bad.Start());
  EXPECT_NE(bad.Log().find("http_listen: 0.0.0.0:0 is not a loopback address"), std::string::npos)
      << bad.Log();
  TraindProcess off(dir.path() + "/c", {"--http-listen=off"});
  ASSERT_TRUE(off.Start()) << off.Log();
  // Start returns once the socket answers; the ready line follows.
  for (int i = 0; i < 500 && off.Log().find("traind ready") == std::string::npos; ++i) {
    usleep(10000);
  }
  EXPECT_NE(off.Log().find("http=off"), std::string::npos) << off.Log();
  traind::v1::DashboardLogin login;
  auto ctx = Ctx();
  grpc::Status s = off.stub()->CreateDashboardLogin(
      ctx.get(), traind::v1::CreateDashboardLoginRequest(), &login);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << s.error_message();
}

}  // namespace
}  // namespace traind::testing
