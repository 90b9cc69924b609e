// NVML, loaded at run time. Only the few stable C entry points traind needs
// are declared here (the NVML ABI; nvml.h comes with the driver, not with
// Debian or the CUDA toolkit on a build machine).
#include <dlfcn.h>

#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "server/devices/device_probe.h"

namespace traind::server {
namespace {

using nvmlReturn_t = int;
using nvmlDevice_t = void*;
constexpr nvmlReturn_t kNvmlSuccess = 0;
constexpr nvmlReturn_t kNvmlInsufficientSize = 7;

struct NvmlMemory {
  unsigned long long total, free, used;
};
// nvmlProcessInfo_v2_t / _v3_t (same layout).
struct NvmlProcessInfo {
  unsigned int pid;
  unsigned long long used_gpu_memory;
  unsigned int gpu_instance_id;
  unsigned int compute_instance_id;
};

class NvmlProbe final : public DeviceProbe {
 public:
  NvmlProbe() {
    handle_ = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (handle_ == nullptr) {
      unavailable_ = "libnvidia-ml.so.1 not found (no NVIDIA driver): no GPUs";
      return;
    }
    bool ok = Load(init_, "nvmlInit_v2") && Load(shutdown_, "nvmlShutdown") &&
              Load(count_, "nvmlDeviceGetCount_v2") &&
              Load(by_index_, "nvmlDeviceGetHandleByIndex_v2") &&
              Load(name_, "nvmlDeviceGetName") && Load(uuid_, "nvmlDeviceGetUUID") &&
              Load(memory_, "nvmlDeviceGetMemoryInfo") && Load(error_string_, "nvmlErrorString");
    if (!Load(processes_, "nvmlDeviceGetComputeRunningProcesses_v3") &&
        !Load(processes_, "nvmlDeviceGetComputeRunningProcesses_v2")) {
      ok = false;
    }
    if (!ok) {
      unavailable_ = "libnvidia-ml.so.1 lacks the NVML functions traind needs (driver too old)";
      return;
    }
    nvmlReturn_t r = init_();
    if (r != kNvmlSuccess) {
      unavailable_ = absl::StrCat("nvmlInit failed: ", error_string_(r));
      return;
    }
    initialized_ = true;
  }

  ~NvmlProbe() override {
    if (initialized_) shutdown_();
    if (handle_ != nullptr) dlclose(handle_);
  }

  std::string Unavailable() const override { return unavailable_; }

  absl::StatusOr<std::vector<GpuState>> Probe() override {
    std::vector<GpuState> gpus;
    if (!initialized_) return gpus;
    unsigned int n = 0;
    if (nvmlReturn_t r = count_(&n); r != kNvmlSuccess) return Error("nvmlDeviceGetCount", r);
    for (unsigned int i = 0; i < n; ++i) {
      nvmlDevice_t dev = nullptr;
      if (nvmlReturn_t r = by_index_(i, &dev); r != kNvmlSuccess) {
        return Error("nvmlDeviceGetHandleByIndex", r);
      }
      GpuState g;
      char buf[256] = {0};
      if (name_(dev, buf, sizeof(buf)) == kNvmlSuccess) g.name = buf;
      char ubuf[96] = {0};
      if (nvmlReturn_t r = uuid_(dev, ubuf, sizeof(ubuf)); r != kNvmlSuccess) {
        return Error("nvmlDeviceGetUUID", r);
      }
      g.uuid = ubuf;
      NvmlMemory mem{};
      if (nvmlReturn_t r = memory_(dev, &mem); r != kNvmlSuccess) {
        return Error("nvmlDeviceGetMemoryInfo", r);
      }
      g.total_bytes = static_cast<int64_t>(mem.total);
      g.used_bytes = static_cast<int64_t>(mem.used);
      std::vector<NvmlProcessInfo> procs(16);
      for (;;) {
        unsigned int count = static_cast<unsigned int>(procs.size());
        nvmlReturn_t r = processes_(dev, &count, procs.data());
        if (r == kNvmlInsufficientSize) {
          procs.resize(count + 8);
          continue;
        }
        if (r != kNvmlSuccess) return Error("nvmlDeviceGetComputeRunningProcesses", r);
        procs.resize(count);
        break;
      }
      for (const NvmlProcessInfo& p : procs) {
        g.processes.push_back({static_cast<int>(p.pid), static_cast<int64_t>(p.used_gpu_memory)});
      }
      gpus.push_back(std::move(g));
    }
    return gpus;
  }

