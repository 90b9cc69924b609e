// Random secrets and their comparison, for every part of traind that hands
// out or checks one: job ids, attempt secrets, API tokens, dashboard
// tickets and sessions.
//
// Thread-safety: thread-safe (getrandom and OpenSSL only).
#ifndef TRAIND_SERVER_SECRETS_H_
#define TRAIND_SERVER_SECRETS_H_

#include <string>

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

}  // namespace traind::server

#endif  // TRAIND_SERVER_SECRETS_H_
