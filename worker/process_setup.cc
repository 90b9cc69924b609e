#include "worker/process_setup.h"

#include <omp.h>
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cstdlib>
#include <memory>

#include "absl/status/statusor.h"
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

// One forward and backward pass of a small dense kernel per activation, on
// this thread alone: oneDNN generates its GEMM kernels the first time a
// process multiplies (about 17 ms on a 2-core Zen 2), and a fork inherits
// them. With one OpenMP thread no parallel region starts a thread.
void RunSmallDenseKernels(engine::Backend* cpu) {
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  for (engine::DenseActivation a :
       {engine::DenseActivation::kRelu, engine::DenseActivation::kLinear}) {
    absl::StatusOr<std::unique_ptr<engine::DenseKernel>> kernel =
        cpu->CreateDenseKernel(16, 16, 16, a);
    absl::StatusOr<engine::Tensor> x = cpu->Allocate2d(engine::DType::kF32, 16, 16);
    absl::StatusOr<engine::Tensor> w = cpu->Allocate2d(engine::DType::kF32, 16, 16);
    absl::StatusOr<engine::Tensor> b = cpu->Allocate1d(engine::DType::kF32, 16);
    absl::StatusOr<engine::Tensor> y = cpu->Allocate2d(engine::DType::kF32, 16, 16);
    absl::StatusOr<engine::Tensor> dy = cpu->Allocate2d(engine::DType::kF32, 16, 16);
    absl::StatusOr<engine::Tensor> dw = cpu->Allocate2d(engine::DType::kF32, 16, 16);
    absl::StatusOr<engine::Tensor> db = cpu->Allocate1d(engine::DType::kF32, 16);
    absl::StatusOr<engine::Tensor> dx = cpu->Allocate2d(engine::DType::kF32, 16, 16);
    if (!kernel.ok() || !x.ok() || !w.ok() || !b.ok() || !y.ok() || !dy.ok() || !dw.ok() ||
        !db.ok() || !dx.ok()) {
      break;
    }
    for (engine::Tensor* t : {&*x, &*w, &*b, &*dy}) (void)cpu->Fill(0.5f, t);
    if ((*kernel)->Forward(*x, *w, *b, &*y).ok()) {
      (void)(*kernel)->Backward(*x, *w, *y, &*dy, &*dw, &*db, &*dx);
    }
  }
  omp_set_num_threads(threads);
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
  RunSmallDenseKernels(cpu->get());
}

void ApplyOmpNumThreads() {
  if (const char* threads = std::getenv("OMP_NUM_THREADS"); threads != nullptr) {
    if (const int n = std::atoi(threads); n > 0) omp_set_num_threads(n);
  }
}

}  // namespace traind::worker
