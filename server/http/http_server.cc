#include "server/http/http_server.h"

#include <sys/socket.h>
#include <unistd.h>

#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
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
#include "httplib.h"
#include "server/core/event_feed.h"
#include "server/http/json.h"
#include "server/http/web_assets.h"
#include "server/scheduler/state_transitions.h"

namespace traind::server {
namespace {

constexpr char kCookie[] = "traind_session";
constexpr char kJson[] = "application/json";

// cpp-httplib's TaskQueue with a thread per connection, started when no
// thread is idle, up to `max` (then connections wait for a thread). Its
// ThreadPool has a fixed size, which open event streams would use up.
class ElasticTaskQueue final : public httplib::TaskQueue {
 public:
  explicit ElasticTaskQueue(int max) : max_(max) {}
  ~ElasticTaskQueue() override { shutdown(); }

  void enqueue(std::function<void()> fn) override {
    std::lock_guard<std::mutex> lock(mu_);
    jobs_.push_back(std::move(fn));
    if (jobs_.size() > static_cast<size_t>(idle_) && static_cast<int>(threads_.size()) < max_) {
      threads_.emplace_back([this] { Work(); });
    } else {
      cv_.notify_one();
    }
  }

  void shutdown() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      shutdown_ = true;
    }
    cv_.notify_all();
    for (std::thread& t : threads_) {
      if (t.joinable()) t.join();
    }
  }

 private:
  void Work() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      ++idle_;
      cv_.wait(lock, [this] { return shutdown_ || !jobs_.empty(); });
      --idle_;
      if (jobs_.empty()) return;  // shut down, and nothing left
      std::function<void()> fn = std::move(jobs_.front());
      jobs_.pop_front();
      lock.unlock();
      fn();
      lock.lock();
    }
  }

  const int max_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;
  std::vector<std::thread> threads_;
  int idle_ = 0;
  bool shutdown_ = false;
};

void Reply(httplib::Response& res, int status, const std::string& body, const char* type = kJson) {
  res.status = status;
  res.set_header("Cache-Control", "no-store");
  res.set_content(body, type);
}

void ReplyError(httplib::Response& res, const absl::Status& status) {
  if (status.code() == absl::StatusCode::kUnauthenticated) {
    res.set_header("WWW-Authenticate", "Bearer realm=\"traind\"");
  }
  Reply(res, HttpStatus(status.code()), ErrorJson(status));
}

template <typename T>
void ReplyWith(httplib::Response& res, const absl::StatusOr<T>& result) {
  if (!result.ok()) {
    ReplyError(res, result.status());
    return;
  }
  Reply(res, 200, ToJson(*result));
}

// The gRPC-style peer of an HTTP caller, for the Authenticator: never a
// unix socket, so a token is always required.
std::string Peer(const httplib::Request& req) {
  if (absl::StrContains(req.remote_addr, ':')) {
    return absl::StrCat("ipv6:[", req.remote_addr, "]:", req.remote_port);
  }
  return absl::StrCat("ipv4:", req.remote_addr, ":", req.remote_port);
}

