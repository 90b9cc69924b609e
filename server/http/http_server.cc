#include "server/http/http_server.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "base/log.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "server/core/event_feed.h"
#include "server/http/json.h"
#include "server/http/web_assets.h"
#include "server/scheduler/state_transitions.h"
#include "server/store/job_files.h"

namespace traind::server {
namespace {

constexpr char kCookie[] = "traind_session";
constexpr char kJson[] = "application/json";

void Reply(HttpResponse* res, int status, std::string body, const char* type = kJson) {
  res->status = status;
  res->headers.emplace_back("Cache-Control", "no-store");
  res->content_type = type;
  res->body = std::move(body);
}

void ReplyError(HttpResponse* res, const absl::Status& status) {
  if (status.code() == absl::StatusCode::kUnauthenticated) {
    res->headers.emplace_back("WWW-Authenticate", "Bearer realm=\"traind\"");
  }
  Reply(res, HttpStatus(status.code()), ErrorJson(status));
}

template <typename T>
void ReplyWith(HttpResponse* res, const absl::StatusOr<T>& result) {
  if (!result.ok()) return ReplyError(res, result.status());
  Reply(res, 200, ToJson(*result));
}

// The gRPC-style peer of an HTTP caller, for the Authenticator: never a
// unix socket, so a token is always required.
std::string Peer(const HttpRequest& req) {
  if (absl::StrContains(req.remote_address, ':')) {
    return absl::StrCat("ipv6:[", req.remote_address, "]:", req.remote_port);
  }
  return absl::StrCat("ipv4:", req.remote_address, ":", req.remote_port);
}

std::string SessionCookie(const HttpRequest& req) {
  for (const std::string& header : req.Headers("cookie")) {
    for (absl::string_view part : absl::StrSplit(header, ';')) {
      part = absl::StripAsciiWhitespace(part);
      if (absl::ConsumePrefix(&part, kCookie) && absl::ConsumePrefix(&part, "=")) {
        return std::string(part);
      }
    }
  }
  return std::string();
}

std::string CallerJson(const Caller& c) {
  google::protobuf::Struct s;
  (*s.mutable_fields())["name"].set_string_value(c.name);
  (*s.mutable_fields())["role"].set_string_value(RoleName(c.role));
  return ToJson(s);
}

// Splits "HOST:PORT" / "[V6]:PORT".
absl::Status SplitHostPort(const std::string& address, std::string* host, int* port) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos || !absl::SimpleAtoi(address.substr(colon + 1), port) ||
      *port < 0 || *port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("http_listen: \"", address, "\" is not HOST:PORT"));
  }
  *host = address.substr(0, colon);
  if (absl::StartsWith(*host, "[") && absl::EndsWith(*host, "]")) {
    *host = host->substr(1, host->size() - 2);
  }
  if (host->empty()) *host = "0.0.0.0";
  return absl::OkStatus();
}

}  // namespace

HttpRoute MatchRoute(const std::string& path, std::string* arg) {
  static const auto* const kFixed =
      new std::map<std::string, HttpRoute>{{"/healthz", HttpRoute::kHealth},
                                           {"/readyz", HttpRoute::kReady},
                                           {"/metrics", HttpRoute::kMetrics},
                                           {"/api/v1/info", HttpRoute::kInfo},
                                           {"/api/v1/devices", HttpRoute::kDevices},
                                           {"/api/v1/jobs", HttpRoute::kJobs},
                                           {"/api/v1/datasets", HttpRoute::kDatasets},
                                           {"/api/v1/session", HttpRoute::kSession},
                                           {"/api/v1/session/logout", HttpRoute::kLogout},
                                           {"/login", HttpRoute::kLogin},
                                           {"/", HttpRoute::kIndex}};
  std::string ignored;
  if (arg == nullptr) arg = &ignored;
  auto it = kFixed->find(path);
  if (it != kFixed->end()) return it->second;
  const std::vector<absl::string_view> parts = absl::StrSplit(path, '/');
  // "", "assets", NAME
  if (parts.size() == 3 && parts[0].empty() && parts[1] == "assets" && !parts[2].empty()) {
    *arg = std::string(parts[2]);
    return HttpRoute::kAsset;
  }
  // "", "api", "v1", "jobs" | "datasets", ID [, "result" | "events"]
  if (parts.size() < 5 || parts.size() > 6 || !parts[0].empty() || parts[1] != "api" ||
      parts[2] != "v1" || parts[4].empty()) {
    return HttpRoute::kNone;
  }
  *arg = std::string(parts[4]);
  if (parts.size() == 5 && parts[3] == "jobs") return HttpRoute::kJob;
  if (parts.size() == 5 && parts[3] == "datasets") return HttpRoute::kDataset;
  if (parts.size() == 6 && parts[3] == "jobs" && parts[5] == "result") return HttpRoute::kResult;
  if (parts.size() == 6 && parts[3] == "jobs" && parts[5] == "events") return HttpRoute::kEvents;
  if (parts.size() == 6 && parts[3] == "jobs" && parts[5] == "artifacts") {
    return HttpRoute::kArtifacts;
  }
  if (parts.size() == 6 && parts[3] == "jobs" && parts[5] == "artifact")
    return HttpRoute::kArtifact;
  return HttpRoute::kNone;
}

