#include "server/scheduler/attempt_secrets.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "absl/strings/str_cat.h"
#include "server/secrets.h"

namespace traind::server {

std::string NewAttemptSecret() { return RandomHex(16); }

std::string AttemptSecret(absl::string_view key, absl::string_view job_id, int task, int attempt) {
  const std::string what = absl::StrCat("traind attempt ", job_id, "/", task, "/", attempt);
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int size = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
       reinterpret_cast<const unsigned char*>(what.data()), what.size(), mac, &size);
  return HexOf(absl::string_view(reinterpret_cast<const char*>(mac), 16));
}

bool SecretMatches(absl::string_view expected, absl::string_view presented) {
  return ConstantTimeEquals(expected, presented);
}

}  // namespace traind::server
