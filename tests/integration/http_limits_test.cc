// The HTTP side door under hostile traffic, over raw sockets (loopback):
// bodies that are never read or are bounded by the bytes that arrive,
// header size and count, the per-request deadline, connection caps that a
// flood of slow clients cannot use to silence /healthz, event streams
// capped per token, descriptors kept for gRPC, errors that are valid JSON
// in UTF-8, and a reconnecting event stream that waits for the next event.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "server/core/auth.h"
#include "tests/integration/testing/traind_process.h"

namespace traind::testing {
namespace {

using traind::v1::Job;

const char* kViewerToken = "limits-viewer-token-0123456789";
const char* kAdminToken = "limits-admin-token-0123456789";

std::string Tokens(const TempDir& dir) {
  using traind::server::Sha256Hex;
  return dir.Write(
      "tokens.yaml",
      absl::StrCat("tokens:\n  - {name: vera, role: viewer, sha256: ", Sha256Hex(kViewerToken),
                   "}\n  - {name: ada, role: admin, sha256: ", Sha256Hex(kAdminToken), "}\n"));
}

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

// One TCP connection to traind's HTTP port, bytes in and out as they are.
class Raw {
 public:
  // `rcvbuf` > 0: a small receive buffer (before connect, so the window the
  // client offers stays small too).
  explicit Raw(int port, int rcvbuf = 0) {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    if (rcvbuf > 0) setsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf));
    sockaddr_in a = {};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    if (connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
      close(fd_);
      fd_ = -1;
    }
  }
  ~Raw() {
    if (fd_ >= 0) close(fd_);
  }
  bool ok() const { return fd_ >= 0; }
  // False once traind has closed (or reset) the connection.
  bool Send(const std::string& data) {
    size_t off = 0;
    while (off < data.size()) {
      const ssize_t n = send(fd_, data.data() + off, data.size() - off, MSG_NOSIGNAL);
      if (n <= 0) return false;
      off += static_cast<size_t>(n);
    }
    return true;
  }
  // Reads until `needle` has arrived, the peer closed, or `seconds` passed.
  std::string ReadUntil(const std::string& needle, double seconds) {
    const auto start = std::chrono::steady_clock::now();
    while (!absl::StrContains(got_, needle) && !closed_ && Seconds(start) < seconds) {
      Poll(seconds - Seconds(start));
    }
    return got_;
  }
  // Whether traind closes the connection within `seconds`.
  bool ClosedWithin(double seconds) {
    const auto start = std::chrono::steady_clock::now();
    while (!closed_ && Seconds(start) < seconds) Poll(seconds - Seconds(start));
    return closed_;
  }
  const std::string& got() const { return got_; }

 private:
  void Poll(double seconds) {
    pollfd p = {fd_, POLLIN, 0};
    if (poll(&p, 1, std::max(1, static_cast<int>(seconds * 1000))) <= 0) return;
    char buf[65536];
    const ssize_t n = recv(fd_, buf, sizeof(buf), 0);
    if (n <= 0) {
      closed_ = true;
    } else {
      got_.append(buf, static_cast<size_t>(n));
    }
  }

  int fd_ = -1;
  std::string got_;
  bool closed_ = false;
};

int Status(const std::string& response) {
  int code = 0;
  if (absl::StartsWith(response, "HTTP/1.1 ")) (void)absl::SimpleAtoi(response.substr(9, 3), &code);
  return code;
}

std::string Body(const std::string& response) {
  const size_t at = response.find("\r\n\r\n");
  return at == std::string::npos ? std::string() : response.substr(at + 4);
}

int OpenDescriptors(int pid) {
  int n = 0;
  std::error_code ec;
  for (auto it = std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/fd", ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
    ++n;
  }
  return n;
}