std::optional<std::string> JsonCache::Find(const std::string& key) {
  absl::MutexLock lock(&mu_);
  auto it = entries_.find(key);
  if (it == entries_.end()) return std::nullopt;
  return it->second;
}

void JsonCache::Add(const std::string& key, std::string json) {
  absl::MutexLock lock(&mu_);
  if (!entries_.emplace(key, std::move(json)).second) return;
  order_.push_back(key);
  while (order_.size() > kEntries) {
    entries_.erase(order_.front());
    order_.pop_front();
  }
}

void JsonCache::Erase(const std::string& key) {
  absl::MutexLock lock(&mu_);
  entries_.erase(key);  // its place in order_ ages out with the others
}

// One server-sent event stream: a job's EventFeed (core/event_feed.h)
// written to one HTTP connection. Live events come from the EventHub (the
// feed only enqueues and wakes the transport); store reads run in Next, on
// a handler thread.
class SseStream final : public EventSubscriber, public HttpEventSource {
 public:
  SseStream(Scheduler* scheduler, ServerMetrics* metrics, JsonCache* json, std::string job_id,
            int64_t after, bool finished)
      : scheduler_(scheduler),
        metrics_(metrics),
        json_(json),
        job_id_(std::move(job_id)),
        feed_(after),
        finished_(finished) {
    if (metrics_ != nullptr) metrics_->StreamOpened(ServerMetrics::Stream::kSse);
  }
  ~SseStream() override {
    bool subscribed;
    {
      absl::MutexLock lock(&mu_);
      subscribed = wake_ != nullptr;
    }
    if (subscribed) scheduler_->hub()->Unsubscribe(job_id_, this);
    if (metrics_ != nullptr) metrics_->StreamClosed(ServerMetrics::Stream::kSse);
  }

  void Start(std::function<void()> wake) override {
    {
      absl::MutexLock lock(&mu_);
      wake_ = std::move(wake);
    }
    scheduler_->hub()->Subscribe(job_id_, this);
  }

  void OnEvent(const SharedEvent& event) override {
    std::function<void()> wake;
    {
      absl::MutexLock lock(&mu_);
      if (feed_.OnLive(event)) wake = wake_;
    }
    if (wake) wake();
  }

  void OnJobRemoved() override {
    std::function<void()> wake;
    {
      absl::MutexLock lock(&mu_);
      removed_ = true;
      wake = wake_;
    }
    if (wake) wake();
  }

