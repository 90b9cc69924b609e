#include "server/http/http_transport.h"

#include <sys/resource.h>

#include <atomic>
#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/log.h"
#include "server/http/json.h"
#include "server/secrets.h"

namespace traind::server {
namespace {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
namespace ssl = net::ssl;
using tcp = net::ip::tcp;
using SslStream = beast::ssl_stream<beast::tcp_stream>;

constexpr int kSendBufferBytes = 256 << 10;

std::chrono::nanoseconds Chrono(absl::Duration d) { return absl::ToChronoNanoseconds(d); }

int64_t NowNanos() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

bool Compressible(absl::string_view content_type) {
  return absl::StartsWith(content_type, "text/") ||
         absl::StartsWith(content_type, "application/json") ||
         absl::StartsWith(content_type, "application/javascript") ||
         absl::StartsWith(content_type, "image/svg");
}

// What the registry knows of a connection; the rest is the template below.
class ConnectionBase {
 public:
  virtual ~ConnectionBase() = default;
  // From any thread: ends the connection on its own strand.
  virtual void CloseLater() = 0;
  // Waiting for (the rest of) a request, since when (steady clock).
  std::atomic<bool> waiting{true};
  std::atomic<bool> closed{false};
  std::atomic<int64_t> waiting_since{0};
};

}  // namespace

struct HttpTransport::Impl {
  Impl(HttpLimits l, TlsConfig t, HttpHandler* h) : limits(l), tls(std::move(t)), handler(h) {}

  // Admits a connection from `address`: its id, or 0 when it is refused.
  // Connections it displaces (the longest waiting) are added to `evict`.
  uint64_t Admit(const std::string& address, std::vector<std::shared_ptr<ConnectionBase>>* evict);
  void Attach(uint64_t id, std::weak_ptr<ConnectionBase> c);
  void Unregister(uint64_t id);
  void DoAccept();
  void OnAccept(beast::error_code ec, tcp::socket socket);
  // A route runs on the network thread that read its request (no hop to
  // the handler pool, which costs more than most routes) while one network
  // thread at least stays free for sockets; else on the pool. True: the
  // caller runs it, then gives the slot back (inline_busy -= 1).
  bool TakeInlineSlot() {
    if (inline_busy.fetch_add(1) < std::max(1, limits.network_threads - 1)) return true;
    inline_busy.fetch_sub(1);
    return false;
  }

  const HttpLimits limits;
  const TlsConfig tls;
  HttpHandler* const handler;
  int max_connections = 0;  // in force
  std::atomic<bool> stopping{false};

  struct Entry {
    std::weak_ptr<ConnectionBase> conn;
    std::string address;
    bool evicted = false;
  };
  mutable std::mutex mu;
  std::map<uint64_t, Entry> conns;
  std::map<std::string, int> per_address;
  int live = 0;
  uint64_t next_id = 1;

  std::atomic<int64_t> accepted{0}, evicted{0}, refused_total{0}, refused_address{0};
  std::atomic<int64_t> requests{0}, requests_refused{0};
  std::atomic<int> inline_busy{0};

