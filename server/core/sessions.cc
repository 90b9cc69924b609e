#include "server/core/sessions.h"

#include <sys/random.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "absl/strings/escaping.h"
#include "base/log.h"

namespace traind::server {
namespace {

// The map key of a secret: its SHA-256, so a lookup compares hashes
// (knowing where two hashes differ tells nothing about the secret).
std::string Key(absl::string_view secret) { return Sha256Hex(secret); }

}  // namespace

std::string RandomSecretHex() {
  unsigned char buf[32];
  size_t got = 0;
  while (got < sizeof(buf)) {
    ssize_t n = getrandom(buf + got, sizeof(buf) - got, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      LogError("getrandom failed: %s", strerror(errno));
      std::abort();  // never hand out a predictable secret
    }
    got += static_cast<size_t>(n);
  }
  return absl::BytesToHexString(absl::string_view(reinterpret_cast<const char*>(buf), sizeof(buf)));
}

SessionStore::SessionStore(SessionOptions options) : options_(std::move(options)) {}

absl::Time SessionStore::Now() const { return options_.now ? options_.now() : absl::Now(); }

void SessionStore::Prune(std::map<std::string, Entry>* entries, absl::Time now, size_t max) {
  for (auto it = entries->begin(); it != entries->end();) {
    it = it->second.expire_time <= now ? entries->erase(it) : std::next(it);
  }
  while (entries->size() > max) {
    auto oldest = entries->begin();
    for (auto it = entries->begin(); it != entries->end(); ++it) {
      if (it->second.created < oldest->second.created) oldest = it;
    }
    entries->erase(oldest);
  }
}

void SessionStore::PruneCaller(std::map<std::string, Entry>* entries, const std::string& name,
                               size_t max) {
  for (;;) {
    size_t count = 0;
    auto oldest = entries->end();
    for (auto it = entries->begin(); it != entries->end(); ++it) {
      if (it->second.caller.name != name) continue;
      ++count;
      if (oldest == entries->end() || it->second.created < oldest->second.created) oldest = it;
    }
    if (count <= max) return;
    entries->erase(oldest);
  }
}

SessionStore::Ticket SessionStore::NewTicket(const Caller& caller) {
  Ticket t;
  t.secret = RandomSecretHex();
  const absl::Time now = Now();
  t.expire_time = now + options_.ticket_ttl;
  absl::MutexLock lock(&mu_);
  Prune(&tickets_, now, options_.max_tickets - 1);
  PruneCaller(&tickets_, caller.name, options_.max_tickets_per_caller - 1);
  tickets_[Key(t.secret)] = Entry{caller, t.expire_time, now};
  return t;
}

std::optional<std::string> SessionStore::RedeemTicket(absl::string_view ticket) {
  if (ticket.empty()) return std::nullopt;
  const std::string key = Key(ticket);
  absl::MutexLock lock(&mu_);
  auto it = tickets_.find(key);
  if (it == tickets_.end()) return std::nullopt;
  Entry e = std::move(it->second);
  tickets_.erase(it);  // once only, even when expired
  if (e.expire_time <= Now()) return std::nullopt;
  return NewSessionLocked(e.caller);
}

std::string SessionStore::NewSession(const Caller& caller) {
  absl::MutexLock lock(&mu_);
  return NewSessionLocked(caller);
}

std::string SessionStore::NewSessionLocked(const Caller& caller) {
  std::string id = RandomSecretHex();
  const absl::Time now = Now();
  Prune(&sessions_, now, options_.max_sessions - 1);
  PruneCaller(&sessions_, caller.name, options_.max_sessions_per_caller - 1);
  sessions_[Key(id)] = Entry{caller, now + options_.session_ttl, now};
  return id;
}

std::optional<Caller> SessionStore::Lookup(absl::string_view session_id) {
  if (session_id.empty()) return std::nullopt;
  const std::string key = Key(session_id);
  absl::MutexLock lock(&mu_);
  auto it = sessions_.find(key);
  if (it == sessions_.end()) return std::nullopt;
  if (it->second.expire_time <= Now()) {
    sessions_.erase(it);
    return std::nullopt;
  }
  return it->second.caller;
}

void SessionStore::End(absl::string_view session_id) {
  const std::string key = Key(session_id);
  absl::MutexLock lock(&mu_);
  sessions_.erase(key);
}

}  // namespace traind::server