  std::string Next(bool* done) override {
    std::vector<SharedEvent> out;
    bool read_store = false;
    int64_t after = 0;
    bool check = false;
    {
      absl::MutexLock lock(&mu_);
      check = !checked_;
      checked_ = true;
    }
    if (check) {
      // Once subscribed: a job deleted between the request's check and the
      // subscription would otherwise never be noticed.
      int64_t last = 0;
      bool terminal = false;
      if (scheduler_->JobEventsState(job_id_, &last, &terminal).code() ==
          absl::StatusCode::kNotFound) {
        absl::MutexLock lock(&mu_);
        removed_ = true;
      }
    }
    {
      absl::MutexLock lock(&mu_);
      if (removed_ && !finished_) {
        // The job was deleted while it was watched: a last `error` event
        // (the gRPC watch ends with NOT_FOUND), then the end.
        finished_ = true;
        *done = true;
        return absl::StrCat("event: error\ndata: ",
                            ErrorJson(absl::NotFoundError(absl::StrCat(
                                "job ", job_id_, " was deleted while it was watched"))),
                            "\n\n");
      }
      if (finished_) {
        *done = true;
        return std::string();
      }
      switch (feed_.next()) {
        case EventFeed::Next::kReadStore:
          read_store = true;
          after = feed_.BeginRead();
          break;
        case EventFeed::Next::kSend:
          out = feed_.Take(EventFeed::kMaxBuffered);
          break;
        case EventFeed::Next::kWait:
          return std::string();
      }
    }
    if (read_store) {
      absl::StatusOr<std::vector<traind::v1::JobEvent>> events =
          scheduler_->store_as_is()->ReadEvents(job_id_, after, EventFeed::kStoreBatch);
      absl::MutexLock lock(&mu_);
      if (!events.ok()) {
        feed_.AbortRead();
        LogError("event stream job=%s: cannot read events: %s", job_id_, events.status().message());
        *done = true;
        return std::string();
      }
      feed_.EndRead(*std::move(events));
      if (feed_.next() == EventFeed::Next::kSend) out = feed_.Take(EventFeed::kStoreBatch);
    }
    std::string text;
    for (const SharedEvent& e : out) {
      // Every stream of the job sends this event: rendered once.
      const std::string key = absl::StrCat(job_id_, "/", e->sequence());
      std::optional<std::string> data = json_->Find(key);
      if (!data.has_value()) {
        data = ToJson(e->event());
        json_->Add(key, *data);
      }
      absl::StrAppend(&text, "id: ", e->sequence(), "\nevent: job\ndata: ", *data, "\n\n");
    }
    absl::MutexLock lock(&mu_);
    if (feed_.ended()) {
      finished_ = true;
      *done = true;
    } else if (text.empty() && feed_.next() != EventFeed::Next::kWait) {
      // More in the store (a read that found nothing new yet, or a batch
      // boundary): the transport asks again at once.
      text = std::string();
      if (wake_) wake_();
    }
    return text;
  }

 private:
  Scheduler* const scheduler_;
  ServerMetrics* const metrics_;
  JsonCache* const json_;
  const std::string job_id_;
  absl::Mutex mu_;
  EventFeed feed_ ABSL_GUARDED_BY(mu_);
  bool finished_ ABSL_GUARDED_BY(mu_) = false;  // the last event was handed out
  bool checked_ ABSL_GUARDED_BY(mu_) = false;   // the job's existence, once subscribed
  bool removed_ ABSL_GUARDED_BY(mu_) = false;   // the job was deleted
  std::function<void()> wake_ ABSL_GUARDED_BY(mu_);
};

HttpServer::HttpServer(HttpOptions options, ReadApi* reads,
                       std::shared_ptr<const Authenticator> auth, SessionStore* sessions,
                       ServerMetrics* metrics, std::function<absl::Status()> ready)
    : options_(std::move(options)),
      reads_(reads),
      auth_(std::move(auth)),
      sessions_(sessions),
      metrics_(metrics),
      ready_(std::move(ready)) {}

HttpServer::~HttpServer() { Stop(); }

void HttpServer::ForgetJob(const std::string& job_id) {
  finished_json_.Erase("job/" + job_id);
  finished_json_.Erase("result/" + job_id);
}