class HttpLimitsTest : public ::testing::Test {
 protected:
  void StartDaemon(std::vector<std::string> args, int nofile = 0) {
    args.push_back("--tokens-file=" + Tokens(dir_));
    daemon_ = std::make_unique<TraindProcess>(dir_.path() + "/state", args);
    if (nofile > 0) daemon_->SetNofile(nofile);
    ASSERT_TRUE(daemon_->Start()) << daemon_->Log();
    traind::v1::ServerInfo info;
    auto ctx = Ctx();
    ASSERT_TRUE(daemon_->stub()->GetServerInfo(ctx.get(), {}, &info).ok());
    ASSERT_TRUE(absl::SimpleAtoi(info.http_url().substr(info.http_url().rfind(':') + 1), &port_));
  }
  void SetUp() override {
    StartDaemon({"--cpu-slots=1", "--http-max-connections=16",
                 "--http-max-connections-per-address=8", "--http-request-timeout=2s",
                 "--http-max-streams-per-token=2"});
  }
  void TearDown() override {
    if (daemon_ != nullptr) daemon_->Stop();
    if (HasFailure() && daemon_ != nullptr) std::cerr << "--- traind log ---\n" << daemon_->Log();
  }

  // One request on a fresh connection; the whole response (traind closes
  // after it: "Connection: close").
  std::string Request(const std::string& head, const std::string& body = "") {
    Raw c(port_);
    EXPECT_TRUE(c.ok());
    c.Send(head + "Connection: close\r\n\r\n" + body);
    c.ClosedWithin(5);
    return c.got();
  }
  std::string Auth(const char* token = kViewerToken) {
    return absl::StrCat("Authorization: Bearer ", token, "\r\n");
  }

  TempDir dir_;
  std::unique_ptr<TraindProcess> daemon_;
  int port_ = 0;
};

TEST_F(HttpLimitsTest, BodiesAreBoundedOrNeverRead) {
  // Compressed bodies are refused, never decoded (421 bytes of brotli once
  // became 528 MiB).
  for (const char* coding : {"br", "gzip", "deflate"}) {
    const std::string r =
        Request(absl::StrCat("POST /api/v1/session HTTP/1.1\r\nHost: t\r\n",
                             "Content-Type: application/json\r\n", "Content-Encoding: ", coding,
                             "\r\nContent-Length: 5\r\n"),
                "xxxxx");
    EXPECT_EQ(Status(r), 415) << r;
    EXPECT_NE(r.find(absl::StrCat("Content-Encoding: ", coding, ": send the body as it is")),
              std::string::npos)
        << r;
  }
  // A chunked body is bounded by the bytes that arrive.
  {
    Raw c(port_);
    ASSERT_TRUE(
        c.Send("POST /api/v1/session HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
               "Transfer-Encoding: chunked\r\n\r\n"));
    const std::string chunk = absl::StrCat("1000\r\n", std::string(4096, 'x'), "\r\n");
    int sent = 0;
    while (sent < 256 && c.Send(chunk)) ++sent;  // 1 MiB, unless traind stops it first
    const std::string r = c.ReadUntil("}}", 5);
    EXPECT_EQ(Status(r), 413) << r;
    EXPECT_NE(r.find("the body is over 16384 bytes"), std::string::npos) << r;
    EXPECT_TRUE(c.ClosedWithin(5));
  }
  // A declared length over the limit: refused before a byte of it.
  EXPECT_EQ(Status(Request("POST /api/v1/session HTTP/1.1\r\nHost: t\r\nContent-Type: "
                           "application/json\r\nContent-Length: 1073741824\r\n")),
            413);
  // Any other route never reads a body: answered while the body has not
  // been sent, then the connection is closed.
  for (const std::string& head :
       {std::string("POST /api/v1/jobs HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"),
        absl::StrCat("GET /api/v1/info HTTP/1.1\r\nHost: t\r\n", Auth(),
                     "Content-Length: 1073741824\r\n\r\n")}) {
    Raw c(port_);
    ASSERT_TRUE(c.Send(head));
    const std::string r = c.ReadUntil("\r\n\r\n", 5);
    EXPECT_EQ(Status(r), absl::StartsWith(head, "POST") ? 405 : 200) << r;
    EXPECT_NE(r.find("Connection: close"), std::string::npos) << r;
    EXPECT_TRUE(c.ClosedWithin(5)) << head;
  }
}

