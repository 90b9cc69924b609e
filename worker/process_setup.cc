#include "worker/process_setup.h"

#include <omp.h>
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "base/status.h"
#include "traind/v1/worker_service.pb.h"
#include "worker/engine/backend/backend.h"
#include "worker/engine/backend/cpu/cpu_backend.h"
#include "worker/engine/onnx_export.h"

namespace traind::worker {

bool ArmParentDeathSignal() {
  if (const char* parent = std::getenv("TRAIND_PARENT_PID"); parent != nullptr) {
    const int expected = std::atoi(parent);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != expected) return false;
    unsetenv("TRAIND_PARENT_PID");
  }
  return true;
}

namespace {

// One forward and backward pass of a small dense kernel with activation
// `a`: oneDNN generates its GEMM kernels the first time a process multiplies
// (about 17 ms on a 2-core Zen 2), and a fork inherits them.
absl::Status RunSmallDenseKernel(engine::Backend* cpu, engine::DenseActivation a) {
  constexpr int64_t n = 16;
  TRAIND_ASSIGN_OR_RETURN(std::unique_ptr<engine::DenseKernel> kernel,
                          cpu->CreateDenseKernel(n, n, n, a));
  std::vector<engine::Tensor> m;  // x, w, y, dy, dw, dx: [n, n] each
  for (int i = 0; i < 6; ++i) {
    TRAIND_ASSIGN_OR_RETURN(engine::Tensor t, cpu->Allocate2d(engine::DType::kF32, n, n));
    m.push_back(std::move(t));
  }
  TRAIND_ASSIGN_OR_RETURN(engine::Tensor b, cpu->Allocate1d(engine::DType::kF32, n));
  TRAIND_ASSIGN_OR_RETURN(engine::Tensor db, cpu->Allocate1d(engine::DType::kF32, n));
  for (engine::Tensor* t : {&m[0], &m[1], &b, &m[3]}) TRAIND_RETURN_IF_ERROR(cpu->Fill(0.5f, t));
  TRAIND_RETURN_IF_ERROR(kernel->Forward(m[0], m[1], b, &m[2]));
  return kernel->Backward(m[0], m[1], m[2], &m[3], &m[4], &db, &m[5]);
}

}  // namespace

void PrewarmZygote() {
  engine::DisableOneDnnProfilerHooks();
  (void)traind::v1::JobSpec::descriptor();
  (void)traind::v1::TaskAssignment::descriptor();
  // Every task writes model.onnx: ONNX's operator schemas are registered
  // on first use (about 11 ms).
  engine::PrewarmOnnxExport();
  absl::StatusOr<std::unique_ptr<engine::Backend>> cpu = engine::CreateCpuBackend();
  if (!cpu.ok()) return;
  // On this thread alone: with one OpenMP thread no parallel region starts
  // a thread.
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  for (engine::DenseActivation a :
       {engine::DenseActivation::kRelu, engine::DenseActivation::kLinear}) {
    (void)RunSmallDenseKernel(cpu->get(), a);
  }
  omp_set_num_threads(threads);
}

void ApplyOmpNumThreads() {
  if (const char* threads = std::getenv("OMP_NUM_THREADS"); threads != nullptr) {
    if (const int n = std::atoi(threads); n > 0) omp_set_num_threads(n);
  }
}

int DecodeThreads() { return std::max(1, omp_get_max_threads()); }

}  // namespace traind::worker
