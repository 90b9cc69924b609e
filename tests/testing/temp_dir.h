// Scratch directories and files for tests, one kit for every test binary (server,
// spec, engine, worker and the integration suites).
//
// Thread-safety: a TempDir is not shared between threads while it changes.
#ifndef TRAIND_TESTS_TESTING_TEMP_DIR_H_
#define TRAIND_TESTS_TESTING_TEMP_DIR_H_

#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <system_error>

namespace traind::testing {

// A fresh directory under $TEST_TMPDIR (or /tmp), removed with everything in
// it when the object goes. path() is empty when it could not be made.
class TempDir {
 public:
  explicit TempDir(const std::string& prefix = "traind-test") {
    const char* root = std::getenv("TEST_TMPDIR");
    std::string pattern =
        std::string(root != nullptr && *root != '\0' ? root : "/tmp") + "/" + prefix + "-XXXXXX";
    if (mkdtemp(pattern.data()) != nullptr) path_ = pattern;
  }
  ~TempDir() {
    if (path_.empty()) return;
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }

  // path()/name.
  std::string Path(const std::string& name) const { return path_ + "/" + name; }

  // Writes `text` to path()/name (replacing it) and returns that path.
  std::string Write(const std::string& name, const std::string& text) const {
    const std::string p = Path(name);
    std::ofstream(p, std::ios::binary | std::ios::trunc) << text;
    return p;
  }

 private:
  std::string path_;
};

// A file with the given contents under $TEST_TMPDIR (or /tmp), deleted with
// the object. path() is empty when it could not be made.
class TempFile {
 public:
  explicit TempFile(const std::string& contents, const std::string& suffix = ".csv") {
    const char* root = std::getenv("TEST_TMPDIR");
    std::string pattern = std::string(root != nullptr && *root != '\0' ? root : "/tmp") +
                          "/traind-test-XXXXXX" + suffix;
    const int fd = mkstemps(pattern.data(), static_cast<int>(suffix.size()));
    if (fd < 0) return;
    const ssize_t written = ::write(fd, contents.data(), contents.size());
    ::close(fd);
    if (written == static_cast<ssize_t>(contents.size())) {
      path_ = pattern;
    } else {
      std::remove(pattern.c_str());
    }
  }
  ~TempFile() {
    if (!path_.empty()) std::remove(path_.c_str());
  }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;

  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace traind::testing

#endif  // TRAIND_TESTS_TESTING_TEMP_DIR_H_