absl::StatusOr<std::string> HttpServer::Start() {
  std::string host;
  int port = 0;
  if (absl::Status s = SplitHostPort(options_.listen, &host, &port); !s.ok()) return s;
  // The page's files are compressed once, before any request can ask for
  // them (routes read gzip_assets_ without a lock), but after the port is
  // bound: an address in use fails start-up at once.
  transport_ = std::make_unique<HttpTransport>(options_.limits, options_.tls, this);
  absl::StatusOr<int> bound = transport_->Bind(host, port);
  if (!bound.ok()) {
    transport_.reset();
    return bound.status();
  }
  size_t count = 0;
  const WebAsset* assets = WebAssets(&count);
  for (size_t i = 0; i < count; ++i) {
    gzip_assets_[assets[i].name] = std::make_shared<const std::string>(
        Gzip(absl::string_view(assets[i].data, assets[i].size)));
  }
  transport_->Serve();
  if (metrics_ != nullptr) {
    // The collector outlives this server (ServerMetrics keeps it): it reads
    // through `stats_`, which Stop clears.
    std::shared_ptr<StatsSource> stats = stats_;
    {
      absl::MutexLock lock(&stats->mu);
      stats->server = this;
    }
    if (!collector_added_) {
      metrics_->AddCollector([stats](std::vector<prometheus::MetricFamily>* out) {
        absl::MutexLock lock(&stats->mu);
        if (stats->server != nullptr) stats->server->Collect(out);
      });
      collector_added_ = true;
    }
  }
  std::string url_host = host;
  if (host == "0.0.0.0" || host == "::") {
    char name[256] = {0};
    url_host = gethostname(name, sizeof(name) - 1) == 0 && name[0] ? name : "localhost";
  } else if (absl::StrContains(host, ':')) {
    url_host = absl::StrCat("[", host, "]");
  }
  return absl::StrCat(options_.tls.enabled() ? "https://" : "http://", url_host, ":", *bound);
}

void HttpServer::Stop() {
  {
    absl::MutexLock lock(&stats_->mu);
    stats_->server = nullptr;
  }
  if (!transport_) return;
  stopping_ = true;
  transport_->Stop();
  transport_.reset();  // every stream is gone with it
}

void HttpServer::Collect(std::vector<prometheus::MetricFamily>* out) {
  if (!transport_) return;
  const HttpTransportStats s = transport_->stats();
  auto family = [out](const char* name, const char* help, prometheus::MetricType type) {
    out->emplace_back();
    out->back().name = name;
    out->back().help = help;
    out->back().type = type;
    return &out->back();
  };
  auto add = [](prometheus::MetricFamily* f, std::vector<prometheus::ClientMetric::Label> labels,
                double v) {
    prometheus::ClientMetric m;
    m.label = std::move(labels);
    if (f->type == prometheus::MetricType::Counter) {
      m.counter.value = v;
    } else {
      m.gauge.value = v;
    }
    f->metric.push_back(std::move(m));
  };
  add(family("traind_http_connections", "HTTP connections open.", prometheus::MetricType::Gauge),
      {}, static_cast<double>(s.connections_open));
  add(family("traind_http_max_connections",
             "HTTP connections allowed at once (after the descriptor cap).",
             prometheus::MetricType::Gauge),
      {}, s.max_connections);
  prometheus::MetricFamily* closed =
      family("traind_http_connections_shed_total",
             "HTTP connections closed to stay within the connection caps: a waiting one "
             "displaced, or a new one refused (limit: total or per_address).",
             prometheus::MetricType::Counter);
  add(closed, {{"reason", "displaced"}}, static_cast<double>(s.connections_evicted));
  add(closed, {{"reason", "refused_total"}}, static_cast<double>(s.connections_refused_total));
  add(closed, {{"reason", "refused_per_address"}},
      static_cast<double>(s.connections_refused_address));
  int64_t streams_refused;
  {
    absl::MutexLock lock(&streams_mu_);
    streams_refused = streams_refused_;
  }
  prometheus::MetricFamily* refused = family(
      "traind_http_requests_refused_total",
      "HTTP requests refused for a limit: the request itself (header or body size, encoding) or "
      "the event streams cap.",
      prometheus::MetricType::Counter);
  add(refused, {{"limit", "request"}}, static_cast<double>(s.requests_refused));
  add(refused, {{"limit", "streams"}}, static_cast<double>(streams_refused));
}

