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
// Served by HttpTransport (http_transport.h: Boost.Beast, every limit a
// hostile client meets); the routes here run on its handler threads, so
// store reads (event streams included) never run on a gRPC or scheduler
// thread. Event streams are capped per caller and in all.
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
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/config.h"
#include "server/core/auth.h"
#include "server/core/read_api.h"
#include "server/core/sessions.h"
#include "server/datasets/dataset_catalog.h"
#include "server/http/http_message.h"
#include "server/http/http_transport.h"
#include "server/metrics/server_metrics.h"

namespace traind::server {

struct HttpOptions {
  // HOST:PORT (port 0: the kernel chooses).
  std::string listen;
  TlsConfig tls;
  HttpLimits limits;
  // Event streams open at once per caller (token name, or the session's);
  // in all, half of `limits.max_connections`, so that streams never hold
  // every connection.
  int max_streams_per_caller = 32;
};

class SseStream;

// What a request's (decoded) path names; `arg` gets its variable part (a
// job id, a dataset reference, an asset's name).
enum class HttpRoute {
  kNone,
  kHealth,
  kReady,
  kMetrics,
  kInfo,
  kDevices,
  kJobs,
  kJob,
  kResult,
  kEvents,
  kArtifacts,  // /api/v1/jobs/ID/artifacts: the list
  kArtifact,   // /api/v1/jobs/ID/artifact?name=NAME: one file's bytes
  kDatasets,
  kDataset,
  kSession,
  kLogout,
  kLogin,
  kIndex,
  kAsset,
};
HttpRoute MatchRoute(const std::string& path, std::string* arg);

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

class HttpServer final : public HttpHandler {
 public:
  // Everything given must outlive the server. `ready` answers /readyz: OK,
  // or why traind takes no new work now (the body of the 503).
  HttpServer(HttpOptions options, ReadApi* reads, std::shared_ptr<const Authenticator> auth,
             SessionStore* sessions, ServerMetrics* metrics, std::function<absl::Status()> ready);
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;
  ~HttpServer() override;

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

  // HttpHandler (the transport's; tests may call Handle directly).
  bool TakesBody(const HttpRequest& req) override;
  bool Inline(const HttpRequest& req) override;
  void Handle(const HttpRequest& req, HttpResponse* res) override;

 private:
  void Get(const HttpRequest& req, HttpRoute route, const std::string& arg, HttpResponse* res);
  void Post(const HttpRequest& req, HttpRoute route, HttpResponse* res);
  // The caller of `req` if it may call `rpc` (a bearer token, else the
  // session cookie); else writes the error to `res`.
  std::optional<Caller> Authorize(const HttpRequest& req, HttpResponse* res, Rpc rpc);
  void Events(const HttpRequest& req, const Caller& caller, const std::string& job_id,
              HttpResponse* res);
  std::string Cookie(const std::string& value, absl::Duration age) const;
  // traind_http_* for the scrape.
  void Collect(std::vector<prometheus::MetricFamily>* out);

  const HttpOptions options_;
  ReadApi* const reads_;
  const std::shared_ptr<const Authenticator> auth_;
  SessionStore* const sessions_;
  DatasetCatalog* datasets_ = nullptr;
  ServerMetrics* const metrics_;
  const std::function<absl::Status()> ready_;
  // What the metrics' collector reads (it outlives this server).
  struct StatsSource {
    absl::Mutex mu;
    HttpServer* server ABSL_GUARDED_BY(mu) = nullptr;
  };
  const std::shared_ptr<StatsSource> stats_ = std::make_shared<StatsSource>();
  bool collector_added_ = false;
  std::unique_ptr<HttpTransport> transport_;
  std::atomic<bool> stopping_{false};
  absl::Mutex streams_mu_;
  int streams_open_ ABSL_GUARDED_BY(streams_mu_) = 0;
  std::map<std::string, int> streams_per_caller_ ABSL_GUARDED_BY(streams_mu_);
  int64_t streams_refused_ ABSL_GUARDED_BY(streams_mu_) = 0;
  // The dashboard's files compressed once, by name.
  std::map<std::string, std::shared_ptr<const std::string>> gzip_assets_;
  JsonCache finished_json_;
  JsonCache event_json_;
};

}  // namespace traind::server

#endif  // TRAIND_SERVER_HTTP_HTTP_SERVER_H_
