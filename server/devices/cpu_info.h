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

}  // namespace traind::server

#endif  // TRAIND_SERVER_DEVICES_CPU_INFO_H_
