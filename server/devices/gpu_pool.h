// GpuPool: which GPUs a task may be placed on.
//
//   IDLE ──allocate──▶ BUSY ──worker exits──▶ DRAINING ──released──▶ IDLE
//                                                 └──drain timeout──▶ UNHEALTHY
//
// A GPU goes back to IDLE only when the probe shows no compute process of
// the worker that used it and its used memory is back within a tolerance of
// the idle baseline measured when traind started: the check users of
// in-process training loops do by hand between folds. A GPU that does not
// drain in time is UNHEALTHY and never used again by this daemon.
//
// Thread-compatible: the scheduler calls it under its own lock.
#ifndef TRAIND_SERVER_DEVICES_GPU_POOL_H_
#define TRAIND_SERVER_DEVICES_GPU_POOL_H_

#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "server/devices/device_probe.h"

namespace traind::server {

struct GpuPoolOptions {
  absl::Duration drain_timeout = absl::Seconds(60);
  // Used memory above the idle baseline that still counts as released
  // (the driver's own allocations move a little).
  int64_t drain_tolerance_bytes = 256ll << 20;
};

class GpuPool final {
 public:
  enum class State { kIdle, kBusy, kDraining, kUnhealthy };
  struct Gpu {
    int index = 0;
    GpuState last;  // latest probe
    int64_t baseline_used_bytes = 0;
    State state = State::kIdle;
    int pid = 0;  // BUSY/DRAINING: the worker
    absl::Time draining_since;
    std::string note;  // why UNHEALTHY
  };

  // `probe` must outlive the pool; null means no GPUs.
  GpuPool(DeviceProbe* probe, GpuPoolOptions options);

  // First probe: the GPUs and their idle baselines.
  absl::Status Init();
  // Probes again and moves DRAINING GPUs on. Returns one message per GPU
  // that became IDLE or UNHEALTHY.
  std::vector<std::string> Refresh(absl::Time now);
  // Refresh in two steps, for a caller that probes without its lock (a
  // driver call): the probe's result `states` moves the pool on.
  std::vector<std::string> Update(absl::Time now,
                                  const absl::StatusOr<std::vector<GpuState>>& states);
  // `count` IDLE GPUs with at least `bytes` free each, none of them in
  // `avoid`, or nothing.
  std::optional<std::vector<int>> Allocate(int count, int64_t bytes,
                                           const std::set<int>& avoid = {}) const;
  void MarkBusy(const std::vector<int>& gpus, int pid);
  void Release(const std::vector<int>& gpus, absl::Time now);

  bool AnyDraining() const;
  bool AnyBusyOrDraining() const;
  int Usable() const;             // not UNHEALTHY
  int64_t MaxTotalBytes() const;  // of usable GPUs
  const std::vector<Gpu>& gpus() const { return gpus_; }
  std::string unavailable() const;

 private:
  DeviceProbe* const probe_;
  const GpuPoolOptions options_;
  std::vector<Gpu> gpus_;
  std::string probe_error_;
};

const char* GpuStateName(GpuPool::State s);

}  // namespace traind::server

#endif  // TRAIND_SERVER_DEVICES_GPU_POOL_H_
