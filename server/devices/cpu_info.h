// What ListDevices reports about this machine's CPU.
#ifndef TRAIND_SERVER_DEVICES_CPU_INFO_H_
#define TRAIND_SERVER_DEVICES_CPU_INFO_H_

#include <cstdint>
#include <string>

namespace traind::server {

struct CpuInfo {
  std::string model;  // "model name" of /proc/cpuinfo
  int cores = 0;      // CPUs this process may run on
  int64_t memory_total_bytes = 0;
  int64_t memory_available_bytes = 0;
};

CpuInfo ReadCpuInfo();

// The memory this process and its children may use: `info`'s MemTotal, or
// the cgroup v2 memory.max above this process when that is lower (a
// container). 0 when neither is known.
int64_t HostMemoryLimitBytes(const CpuInfo& info);

}  // namespace traind::server

#endif  // TRAIND_SERVER_DEVICES_CPU_INFO_H_
