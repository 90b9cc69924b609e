// HttpTransport: the HTTP/1.1 server under traind's side door, on
// Boost.Beast and Asio, built for traffic that may be hostile. Routes know
// nothing of it (HttpHandler); it knows nothing of traind's API.
//
// What a client can make it spend is bounded (docs/operations.md lists the
// limits, docs/architecture.md the design):
// - Connections: at most `max_connections` in all (never more than half
//   the process's descriptors, so the gRPC listeners, the store and the
//   workers keep theirs) and `max_connections_per_address`. A connection
//   past a cap takes the place of the one that has waited longest for its
//   next request (idle, or a request still arriving: what a slow or idle
//   client holds), else it is closed at once. So a flood of slow clients
//   cannot keep /healthz from being answered. Accepting never waits; the
//   kernel's backlog is the only queue.
// - Requests: the request line and header fields within `max_header_bytes`
//   and `max_header_fields`, all of it (TLS handshake included) within
//   `request_timeout` of the connection becoming idle: a per-request
//   deadline, not a per-read one. Beyond: 431, 408, or the connection
//   closed.
// - Bodies: read only for routes that take one (HttpHandler::TakesBody),
//   after the header is complete; bounded by the bytes actually read
//   (chunked bodies included) to `max_body_bytes`; never decoded: a
//   Content-Encoding other than identity is 415. A body sent to any other
//   route is never read: the request is answered and the connection
//   closed.
// - Responses: written within `write_timeout` per write, else the
//   connection is closed. Range requests are not served (RFC 9110 lets a
//   server ignore Range: the whole body, 200); bodies are compressed with
//   gzip when the client accepts it, never with anything slower.
// - Threads: `network_threads` run every socket (a slow client holds no
//   thread). A route runs on the network thread that read it while all but
//   one of them are free (a hop to another thread costs more than most
//   routes), else on `handler_threads`; so one network thread is always
//   free for sockets, and the routes HttpHandler::Inline names (health,
//   static files) answer however busy the others are.
//
// Thread-safety: Start and Stop from one thread.
#ifndef TRAIND_SERVER_HTTP_HTTP_TRANSPORT_H_
#define TRAIND_SERVER_HTTP_HTTP_TRANSPORT_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "server/config.h"
#include "server/http/http_message.h"

namespace traind::server {

struct HttpLimits {
  int max_connections = 512;
  int max_connections_per_address = 128;
  size_t max_header_bytes = 16 << 10;
  int max_header_fields = 64;
  size_t max_body_bytes = 16 << 10;
  absl::Duration request_timeout = absl::Seconds(10);
  absl::Duration write_timeout = absl::Seconds(10);
  // An idle event stream sends a comment this often, so that proxies keep
  // it open and a client that left is noticed.
  absl::Duration keepalive = absl::Seconds(15);
  int network_threads = 3;
  int handler_threads = 4;
};

class HttpHandler {
 public:
  virtual ~HttpHandler() = default;
  // Whether the route of `request` (its header only) reads a body.
  virtual bool TakesBody(const HttpRequest& request) = 0;
  // Whether `request` is answered on a network thread (cheap, never
  // blocks): health checks and the like.
  virtual bool Inline(const HttpRequest& request) = 0;
  // Answers `request`. On a handler thread unless Inline.
  virtual void Handle(const HttpRequest& request, HttpResponse* response) = 0;
};

// Counts for the metrics (traind_http_*).
struct HttpTransportStats {
  int64_t connections_open = 0;
  int64_t connections_accepted = 0;
  int64_t connections_evicted = 0;          // a waiting connection made room
  int64_t connections_refused_total = 0;    // over max_connections, none to evict
  int64_t connections_refused_address = 0;  // over the per-address cap, none to evict
  int64_t requests = 0;
  int64_t requests_refused = 0;  // 408, 413, 415, 431
  int max_connections = 0;       // in force (after the descriptor cap)
};

class HttpTransport final {
 public:
  // `handler` must outlive the transport.
  HttpTransport(HttpLimits limits, TlsConfig tls, HttpHandler* handler);
  ~HttpTransport();
  HttpTransport(const HttpTransport&) = delete;
  HttpTransport& operator=(const HttpTransport&) = delete;

  // Binds HOST:PORT (port 0: any) and starts serving; returns the port. An
  // error names the address, or the TLS setting and file that is wrong.
  absl::StatusOr<int> Start(const std::string& host, int port) {
    absl::StatusOr<int> bound = Bind(host, port);
    if (bound.ok()) Serve();
    return bound;
  }
  // Start in two steps: Bind (the port is taken and listened on; nothing
  // is accepted yet), then Serve.
  absl::StatusOr<int> Bind(const std::string& host, int port);
  void Serve();
  // Closes every connection (open streams end) and returns once no route
  // runs.
  void Stop();

  HttpTransportStats stats() const;
  const HttpLimits& limits() const;

  struct Impl;  // http_transport.cc

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace traind::server

#endif  // TRAIND_SERVER_HTTP_HTTP_TRANSPORT_H_
