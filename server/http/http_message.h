// The HTTP side door's requests and responses as traind's routes see them:
// plain values, no HTTP library (the transport, http_transport.h, parses and
// writes them). The URL helpers are unit-tested in http_message_test.cc.
//
// Thread-safety: values; the functions are pure.
#ifndef TRAIND_SERVER_HTTP_HTTP_MESSAGE_H_
#define TRAIND_SERVER_HTTP_HTTP_MESSAGE_H_

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace traind::server {

struct HttpRequest {
  std::string method;                             // as sent ("GET", "HEAD", "POST", ...)
  std::string target;                             // as sent: path and query, percent-encoded
  std::string path;                               // percent-decoded
  std::multimap<std::string, std::string> query;  // decoded ('+' is a space)
  // Header fields, names in lower case, in the order sent.
  std::vector<std::pair<std::string, std::string>> headers;
  std::string remote_address;  // "127.0.0.1", "::1"
  int remote_port = 0;
  std::string body;  // read only for routes that take one (HttpHandler::TakesBody)

  // The first value of header `name` (lower case), or "".
  std::string Header(absl::string_view name) const;
  bool HasHeader(absl::string_view name) const;
  // Every value of header `name`.
  std::vector<std::string> Headers(absl::string_view name) const;
  // The first value of query parameter `name`, or "".
  std::string Param(const std::string& name) const;
};

// A stream of text sent as it comes (server-sent events): the transport
// writes its header, then whatever Next returns, until Next says done.
class HttpEventSource {
 public:
  virtual ~HttpEventSource() = default;
  // Called once, on the transport's thread, when the response header is
  // out; `wake` may then be called from any thread (and must be cheap:
  // it posts) whenever Next may have more to send.
  virtual void Start(std::function<void()> wake) = 0;
  // On a handler thread (it may read the store): the text to send now, ""
  // when there is none yet. *done once the stream is over (after `text`).
  virtual std::string Next(bool* done) = 0;
};

struct HttpResponse {
  int status = 200;
  std::string content_type;
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
  // The same body compressed with gzip, made once for bodies served often
  // (the dashboard's files); sent to clients that accept gzip.
  std::shared_ptr<const std::string> gzip_body;
  // Set: the body is this file's bytes, read as they are written (memory
  // does not grow with the file; each write has the write deadline), not
  // `body`. A file that cannot be opened is a 500.
  std::string file_path;
  // Set: an event stream (status 200, content_type), not `body`.
  std::shared_ptr<HttpEventSource> stream;
  // Called once the stream ends (the client left, or traind stops).
  std::function<void()> on_stream_end;
};

// Percent-decodes `text` ("%2F" -> "/"; '+' -> ' ' where `plus_is_space`).
// A '%' without two hex digits is INVALID_ARGUMENT.
absl::StatusOr<std::string> PercentDecode(absl::string_view text, bool plus_is_space);

// Splits a request target into its decoded path and query parameters.
absl::Status ParseTarget(absl::string_view target, std::string* path,
                         std::multimap<std::string, std::string>* query);

// Whether an Accept-Encoding value accepts gzip (not "gzip;q=0").
bool AcceptsGzip(absl::string_view accept_encoding);

// `data` compressed with gzip (zlib, level 6).
std::string Gzip(absl::string_view data);

}  // namespace traind::server

#endif  // TRAIND_SERVER_HTTP_HTTP_MESSAGE_H_
