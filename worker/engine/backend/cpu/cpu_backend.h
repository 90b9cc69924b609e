// The CPU backend: oneDNN matmul primitives plus vectorized loops.
#ifndef TRAIND_WORKER_ENGINE_BACKEND_CPU_CPU_BACKEND_H_
#define TRAIND_WORKER_ENGINE_BACKEND_CPU_CPU_BACKEND_H_

#include <memory>

#include "absl/status/statusor.h"
#include "worker/engine/backend/backend.h"

namespace traind::engine {

// Creates a oneDNN CPU engine and an in-order stream; create one per process
// and share it. oneDNN and the backend's loops run on the OpenMP thread pool
// (OMP_NUM_THREADS). Tensors live in host memory (64-byte aligned), so the
// caller may read and write them through data pointers.
//
// Results are bit-identical from run to run for the same thread count.
absl::StatusOr<std::unique_ptr<Backend>> CreateCpuBackend();

}  // namespace traind::engine

#endif  // TRAIND_WORKER_ENGINE_BACKEND_CPU_CPU_BACKEND_H_