TEST_F(HttpLimitsTest, HeadersAreBoundedInBytesAndFields) {
  std::string many = "GET /healthz HTTP/1.1\r\nHost: t\r\n";
  for (int i = 0; i < 64; ++i) absl::StrAppend(&many, "X-", i, ": y\r\n");
  std::string r = Request(many);
  EXPECT_EQ(Status(r), 431) << r;
  EXPECT_NE(r.find("more than 64 header fields"), std::string::npos) << r;
  r = Request(
      absl::StrCat("GET /healthz HTTP/1.1\r\nHost: t\r\nX-Big: ", std::string(17000, 'a'), "\r\n"));
  EXPECT_EQ(Status(r), 431) << r;
  EXPECT_NE(r.find("the request's header is over 16384 bytes"), std::string::npos) << r;
  // Within the limits: answered.
  EXPECT_EQ(Status(Request("GET /healthz HTTP/1.1\r\nHost: t\r\nX-A: 1\r\n")), 200);
  // Overlapping ranges (one 8 KiB request once built a 111 MiB reply): a
  // Range is not served, the whole file is, once.
  const std::string whole = Body(Request("GET /assets/dygraph.min.js HTTP/1.1\r\nHost: t\r\n"));
  ASSERT_GT(whole.size(), 100000u);
  std::string ranges = "bytes=0-";
  for (int i = 0; i < 800; ++i) ranges += ",0-";
  r = Request(
      absl::StrCat("GET /assets/dygraph.min.js HTTP/1.1\r\nHost: t\r\nRange: ", ranges, "\r\n"));
  EXPECT_EQ(Status(r), 200);
  EXPECT_EQ(Body(r), whole);
}

TEST_F(HttpLimitsTest, ErrorsAreJsonInUtf8AndMethodsAnswerConsistently) {
  std::string r = Request(absl::StrCat("GET /api/v1/jobs/%ff%fe HTTP/1.1\r\nHost: t\r\n", Auth()));
  EXPECT_EQ(Status(r), 404) << r;
  std::string body = Body(r);
  EXPECT_NE(body.find("\\\\xff\\\\xfe"), std::string::npos) << body;
  for (unsigned char ch : body) EXPECT_LT(ch, 0x80) << body;
  r = Request(absl::StrCat("GET /api/v1/jobs?state=%ff HTTP/1.1\r\nHost: t\r\n", Auth()));
  EXPECT_EQ(Status(r), 400) << r;
  body = Body(r);
  EXPECT_NE(body.find("state: \\\"\\\\xff\\\" is not a job state"), std::string::npos) << body;
  for (unsigned char ch : body) EXPECT_LT(ch, 0x80) << body;
  r = Request("GET /api/v1/jobs/%zz HTTP/1.1\r\nHost: t\r\n");
  EXPECT_EQ(Status(r), 400) << r;
  EXPECT_NE(r.find("bad percent-encoding"), std::string::npos) << r;
  // OPTIONS names what a path answers to; any other method is 405 with the
  // same Allow, its JSON code the HTTP status; an unknown path is 404 for
  // every method.
  r = Request("OPTIONS /api/v1/jobs HTTP/1.1\r\nHost: t\r\n");
  EXPECT_EQ(Status(r), 204) << r;
  EXPECT_NE(r.find("Allow: GET, HEAD, OPTIONS\r\n"), std::string::npos) << r;
  for (const char* method : {"PUT", "DELETE", "PATCH", "FOO"}) {
    r = Request(absl::StrCat(method, " /api/v1/jobs HTTP/1.1\r\nHost: t\r\n", Auth(kAdminToken)));
    EXPECT_EQ(Status(r), 405) << r;
    EXPECT_NE(r.find("Allow: GET, HEAD, OPTIONS\r\n"), std::string::npos) << r;
    EXPECT_NE(r.find("{\"error\":{\"code\":405,"), std::string::npos) << r;
  }
  r = Request("OPTIONS /api/v1/session/logout HTTP/1.1\r\nHost: t\r\n");
  EXPECT_NE(r.find("Allow: POST, OPTIONS\r\n"), std::string::npos) << r;
  for (const char* method : {"GET", "OPTIONS", "PUT"}) {
    r = Request(absl::StrCat(method, " /nope HTTP/1.1\r\nHost: t\r\n"));
    EXPECT_EQ(Status(r), 404) << method << ": " << r;
  }
  // HEAD: GET's status and length, no body (and still a token).
  r = Request(absl::StrCat("HEAD /api/v1/info HTTP/1.1\r\nHost: t\r\n"));
  EXPECT_EQ(Status(r), 401) << r;
  r = Request(absl::StrCat("HEAD /api/v1/info HTTP/1.1\r\nHost: t\r\n", Auth()));
  EXPECT_EQ(Status(r), 200) << r;
  EXPECT_TRUE(Body(r).empty()) << r;
}

