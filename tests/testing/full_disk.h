// A file system that fills up, for tests of what traind does on a full disk:
// a small tmpfs mounted in a mount namespace of the test process (children
// it starts, traind among them, inherit it), so nothing outlives the test.
//
// Call MountSmallTmpfs before the test starts threads (unshare(CLONE_NEWNS)
// needs a single-threaded process); it needs root or user namespaces, and
// says why not otherwise (the test then skips).
#ifndef TRAIND_TESTS_TESTING_FULL_DISK_H_
#define TRAIND_TESTS_TESTING_FULL_DISK_H_

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <sys/mount.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <string>

namespace traind::testing {

// Mounts a tmpfs of `bytes` at `dir`. Empty: mounted; else why not.
inline std::string MountSmallTmpfs(const std::string& dir, int64_t bytes) {
  if (unshare(CLONE_NEWNS) != 0 && unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0) {
    return std::string("no mount namespace: ") + strerror(errno);
  }
  if (mount("none", "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) {
    return std::string("cannot make mounts private: ") + strerror(errno);
  }
  const std::string options = "size=" + std::to_string(bytes) + ",mode=0700";
  if (mount("tmpfs", dir.c_str(), "tmpfs", 0, options.c_str()) != 0) {
    return std::string("cannot mount tmpfs: ") + strerror(errno);
  }
  return "";
}

// Writes to `path` until its file system is full to the last byte; returns
// the bytes written (-1: the file cannot be created).
inline int64_t FillUp(const std::string& path) {
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (fd < 0) return -1;
  const std::string block(64 * 1024, 'x');
  int64_t total = 0;
  for (ssize_t n; (n = write(fd, block.data(), block.size())) > 0;) total += n;
  while (write(fd, "x", 1) == 1) ++total;  // so that not even a small page fits
  close(fd);
  return total;
}

}  // namespace traind::testing

#endif  // TRAIND_TESTS_TESTING_FULL_DISK_H_