std::optional<Caller> HttpServer::Authorize(const HttpRequest& req, HttpResponse* res, Rpc rpc) {
  if (req.HasHeader("authorization")) {
    absl::StatusOr<Caller> c = auth_->Authorize(Peer(req), req.Header("authorization"), rpc);
    if (!c.ok()) {
      ReplyError(res, c.status());
      return std::nullopt;
    }
    return *c;
  }
  const std::string cookie = SessionCookie(req);
  std::optional<Caller> c =
      sessions_ != nullptr && !cookie.empty() ? sessions_->Lookup(cookie) : std::optional<Caller>();
  if (!c.has_value()) {
    ReplyError(res, absl::UnauthenticatedError(
                        cookie.empty() ? "send \"Authorization: Bearer <token>\", or log in to the "
                                         "dashboard (`trainctl dashboard` prints a login link)"
                                       : "the session has expired: log in again"));
    return std::nullopt;
  }
  if (c->role < RequiredRole(rpc)) {
    ReplyError(res, absl::PermissionDeniedError(absl::StrCat(c->name, " (", RoleName(c->role),
                                                             ") may not call ", RpcName(rpc))));
    return std::nullopt;
  }
  return c;
}

std::string HttpServer::Cookie(const std::string& value, absl::Duration age) const {
  return absl::StrCat(kCookie, "=", value,
                      "; Path=/; HttpOnly; SameSite=Strict; Max-Age=", absl::ToInt64Seconds(age),
                      options_.tls.enabled() ? "; Secure" : "");
}

bool HttpServer::TakesBody(const HttpRequest& req) {
  return req.method == "POST" && req.path == "/api/v1/session";
}

bool HttpServer::Inline(const HttpRequest& req) {
  const HttpRoute r = MatchRoute(req.path, nullptr);
  return r == HttpRoute::kHealth || r == HttpRoute::kReady || r == HttpRoute::kIndex ||
         r == HttpRoute::kAsset;
}

void HttpServer::Handle(const HttpRequest& req, HttpResponse* res) {
  std::string arg;
  const HttpRoute route = MatchRoute(req.path, &arg);
  if (route == HttpRoute::kNone) {
    return Reply(res, 404,
                 ErrorJson(absl::NotFoundError(absl::StrCat("no such path: ", req.path))));
  }
  const bool post_route = route == HttpRoute::kSession || route == HttpRoute::kLogout;
  const bool get_route = route != HttpRoute::kLogout;
  const char* allow = route == HttpRoute::kSession  ? "GET, HEAD, POST, OPTIONS"
                      : route == HttpRoute::kLogout ? "POST, OPTIONS"
                                                    : "GET, HEAD, OPTIONS";
  if (req.method == "POST" && post_route) return Post(req, route, res);
  if ((req.method == "GET" || req.method == "HEAD") && get_route) return Get(req, route, arg, res);
  res->headers.emplace_back("Allow", allow);
  if (req.method == "OPTIONS") {
    res->status = 204;
    return;
  }
  Reply(res, 405,
        ErrorJson(absl::InvalidArgumentError(
                      absl::StrCat(req.method, " ", req.path, ": not served here (", allow,
                                   "); the HTTP API is read-only: jobs are changed over gRPC")),
                  405));
}

