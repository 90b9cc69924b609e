#include "server/devices/cpu_info.h"

#include <sched.h>

#include <fstream>
#include <sstream>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"

namespace traind::server {

CpuInfo ReadCpuInfo() {
  CpuInfo info;
  {
    std::ifstream in("/proc/cpuinfo");
    std::string line;
    while (std::getline(in, line)) {
      if (absl::StartsWith(line, "model name")) {
        size_t colon = line.find(':');
        if (colon != std::string::npos) {
          info.model = std::string(absl::StripAsciiWhitespace(line.substr(colon + 1)));
        }
        break;
      }
    }
  }
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    info.cores = CPU_COUNT(&set);
  } else {
    info.cores = static_cast<int>(std::thread::hardware_concurrency());
  }
  std::ifstream in("/proc/meminfo");
  std::string key, unit;
  int64_t kib = 0;
  while (in >> key >> kib) {
    std::getline(in, unit);
    if (key == "MemTotal:") info.memory_total_bytes = kib * 1024;
    if (key == "MemAvailable:") info.memory_available_bytes = kib * 1024;
  }
  return info;
}

int64_t HostMemoryLimitBytes(const CpuInfo& info) {
  int64_t limit = info.memory_total_bytes;
  std::ifstream cgroup("/proc/self/cgroup");
  std::string line;
  while (std::getline(cgroup, line)) {
    if (!absl::StartsWith(line, "0::")) continue;  // cgroup v2
    std::ifstream max("/sys/fs/cgroup" + line.substr(3) + "/memory.max");
    std::string value;  // bytes, or "max"
    int64_t bytes = 0;
    if (max >> value && absl::SimpleAtoi(value, &bytes) && bytes > 0 &&
        (limit == 0 || bytes < limit)) {
      limit = bytes;
    }
  }
  return limit;
}

}  // namespace traind::server