  // Declared after the registry: connections unregister as these go.
  net::io_context ioc;
  std::optional<net::executor_work_guard<net::io_context::executor_type>> work;
  std::optional<net::thread_pool> pool;
  std::optional<ssl::context> ssl_ctx;
  std::optional<tcp::acceptor> acceptor;
  std::optional<net::steady_timer> accept_retry;
  std::vector<std::thread> threads;
  bool emfile_logged = false;  // on the acceptor's strand
};

namespace {

template <class Stream>
class Connection final : public ConnectionBase,
                         public std::enable_shared_from_this<Connection<Stream>> {
 public:
  static constexpr bool kTls = std::is_same_v<Stream, SslStream>;

  Connection(HttpTransport::Impl* impl, uint64_t id, Stream stream, std::string address, int port)
      : impl_(impl),
        id_(id),
        stream_(std::move(stream)),
        timer_(stream_.get_executor()),
        buffer_(impl->limits.max_header_bytes + (8 << 10)),
        address_(std::move(address)),
        port_(port) {}

  ~Connection() override {
    EndStream();
    impl_->Unregister(id_);
  }

  void Begin() {
    waiting_since = NowNanos();
    if constexpr (kTls) {
      beast::get_lowest_layer(stream_).expires_after(Chrono(impl_->limits.request_timeout));
      stream_.async_handshake(ssl::stream_base::server,
                              [self = this->shared_from_this()](beast::error_code ec) {
                                if (ec) return self->Close();
                                self->ReadRequest(/*fresh=*/false);
                              });
    } else {
      ReadRequest(/*fresh=*/false);
    }
  }

  auto executor() { return stream_.get_executor(); }

  void CloseLater() override {
    net::post(stream_.get_executor(), [self = this->shared_from_this()] { self->Close(); });
  }

 private:
  auto& Lowest() { return beast::get_lowest_layer(stream_); }

  // Waits for the next request: idle time and the whole header share one
  // deadline (a slow client cannot extend it byte by byte).
  void ReadRequest(bool fresh) {
    if (closed_) return;
    if (fresh) waiting_since = NowNanos();
    waiting = true;
    header_.emplace();
    header_->header_limit(static_cast<uint32_t>(impl_->limits.max_header_bytes));
    // The body's limit is checked once the route is known (OnHeader).
    header_->body_limit(std::numeric_limits<std::uint64_t>::max());
    Lowest().expires_after(Chrono(impl_->limits.request_timeout) -
                           std::chrono::nanoseconds(NowNanos() - waiting_since));
    http::async_read_header(
        stream_, buffer_, *header_,
        [self = this->shared_from_this()](beast::error_code ec, size_t) { self->OnHeader(ec); });
  }

  void OnHeader(beast::error_code ec) {
    waiting = false;
    if (ec == http::error::header_limit || ec == http::error::buffer_overflow) {
      return Refuse(431, absl::StrCat("the request's header is over ",
                                      impl_->limits.max_header_bytes, " bytes"));
    }
    if (ec && &ec.category() == &http::make_error_code(http::error::bad_target).category() &&
        ec != http::error::end_of_stream && ec != http::error::partial_message) {
      return Refuse(400, absl::StrCat("malformed request: ", ec.message()));
    }
    if (ec) return Close();  // the client left, or its time ran out
    const auto& msg = header_->get();
    request_ = HttpRequest();
    int fields = 0;
    for (const auto& f : msg) {
      if (++fields > impl_->limits.max_header_fields) {
        return Refuse(431, absl::StrCat("the request has more than ",
                                        impl_->limits.max_header_fields, " header fields"));
      }
      request_.headers.emplace_back(absl::AsciiStrToLower(std::string(f.name_string())),
                                    std::string(f.value()));
    }
    request_.method = std::string(msg.method_string());
    request_.target = std::string(msg.target());
    request_.remote_address = address_;
    request_.remote_port = port_;
    keep_alive_ = msg.keep_alive();
    head_ = msg.method() == http::verb::head;
    if (absl::Status s = ParseTarget(request_.target, &request_.path, &request_.query); !s.ok()) {
      return Refuse(400, s.message());
    }
    const uint64_t length = header_->content_length().value_or(0);
    if (!header_->chunked() && length == 0) return Dispatch();
    if (!impl_->handler->TakesBody(request_)) {
      // Answered without reading the body, which nobody asked for.
      keep_alive_ = false;
      return Dispatch();
    }
    const std::string encoding = request_.Header("content-encoding");
    if (!encoding.empty() && !absl::EqualsIgnoreCase(encoding, "identity")) {
      return Refuse(415, absl::StrCat("Content-Encoding: ", encoding,
                                      ": send the body as it is (no encoding)"));
    }
    if (length > impl_->limits.max_body_bytes) {
      return Refuse(413, absl::StrCat("the body is over ", impl_->limits.max_body_bytes, " bytes"));
    }
    body_.emplace(std::move(*header_));
    body_->body_limit(impl_->limits.max_body_bytes);
    waiting = true;  // a body still arriving is as evictable as a header
    http::async_read(
        stream_, buffer_, *body_,
        [self = this->shared_from_this()](beast::error_code ec, size_t) { self->OnBody(ec); });
  }

  void OnBody(beast::error_code ec) {
    waiting = false;
    if (ec == http::error::body_limit) {
      return Refuse(413, absl::StrCat("the body is over ", impl_->limits.max_body_bytes, " bytes"));
    }
    if (ec) return Close();
    request_.body = std::move(body_->get().body());
    body_.reset();
    Dispatch();
  }

  void Dispatch() {
    if (impl_->stopping) return Close();
    impl_->requests.fetch_add(1);
    const bool cheap = impl_->handler->Inline(request_);
    if (cheap || impl_->TakeInlineSlot()) {
      HttpResponse res;
      impl_->handler->Handle(request_, &res);
      if (!cheap) impl_->inline_busy.fetch_sub(1);
      return Respond(std::move(res));
    }
    net::post(*impl_->pool, [self = this->shared_from_this()] {
      auto res = std::make_shared<HttpResponse>();
      self->impl_->handler->Handle(self->request_, res.get());
      net::post(self->stream_.get_executor(), [self, res] { self->Respond(std::move(*res)); });
    });
  }

  void Refuse(int status, absl::string_view message) {
    impl_->requests_refused.fetch_add(1);
    HttpResponse res;
    res.status = status;
    res.content_type = "application/json";
    res.body = ErrorJson(status == 400 || status == 415 ? absl::InvalidArgumentError(message)
                                                        : absl::ResourceExhaustedError(message),
                         status);
    keep_alive_ = false;
    head_ = false;
    Respond(std::move(res));
  }

  void Respond(HttpResponse res) {
    if (closed_) {
      if (res.on_stream_end) res.on_stream_end();
      return;
    }
    if (res.stream != nullptr && !head_) return StartStream(std::move(res));
    if (res.on_stream_end) res.on_stream_end();
    if (!res.file_path.empty()) return RespondFile(std::move(res));
    auto msg = std::make_shared<http::response<http::string_body>>(
        static_cast<http::status>(res.status), 11);
    if (!res.content_type.empty()) msg->set(http::field::content_type, res.content_type);
    for (const auto& [name, value] : res.headers) msg->insert(name, value);
    if (Compressible(res.content_type) && AcceptsGzip(request_.Header("accept-encoding"))) {
      std::string gz;
      if (res.gzip_body != nullptr) {
        gz = *res.gzip_body;
      } else if (res.body.size() >= 1024) {
        gz = Gzip(res.body);
      }
      if (!gz.empty()) {
        res.body = std::move(gz);
        msg->set(http::field::content_encoding, "gzip");
      }
      msg->set(http::field::vary, "Accept-Encoding");
    }
    msg->body() = std::move(res.body);
    msg->keep_alive(keep_alive_ && !impl_->stopping);
    msg->prepare_payload();
    if (head_) msg->body().clear();  // the length of the GET's body, no body
    Lowest().expires_after(Chrono(impl_->limits.write_timeout));
    http::async_write(stream_, *msg,
                      [self = this->shared_from_this(), msg](beast::error_code ec, size_t) {
                        if (ec) return self->Close();
                        if (!msg->keep_alive()) return self->Finish();
                        self->ReadRequest(/*fresh=*/true);
                      });
  }

  // A file's bytes: the header, then the body a piece per write, the write
  // deadline renewed at each (a slow but moving client finishes a large
  // file; a stalled one is cut off).
  void RespondFile(HttpResponse res) {
    beast::error_code ec;
    http::file_body::value_type file;
    file.open(res.file_path.c_str(), beast::file_mode::scan, ec);
    if (ec) {
      LogWarning("http: cannot open %s: %s", res.file_path, ec.message());
      HttpResponse error;
      error.status = 500;
      error.content_type = "application/json";
      error.body = ErrorJson(absl::InternalError("the file cannot be read"), 500);
      return Respond(std::move(error));
    }
    auto msg = std::make_shared<http::response<http::file_body>>(
        static_cast<http::status>(res.status), 11);
    if (!res.content_type.empty()) msg->set(http::field::content_type, res.content_type);
    for (const auto& [name, value] : res.headers) msg->insert(name, value);
    msg->keep_alive(keep_alive_ && !impl_->stopping);
    msg->body() = std::move(file);
    msg->prepare_payload();
    WriteFilePiece(msg, std::make_shared<http::response_serializer<http::file_body>>(*msg));
  }

  // HEAD: the header alone (the GET's Content-Length); GET: a piece more.
  void WriteFilePiece(std::shared_ptr<http::response<http::file_body>> msg,
                      std::shared_ptr<http::response_serializer<http::file_body>> sr) {
    Lowest().expires_after(Chrono(impl_->limits.write_timeout));
    auto next = [self = this->shared_from_this(), msg, sr](beast::error_code ec, size_t) {
      if (ec) return self->Close();
      if (!self->head_ && !sr->is_done()) return self->WriteFilePiece(msg, sr);
      if (!msg->keep_alive()) return self->Finish();
      self->ReadRequest(/*fresh=*/true);
    };
    if (head_) return http::async_write_header(stream_, *sr, std::move(next));
    http::async_write_some(stream_, *sr, std::move(next));
  }

  // Server-sent events: the header, then each text Next hands out as a
  // chunk, a comment when idle for `keepalive`, until the source is done.
  void StartStream(HttpResponse res) {
    source_ = std::move(res.stream);
    on_end_ = std::move(res.on_stream_end);
    auto msg = std::make_shared<http::response<http::empty_body>>(http::status::ok, 11);
    msg->set(http::field::content_type, res.content_type);
    for (const auto& [name, value] : res.headers) msg->insert(name, value);
    msg->keep_alive(keep_alive_);
    msg->chunked(true);
    auto sr = std::make_shared<http::response_serializer<http::empty_body>>(*msg);
    Lowest().expires_after(Chrono(impl_->limits.write_timeout));
    http::async_write_header(
        stream_, *sr, [self = this->shared_from_this(), msg, sr](beast::error_code ec, size_t) {
          if (ec) return self->Close();
          std::weak_ptr<Connection> weak = self;
          auto ex = self->stream_.get_executor();
          self->source_->Start([weak, ex] {
            net::post(ex, [weak] {
              if (auto s = weak.lock()) s->OnWake();
            });
          });
          self->Pull();
        });
  }

  void Pull() {
    if (closed_) return;
    if (impl_->stopping) return Close();
    if (impl_->TakeInlineSlot()) {
      bool done = false;
      std::string text = source_->Next(&done);
      impl_->inline_busy.fetch_sub(1);
      // Posted, not called: a stream that always has more must not recurse.
      net::post(stream_.get_executor(),
                [self = this->shared_from_this(), text = std::move(text), done]() mutable {
                  self->OnPulled(std::move(text), done);
                });
      return;
    }
    net::post(*impl_->pool, [self = this->shared_from_this()] {
      bool done = false;
      std::string text = self->source_->Next(&done);
      net::post(self->stream_.get_executor(), [self, text = std::move(text), done]() mutable {
        self->OnPulled(std::move(text), done);
      });
    });
  }

  void OnPulled(std::string text, bool done) {
    if (closed_) return;
    if (!text.empty() || done) return WriteChunk(std::move(text), done);
    if (woken_) {
      woken_ = false;
      return Pull();
    }
    idle_ = true;
    timer_.expires_after(Chrono(impl_->limits.keepalive));
    timer_.async_wait([self = this->shared_from_this()](beast::error_code ec) {
      self->idle_ = false;
      if (self->closed_) return;
      if (ec == net::error::operation_aborted) return self->Pull();
      self->WriteChunk(": keepalive\n\n", false);
    });
  }

  void OnWake() {
    if (closed_) return;
    if (idle_) {
      timer_.cancel();
    } else {
      woken_ = true;
    }
  }

  void WriteChunk(std::string text, bool done) {
    chunk_ = std::move(text);
    Lowest().expires_after(Chrono(impl_->limits.write_timeout));
    auto after = [self = this->shared_from_this(), done](beast::error_code ec, size_t) {
      if (ec) return self->Close();
      if (!done) return self->Pull();
      self->Lowest().expires_after(Chrono(self->impl_->limits.write_timeout));
      net::async_write(self->stream_, http::make_chunk_last(),
                       [self](beast::error_code ec, size_t) {
                         self->EndStream();
                         if (ec || !self->keep_alive_ || self->impl_->stopping) {
                           return self->Close();
                         }
                         self->ReadRequest(/*fresh=*/true);
                       });
    };
    if (chunk_.empty()) return after(beast::error_code(), 0);
    net::async_write(stream_, http::make_chunk(net::buffer(chunk_)), std::move(after));
  }

  void EndStream() {
    if (on_end_) {
      std::function<void()> f = std::move(on_end_);
      on_end_ = nullptr;
      f();
    }
  }

  // After a last response: tells the client so, then reads and drops what
  // it still sends (a body nobody read) for a moment, so that closing does
  // not reset the connection under the response.
  void Finish() {
    if constexpr (kTls) {
      Close();
    } else {
      beast::error_code ec;
      Lowest().socket().shutdown(tcp::socket::shutdown_send, ec);
      if (ec) return Close();
      Lowest().expires_after(std::chrono::seconds(2));
      Drain(64 << 10);
    }
  }

  void Drain(size_t budget) {
    Lowest().async_read_some(net::buffer(scratch_), [self = this->shared_from_this(), budget](
                                                        beast::error_code ec, size_t n) {
      if (ec || n >= budget) return self->Close();
      self->Drain(budget - n);
    });
  }

  void Close() {
    if (closed_) return;
    closed_ = true;
    closed = true;
    waiting = false;
    timer_.cancel();
    EndStream();
    beast::error_code ec;
    Lowest().socket().shutdown(tcp::socket::shutdown_both, ec);
    Lowest().close();
  }

  HttpTransport::Impl* const impl_;
  const uint64_t id_;
  Stream stream_;
  net::steady_timer timer_;
  beast::flat_buffer buffer_;
  const std::string address_;
  const int port_;
  std::optional<http::request_parser<http::empty_body>> header_;
  std::optional<http::request_parser<http::string_body>> body_;
  HttpRequest request_;
  bool keep_alive_ = true;
  bool head_ = false;
  bool closed_ = false;
  std::shared_ptr<HttpEventSource> source_;
  std::function<void()> on_end_;
  bool idle_ = false;   // a stream waits for its source (timer_ armed)
  bool woken_ = false;  // the source woke it while a Next ran
  std::string chunk_;
  char scratch_[4096];
};

}  // namespace

uint64_t HttpTransport::Impl::Admit(const std::string& address,
                                    std::vector<std::shared_ptr<ConnectionBase>>* evict) {
  std::lock_guard<std::mutex> lock(mu);
  // Makes room by closing the connection that has waited longest for a
  // request (from `only`, if given).
  auto displace = [&](const std::string* only) {
    Entry* best = nullptr;
    std::shared_ptr<ConnectionBase> best_conn;
    int64_t best_since = 0;
    for (auto& [id, e] : conns) {
      if (e.evicted || (only != nullptr && e.address != *only)) continue;
      std::shared_ptr<ConnectionBase> c = e.conn.lock();
      if (c == nullptr || !c->waiting) continue;
      const int64_t since = c->waiting_since;
      if (best == nullptr || since < best_since) {
        best = &e;
        best_conn = std::move(c);
        best_since = since;
      }
    }
    if (best == nullptr) return false;
    best->evicted = true;
    --live;
    if (--per_address[best->address] == 0) per_address.erase(best->address);
    evict->push_back(std::move(best_conn));
    evicted.fetch_add(1);
    return true;
  };
  auto at = per_address.find(address);
  if (at != per_address.end() && at->second >= limits.max_connections_per_address &&
      !displace(&address)) {
    refused_address.fetch_add(1);
    return 0;
  }
  if (live >= max_connections && !displace(nullptr)) {
    refused_total.fetch_add(1);
    return 0;
  }
  const uint64_t id = next_id++;
  conns[id].address = address;
  ++live;
  ++per_address[address];
  return id;
}

void HttpTransport::Impl::Attach(uint64_t id, std::weak_ptr<ConnectionBase> c) {
  std::lock_guard<std::mutex> lock(mu);
  auto it = conns.find(id);
  if (it != conns.end()) it->second.conn = std::move(c);
}

void HttpTransport::Impl::Unregister(uint64_t id) {
  std::lock_guard<std::mutex> lock(mu);
  auto it = conns.find(id);
  if (it == conns.end()) return;
  if (!it->second.evicted) {
    --live;
    if (--per_address[it->second.address] == 0) per_address.erase(it->second.address);
  }
  conns.erase(it);
}

void HttpTransport::Impl::DoAccept() {
  acceptor->async_accept(net::make_strand(ioc), [this](beast::error_code ec, tcp::socket socket) {
    OnAccept(ec, std::move(socket));
  });
}

void HttpTransport::Impl::OnAccept(beast::error_code ec, tcp::socket socket) {
  if (stopping) return;
  if (ec) {
    if (ec == net::error::operation_aborted) return;
    if (ec == net::error::no_descriptors || ec.value() == ENFILE || ec.value() == ENOBUFS ||
        ec.value() == ENOMEM) {
      // Out of descriptors (or memory): try again shortly rather than spin.
      if (!emfile_logged) {
        LogWarning("http: cannot accept a connection: %s (retrying every 100 ms)", ec.message());
        emfile_logged = true;
      }
      accept_retry->expires_after(std::chrono::milliseconds(100));
      accept_retry->async_wait([this](beast::error_code e) {
        if (!e && !stopping) DoAccept();
      });
      return;
    }
    return DoAccept();
  }
  beast::error_code peer_ec;
  const tcp::endpoint peer = socket.remote_endpoint(peer_ec);
  if (peer_ec) return DoAccept();
  net::ip::address a = peer.address();
  if (a.is_v6() && a.to_v6().is_v4_mapped())
    a = net::ip::make_address_v4(net::ip::v4_mapped, a.to_v6());  // one address, one cap
  const std::string address = a.to_string();
  std::vector<std::shared_ptr<ConnectionBase>> evict;
  const uint64_t id = Admit(address, &evict);
  for (auto& c : evict) c->CloseLater();
  if (id == 0) {
    beast::error_code ignored;
    socket.close(ignored);
    return DoAccept();
  }
  accepted.fetch_add(1);
  beast::error_code ignored;
  socket.set_option(tcp::no_delay(true), ignored);
  // The kernel's send buffer would grow to tcp_wmem's maximum (4 MiB) under
  // a client that reads slowly: 512 such streams would pin 2 GiB of kernel
  // memory. A fixed buffer (the kernel doubles it) still covers a LAN's
  // bandwidth-delay product.
  socket.set_option(net::socket_base::send_buffer_size(kSendBufferBytes), ignored);
  auto launch = [this, id](auto c) {
    Attach(id, c);
    net::post(c->executor(), [c] { c->Begin(); });
  };
  if (ssl_ctx.has_value()) {
    launch(std::make_shared<Connection<SslStream>>(this, id, SslStream(std::move(socket), *ssl_ctx),
                                                   address, peer.port()));
  } else {
    launch(std::make_shared<Connection<beast::tcp_stream>>(
        this, id, beast::tcp_stream(std::move(socket)), address, peer.port()));
  }
  DoAccept();
}

HttpTransport::HttpTransport(HttpLimits limits, TlsConfig tls, HttpHandler* handler)
    : impl_(std::make_unique<Impl>(limits, std::move(tls), handler)) {}

HttpTransport::~HttpTransport() { Stop(); }

const HttpLimits& HttpTransport::limits() const { return impl_->limits; }

HttpTransportStats HttpTransport::stats() const {
  HttpTransportStats s;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    s.connections_open = impl_->live;
  }
  s.connections_accepted = impl_->accepted;
  s.connections_evicted = impl_->evicted;
  s.connections_refused_total = impl_->refused_total;
  s.connections_refused_address = impl_->refused_address;
  s.requests = impl_->requests;
  s.requests_refused = impl_->requests_refused;
  s.max_connections = impl_->max_connections;
  return s;
}

