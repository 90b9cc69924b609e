// Temporary files for tests.
#ifndef TRAIND_WORKER_ENGINE_TESTING_TEMP_FILE_H_
#define TRAIND_WORKER_ENGINE_TESTING_TEMP_FILE_H_

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

namespace traind::engine::testing {

// A file with the given contents, deleted with the object.
class TempFile {
 public:
  explicit TempFile(const std::string& contents, const std::string& suffix = ".csv") {
    const char* dir = std::getenv("TEST_TMPDIR");
    std::string pattern =
        std::string(dir != nullptr ? dir : "/tmp") + "/traind_engine_XXXXXX" + suffix;
    const int fd = mkstemps(pattern.data(), static_cast<int>(suffix.size()));
    if (fd >= 0) {
      const ssize_t written = ::write(fd, contents.data(), contents.size());
      (void)written;
      ::close(fd);
      path_ = pattern;
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

}  // namespace traind::engine::testing

#endif  // TRAIND_WORKER_ENGINE_TESTING_TEMP_FILE_H_
