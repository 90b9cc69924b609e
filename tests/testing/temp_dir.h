// Scratch directories for tests, one kit for every test binary (server,
// spec, engine, worker and the integration suites).
//
// Thread-safety: a TempDir is not shared between threads while it changes.
#ifndef TRAIND_TESTS_TESTING_TEMP_DIR_H_
#define TRAIND_TESTS_TESTING_TEMP_DIR_H_

#include <stdlib.h>

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

}  // namespace traind::testing

#endif  // TRAIND_TESTS_TESTING_TEMP_DIR_H_
