#include "worker/capabilities.h"

#include <cstdio>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "worker/cuda_plugin_loader.h"
#include "worker/engine/backend/cpu/cpu_backend.h"

namespace traind::worker {

int PrintCapabilities() {
  std::string tokens = "cpu";
  if (engine::CpuSupportsBf16()) tokens += " cpu-bf16";
  absl::StatusOr<std::unique_ptr<CudaPlugin>> plugin = CudaPlugin::LoadDefault();
  std::string reason;
  if (!plugin.ok()) {
    std::fprintf(stderr, "traind-worker: no cuda backend: %s\n",
                 std::string(plugin.status().message()).c_str());
  } else if ((*plugin)->DeviceCount(&reason) == 0) {
    std::fprintf(stderr, "traind-worker: no cuda backend: %s (plugin %s)\n", reason.c_str(),
                 (*plugin)->path().c_str());
  } else {
    tokens += " cuda";
  }
  std::printf("%s\n", tokens.c_str());
  return 0;
}

}  // namespace traind::worker
