#include "server/scheduler/attempt_secrets.h"

#include <sys/random.h>

#include "server/api/auth.h"

namespace traind::server {
namespace {

std::string RandomHex(int bytes) {
  std::string raw(bytes, '\0');
  size_t got = 0;
  while (got < raw.size()) {
    ssize_t n = getrandom(raw.data() + got, raw.size() - got, 0);
    if (n > 0) got += n;
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (unsigned char c : raw) {
    out.push_back(kHex[c >> 4]);
    out.push_back(kHex[c & 15]);
  }
  return out;
}

}  // namespace

std::string NewJobId() { return RandomHex(6); }

std::string NewAttemptSecret() { return RandomHex(16); }

bool SecretMatches(absl::string_view expected, absl::string_view presented) {
  return ConstantTimeEquals(expected, presented);
}

}  // namespace traind::server
