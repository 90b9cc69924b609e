// The CUDA plugin's interface: what libtraind_cuda.so exports to
// traind-worker.
//
// The CUDA backend, cuBLAS, cuBLASLt and NCCL live in a shared module that
// traind-worker loads with dlopen() only when a task trains on a GPU (or for
// --capabilities): a CPU task never pays for loading them (cuBLASLt alone is
// over 500 MB). The module exports one C symbol, kCudaPluginEntryPoint,
// that returns a table of functions (CudaPluginApi).
//
// The table passes C++ types (absl::Status, std::string, std::unique_ptr of
// engine interfaces): the plugin and the worker must come from one build of
// traind (same compiler, same libstdc++ and Abseil). The loader checks
// abi_version and struct_size; bump kCudaPluginAbiVersion whenever this
// struct, Backend or Communicator changes.
//
// This header includes no CUDA header: the worker compiles it without CUDA.
#ifndef TRAIND_WORKER_ENGINE_BACKEND_CUDA_CUDA_PLUGIN_H_
#define TRAIND_WORKER_ENGINE_BACKEND_CUDA_CUDA_PLUGIN_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "traind/v1/job.pb.h"

namespace traind::engine {

class Backend;
class Communicator;

inline constexpr uint32_t kCudaPluginAbiVersion = 4;
// extern "C" const CudaPluginApi* traind_cuda_plugin_v1(uint32_t abi_version);
// returns null when the plugin cannot serve the caller's abi_version.
inline constexpr char kCudaPluginEntryPoint[] = "traind_cuda_plugin_v1";
// The module's file name (found beside traind-worker, or in ../lib/traind).
inline constexpr char kCudaPluginFileName[] = "libtraind_cuda.so";

struct CudaPluginApi {
  uint32_t abi_version;  // kCudaPluginAbiVersion of the plugin's build
  uint32_t struct_size;  // sizeof(CudaPluginApi) of the plugin's build
  // What the plugin was built against, e.g. "traind 0.1.0, CUDA runtime
  // 13000 (static), cuBLAS 130100, NCCL 22800". Static storage.
  const char* build_info;

  // The number of CUDA devices this process can use (CUDA_VISIBLE_DEVICES
  // applies). 0 when there is none; *reason (not null) then says why.
  int (*device_count)(std::string* reason);

  // A CUDA backend on `device` whose GEMMs run in `precision`
  // (PRECISION_UNSPECIFIED and FP32: fp32; TF32: TF32 tensor cores; BF16:
  // bf16 inputs, fp32 accumulation and output). Selects the device for the
  // calling thread. Errors: FailedPrecondition (no device), InvalidArgument,
  // OutOfMemoryError / DeviceError (engine/status.h).
  absl::Status (*create_backend)(int device, traind::v1::Precision precision,
                                 std::unique_ptr<Backend>* backend);

  // A fresh NCCL unique id (rank 0 of a multi-GPU task), 128 bytes.
  absl::Status (*new_nccl_unique_id)(std::string* unique_id);

  // Joins the NCCL group named by `unique_id` as `rank` of `size` on the
  // device of `backend` (made by create_backend; not owned, outlives the
  // communicator): collectives are ordered on its stream. Waits until every
  // rank has joined or `timeout_seconds` (<= 0: 120 s) have passed.
  // Destroying the communicator finalizes it (or aborts when a peer is gone).
  absl::Status (*create_nccl_communicator)(Backend* backend, const std::string& unique_id, int rank,
                                           int size, double timeout_seconds,
                                           std::unique_ptr<Communicator>* communicator);
};

using CudaPluginEntryPoint = const CudaPluginApi* (*)(uint32_t abi_version);

}  // namespace traind::engine

#endif  // TRAIND_WORKER_ENGINE_BACKEND_CUDA_CUDA_PLUGIN_H_
