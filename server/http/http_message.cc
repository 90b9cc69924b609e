#include "server/http/http_message.h"

#include <zlib.h>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace traind::server {

std::string HttpRequest::Header(absl::string_view name) const {
  for (const auto& [n, v] : headers) {
    if (n == name) return v;
  }
  return std::string();
}

bool HttpRequest::HasHeader(absl::string_view name) const {
  for (const auto& [n, v] : headers) {
    if (n == name) return true;
  }
  return false;
}

std::vector<std::string> HttpRequest::Headers(absl::string_view name) const {
  std::vector<std::string> out;
  for (const auto& [n, v] : headers) {
    if (n == name) out.push_back(v);
  }
  return out;
}

std::string HttpRequest::Param(const std::string& name) const {
  auto it = query.find(name);
  return it == query.end() ? std::string() : it->second;
}

absl::StatusOr<std::string> PercentDecode(absl::string_view text, bool plus_is_space) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '%') {
      if (i + 2 >= text.size() || !absl::ascii_isxdigit(text[i + 1]) ||
          !absl::ascii_isxdigit(text[i + 2])) {
        return absl::InvalidArgumentError(
            absl::StrCat("bad percent-encoding at character ", i + 1, " of the URL"));
      }
      const auto hex = [](char h) {
        return absl::ascii_isdigit(h) ? h - '0' : absl::ascii_tolower(h) - 'a' + 10;
      };
      out += static_cast<char>(hex(text[i + 1]) * 16 + hex(text[i + 2]));
      i += 2;
    } else if (c == '+' && plus_is_space) {
      out += ' ';
    } else {
      out += c;
    }
  }
  return out;
}

absl::Status ParseTarget(absl::string_view target, std::string* path,
                         std::multimap<std::string, std::string>* query) {
  const size_t q = target.find('?');
  absl::StatusOr<std::string> p = PercentDecode(target.substr(0, q), /*plus_is_space=*/false);
  if (!p.ok()) return p.status();
  *path = *std::move(p);
  query->clear();
  if (q == absl::string_view::npos) return absl::OkStatus();
  for (absl::string_view pair : absl::StrSplit(target.substr(q + 1), '&', absl::SkipEmpty())) {
    const size_t eq = pair.find('=');
    absl::StatusOr<std::string> key = PercentDecode(pair.substr(0, eq), true);
    absl::StatusOr<std::string> value =
        eq == absl::string_view::npos ? std::string() : PercentDecode(pair.substr(eq + 1), true);
    if (!key.ok()) return key.status();
    if (!value.ok()) return value.status();
    query->emplace(*std::move(key), *std::move(value));
  }
  return absl::OkStatus();
}

bool AcceptsGzip(absl::string_view accept_encoding) {
  for (absl::string_view coding : absl::StrSplit(accept_encoding, ',')) {
    std::vector<absl::string_view> parts = absl::StrSplit(coding, ';');
    const absl::string_view name = absl::StripAsciiWhitespace(parts[0]);
    if (!absl::EqualsIgnoreCase(name, "gzip") && name != "*") continue;
    double q = 1;
    for (size_t i = 1; i < parts.size(); ++i) {
      absl::string_view p = absl::StripAsciiWhitespace(parts[i]);
      if (absl::ConsumePrefix(&p, "q=") && !absl::SimpleAtod(p, &q)) q = 0;
    }
    if (q > 0) return true;
  }
  return false;
}

std::string Gzip(absl::string_view data) {
  z_stream z = {};
  // windowBits 15 + 16: a gzip wrapper, not zlib's.
  if (deflateInit2(&z, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK) return std::string();
  std::string out(deflateBound(&z, data.size()), '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  z.avail_in = static_cast<uInt>(data.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  const int rc = deflate(&z, Z_FINISH);
  out.resize(z.total_out);
  deflateEnd(&z);
  return rc == Z_STREAM_END ? out : std::string();
}

}  // namespace traind::server
