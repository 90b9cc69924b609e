// Browser sessions for the HTTP side door: minted over either front end
// (gRPC's CreateDashboardLogin), redeemed and checked by http/. Holds no
// HTTP itself (cookies are http_server.cc's).
//
// A browser's EventSource cannot send an authorization header, so the web
// dashboard authenticates with a cookie: a caller who holds a token (or the
// unix socket) asks for a one-time ticket (CreateDashboardLogin, printed by
// `trainctl dashboard` as a link, as Jupyter's token URL does); the browser
// exchanges it once, within a minute, for a session id that it keeps in an
// HttpOnly cookie. A browser can also exchange a bearer token for a session
// (the login form). A session acts as the caller that created it, with its
// role, and lasts `session_ttl`.
//
// Only SHA-256 hashes of tickets and session ids are kept, so the memory of
// traind holds no usable secret. Sessions live in memory: a restart of
// traind logs every browser out.
//
// Thread-safety: thread-safe.
#ifndef TRAIND_SERVER_CORE_SESSIONS_H_
#define TRAIND_SERVER_CORE_SESSIONS_H_

#include <cstddef>
#include <functional>
#include <map>
#include <optional>
#include <string>

#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/core/auth.h"

namespace traind::server {

struct SessionOptions {
  absl::Duration ticket_ttl = absl::Minutes(1);
  absl::Duration session_ttl = absl::Hours(12);
  // Sessions kept at once; the oldest goes when a new one would exceed it.
  size_t max_sessions = 10000;
  // Tickets not yet redeemed, at most.
  size_t max_tickets = 1000;
  // Per caller (token name; the unix socket's "local"): a new one past it
  // replaces that caller's oldest, so no caller pushes out another's.
  size_t max_sessions_per_caller = 100;
  size_t max_tickets_per_caller = 20;
  // Where the time comes from (absl::Now when null).
  std::function<absl::Time()> now;
};

class SessionStore final {
 public:
  explicit SessionStore(SessionOptions options = {});

  struct Ticket {
    std::string secret;  // 64 hex characters
    absl::Time expire_time;
  };
  // A one-time ticket that logs a browser in as `caller`.
  Ticket NewTicket(const Caller& caller);
  // The ticket's session id (a new session as the ticket's caller), or
  // nullopt if the ticket is unknown, was used or has expired.
  std::optional<std::string> RedeemTicket(absl::string_view ticket);
  // A new session as `caller` (for a browser that sent a valid token).
  std::string NewSession(const Caller& caller);
  // The caller of a live session.
  std::optional<Caller> Lookup(absl::string_view session_id);
  // Ends a session (logout); unknown ids are ignored.
  void End(absl::string_view session_id);

  absl::Duration session_ttl() const { return options_.session_ttl; }

 private:
  struct Entry {
    Caller caller;
    absl::Time expire_time;
    absl::Time created;
  };
  absl::Time Now() const;
  // Drops expired entries, then the oldest while over `max`.
  static void Prune(std::map<std::string, Entry>* entries, absl::Time now, size_t max);
  // Drops `name`'s oldest entries while it holds more than `max`.
  static void PruneCaller(std::map<std::string, Entry>* entries, const std::string& name,
                          size_t max);
  std::string NewSessionLocked(const Caller& caller) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const SessionOptions options_;
  absl::Mutex mu_;
  // Keyed by the SHA-256 (hex) of the secret.
  std::map<std::string, Entry> tickets_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, Entry> sessions_ ABSL_GUARDED_BY(mu_);
};

// 32 random bytes from the kernel, as 64 hex characters.
std::string RandomSecretHex();

}  // namespace traind::server

#endif  // TRAIND_SERVER_CORE_SESSIONS_H_
