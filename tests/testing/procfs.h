// What /proc says of a process, for the tests that watch traind's own
// processes (its children, the worker zygote, its memory).
#ifndef TRAIND_TESTS_TESTING_PROCFS_H_
#define TRAIND_TESTS_TESTING_PROCFS_H_

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace traind::testing {

// The process's command line, its arguments separated by NULs ("" when it
// is gone).
inline std::string ProcCmdline(int pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/cmdline");
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// The children of `parent`, in any state, with their state letter from
// /proc/PID/stat ('Z' for a zombie).
struct ProcChild {
  int pid;
  char state;
};
inline std::vector<ProcChild> ChildrenOf(int parent) {
  std::vector<ProcChild> children;
  std::error_code ec;
  for (const std::filesystem::directory_entry& e :
       std::filesystem::directory_iterator("/proc", ec)) {
    const std::string name = e.path().filename().string();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream in(e.path() / "stat");
    std::string line;
    if (!std::getline(in, line)) continue;
    // "pid (comm) state ppid ...": comm may hold spaces and parentheses.
    const size_t close = line.rfind(')');
    if (close == std::string::npos || line.size() < close + 4) continue;
    const char state = line[close + 2];
    if (std::atoi(line.c_str() + close + 4) == parent) children.push_back({std::stoi(name), state});
  }
  return children;
}

// A "Name: N kB" field of /proc/PID/status (VmRSS, VmHWM, ...), in KiB; -1
// when it has none.
inline int64_t ProcStatusKiB(int pid, const std::string& field) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string key;
  int64_t v = -1;
  while (in >> key) {
    if (key == field + ":") {
      in >> v;
      return v;
    }
  }
  return -1;
}

}  // namespace traind::testing

#endif  // TRAIND_TESTS_TESTING_PROCFS_H_