void HttpServer::Get(const HttpRequest& req, HttpRoute route, const std::string& arg,
                     HttpResponse* res) {
  switch (route) {
    case HttpRoute::kHealth:
      return Reply(res, 200, "ok\n", "text/plain");
    case HttpRoute::kReady: {
      const absl::Status ready = stopping_ ? absl::UnavailableError("stopping") : ready_();
      if (ready.ok()) return Reply(res, 200, "ready\n", "text/plain");
      return Reply(res, 503, absl::StrCat(ready.message(), "\n"), "text/plain");
    }
    case HttpRoute::kIndex:
    case HttpRoute::kAsset: {
      // The page: its shell and assets hold no data (the data needs a
      // session).
      size_t count = 0;
      const WebAsset* assets = WebAssets(&count);
      const std::string name = route == HttpRoute::kIndex ? "index.html" : arg;
      for (size_t i = 0; i < count; ++i) {
        if (name != assets[i].name) continue;
        res->status = 200;
        res->headers = {
            {"Cache-Control", "no-cache"},
            {"X-Content-Type-Options", "nosniff"},
            {"X-Frame-Options", "DENY"},
            {"Content-Security-Policy",
             "default-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
             "frame-ancestors 'none'; base-uri 'none'; form-action 'self'"}};
        res->content_type = assets[i].content_type;
        res->body.assign(assets[i].data, assets[i].size);
        auto gz = gzip_assets_.find(name);
        if (gz != gzip_assets_.end()) res->gzip_body = gz->second;
        return;
      }
      return Reply(res, 404,
                   ErrorJson(absl::NotFoundError(absl::StrCat("no such path: ", req.path))));
    }
    case HttpRoute::kLogin: {
      res->headers.emplace_back("Cache-Control", "no-store");
      res->headers.emplace_back("Referrer-Policy", "no-referrer");
      res->status = 303;
      std::optional<std::string> id = sessions_->RedeemTicket(req.Param("ticket"));
      if (!id.has_value()) {
        res->headers.emplace_back("Location", "/?login=expired");
        return;
      }
      std::optional<Caller> c = sessions_->Lookup(*id);
      LogInfo("dashboard session started for %s (role %s) from %s with a login link",
              c ? c->name : "?", c ? RoleName(c->role) : "?", req.remote_address);
      res->headers.emplace_back("Set-Cookie", Cookie(*id, sessions_->session_ttl()));
      // `trainctl dashboard JOB`: the job's page. Only a job id goes into
      // the Location (never an address: no open redirect).
      const std::string job = req.Param("job");
      const bool job_id =
          !job.empty() && job.size() <= 64 && std::all_of(job.begin(), job.end(), [](char ch) {
            return absl::ascii_isalnum(static_cast<unsigned char>(ch)) || ch == '-' || ch == '_';
          });
      res->headers.emplace_back("Location", job_id ? "/#/jobs/" + job : "/");
      return;
    }
    default:
      break;
  }
  // Everything else needs a caller.
  static const std::map<HttpRoute, Rpc> kRpc = {{HttpRoute::kMetrics, Rpc::kReadMetrics},
                                                {HttpRoute::kInfo, Rpc::kGetServerInfo},
                                                {HttpRoute::kDevices, Rpc::kListDevices},
                                                {HttpRoute::kJobs, Rpc::kListJobs},
                                                {HttpRoute::kJob, Rpc::kGetJob},
                                                {HttpRoute::kResult, Rpc::kGetJobResult},
                                                {HttpRoute::kEvents, Rpc::kWatchJob},
                                                {HttpRoute::kDatasets, Rpc::kListDatasets},
                                                {HttpRoute::kDataset, Rpc::kGetDataset},
                                                {HttpRoute::kSession, Rpc::kGetServerInfo},
                                                {HttpRoute::kArtifacts, Rpc::kListArtifacts},
                                                {HttpRoute::kArtifact, Rpc::kGetArtifact}};
  std::optional<Caller> caller = Authorize(req, res, kRpc.at(route));
  if (!caller) return;
  switch (route) {
    case HttpRoute::kMetrics:
      return Reply(res, 200, metrics_ != nullptr ? metrics_->Scrape() : std::string(),
                   "text/plain; version=0.0.4; charset=utf-8");
    case HttpRoute::kInfo:
      return Reply(res, 200, ToJson(reads_->GetServerInfo()));
    case HttpRoute::kDevices:
      return Reply(res, 200, ToJson(reads_->ListDevices()));
    case HttpRoute::kJobs: {
      absl::StatusOr<traind::v1::ListJobsRequest> list = ListJobsFromQuery(req.query);
      if (!list.ok()) return ReplyError(res, list.status());
      return ReplyWith(res, reads_->ListJobs(*list));
    }
    case HttpRoute::kJob: {
      if (std::optional<std::string> json = finished_json_.Find("job/" + arg)) {
        return Reply(res, 200, *std::move(json));
      }
      absl::StatusOr<traind::v1::Job> job = reads_->GetJob(arg);
      if (!job.ok()) return ReplyError(res, job.status());
      std::string json = ToJson(*job);
      if (IsTerminal(job->state())) finished_json_.Add("job/" + arg, json);
      return Reply(res, 200, std::move(json));
    }
    case HttpRoute::kResult: {
      if (std::optional<std::string> json = finished_json_.Find("result/" + arg)) {
        return Reply(res, 200, *std::move(json));
      }
      absl::StatusOr<traind::v1::JobResult> result = reads_->GetJobResult(arg);
      if (!result.ok()) return ReplyError(res, result.status());
      std::string json = ToJson(*result);
      if (result->complete()) finished_json_.Add("result/" + arg, json);
      return Reply(res, 200, std::move(json));
    }
    case HttpRoute::kEvents:
      return Events(req, *caller, arg, res);
    case HttpRoute::kDatasets:
    case HttpRoute::kDataset: {
      // The caller's datasets (an admin's: everyone's, or one owner's).
      if (datasets_ == nullptr) {
        return ReplyError(res, absl::FailedPreconditionError("this traind stores no datasets"));
      }
      if (route == HttpRoute::kDataset) {
        traind::v1::GetDatasetRequest get;
        get.set_ref(arg);
        get.set_owner(req.Param("owner"));
        return ReplyWith(res, datasets_->Get(*caller, get));
      }
      traind::v1::ListDatasetsRequest list;
      list.set_name(req.Param("name"));
      list.set_owner(req.Param("owner"));
      absl::StatusOr<std::vector<traind::v1::Dataset>> found = datasets_->List(*caller, list);
      if (!found.ok()) return ReplyError(res, found.status());
      traind::v1::ListDatasetsResponse out;
      for (traind::v1::Dataset& d : *found) *out.add_datasets() = std::move(d);
      return Reply(res, 200, ToJson(out));
    }
    case HttpRoute::kSession:
      return Reply(res, 200, CallerJson(*caller));
    case HttpRoute::kArtifacts:
    case HttpRoute::kArtifact: {
      absl::StatusOr<traind::v1::Job> job = reads_->GetJob(arg);
      if (!job.ok()) return ReplyError(res, job.status());
      const std::string& state_dir = reads_->description().state_dir;
      if (route == HttpRoute::kArtifacts) {
        absl::StatusOr<std::vector<traind::v1::Artifact>> list = ListArtifacts(state_dir, *job);
        if (!list.ok()) return ReplyError(res, list.status());
        traind::v1::ListArtifactsResponse out;
        for (traind::v1::Artifact& a : *list) *out.add_artifacts() = std::move(a);
        return Reply(res, 200, ToJson(out));
      }
      const std::string name = req.Param("name");
      if (name.empty()) return ReplyError(res, absl::InvalidArgumentError("name: required"));
      // Only what ListArtifacts lists (never a path out of the job).
      absl::StatusOr<ArtifactFile> file = FindArtifact(state_dir, *job, name);
      if (!file.ok()) return ReplyError(res, file.status());
      res->status = 200;
      res->content_type = "application/octet-stream";
      res->headers.emplace_back("Cache-Control", "no-store");
      res->headers.emplace_back("X-Content-Type-Options", "nosniff");
      std::string filename = name.substr(name.rfind('/') + 1);
      for (char& ch : filename) {
        if (!absl::ascii_isalnum(static_cast<unsigned char>(ch)) && ch != '.' && ch != '-') {
          ch = '_';
        }
      }
      res->headers.emplace_back(
          "Content-Disposition",
          absl::StrCat("attachment; filename=\"", job->id(), "-", filename, "\""));
      res->file_path = file->path;
      return;
    }
    default:
      return ReplyError(res, absl::InternalError("unrouted path"));
  }
}