TEST_F(HttpLimitsTest, SlowClientsCannotHoldThePortOrItsDescriptors) {
  const int base = OpenDescriptors(daemon_->pid());
  // 40 connections that never finish their header (8 per address, 16 in
  // all are allowed).
  std::vector<std::unique_ptr<Raw>> slow;
  for (int i = 0; i < 40; ++i) {
    slow.push_back(std::make_unique<Raw>(port_));
    slow.back()->Send("GET /healthz HTTP/1.1\r\nHost: t\r\n");
  }
  usleep(200 * 1000);
  EXPECT_LE(OpenDescriptors(daemon_->pid()), base + 8 + 2);
  // A liveness probe is answered at once: it takes the place of the
  // connection that has waited longest.
  for (int i = 0; i < 5; ++i) {
    const auto start = std::chrono::steady_clock::now();
    const std::string r = Request("GET /healthz HTTP/1.1\r\nHost: t\r\n");
    EXPECT_EQ(Status(r), 200) << r;
    EXPECT_LT(Seconds(start), 1.0);
  }
  // The deadline is per request, not per read: a client that sends a byte
  // every 300 ms is closed after http_request_timeout (2 s).
  Raw trickle(port_);
  const auto start = std::chrono::steady_clock::now();
  const std::string head = "GET /healthz HTTP/1.1\r\nHost: t\r\nX-Slow: ";
  bool open = true;
  for (size_t i = 0; open && Seconds(start) < 6; ++i) {
    open = trickle.Send(std::string(1, i < head.size() ? head[i] : 'a'));
    if (open) open = !trickle.ClosedWithin(0.3);
  }
  EXPECT_FALSE(open);
  EXPECT_GT(Seconds(start), 1.5);
  EXPECT_LT(Seconds(start), 4.0);
  // Counted for the operator.
  const std::string m = Request(absl::StrCat("GET /metrics HTTP/1.1\r\nHost: t\r\n", Auth()));
  EXPECT_NE(m.find("traind_http_max_connections 16"), std::string::npos) << m;
  EXPECT_NE(m.find("traind_http_connections_shed_total{reason=\"displaced\"}"), std::string::npos);
  EXPECT_EQ(m.find("traind_http_connections_shed_total{reason=\"displaced\"} 0"), std::string::npos)
      << m;
}

TEST_F(HttpLimitsTest, EventStreamsAreCappedPerToken) {
  absl::StatusOr<Job> job = SubmitJob(daemon_->stub(), IrisExampleSpec(2, 100000));
  ASSERT_TRUE(job.ok()) << job.status();
  const std::string get =
      absl::StrCat("GET /api/v1/jobs/", job->id(), "/events HTTP/1.1\r\n", "Host: t\r\n");
  std::vector<std::unique_ptr<Raw>> streams;
  for (int i = 0; i < 2; ++i) {
    streams.push_back(std::make_unique<Raw>(port_));
    streams.back()->Send(get + Auth() + "\r\n");
    EXPECT_EQ(Status(streams.back()->ReadUntil("\r\n\r\n", 5)), 200);
  }
  std::string r = Request(get + Auth());
  EXPECT_EQ(Status(r), 429) << r;
  EXPECT_NE(r.find("vera has 2 event streams open, the most one caller may "
                   "(http_max_streams_per_token)"),
            std::string::npos)
      << r;
  // Another caller is not held back by vera's streams.
  Raw admin(port_);
  admin.Send(get + Auth(kAdminToken) + "\r\n");
  EXPECT_EQ(Status(admin.ReadUntil("\r\n\r\n", 5)), 200);
  // A stream that ends makes room.
  streams.pop_back();
  bool reopened = false;
  for (int i = 0; i < 50 && !reopened; ++i) {
    usleep(100 * 1000);
    Raw again(port_);
    again.Send(get + Auth() + "\r\n");
    reopened = Status(again.ReadUntil("\r\n\r\n", 5)) == 200;
  }
  // The server notices a closed stream at its next write: an event of the
  // running job, or the keepalive.
  EXPECT_TRUE(reopened);
}