absl::StatusOr<int> HttpTransport::Bind(const std::string& host, int port) {
  Impl& m = *impl_;
  const std::string where = absl::StrCat("http_listen ", host, ":", port);
  if (m.tls.enabled()) {
    m.ssl_ctx.emplace(ssl::context::tls_server);
    m.ssl_ctx->set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 |
                           ssl::context::no_sslv3 | ssl::context::no_tlsv1 |
                           ssl::context::no_tlsv1_1 | ssl::context::single_dh_use);
    // The files' own errors (which setting, which file, what is wrong) are
    // secrets.h's, as for the gRPC listeners.
    if (absl::Status s = CheckTlsFiles(m.tls.cert, m.tls.key, m.tls.client_ca); !s.ok()) return s;
    beast::error_code ec;
    m.ssl_ctx->use_certificate_chain_file(m.tls.cert, ec);
    if (!ec) m.ssl_ctx->use_private_key_file(m.tls.key, ssl::context::pem, ec);
    if (!ec && !m.tls.client_ca.empty()) {
      m.ssl_ctx->load_verify_file(m.tls.client_ca, ec);
      m.ssl_ctx->set_verify_mode(ssl::verify_peer | ssl::verify_fail_if_no_peer_cert);
    }
    if (ec) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": cannot load tls.cert ", m.tls.cert,
                                                     " / tls.key ", m.tls.key, ": ", ec.message()));
    }
  }
  beast::error_code ec;
  tcp::resolver resolver(m.ioc);
  auto found = resolver.resolve(host, std::to_string(port),
                                tcp::resolver::passive | tcp::resolver::numeric_service, ec);
  if (ec || found.empty()) {
    return absl::UnavailableError(absl::StrCat(where, ": cannot resolve ", host));
  }
  const tcp::endpoint endpoint = found.begin()->endpoint();
  m.acceptor.emplace(net::make_strand(m.ioc));
  m.acceptor->open(endpoint.protocol(), ec);
  // SO_REUSEADDR only (a restart binds at once), never SO_REUSEPORT (a
  // second traind would take half of the connections): a port in use is
  // an error.
  if (!ec) m.acceptor->set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) m.acceptor->bind(endpoint, ec);
  // The system's maximum backlog: a burst of connects (a dashboard's
  // streams) is never dropped by the kernel, which clients retry only
  // after 1, 3, 7 s.
  if (!ec) m.acceptor->listen(net::socket_base::max_listen_connections, ec);
  if (ec) {
    m.acceptor.reset();
    return absl::UnavailableError(absl::StrCat(where, ": cannot listen (", ec.message(), ")"));
  }
  const int bound = m.acceptor->local_endpoint().port();

  // Never more than half of the descriptors traind may open: the gRPC
  // listeners, the store and the workers keep the rest.
  m.max_connections = std::max(4, m.limits.max_connections);
  struct rlimit nofile;
  if (getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur != RLIM_INFINITY) {
    const int half = static_cast<int>(std::min<rlim_t>(nofile.rlim_cur / 2, 1 << 30));
    if (half < m.max_connections) {
      LogWarning(
          "http: max_connections %d lowered to %d, half of the %d descriptors traind may "
          "open (raise LimitNOFILE / ulimit -n)",
          m.max_connections, std::max(4, half), static_cast<int>(nofile.rlim_cur));
      m.max_connections = std::max(4, half);
    }
  }
  return bound;
}

