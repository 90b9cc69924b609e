#include "server/secrets.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <sys/random.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

#include "absl/strings/str_cat.h"

namespace traind::server {

std::string RandomBytes(int bytes) {
  std::string raw(bytes, '\0');
  size_t got = 0;
  while (got < raw.size()) {
    ssize_t n = getrandom(raw.data() + got, raw.size() - got, 0);
    if (n > 0) got += n;
  }
  return raw;
}

std::string HexOf(absl::string_view raw) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(raw.size() * 2);
  for (unsigned char c : raw) {
    out.push_back(kHex[c >> 4]);
    out.push_back(kHex[c & 15]);
  }
  return out;
}

std::string RandomHex(int bytes) { return HexOf(RandomBytes(bytes)); }

bool ConstantTimeEquals(absl::string_view a, absl::string_view b) {
  if (a.size() != b.size()) return false;
  return a.empty() || CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

namespace {

struct FileCloser {
  void operator()(FILE* f) const { fclose(f); }
};

// `path` opened for reading if it is a readable regular file; else the
// error names `setting` and the file.
absl::Status OpenTlsFile(const char* setting, const std::string& path,
                         std::unique_ptr<FILE, FileCloser>* file) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(setting, ": ", path, ": ", std::strerror(errno)));
  }
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat(setting, ": ", path, " is not a regular file"));
  }
  file->reset(fopen(path.c_str(), "r"));
  if (*file == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(setting, ": ", path, ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

// Never asks for a passphrase (OpenSSL's default would read the terminal).
int NoPassphrase(char*, int, int, void*) { return 0; }

}  // namespace

absl::Status CheckTlsFiles(const std::string& cert, const std::string& key,
                           const std::string& client_ca) {
  std::unique_ptr<FILE, FileCloser> f;
  if (absl::Status s = OpenTlsFile("tls.cert", cert, &f); !s.ok()) return s;
  std::unique_ptr<X509, decltype(&X509_free)> x509(
      PEM_read_X509(f.get(), nullptr, nullptr, nullptr), &X509_free);
  if (x509 == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("tls.cert: ", cert, ": no PEM certificate in it"));
  }
  if (absl::Status s = OpenTlsFile("tls.key", key, &f); !s.ok()) return s;
  std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)> pkey(
      PEM_read_PrivateKey(f.get(), nullptr, NoPassphrase, nullptr), &EVP_PKEY_free);
  if (pkey == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("tls.key: ", key, ": not a PEM private key (or one with a passphrase)"));
  }
  if (X509_check_private_key(x509.get(), pkey.get()) != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("tls.key: ", key, " is not the key of tls.cert ", cert));
  }
  if (!client_ca.empty()) {
    if (absl::Status s = OpenTlsFile("tls.client_ca", client_ca, &f); !s.ok()) return s;
    std::unique_ptr<X509, decltype(&X509_free)> ca(
        PEM_read_X509(f.get(), nullptr, nullptr, nullptr), &X509_free);
    if (ca == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("tls.client_ca: ", client_ca, ": no PEM certificate in it"));
    }
  }
  return absl::OkStatus();
}

}  // namespace traind::server
