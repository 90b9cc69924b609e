// Random secrets and their comparison, for every part of traind that hands
// out or checks one: job ids, attempt secrets, API tokens, dashboard
// tickets and sessions.
//
// Thread-safety: thread-safe (getrandom and OpenSSL only).
#ifndef TRAIND_SERVER_SECRETS_H_
#define TRAIND_SERVER_SECRETS_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace traind::server {

// `bytes` random bytes (getrandom).
std::string RandomBytes(int bytes);
// 2 * `bytes` random hex digits.
std::string RandomHex(int bytes);
// Lower-case hex of `raw`'s bytes.
std::string HexOf(absl::string_view raw);
// Whether `a` equals `b`, in time that depends on their lengths only (never
// on where they differ): for comparing secrets and token hashes.
bool ConstantTimeEquals(absl::string_view a, absl::string_view b);

// Whether the TLS files are usable, before any listener is built (gRPC's
// own error is only "cannot listen"): each a readable regular file, `cert`
// holding a PEM certificate, `key` a PEM private key that is `cert`'s, and
// `client_ca` (if not empty) a PEM certificate. The error names the
// setting (tls.cert, tls.key, tls.client_ca) and the file.
absl::Status CheckTlsFiles(const std::string& cert, const std::string& key,
                           const std::string& client_ca);

}  // namespace traind::server

#endif  // TRAIND_SERVER_SECRETS_H_
