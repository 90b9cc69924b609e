// FakeDeviceProbe: GPUs whose state a test sets directly.
#ifndef TRAIND_SERVER_TESTING_FAKE_DEVICE_PROBE_H_
#define TRAIND_SERVER_TESTING_FAKE_DEVICE_PROBE_H_

#include <vector>

#include "absl/synchronization/mutex.h"
#include "server/devices/device_probe.h"

namespace traind::server {

class FakeDeviceProbe final : public DeviceProbe {
 public:
  std::string Unavailable() const override { return ""; }
  absl::StatusOr<std::vector<GpuState>> Probe() override {
    absl::MutexLock lock(&mu_);
    ++probes_;
    if (fail_) return absl::UnavailableError("probe failed");
    return gpus_;
  }
  void Set(std::vector<GpuState> gpus) {
    absl::MutexLock lock(&mu_);
    gpus_ = std::move(gpus);
  }
  // GPU i: `used` bytes in use, and these processes on it.
  void SetUsage(size_t i, int64_t used, std::vector<GpuProcess> processes) {
    absl::MutexLock lock(&mu_);
    gpus_[i].used_bytes = used;
    gpus_[i].processes = std::move(processes);
  }
  void set_fail(bool fail) {
    absl::MutexLock lock(&mu_);
    fail_ = fail;
  }

 private:
  absl::Mutex mu_;
  std::vector<GpuState> gpus_;
  bool fail_ = false;
  int probes_ = 0;
};

inline GpuState FakeGpu(const std::string& uuid, int64_t total, int64_t used) {
  GpuState g;
  g.uuid = uuid;
  g.name = "Fake H200";
  g.total_bytes = total;
  g.used_bytes = used;
  return g;
}

}  // namespace traind::server

#endif  // TRAIND_SERVER_TESTING_FAKE_DEVICE_PROBE_H_