void HttpServer::Post(const HttpRequest& req, HttpRoute route, HttpResponse* res) {
  if (route == HttpRoute::kLogout) {
    const std::string id = SessionCookie(req);
    if (!id.empty()) sessions_->End(id);
    res->headers.emplace_back("Set-Cookie", Cookie("", absl::ZeroDuration()));
    res->status = 204;
    return;
  }
  if (!absl::StartsWith(req.Header("content-type"), kJson)) {
    return Reply(res, 415,
                 ErrorJson(absl::InvalidArgumentError(
                               "send the token as JSON: {\"token\": \"...\"} (Content-Type: "
                               "application/json)"),
                           415));
  }
  google::protobuf::Struct body;
  if (!google::protobuf::util::JsonStringToMessage(req.body, &body).ok() ||
      !body.fields().contains("token") || !body.fields().at("token").has_string_value()) {
    return ReplyError(res, absl::InvalidArgumentError("body: expected {\"token\": \"...\"}"));
  }
  absl::StatusOr<Caller> c =
      auth_->Authorize(Peer(req), absl::StrCat("Bearer ", body.fields().at("token").string_value()),
                       Rpc::kGetServerInfo);
  if (!c.ok()) return ReplyError(res, c.status());
  const std::string id = sessions_->NewSession(*c);
  LogInfo("dashboard session started for %s (role %s) from %s", c->name, RoleName(c->role),
          req.remote_address);
  res->headers.emplace_back("Set-Cookie", Cookie(id, sessions_->session_ttl()));
  Reply(res, 200, CallerJson(*c));
}

