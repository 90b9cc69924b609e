#include "worker/cuda_plugin_loader.h"

#include <dlfcn.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace traind::worker {
namespace {

std::string ExecutableDir() {
  char buf[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return "";
  std::string exe(buf, static_cast<size_t>(n));
  const size_t slash = exe.rfind('/');
  return slash == std::string::npos ? std::string() : exe.substr(0, slash);
}

}  // namespace

std::vector<std::string> CudaPlugin::DefaultSearchPath() {
  const std::string dir = ExecutableDir();
  if (dir.empty()) return {};
  return {absl::StrCat(dir, "/", engine::kCudaPluginFileName),
          absl::StrCat(dir, "/../lib/traind/", engine::kCudaPluginFileName)};
}

absl::StatusOr<std::unique_ptr<CudaPlugin>> CudaPlugin::Load(const std::string& path) {
  // RTLD_LOCAL: its symbols serve only itself. It is never dlclose()d.
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* error = dlerror();
    // dlerror() names the file that failed: the plugin or a library it needs.
    return absl::FailedPreconditionError(absl::StrCat("cannot load the CUDA plugin ", path, ": ",
                                                      error != nullptr ? error : "dlopen failed"));
  }
  dlerror();
  void* symbol = dlsym(handle, engine::kCudaPluginEntryPoint);
  if (symbol == nullptr) {
    dlclose(handle);
    return absl::FailedPreconditionError(absl::StrCat("cannot load the CUDA plugin: ", path,
                                                      " has no ", engine::kCudaPluginEntryPoint,
                                                      " (not a traind CUDA plugin)"));
  }
  auto entry = reinterpret_cast<engine::CudaPluginEntryPoint>(symbol);
  const engine::CudaPluginApi* api = entry(engine::kCudaPluginAbiVersion);
  if (api == nullptr || api->abi_version != engine::kCudaPluginAbiVersion ||
      api->struct_size != sizeof(engine::CudaPluginApi)) {
    // Keep it loaded: a module may not support being unloaded cleanly.
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot load the CUDA plugin: ", path, " was built for another traind-worker (plugin ABI ",
        api != nullptr ? absl::StrCat(api->abi_version) : std::string("unknown"), ", expected ",
        engine::kCudaPluginAbiVersion, "); install the plugin of this build"));
  }
  return std::unique_ptr<CudaPlugin>(new CudaPlugin(path, api));
}

absl::StatusOr<std::unique_ptr<CudaPlugin>> CudaPlugin::LoadDefault() {
  const std::vector<std::string> candidates = DefaultSearchPath();
  for (const std::string& path : candidates) {
    if (access(path.c_str(), F_OK) != 0) continue;
    // The first one that exists decides: a broken plugin is reported, not
    // skipped for another one.
    return Load(path);
  }
  return absl::FailedPreconditionError(
      absl::StrCat("no CUDA plugin: ", engine::kCudaPluginFileName, " not found (looked for ",
                   candidates.empty() ? std::string("nothing: /proc/self/exe is unreadable")
                                      : absl::StrJoin(candidates, ", "),
                   "); this traind-worker was built without CUDA, or the plugin was not "
                   "installed beside it"));
}

int CudaPlugin::DeviceCount(std::string* reason) const {
  std::string why;
  const int count = api_->device_count(&why);
  if (reason != nullptr) *reason = std::move(why);
  return count;
}

absl::StatusOr<std::unique_ptr<engine::Backend>> CudaPlugin::CreateBackend(
    int device, traind::v1::Precision precision) const {
  std::unique_ptr<engine::Backend> backend;
  if (absl::Status s = api_->create_backend(device, precision, &backend); !s.ok()) return s;
  return backend;
}

absl::StatusOr<std::string> CudaPlugin::NewNcclUniqueId() const {
  std::string id;
  if (absl::Status s = api_->new_nccl_unique_id(&id); !s.ok()) return s;
  return id;
}

absl::StatusOr<std::unique_ptr<engine::Communicator>> CudaPlugin::CreateCommunicator(
    engine::Backend* backend, const std::string& unique_id, int rank, int size,
    double timeout_seconds) const {
  std::unique_ptr<engine::Communicator> communicator;
  if (absl::Status s = api_->create_nccl_communicator(backend, unique_id, rank, size,
                                                      timeout_seconds, &communicator);
      !s.ok()) {
    return s;
  }
  return communicator;
}

}  // namespace traind::worker
