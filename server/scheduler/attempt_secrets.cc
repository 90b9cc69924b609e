#include "server/scheduler/attempt_secrets.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <sys/random.h>

#include "absl/strings/str_cat.h"
#include "server/api/auth.h"

namespace traind::server {
namespace {

std::string Hex(absl::string_view raw) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (unsigned char c : raw) {
    out.push_back(kHex[c >> 4]);
    out.push_back(kHex[c & 15]);
  }
  return out;
}

std::string RandomHex(int bytes) { return Hex(RandomBytes(bytes)); }

}  // namespace

std::string RandomBytes(int bytes) {
  std::string raw(bytes, '\0');
  size_t got = 0;
  while (got < raw.size()) {
    ssize_t n = getrandom(raw.data() + got, raw.size() - got, 0);
    if (n > 0) got += n;
  }
  return raw;
}

std::string NewJobId() { return RandomHex(6); }

std::string NewAttemptSecret() { return RandomHex(16); }

std::string AttemptSecret(absl::string_view key, absl::string_view job_id, int task, int attempt) {
  const std::string what = absl::StrCat("traind attempt ", job_id, "/", task, "/", attempt);
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int size = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
       reinterpret_cast<const unsigned char*>(what.data()), what.size(), mac, &size);
  return Hex(absl::string_view(reinterpret_cast<const char*>(mac), 16));
}

bool SecretMatches(absl::string_view expected, absl::string_view presented) {
  return ConstantTimeEquals(expected, presented);
}

}  // namespace traind::server
