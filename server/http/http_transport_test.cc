// HttpTransport in-process, over loopback: properties of the URL decoding,
// and a fuzz of the request parser (thousands of mutated and random
// requests: each is answered with a well-formed status line or closed,
// nothing crashes, and the server still answers afterwards).
#include "server/http/http_transport.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "server/http/http_message.h"

namespace traind::server {
namespace {

// Answers every request with what it saw, so the fuzz can check that what
// reaches a route is what the client sent.
class EchoHandler final : public HttpHandler {
 public:
  bool TakesBody(const HttpRequest& req) override { return req.method == "POST"; }
  bool Inline(const HttpRequest& req) override { return req.path == "/inline"; }
  void Handle(const HttpRequest& req, HttpResponse* res) override {
    handled.fetch_add(1);
    res->status = 200;
    res->content_type = "text/plain";
    res->body = absl::StrCat(req.method, " ", req.path, " ", req.body.size());
  }
  std::atomic<int> handled{0};
};

// Sends `request` on a fresh connection; what came back before traind
// closed it or `seconds` passed.
std::string Exchange(int port, const std::string& request, double seconds = 2) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a = {};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
  std::string got;
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0) {
    (void)send(fd, request.data(), request.size(), MSG_NOSIGNAL);
    shutdown(fd, SHUT_WR);
    const auto start = std::chrono::steady_clock::now();
    for (;;) {
      const double left =
          seconds - std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      pollfd p = {fd, POLLIN, 0};
      if (left <= 0 || poll(&p, 1, static_cast<int>(left * 1000) + 1) <= 0) break;
      char buf[8192];
      const ssize_t n = recv(fd, buf, sizeof(buf), 0);
      if (n <= 0) break;
      got.append(buf, static_cast<size_t>(n));
    }
  }
  close(fd);
  return got;
}

TEST(PercentDecodeTest, DecodesWhatWasEncodedAndRefusesBadEscapes) {
  std::mt19937 rng(7);
  for (int i = 0; i < 2000; ++i) {
    std::string raw(rng() % 40, '\0');
    for (char& c : raw) c = static_cast<char>(rng() % 256);
    std::string encoded;
    for (unsigned char c : raw) absl::StrAppend(&encoded, "%", absl::Hex(c, absl::kZeroPad2));
    absl::StatusOr<std::string> back = PercentDecode(encoded, false);
    ASSERT_TRUE(back.ok());
    EXPECT_EQ(*back, raw);
  }
  EXPECT_EQ(*PercentDecode("a+b%20c", true), "a b c");
  EXPECT_EQ(*PercentDecode("a+b", false), "a+b");
  for (const char* bad : {"%", "%2", "%zz", "a%g1", "%%"}) {
    EXPECT_FALSE(PercentDecode(bad, false).ok()) << bad;
  }
  std::string path;
  std::multimap<std::string, std::string> query;
  ASSERT_TRUE(ParseTarget("/a%2Fb?x=1&y=%41+B&x=2&flag", &path, &query).ok());
  EXPECT_EQ(path, "/a/b");
  EXPECT_EQ(query.count("x"), 2u);
  EXPECT_EQ(query.find("y")->second, "A B");
  EXPECT_EQ(query.find("flag")->second, "");
  EXPECT_TRUE(AcceptsGzip("br, gzip;q=0.5"));
  EXPECT_FALSE(AcceptsGzip("gzip;q=0, br"));
  EXPECT_FALSE(AcceptsGzip("identity"));
}

TEST(HttpTransportFuzzTest, MutatedRequestsAreAnsweredOrClosedAndTheServerLives) {
  EchoHandler handler;
  HttpLimits limits;
  limits.request_timeout = absl::Milliseconds(500);
  limits.max_connections_per_address = 1000;
  HttpTransport transport(limits, TlsConfig(), &handler);
  absl::StatusOr<int> port = transport.Start("127.0.0.1", 0);
  ASSERT_TRUE(port.ok()) << port.status();

  const std::vector<std::string> seeds = {
      "GET /a/b?x=1 HTTP/1.1\r\nHost: t\r\nAccept-Encoding: gzip\r\n\r\n",
      "POST /p HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n\r\nhello",
      "POST /p HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
      "GET /inline HTTP/1.0\r\n\r\n",
      "HEAD / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
  };
  std::mt19937 rng(20261207);
  int answered = 0;
  for (int i = 0; i < 1500; ++i) {
    std::string req = seeds[rng() % seeds.size()];
    const int kind = static_cast<int>(rng() % 5);
    const int edits = 1 + static_cast<int>(rng() % 8);
    for (int e = 0; e < edits && kind < 4; ++e) {
      const size_t at = rng() % (req.size() + 1);
      switch (rng() % 4) {
        case 0:  // flip a byte
          if (at < req.size()) req[at] = static_cast<char>(rng() % 256);
          break;
        case 1:  // insert bytes
          req.insert(at, std::string(1 + rng() % 4, static_cast<char>(rng() % 256)));
          break;
        case 2:  // delete
          if (at < req.size()) req.erase(at, 1 + rng() % 4);
          break;
        case 3:  // duplicate a piece (repeated headers, chunks)
          req.insert(at, req.substr(rng() % req.size(), rng() % 40));
          break;
      }
    }
    if (kind == 4) {  // pure noise
      req.assign(rng() % 300, '\0');
      for (char& c : req) c = static_cast<char>(rng() % 256);
    }
    const std::string got = Exchange(*port, req, 1.5);
    if (got.empty()) continue;  // closed without a word: allowed
    ASSERT_TRUE(absl::StartsWith(got, "HTTP/1.1 "))
        << "request: " << absl::CEscape(req) << "\nresponse: " << absl::CEscape(got);
    ++answered;
  }
  EXPECT_GT(answered, 300);
  // Still serving, and what reaches the route is what was sent.
  const std::string ok = Exchange(*port, seeds[1]);
  EXPECT_TRUE(absl::StartsWith(ok, "HTTP/1.1 200")) << ok;
  EXPECT_TRUE(absl::EndsWith(ok, "POST /p 5")) << ok;
  const std::string chunked = Exchange(*port, seeds[2]);
  EXPECT_TRUE(absl::EndsWith(chunked, "POST /p 5")) << chunked;
  transport.Stop();
  EXPECT_EQ(transport.stats().connections_open, 0);
}

}  // namespace
}  // namespace traind::server
