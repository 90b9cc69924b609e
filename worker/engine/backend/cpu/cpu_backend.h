// The CPU backend: oneDNN matmul primitives plus vectorized loops.
#ifndef TRAIND_WORKER_ENGINE_BACKEND_CPU_CPU_BACKEND_H_
#define TRAIND_WORKER_ENGINE_BACKEND_CPU_CPU_BACKEND_H_

#include <memory>

#include "absl/status/statusor.h"
#include "traind/v1/job.pb.h"
#include "worker/engine/backend/backend.h"

namespace traind::engine {

// Creates a oneDNN CPU engine and an in-order stream; create one per process
// and share it. oneDNN and the backend's loops run on the OpenMP thread pool
// (OMP_NUM_THREADS). Tensors live in host memory (64-byte aligned), so the
// caller may read and write them through data pointers.
//
// `precision` is the arithmetic of the dense kernels' matmuls:
// - PRECISION_UNSPECIFIED, FP32: fp32 throughout.
// - BF16: the forward (x w) and both gradient matmuls (dy wᵀ, xᵀ dy) multiply
//   bfloat16 copies of their fp32 operands (rounded to nearest even by oneDNN
//   reorders into buffers planned with the kernel) and accumulate in fp32
//   into fp32 outputs. Everything else (weights, biases, gradients, optimizer
//   state, activations between layers, losses) stays fp32. A kernel converts
//   w and x in Forward and reuses those copies in Backward when it is given
//   the same tensors, so w is converted once per training step.
//
// f32 products run in oneDNN, or in OpenBLAS's OpenMP build where
// backend/cpu/cpu_gemm.h's rule (or TRAIND_CPU_GEMM) says.
//
// Errors: InvalidArgument for a TRAIND_CPU_GEMM that is not auto, onednn or
// openblas; InvalidSpecError (its message names training.precision) for TF32
// (a GPU mode) and for BF16 on a CPU without AVX512-BF16 or AMX-BF16 as
// oneDNN sees it (see CpuSupportsBf16); DeviceError when oneDNN fails.
//
// Results are bit-identical from run to run for the same thread count,
// precision, oneDNN ISA and GEMM policy.
absl::StatusOr<std::unique_ptr<Backend>> CreateCpuBackend(
    traind::v1::Precision precision = traind::v1::PRECISION_UNSPECIFIED);

// Turns oneDNN's profiler hooks off unless the environment sets them: VTune
// task marks around every primitive, and a search of the library path for
// libJitPI.so at the first JIT kernel, which cost time in every process and
// serve no one without a profiler attached. Call before any thread exists
// and before the first backend (it sets environment variables).
void DisableOneDnnProfilerHooks();

// True when oneDNN runs bf16 matmuls natively on this CPU (its effective ISA,
// which ONEDNN_MAX_CPU_ISA may lower, includes AVX512-BF16; AMX implies it).
bool CpuSupportsBf16();

}  // namespace traind::engine

#endif  // TRAIND_WORKER_ENGINE_BACKEND_CPU_CPU_BACKEND_H_
