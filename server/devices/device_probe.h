// DeviceProbe: what the GPUs of this machine look like right now.
//
// The scheduler depends only on this interface: NVML in production (loaded
// with dlopen, so traind neither links nor needs the NVIDIA driver), a
// state file in tests, a fake in unit tests.
#ifndef TRAIND_SERVER_DEVICES_DEVICE_PROBE_H_
#define TRAIND_SERVER_DEVICES_DEVICE_PROBE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace traind::server {

struct GpuProcess {
  int pid = 0;
  int64_t used_bytes = 0;
};

struct GpuState {
  std::string uuid;  // "GPU-…": what CUDA_VISIBLE_DEVICES gets
  std::string name;
  int64_t total_bytes = 0;
  int64_t used_bytes = 0;
  std::vector<GpuProcess> processes;  // compute processes
};

class DeviceProbe {
 public:
  virtual ~DeviceProbe() = default;
  // Why this probe sees no GPU (e.g. no NVIDIA driver); "" when it works.
  virtual std::string Unavailable() const = 0;
  // The GPUs, in a stable order. An error means the probe failed this time.
  virtual absl::StatusOr<std::vector<GpuState>> Probe() = 0;
};

// NVML through dlopen("libnvidia-ml.so.1"). Never fails to construct; a
// machine without the library gets a probe with Unavailable() set.
std::unique_ptr<DeviceProbe> NewNvmlProbe();

// Reads GPU states from a text file on every Probe(), for tests and for
// rehearsing GPU scheduling on machines without GPUs. One GPU per line:
//   UUID TOTAL_BYTES USED_BYTES [PID:BYTES ...]   # comment
// A missing file means no GPUs.
std::unique_ptr<DeviceProbe> NewFileProbe(std::string path);

}  // namespace traind::server

#endif  // TRAIND_SERVER_DEVICES_DEVICE_PROBE_H_
