// What every trainctl command shares: the global options, the exit codes
// (listed in main.cc's header comment and --help) and the one-line errors
// "trainctl: <message>" on stderr.
//
// Thread-safety: trainctl runs one command on one thread; SetAddressHint is
// called once, before any command.
#ifndef TRAIND_CLIENT_CLI_COMMON_H_
#define TRAIND_CLIENT_CLI_COMMON_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "client/client.h"
#include "google/protobuf/message.h"

namespace traind::client {

enum ExitCode : int {
  kExitOk = 0,
  kExitFailed = 1,
  kExitUsage = 2,
  kExitCancelled = 3,
  kExitUnreachable = 4,
  kExitPermissionDenied = 5,
  kExitNotFound = 6,  // no such job, dataset or artifact
};

// Options shared by every command.
struct GlobalOptions {
  std::string address;
  std::string output = "table";
  double timeout_seconds = 10;
  std::string token;
  std::string token_file;
  bool tls = false;
  std::string tls_ca, tls_cert, tls_key, tls_server_name;

  bool json() const { return output == "json"; }
  bool yaml() const { return output == "yaml"; }
  // json or yaml: machine-readable output.
  bool structured() const { return json() || yaml(); }
  // A unix socket address: traind runs on this machine and reads its files.
  bool local() const;
  // A message in the chosen structured format (pretty: one document).
  std::string Encode(const google::protobuf::Message& m, bool pretty) const;
  // A client for these options (connecting lazily).
  std::unique_ptr<TraindClient> MakeClient() const;
};

// The exit code for a failed call's status.
int ExitCodeFor(const absl::Status& status);

// Writes "trainctl: <message>" (one line) to stderr, after flushing stdout.
void PrintError(absl::string_view message);

// Said after the errors that reaching the default TCP address explains
// (UNAVAILABLE, DEADLINE_EXCEEDED, UNAUTHENTICATED); empty: nothing.
void SetAddressHint(std::string hint);

// How trainctl reaches traind (TCP with or without TLS; unix sockets take
// no TLS), for the hint after a connection that closed at once: a plaintext
// client on a TLS port ("Socket closed") is told of --tls, a TLS client on a
// plaintext port (a failed handshake) that the port may not serve TLS.
void SetTransportHint(bool tcp, bool tls);

// Prints the status's message as an error; returns its exit code.
int Fail(const absl::Status& status);

// Prints `message` as an error; returns kExitUsage.
int UsageError(absl::string_view message);

}  // namespace traind::client

#endif  // TRAIND_CLIENT_CLI_COMMON_H_