// A browser reconnects with Last-Event-ID = the latest event of a running
// job: the stream stays open (it once ended after 5 s without its closing
// chunk) and carries the next event when it comes.
TEST_F(HttpLimitsTest, AReconnectAtTheLatestEventWaitsForTheNext) {
  // cpu_slots=1: the second job waits in the queue, its events stay still.
  absl::StatusOr<Job> running = SubmitJob(daemon_->stub(), IrisExampleSpec(2, 100000));
  absl::StatusOr<Job> queued = SubmitJob(daemon_->stub(), IrisExampleSpec(2, 100000));
  ASSERT_TRUE(running.ok() && queued.ok());
  int64_t last = 0;
  bool terminal = false;
  {
    Raw all(port_);
    all.Send(absl::StrCat("GET /api/v1/jobs/", queued->id(), "/events HTTP/1.1\r\nHost: t\r\n",
                          Auth(), "\r\n"));
    usleep(1000 * 1000);
    const std::string got = all.ReadUntil("never", 0.5);
    for (size_t at = got.find("\nid: "); at != std::string::npos; at = got.find("\nid: ", at + 1)) {
      (void)absl::SimpleAtoi(got.substr(at + 5, got.find('\n', at + 5) - at - 5), &last);
    }
    terminal = absl::StrContains(got, "\r\n0\r\n\r\n");
  }
  ASSERT_GT(last, 0);
  ASSERT_FALSE(terminal);
  Raw resumed(port_);
  resumed.Send(absl::StrCat("GET /api/v1/jobs/", queued->id(), "/events HTTP/1.1\r\nHost: t\r\n",
                            Auth(), "Last-Event-ID: ", last, "\r\n\r\n"));
  EXPECT_EQ(Status(resumed.ReadUntil("\r\n\r\n", 5)), 200);
  EXPECT_FALSE(resumed.ClosedWithin(6.0)) << resumed.got();
  traind::v1::CancelJobRequest cancel;
  cancel.set_job_id(queued->id());
  Job out;
  auto ctx = Ctx();
  ASSERT_TRUE(daemon_->stub()->CancelJob(ctx.get(), cancel, &out).ok());
  const std::string got = resumed.ReadUntil("\r\n0\r\n\r\n", 10);
  EXPECT_NE(got.find(absl::StrCat("id: ", last + 1, "\n")), std::string::npos) << got;
  EXPECT_NE(got.find("\"state\":\"CANCELLED\""), std::string::npos) << got;
  EXPECT_TRUE(absl::EndsWith(got, "\r\n0\r\n\r\n")) << got;
}