 private:
  template <typename F>
  bool Load(F& f, const char* symbol) {
    f = reinterpret_cast<F>(dlsym(handle_, symbol));
    return f != nullptr;
  }
  absl::Status Error(const char* what, nvmlReturn_t r) {
    return absl::UnavailableError(absl::StrCat(what, ": ", error_string_(r)));
  }

  void* handle_ = nullptr;
  bool initialized_ = false;
  std::string unavailable_;
  nvmlReturn_t (*init_)() = nullptr;
  nvmlReturn_t (*shutdown_)() = nullptr;
  nvmlReturn_t (*count_)(unsigned int*) = nullptr;
  nvmlReturn_t (*by_index_)(unsigned int, nvmlDevice_t*) = nullptr;
  nvmlReturn_t (*name_)(nvmlDevice_t, char*, unsigned int) = nullptr;
  nvmlReturn_t (*uuid_)(nvmlDevice_t, char*, unsigned int) = nullptr;
  nvmlReturn_t (*memory_)(nvmlDevice_t, NvmlMemory*) = nullptr;
  nvmlReturn_t (*processes_)(nvmlDevice_t, unsigned int*, NvmlProcessInfo*) = nullptr;
  const char* (*error_string_)(nvmlReturn_t) = nullptr;
};

class FileProbe final : public DeviceProbe {
 public:
  explicit FileProbe(std::string path) : path_(std::move(path)) {}
  std::string Unavailable() const override { return ""; }
  absl::StatusOr<std::vector<GpuState>> Probe() override {
    std::vector<GpuState> gpus;
    std::ifstream in(path_);
    if (!in) return gpus;
    std::string line;
    int number = 0;
    while (std::getline(in, line)) {
      ++number;
      line = line.substr(0, line.find('#'));
      std::vector<std::string> f = absl::StrSplit(line, ' ', absl::SkipWhitespace());
      if (f.empty()) continue;
      GpuState g;
      if (f.size() < 3 || !absl::SimpleAtoi(f[1], &g.total_bytes) ||
          !absl::SimpleAtoi(f[2], &g.used_bytes)) {
        return absl::InvalidArgumentError(absl::StrCat(
            path_, ":", number, ": expected UUID TOTAL_BYTES USED_BYTES [PID:BYTES ...]"));
      }
      g.uuid = f[0];
      g.name = "file-probe GPU";
      for (size_t i = 3; i < f.size(); ++i) {
        std::pair<std::string, std::string> kv = absl::StrSplit(f[i], ':');
        GpuProcess p;
        if (!absl::SimpleAtoi(kv.first, &p.pid) || !absl::SimpleAtoi(kv.second, &p.used_bytes)) {
          return absl::InvalidArgumentError(
              absl::StrCat(path_, ":", number, ": bad process \"", f[i], "\" (PID:BYTES)"));
        }
        g.processes.push_back(p);
      }
      gpus.push_back(std::move(g));
    }
    return gpus;
  }

 private:
  std::string path_;
};

}  // namespace

std::unique_ptr<DeviceProbe> NewNvmlProbe() { return std::make_unique<NvmlProbe>(); }
std::unique_ptr<DeviceProbe> NewFileProbe(std::string path) {
  return std::make_unique<FileProbe>(std::move(path));
}

}  // namespace traind::server