void HttpTransport::Serve() {
  Impl& m = *impl_;
  if (!m.acceptor.has_value() || !m.threads.empty()) return;
  m.pool.emplace(std::max(1, m.limits.handler_threads));
  m.accept_retry.emplace(m.acceptor->get_executor());
  m.work.emplace(m.ioc.get_executor());
  for (int i = 0; i < std::max(1, m.limits.network_threads); ++i) {
    m.threads.emplace_back([&m] { m.ioc.run(); });
  }
  net::post(m.acceptor->get_executor(), [&m] { m.DoAccept(); });
}

void HttpTransport::Stop() {
  Impl& m = *impl_;
  if (m.threads.empty()) return;
  m.stopping = true;
  net::post(m.acceptor->get_executor(), [&m] {
    beast::error_code ec;
    m.acceptor->close(ec);
    m.accept_retry->cancel();
  });
  auto close_all = [&m] {
    std::vector<std::shared_ptr<ConnectionBase>> open;
    std::lock_guard<std::mutex> lock(m.mu);
    for (auto& [id, e] : m.conns) {
      if (auto c = e.conn.lock()) open.push_back(std::move(c));
    }
    return open;
  };
  for (auto& c : close_all()) c->CloseLater();
  // Routes running now finish; those not started never run (posting to
  // the stopped pool is still safe: it is destroyed last).
  m.pool->stop();
  m.pool->join();
  // Until every connection has closed (a connection accepted just now
  // included).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (std::chrono::steady_clock::now() < deadline) {
    bool open = false;
    {
      std::lock_guard<std::mutex> lock(m.mu);
      for (auto& [id, e] : m.conns) {
        auto c = e.conn.lock();
        open = open || (c != nullptr && !c->closed);
      }
    }
    if (!open) break;
    for (auto& c : close_all()) c->CloseLater();
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  m.work.reset();
  m.ioc.stop();
  for (std::thread& t : m.threads) t.join();
  m.threads.clear();
  // What was left pending holds connections: they go now, their sockets
  // with them, while the io_context still exists.
  m.pool.reset();
  m.acceptor.reset();
  m.accept_retry.reset();
}

}  // namespace traind::server
