// Stand-ins for libtraind_cuda.so in cuda_plugin_loader_test: one module
// whose entry point answers for another ABI version
// (TRAIND_FAKE_PLUGIN_WRONG_ABI) and one without the entry point.
#include <cstdint>

#include "worker/engine/backend/cuda/cuda_plugin.h"

#ifdef TRAIND_FAKE_PLUGIN_WRONG_ABI
namespace {
const traind::engine::CudaPluginApi kOtherBuild = {traind::engine::kCudaPluginAbiVersion + 1000,
                                                   sizeof(traind::engine::CudaPluginApi),
                                                   "another build",
                                                   nullptr,
                                                   nullptr,
                                                   nullptr,
                                                   nullptr};
}  // namespace

extern "C" __attribute__((visibility("default"))) const traind::engine::CudaPluginApi*
traind_cuda_plugin_v1(uint32_t) {
  return &kOtherBuild;
}
#else
extern "C" __attribute__((visibility("default"))) int traind_not_a_cuda_plugin() { return 42; }
#endif