void HttpServer::Events(const HttpRequest& req, const Caller& caller, const std::string& job_id,
                        HttpResponse* res) {
  int64_t after = 0;
  std::string text = req.Header("last-event-id");
  const char* source = "Last-Event-ID";
  if (text.empty() && req.query.count("after") > 0) {
    text = req.Param("after");
    source = "after";
  }
  if (!text.empty() && (!absl::SimpleAtoi(text, &after) || after < 0)) {
    return ReplyError(res, absl::InvalidArgumentError(absl::StrCat(
                               source, ": \"", text, "\" is not a non-negative event sequence")));
  }
  int64_t last = 0;
  bool terminal = false;
  if (absl::Status s = reads_->scheduler()->JobEventsState(job_id, &last, &terminal); !s.ok()) {
    return ReplyError(res, s);
  }
  // Past the job's last event: no later event would ever be sent (the
  // stream would outlive the job). Refused, as WatchJob refuses it.
  if (after > last) {
    return ReplyError(res, absl::OutOfRangeError(absl::StrCat(
                               source, ": ", after, " is past the job's last event, ", last)));
  }
  if (stopping_) return ReplyError(res, absl::UnavailableError("traind is stopping"));
  if (req.method == "HEAD") {
    res->status = 200;
    res->content_type = "text/event-stream";
    return;
  }
  // Streams hold connections: capped per caller, and in all to half of the
  // connections (the rest stay for everything else).
  const int total_cap = std::max(1, transport_->stats().max_connections / 2);
  {
    absl::MutexLock lock(&streams_mu_);
    int& mine = streams_per_caller_[caller.name];
    if (mine >= options_.max_streams_per_caller || streams_open_ >= total_cap) {
      const bool own = mine >= options_.max_streams_per_caller;
      if (mine == 0) streams_per_caller_.erase(caller.name);
      ++streams_refused_;
      return ReplyError(
          res, absl::ResourceExhaustedError(
                   own ? absl::StrCat(caller.name, " has ", options_.max_streams_per_caller,
                                      " event streams open, the most one caller may "
                                      "(http_max_streams_per_token): close one first")
                       : absl::StrCat(total_cap,
                                      " event streams are open, the most traind serves at once "
                                      "(half of http_max_connections)")));
    }
    ++mine;
    ++streams_open_;
  }
  auto stream = std::make_shared<SseStream>(reads_->scheduler(), metrics_, &event_json_, job_id,
                                            after, terminal && after >= last);
  res->status = 200;
  res->content_type = "text/event-stream";
  res->headers = {{"Cache-Control", "no-store"}, {"X-Accel-Buffering", "no"}};
  res->on_stream_end = [this, name = caller.name] {
    absl::MutexLock lock(&streams_mu_);
    --streams_open_;
    if (--streams_per_caller_[name] <= 0) streams_per_caller_.erase(name);
  };
  res->stream = std::move(stream);
}

}  // namespace traind::server
