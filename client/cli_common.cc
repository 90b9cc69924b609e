#include "client/cli_common.h"

#include <iostream>
#include <utility>

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

int Fail(const absl::Status& status) {
  const absl::StatusCode code = status.code();
  const std::string& hint = AddressHint();
  if (!hint.empty() &&
      (code == absl::StatusCode::kUnavailable || code == absl::StatusCode::kDeadlineExceeded ||
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