std::string SessionCookie(const httplib::Request& req) {
  for (size_t i = 0, n = req.get_header_value_count("Cookie"); i < n; ++i) {
    for (absl::string_view part : absl::StrSplit(req.get_header_value("Cookie", i), ';')) {
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
// feed only enqueues); store reads run on the stream's own connection
// thread.
class SseStream final : public EventSubscriber {
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
    scheduler_->hub()->Subscribe(job_id_, this);
  }
  ~SseStream() override {
    scheduler_->hub()->Unsubscribe(job_id_, this);
    if (metrics_ != nullptr) metrics_->StreamClosed(ServerMetrics::Stream::kSse);
  }

  void OnEvent(const traind::v1::JobEvent& event) override {
    absl::MutexLock lock(&mu_);
    feed_.OnLive(event);  // Pump's wait wakes on the feed's next()
  }

  void Stop() {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }

  // cpp-httplib's content provider: writes what there is (waiting up to
  // `keepalive` for it, else a comment line). False ends the connection.
  bool Pump(httplib::DataSink& sink, absl::Duration keepalive) {
    std::vector<traind::v1::JobEvent> out;
    bool read_store = false;
    int64_t after = 0;
    {
      absl::MutexLock lock(&mu_);
      if (finished_) {
        sink.done();
        return true;
      }
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stop_ || feed_.next() != EventFeed::Next::kWait;
      };
      mu_.AwaitWithTimeout(absl::Condition(&ready), keepalive);
      if (stop_) return false;
      switch (feed_.next()) {
        case EventFeed::Next::kReadStore:
          read_store = true;
          after = feed_.BeginRead();
          break;
        case EventFeed::Next::kSend:
          out = feed_.Take(EventFeed::kMaxBuffered);
          break;
        case EventFeed::Next::kWait:
          break;
      }
    }
    if (read_store) {
      absl::StatusOr<std::vector<traind::v1::JobEvent>> events =
          scheduler_->store_as_is()->ReadEvents(job_id_, after, EventFeed::kStoreBatch);
      absl::MutexLock lock(&mu_);
      if (!events.ok()) {
        feed_.AbortRead();
        LogError("event stream job=%s: cannot read events: %s", job_id_, events.status().message());
        return false;
      }
      feed_.EndRead(*std::move(events));
      out = feed_.Take(EventFeed::kStoreBatch);
    }
    if (out.empty() && !read_store) {
      static constexpr char kPing[] = ": keepalive\n\n";
      return sink.write(kPing, sizeof(kPing) - 1);
    }
    std::string text;
    for (const traind::v1::JobEvent& e : out) {
      // Every stream of the job sends this event: rendered once.
      const std::string key = absl::StrCat(job_id_, "/", e.sequence());
      std::optional<std::string> data = json_->Find(key);
      if (!data.has_value()) {
        data = ToJson(e);
        json_->Add(key, *data);
      }
      absl::StrAppend(&text, "id: ", e.sequence(), "\nevent: job\ndata: ", *data, "\n\n");
    }
    if (!sink.write(text.data(), text.size())) return false;
    absl::MutexLock lock(&mu_);
    if (feed_.ended()) {
      finished_ = true;
      sink.done();
    }
    return true;
  }

 private:
  Scheduler* const scheduler_;
  ServerMetrics* const metrics_;
  JsonCache* const json_;
  const std::string job_id_;
  absl::Mutex mu_;
  EventFeed feed_ ABSL_GUARDED_BY(mu_);
  bool finished_ ABSL_GUARDED_BY(mu_) = false;  // the last event was written
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
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
  if (options_.tls.enabled()) {
    auto ssl = std::make_unique<httplib::SSLServer>(
        options_.tls.cert.c_str(), options_.tls.key.c_str(),
        options_.tls.client_ca.empty() ? nullptr : options_.tls.client_ca.c_str());
    if (!ssl->is_valid()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "http_listen ", options_.listen, ": cannot load the TLS certificate ", options_.tls.cert,
          " and key ", options_.tls.key,
          options_.tls.client_ca.empty() ? ""
                                         : " (or the client CA " + options_.tls.client_ca + ")"));
    }
    server_ = std::move(ssl);
  } else {
    server_ = std::make_unique<httplib::Server>();
  }
  const int max = std::max(4, options_.max_connections);
  server_->new_task_queue = [max] { return new ElasticTaskQueue(max); };
  server_->set_keep_alive_max_count(1000);
  server_->set_read_timeout(10, 0);
  server_->set_write_timeout(10, 0);
  server_->set_payload_max_length(64 << 10);
  server_->set_tcp_nodelay(true);
  // cpp-httplib sets SO_REUSEPORT by default, which lets a second traind
  // bind the same port and take half of the connections: SO_REUSEADDR only
  // (a restart can bind at once), so a port in use is an error.
  int listen_fd = -1;
  server_->set_socket_options([&listen_fd](int fd) {
    int yes = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    listen_fd = fd;
  });
  Route();
  int bound = port;
  if (port == 0) {
    bound = server_->bind_to_any_port(host);
  } else if (!server_->bind_to_port(host, port)) {
    bound = -1;
  }
  if (bound <= 0) {
    return absl::UnavailableError(absl::StrCat("http_listen ", options_.listen,
                                               ": cannot listen (address in use or invalid)"));
  }
  // cpp-httplib listens with a backlog of 5: a burst of connections (a
  // dashboard's event streams, a load balancer's checks) overflows it and
  // the kernel drops connects, which clients retry only after 1, 3, 7 s.
  // Listening again on the bound socket sets the backlog.
  if (listen_fd >= 0) ::listen(listen_fd, SOMAXCONN);
  server_->set_socket_options([](int fd) {
    int yes = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  thread_ = std::thread([this] { server_->listen_after_bind(); });
  std::string url_host = host;
  if (host == "0.0.0.0" || host == "::") {
    char name[256] = {0};
    url_host = gethostname(name, sizeof(name) - 1) == 0 && name[0] ? name : "localhost";
  } else if (absl::StrContains(host, ':')) {
    url_host = absl::StrCat("[", host, "]");
  }
  return absl::StrCat(options_.tls.enabled() ? "https://" : "http://", url_host, ":", bound);
}

void HttpServer::Stop() {
  if (!server_) return;
  stopping_ = true;
  {
    absl::MutexLock lock(&streams_mu_);
    for (SseStream* s : streams_) s->Stop();
  }
  server_->stop();
  if (thread_.joinable()) thread_.join();
  server_.reset();
}

std::optional<Caller> HttpServer::Authorize(const httplib::Request& req, httplib::Response& res,
                                            Rpc rpc) {
  if (req.has_header("Authorization")) {
    absl::StatusOr<Caller> c =
        auth_->Authorize(Peer(req), req.get_header_value("Authorization"), rpc);
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

void HttpServer::Route() {
  httplib::Server& s = *server_;
  const bool tls = options_.tls.enabled();
  auto cookie = [this, tls](const std::string& value, absl::Duration age) {
    return absl::StrCat(kCookie, "=", value,
                        "; Path=/; HttpOnly; SameSite=Strict; Max-Age=", absl::ToInt64Seconds(age),
                        tls ? "; Secure" : "");
  };

  // cpp-httplib 0.11 compresses a body with brotli at its slowest setting
  // whenever the client accepts it (every browser does): 10x the cost of
  // the answer itself (a /metrics scrape: 12 ms with br, 1 ms with gzip).
  // So brotli is taken off what the client accepts; gzip stays.
  s.set_pre_routing_handler([](const httplib::Request& req, httplib::Response&) {
    // The request is the server's own, not const underneath.
    auto& headers = const_cast<httplib::Headers&>(req.headers);
    auto [begin, end] = headers.equal_range("Accept-Encoding");
    std::vector<std::string> kept;
    for (auto it = begin; it != end; ++it) {
      std::vector<std::string> codings;
      for (absl::string_view c : absl::StrSplit(it->second, ',')) {
        c = absl::StripAsciiWhitespace(c);
        if (!c.empty() && !absl::StartsWithIgnoreCase(c, "br")) codings.emplace_back(c);
      }
      if (!codings.empty()) kept.push_back(absl::StrJoin(codings, ", "));
    }
    headers.erase(begin, end);
    for (std::string& v : kept) headers.emplace("Accept-Encoding", std::move(v));
    return httplib::Server::HandlerResponse::Unhandled;
  });

  s.Get("/healthz", [](const httplib::Request&, httplib::Response& res) {
    Reply(res, 200, "ok\n", "text/plain");
  });
  s.Get("/readyz", [this](const httplib::Request&, httplib::Response& res) {
    const absl::Status ready = stopping_ ? absl::UnavailableError("stopping") : ready_();
    if (ready.ok()) {
      Reply(res, 200, "ready\n", "text/plain");
    } else {
      Reply(res, 503, absl::StrCat(ready.message(), "\n"), "text/plain");
    }
  });
  s.Get("/metrics", [this](const httplib::Request& req, httplib::Response& res) {
    if (!Authorize(req, res, Rpc::kReadMetrics)) return;
    Reply(res, 200, metrics_ != nullptr ? metrics_->Scrape() : std::string(),
          "text/plain; version=0.0.4; charset=utf-8");
  });

  // The JSON API.
  s.Get("/api/v1/info", [this](const httplib::Request& req, httplib::Response& res) {
    if (!Authorize(req, res, Rpc::kGetServerInfo)) return;
    Reply(res, 200, ToJson(reads_->GetServerInfo()));
  });
  s.Get("/api/v1/devices", [this](const httplib::Request& req, httplib::Response& res) {
    if (!Authorize(req, res, Rpc::kListDevices)) return;
    Reply(res, 200, ToJson(reads_->ListDevices()));
  });
  s.Get("/api/v1/jobs", [this](const httplib::Request& req, httplib::Response& res) {
    if (!Authorize(req, res, Rpc::kListJobs)) return;
    absl::StatusOr<traind::v1::ListJobsRequest> list = ListJobsFromQuery(req.params);
    if (!list.ok()) return ReplyError(res, list.status());
    ReplyWith(res, reads_->ListJobs(*list));
  });
  s.Get(R"(/api/v1/jobs/([^/]+))", [this](const httplib::Request& req, httplib::Response& res) {
    if (!Authorize(req, res, Rpc::kGetJob)) return;
    const std::string id = req.matches[1];
    if (std::optional<std::string> json = finished_json_.Find("job/" + id)) {
      return Reply(res, 200, *json);
    }
    absl::StatusOr<traind::v1::Job> job = reads_->GetJob(id);
    if (!job.ok()) return ReplyError(res, job.status());
    std::string json = ToJson(*job);
    if (IsTerminal(job->state())) finished_json_.Add("job/" + id, json);
    Reply(res, 200, json);
  });
  s.Get(R"(/api/v1/jobs/([^/]+)/result)",
        [this](const httplib::Request& req, httplib::Response& res) {
          if (!Authorize(req, res, Rpc::kGetJobResult)) return;
          const std::string id = req.matches[1];
          if (std::optional<std::string> json = finished_json_.Find("result/" + id)) {
            return Reply(res, 200, *json);
          }
          absl::StatusOr<traind::v1::JobResult> result = reads_->GetJobResult(id);
          if (!result.ok()) return ReplyError(res, result.status());
          std::string json = ToJson(*result);
          if (result->complete()) finished_json_.Add("result/" + id, json);
          Reply(res, 200, json);
        });
  s.Get(R"(/api/v1/jobs/([^/]+)/events)",
        [this](const httplib::Request& req, httplib::Response& res) {
          if (!Authorize(req, res, Rpc::kWatchJob)) return;
          Events(req, res, req.matches[1]);
        });

  // Browser sessions.
  // Datasets: the caller's (an admin's: everyone's, or one owner's).
  s.Get("/api/v1/datasets", [this](const httplib::Request& req, httplib::Response& res) {
    std::optional<Caller> caller = Authorize(req, res, Rpc::kListDatasets);
    if (!caller) return;
    if (datasets_ == nullptr) {
      return ReplyError(res, absl::FailedPreconditionError("this traind stores no datasets"));
    }
    traind::v1::ListDatasetsRequest list;
    list.set_name(req.get_param_value("name"));
    list.set_owner(req.get_param_value("owner"));
    absl::StatusOr<std::vector<traind::v1::Dataset>> found = datasets_->List(*caller, list);
    if (!found.ok()) return ReplyError(res, found.status());
    traind::v1::ListDatasetsResponse out;
    for (traind::v1::Dataset& d : *found) *out.add_datasets() = std::move(d);
    Reply(res, 200, ToJson(out));
  });
  s.Get(R"(/api/v1/datasets/([^/]+))", [this](const httplib::Request& req, httplib::Response& res) {
    std::optional<Caller> caller = Authorize(req, res, Rpc::kGetDataset);
    if (!caller) return;
    if (datasets_ == nullptr) {
      return ReplyError(res, absl::FailedPreconditionError("this traind stores no datasets"));
    }
    traind::v1::GetDatasetRequest get;
    get.set_ref(req.matches[1]);
    get.set_owner(req.get_param_value("owner"));
    ReplyWith(res, datasets_->Get(*caller, get));
  });
  s.Get("/api/v1/session", [this](const httplib::Request& req, httplib::Response& res) {
    std::optional<Caller> c = Authorize(req, res, Rpc::kGetServerInfo);
    if (c) Reply(res, 200, CallerJson(*c));
  });
  s.Post("/api/v1/session", [this, cookie](const httplib::Request& req, httplib::Response& res) {
    if (!absl::StartsWith(req.get_header_value("Content-Type"), kJson)) {
      return Reply(res, 415,
                   ErrorJson(absl::InvalidArgumentError(
                       "send the token as JSON: {\"token\": \"...\"} (Content-Type: "
                       "application/json)")));
    }
    google::protobuf::Struct body;
    if (!google::protobuf::util::JsonStringToMessage(req.body, &body).ok() ||
        !body.fields().contains("token") || !body.fields().at("token").has_string_value()) {
      return ReplyError(res, absl::InvalidArgumentError("body: expected {\"token\": \"...\"}"));
    }
    absl::StatusOr<Caller> c = auth_->Authorize(
        Peer(req), absl::StrCat("Bearer ", body.fields().at("token").string_value()),
        Rpc::kGetServerInfo);
    if (!c.ok()) return ReplyError(res, c.status());
    const std::string id = sessions_->NewSession(*c);
    LogInfo("dashboard session started for %s (role %s) from %s", c->name, RoleName(c->role),
            req.remote_addr);
    res.set_header("Set-Cookie", cookie(id, sessions_->session_ttl()));
    Reply(res, 200, CallerJson(*c));
  });
  s.Post("/api/v1/session/logout",
         [this, cookie](const httplib::Request& req, httplib::Response& res) {
           const std::string id = SessionCookie(req);
           if (!id.empty()) sessions_->End(id);
           res.set_header("Set-Cookie", cookie("", absl::ZeroDuration()));
           res.status = 204;
         });
  s.Get("/login", [this, cookie](const httplib::Request& req, httplib::Response& res) {
    res.set_header("Cache-Control", "no-store");
    res.set_header("Referrer-Policy", "no-referrer");
    std::optional<std::string> id = sessions_->RedeemTicket(req.get_param_value("ticket"));
    if (!id.has_value()) {
      res.set_redirect("/?login=expired", 303);
      return;
    }
    std::optional<Caller> c = sessions_->Lookup(*id);
    LogInfo("dashboard session started for %s (role %s) from %s with a login link",
            c ? c->name : "?", c ? RoleName(c->role) : "?", req.remote_addr);
    res.set_header("Set-Cookie", cookie(*id, sessions_->session_ttl()));
    res.set_redirect("/", 303);
  });

  // The page: its shell and assets hold no data (the data needs a session).
  size_t count = 0;
  const WebAsset* assets = WebAssets(&count);
  auto serve = [](const WebAsset& a, httplib::Response& res) {
    res.set_header("Cache-Control", "no-cache");
    res.set_header("X-Content-Type-Options", "nosniff");
    res.set_header("X-Frame-Options", "DENY");
    res.set_header("Content-Security-Policy",
                   "default-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
                   "frame-ancestors 'none'; base-uri 'none'; form-action 'self'");
    res.set_content(a.data, a.size, a.content_type);
  };
  for (size_t i = 0; i < count; ++i) {
    const WebAsset& a = assets[i];
    if (std::strcmp(a.name, "index.html") == 0) {
      s.Get("/", [&a, serve](const httplib::Request&, httplib::Response& res) { serve(a, res); });
    }
    s.Get(absl::StrCat("/assets/", a.name),
          [&a, serve](const httplib::Request&, httplib::Response& res) { serve(a, res); });
  }

  s.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    const bool session_post = req.method == "POST" && absl::StartsWith(req.path, "/api/v1/session");
    if (res.status == 404 && req.method != "GET" && req.method != "HEAD" && !session_post) {
      res.set_header("Allow", "GET");
      Reply(res, 405,
            ErrorJson(absl::InvalidArgumentError(absl::StrCat(
                req.method, " ", req.path, ": the HTTP API is read-only (GET only)"))));
    } else if (res.status == 404) {
      Reply(res, 404, ErrorJson(absl::NotFoundError(absl::StrCat("no such path: ", req.path))));
    }
  });
  s.set_exception_handler(
      [](const httplib::Request& req, httplib::Response& res, std::exception_ptr ep) {
        std::string what = "unknown error";
        try {
          std::rethrow_exception(ep);
        } catch (const std::exception& e) {
          what = e.what();
        } catch (...) {
        }
        LogError("http %s %s: %s", req.method, req.path, what);
        ReplyError(res, absl::InternalError(what));
      });
}

void HttpServer::Events(const httplib::Request& req, httplib::Response& res,
                        const std::string& job_id) {
  int64_t after = 0;
  std::string text = req.get_header_value("Last-Event-ID");
  const char* source = "Last-Event-ID";
  if (text.empty() && req.has_param("after")) {
    text = req.get_param_value("after");
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
  auto stream = std::make_shared<SseStream>(reads_->scheduler(), metrics_, &event_json_, job_id,
                                            after, terminal && after >= last);
  {
    absl::MutexLock lock(&streams_mu_);
    streams_.insert(stream.get());
  }
  res.set_header("Cache-Control", "no-store");
  res.set_header("X-Accel-Buffering", "no");
  const absl::Duration keepalive = options_.keepalive;
  res.set_chunked_content_provider(
      "text/event-stream",
      [stream, keepalive](size_t, httplib::DataSink& sink) {
        return stream->Pump(sink, keepalive);
      },
      [this, stream](bool) {
        absl::MutexLock lock(&streams_mu_);
        streams_.erase(stream.get());
      });
}

}  // namespace traind::server
