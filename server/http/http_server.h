// HttpServer: traind's HTTP side door, for dashboards, browsers and shell
// scripts that speak no gRPC. Read-only: no endpoint changes a job.
//
//   GET /healthz, /readyz             liveness / readiness (no token needed)
//   GET /metrics                      Prometheus text exposition
//   GET /api/v1/info                  ServerInfo
//   GET /api/v1/devices               ListDevicesResponse
//   GET /api/v1/jobs?state=&name_contains=&page_size=&page_token=
//                                     ListJobsResponse
//   GET /api/v1/jobs/{id}             Job
//   GET /api/v1/jobs/{id}/result      JobResult
//   GET /api/v1/jobs/{id}/events      server-sent events of the job's
//                                     JobEvents (resumable with
//                                     Last-Event-ID or ?after=), ending
//                                     after the terminal event
//   GET /, /assets/...                the web dashboard
//   GET /login?ticket=T               one-time login link -> session cookie
//   GET|POST /api/v1/session, POST /api/v1/session/logout
//
// JSON is protobuf's canonical mapping of the messages gRPC returns (see
// json.h); both transports answer from the same ReadApi. Security is the
// gRPC TCP port's: a bearer token (viewer is enough) or a browser session
// made from one (sessions.h); TLS with the same certificate settings.
//
// Served by cpp-httplib with a thread per open connection (grown on
// demand up to `max_connections`), so a server-sent event stream holds a
// thread while it is open; it reads the store on that thread, never on a
// gRPC or scheduler thread.
//
// Thread-safety: Start and Stop from one thread; requests on the server's.
#ifndef TRAIND_SERVER_HTTP_HTTP_SERVER_H_
#define TRAIND_SERVER_HTTP_HTTP_SERVER_H_

#include <atomic>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/config.h"
#include "server/core/auth.h"
#include "server/core/read_api.h"
#include "server/core/sessions.h"
#include "server/datasets/dataset_catalog.h"
#include "server/metrics/server_metrics.h"

namespace httplib {
class Server;
struct Request;
struct Response;
}  // namespace httplib

namespace traind::server {

struct HttpOptions {
  // HOST:PORT (port 0: the kernel chooses).
  std::string listen;
  TlsConfig tls;
  // Connections served at once (each open event stream holds one).
  int max_connections = 512;
  // An idle event stream sends a comment this often, so that proxies keep
  // it open and a closed client is noticed.
  absl::Duration keepalive = absl::Seconds(15);
};

class SseStream;

// JSON that never changes, rendered once: finished jobs, complete results,
// stored events (every stream of a job sends the same ones). Rendering
// protobuf JSON costs far more than serving it. FIFO, kEntries at most.
class JsonCache {
 public:
  static constexpr size_t kEntries = 4096;
  std::optional<std::string> Find(const std::string& key);
  void Add(const std::string& key, std::string json);
  void Erase(const std::string& key);

 private:
  absl::Mutex mu_;
  std::map<std::string, std::string> entries_ ABSL_GUARDED_BY(mu_);
  std::deque<std::string> order_ ABSL_GUARDED_BY(mu_);
};

class HttpServer final {
 public:
  // Everything given must outlive the server. `ready` answers /readyz: OK,
  // or why traind takes no new work now (the body of the 503).
  HttpServer(HttpOptions options, ReadApi* reads, std::shared_ptr<const Authenticator> auth,
             SessionStore* sessions, ServerMetrics* metrics, std::function<absl::Status()> ready);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds and starts serving; returns the URL ("http://127.0.0.1:7071",
  // "https://..." with TLS). An error names the address.
  absl::StatusOr<std::string> Start();
  // Ends open event streams and stops; returns once every request ended.
  void Stop();
  // Drops what is cached of a deleted job.
  void ForgetJob(const std::string& job_id);
  // Serves /api/v1/datasets from `datasets` (must outlive the server).
  // Before Start.
  void set_datasets(DatasetCatalog* datasets) { datasets_ = datasets; }

 private:
  struct Auth;
  void Route();
  // The caller of `req` if it may call `rpc` (a bearer token, else the
  // session cookie); else writes the error to `res`.
  std::optional<Caller> Authorize(const httplib::Request& req, httplib::Response& res, Rpc rpc);
  void Events(const httplib::Request& req, httplib::Response& res, const std::string& job_id);

  const HttpOptions options_;
  ReadApi* const reads_;
  const std::shared_ptr<const Authenticator> auth_;
  SessionStore* const sessions_;
  DatasetCatalog* datasets_ = nullptr;
  ServerMetrics* const metrics_;
  const std::function<absl::Status()> ready_;
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  std::atomic<bool> stopping_{false};
  absl::Mutex streams_mu_;
  std::set<SseStream*> streams_ ABSL_GUARDED_BY(streams_mu_);
  JsonCache finished_json_;
  JsonCache event_json_;
};

}  // namespace traind::server

#endif  // TRAIND_SERVER_HTTP_HTTP_SERVER_H_