// A watch still reading a finished job's stored events when the job is
// deleted ends (gRPC: NOT_FOUND; SSE: an `error` event, then the end); it
// once waited forever for live events that could not come.
TEST_F(HttpLimitsTest, WatchesEndWhenTheirJobIsDeleted) {
  for (const bool sse : {false, true}) {
    absl::StatusOr<Job> job = SubmitJob(daemon_->stub(), IrisExampleSpec(2, 3000));
    ASSERT_TRUE(job.ok()) << job.status();
    std::vector<traind::v1::JobEvent> all;
    ASSERT_TRUE(WatchAll(daemon_->stub(), job->id(), 0, &all).ok());
    ASSERT_GT(all.size(), 6000u);
    traind::v1::DeleteJobRequest del;
    del.set_job_id(job->id());
    traind::v1::DeleteJobResponse deleted;
    if (!sse) {
      traind::v1::WatchJobRequest req;
      req.set_job_id(job->id());
      auto ctx = Ctx(30);
      auto reader = daemon_->stub()->WatchJob(ctx.get(), req);
      traind::v1::JobEvent e;
      ASSERT_TRUE(reader->Read(&e));
      usleep(300 * 1000);  // the stream waits on flow control, mid-way
      auto dctx = Ctx();
      ASSERT_TRUE(daemon_->stub()->DeleteJob(dctx.get(), del, &deleted).ok());
      size_t got = 1;
      while (reader->Read(&e)) ++got;
      const grpc::Status end = reader->Finish();
      if (got < all.size()) {
        EXPECT_EQ(end.error_code(), grpc::StatusCode::NOT_FOUND) << end.error_message();
        EXPECT_EQ(end.error_message(),
                  absl::StrCat("job ", job->id(), " was deleted while it was watched"));
      } else {
        EXPECT_TRUE(end.ok()) << end.error_message();
      }
      EXPECT_LT(got, all.size()) << "the whole stream went out before the delete: no test";
    } else {
      Raw c(port_, /*rcvbuf=*/4096);
      c.Send(absl::StrCat("GET /api/v1/jobs/", job->id(), "/events HTTP/1.1\r\nHost: t\r\n", Auth(),
                          "\r\n"));
      c.ReadUntil("\r\n\r\n", 5);
      usleep(300 * 1000);  // not reading: the stream waits on the socket
      auto dctx = Ctx();
      ASSERT_TRUE(daemon_->stub()->DeleteJob(dctx.get(), del, &deleted).ok());
      const std::string got = c.ReadUntil("\r\n0\r\n\r\n", 20);
      EXPECT_EQ(got.find("\"last\":true"), std::string::npos)
          << "the whole stream went out before the delete: no test";
      EXPECT_TRUE(absl::EndsWith(got, "\r\n0\r\n\r\n")) << got.substr(got.size() - 300);
      EXPECT_NE(got.find(absl::StrCat("event: error\ndata: {\"error\":{\"code\":404,\"status\":"
                                      "\"NOT_FOUND\",\"message\":\"job ",
                                      job->id(), " was deleted while it was watched\"}}")),
                std::string::npos)
          << got.substr(got.size() - 300);
    }
  }
}

// The HTTP side never takes the descriptors gRPC needs: with nofile=256 it
// keeps to 128 connections however many arrive, and SubmitJob over the
// unix socket still works.
TEST(HttpDescriptorTest, TheHttpSideKeepsToHalfOfTheDescriptors) {
  TempDir dir;
  TraindProcess d(dir.path() + "/state",
                  {"--cpu-slots=1", "--http-max-connections-per-address=100000",
                   "--tokens-file=" + Tokens(dir)});
  d.SetNofile(256);
  ASSERT_TRUE(d.Start()) << d.Log();
  // The HTTP side starts after the gRPC listener Start waits for.
  const std::string lowered =
      "http: max_connections 512 lowered to 128, half of the 256 descriptors";
  for (int i = 0; i < 100 && d.Log().find(lowered) == std::string::npos; ++i) usleep(50 * 1000);
  EXPECT_NE(d.Log().find(lowered), std::string::npos) << d.Log();
  traind::v1::ServerInfo info;
  auto ctx = Ctx();
  ASSERT_TRUE(d.stub()->GetServerInfo(ctx.get(), {}, &info).ok());
  int port = 0;
  ASSERT_TRUE(absl::SimpleAtoi(info.http_url().substr(info.http_url().rfind(':') + 1), &port));
  const int base = OpenDescriptors(d.pid());
  std::vector<std::unique_ptr<Raw>> conns;
  for (int i = 0; i < 300; ++i) conns.push_back(std::make_unique<Raw>(port));
  usleep(300 * 1000);
  EXPECT_LE(OpenDescriptors(d.pid()), base + 128 + 4) << "the HTTP side took more than its half";
  absl::StatusOr<Job> job = SubmitJob(d.stub(), IrisExampleSpec(2, 1));
  EXPECT_TRUE(job.ok()) << job.status();
  conns.clear();
  d.Stop();
}

}  // namespace
}  // namespace traind::testing
