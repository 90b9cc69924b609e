#include "client/cli_common.h"

#include <iostream>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "client/render.h"

namespace traind::client {
namespace {

std::string& AddressHint() {
  static std::string* hint = new std::string;
  return *hint;
}

struct Transport {
  bool tcp = false;
  bool tls = false;
};
Transport& TransportForHint() {
  static Transport* transport = new Transport;
  return *transport;
}

// What the transport explains about an UNAVAILABLE call ("" when nothing).
std::string TransportHint(const absl::Status& status) {
  const Transport& t = TransportForHint();
  if (!t.tcp || (status.code() != absl::StatusCode::kUnavailable &&
                 status.code() != absl::StatusCode::kDeadlineExceeded)) {
    return "";
  }
  const absl::string_view m = status.message();
  if (!t.tls &&
      (absl::StrContains(m, "Socket closed") || absl::StrContains(m, "Connection reset by peer"))) {
    return "traind closed the connection at once: if it serves TLS on this address, add --tls "
           "(or --tls-ca FILE)";
  }
  const std::string lower = absl::AsciiStrToLower(m);
  if (t.tls &&
      (absl::StrContains(lower, "handshake") || absl::StrContains(lower, "wrong_version_number"))) {
    return "the TLS handshake failed: if traind serves plaintext on this address, leave out "
           "--tls; else check --tls-ca and --tls-server-name";
  }
  return "";
}

}  // namespace

bool GlobalOptions::local() const {
  return absl::StartsWith(address, "unix:") || absl::StartsWith(address, "unix-abstract:");
}

std::string GlobalOptions::Encode(const google::protobuf::Message& m, bool pretty) const {
  if (yaml()) return pretty ? ToYaml(m) : absl::StrCat("---\n", ToYaml(m));
  return ToJson(m, pretty);
}

std::unique_ptr<TraindClient> GlobalOptions::MakeClient() const {
  ClientOptions options;
  options.address = address;
  options.timeout_seconds = timeout_seconds;
  options.token = token;
  options.tls = tls;
  options.tls_ca = tls_ca;
  options.tls_cert = tls_cert;
  options.tls_key = tls_key;
  options.tls_server_name = tls_server_name;
  return std::make_unique<TraindClient>(options);
}

int ExitCodeFor(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kOk:
      return kExitOk;
    case absl::StatusCode::kInvalidArgument:
      return kExitUsage;
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kDeadlineExceeded:
      return kExitUnreachable;
    case absl::StatusCode::kPermissionDenied:
    case absl::StatusCode::kUnauthenticated:
      return kExitPermissionDenied;
    case absl::StatusCode::kNotFound:
      return kExitNotFound;
    default:
      return kExitFailed;
  }
}

void PrintError(absl::string_view message) {
  std::string line = absl::StrReplaceAll(message, {{"\r\n", " "}, {"\n", " "}});
  std::cout.flush();
  std::cerr << "trainctl: " << line << std::endl;
}

void SetAddressHint(std::string hint) { AddressHint() = std::move(hint); }

void SetTransportHint(bool tcp, bool tls) { TransportForHint() = Transport{tcp, tls}; }

int Fail(const absl::Status& status) {
  const absl::StatusCode code = status.code();
  const std::string& hint = AddressHint();
  if (const std::string transport = TransportHint(status); !transport.empty()) {
    PrintError(absl::StrCat(status.message(), " (", transport, ")"));
  } else if (!hint.empty() && (code == absl::StatusCode::kUnavailable ||
                               code == absl::StatusCode::kDeadlineExceeded ||
                               code == absl::StatusCode::kUnauthenticated)) {
    PrintError(absl::StrCat(status.message(), " (", hint, ")"));
  } else {
    PrintError(status.message());
  }
  return ExitCodeFor(status);
}

int UsageError(absl::string_view message) {
  PrintError(message);
  return kExitUsage;
}

}  // namespace traind::client
