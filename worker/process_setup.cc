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

void PrewarmZygote() {
  engine::DisableOneDnnProfilerHooks();
  (void)traind::v1::JobSpec::descriptor();
  (void)traind::v1::TaskAssignment::descriptor();
  absl::StatusOr<std::unique_ptr<engine::Backend>> cpu = engine::CreateCpuBackend();
  if (!cpu.ok()) return;
  for (engine::DenseActivation a :
       {engine::DenseActivation::kRelu, engine::DenseActivation::kLinear}) {
    (void)(*cpu)->CreateDenseKernel(16, 16, 16, a);
  }
}

void ApplyOmpNumThreads() {
  if (const char* threads = std::getenv("OMP_NUM_THREADS"); threads != nullptr) {
    if (const int n = std::atoi(threads); n > 0) omp_set_num_threads(n);
  }
}

}  // namespace traind::worker
