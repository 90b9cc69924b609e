// Loads the CUDA plugin (libtraind_cuda.so, see
// worker/engine/backend/cuda/cuda_plugin.h) into traind-worker at run time.
//
// traind-worker links no CUDA library: a CPU task starts without loading
// cuBLAS, cuBLASLt or NCCL. A GPU task (and --capabilities) loads the plugin
// with dlopen(); the plugin then brings them in. The plugin is looked for
// beside the running executable (/proc/self/exe), then in ../lib/traind
// relative to it, so a build tree and an installed tree both work wherever
// they are moved.
//
// Never load the plugin in a process that will fork() workers (the zygote):
// a CUDA context does not survive fork.
//
// Thread safety: a loaded CudaPlugin is immutable; its functions may be
// called from any thread (what they create follows its own rules).
#ifndef TRAIND_WORKER_CUDA_PLUGIN_LOADER_H_
#define TRAIND_WORKER_CUDA_PLUGIN_LOADER_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "traind/v1/job.pb.h"
#include "worker/engine/backend/backend.h"
#include "worker/engine/backend/cuda/cuda_plugin.h"
#include "worker/engine/parallel/communicator.h"

namespace traind::worker {

class CudaPlugin {
 public:
  // Loads the plugin at `path` (dlopen, RTLD_NOW | RTLD_LOCAL) and checks
  // its entry point and ABI version. FailedPrecondition naming the path and
  // the loader's reason (missing file, a library it needs not found, not a
  // plugin, another build's ABI) otherwise.
  static absl::StatusOr<std::unique_ptr<CudaPlugin>> Load(const std::string& path);

  // Loads the first plugin of DefaultSearchPath() that exists; the error
  // lists every place looked at.
  static absl::StatusOr<std::unique_ptr<CudaPlugin>> LoadDefault();

  // <dir of /proc/self/exe>/libtraind_cuda.so, then
  // <dir of /proc/self/exe>/../lib/traind/libtraind_cuda.so.
  static std::vector<std::string> DefaultSearchPath();

  // The module stays loaded for the life of the process: what it created
  // (backends, tensors, communicators) runs its code until destroyed.
  ~CudaPlugin() = default;
  CudaPlugin(const CudaPlugin&) = delete;
  CudaPlugin& operator=(const CudaPlugin&) = delete;

  const std::string& path() const { return path_; }
  const char* build_info() const { return api_->build_info; }

  // See CudaPluginApi.
  int DeviceCount(std::string* reason) const;
  absl::StatusOr<std::unique_ptr<engine::Backend>> CreateBackend(
      int device, traind::v1::Precision precision) const;
  absl::StatusOr<std::string> NewNcclUniqueId() const;
  absl::StatusOr<std::unique_ptr<engine::Communicator>> CreateCommunicator(
      engine::Backend* backend, const std::string& unique_id, int rank, int size,
      double timeout_seconds) const;

 private:
  CudaPlugin(std::string path, const engine::CudaPluginApi* api)
      : path_(std::move(path)), api_(api) {}

  const std::string path_;
  const engine::CudaPluginApi* const api_;  // static storage of the module
};

}  // namespace traind::worker

#endif  // TRAIND_WORKER_CUDA_PLUGIN_LOADER_H_
