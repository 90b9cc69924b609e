// Scheduler: side processes, run for a caller rather than for a task
// (Predict, the ONNX export): placed on a free GPU when asked, waited for,
// killed past their time, stopped with traind.
#include <signal.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/log.h"
#include "server/scheduler/scheduler.h"

namespace traind::server {

namespace {
constexpr absl::Duration kPredictGpuDrainWait = absl::Seconds(5);
}  // namespace

absl::StatusOr<ProcessExit> Scheduler::RunProcess(LaunchRequest request, absl::Duration timeout,
                                                  bool want_gpu, std::string* placed) {
  std::vector<int> gpu;
  std::string visible;
  {
    absl::MutexLock lock(&mu_);
    if (refusing_) return absl::UnavailableError("traind is stopping");
    if (want_gpu && options_.worker_has_gpu_backend) {
      // The dispatch loop marks the GPUs it picked busy only after their
      // launch, with the mutex free meanwhile: pick once no launch is in
      // flight, and mark it busy before the mutex is let go.
      // A GPU still draining (a task or predict just ended on it) gets a
      // few seconds to come back.
      mu_.AwaitWithTimeout(absl::Condition(
                               +[](Scheduler* s) ABSL_NO_THREAD_SAFETY_ANALYSIS {
                                 return s->gpus_.Allocate(1, 0).has_value() ||
                                        !s->gpus_.AnyDraining();
                               },
                               this),
                           kPredictGpuDrainWait);
      mu_.Await(absl::Condition(
          +[](int* in_flight) { return *in_flight == 0; }, &launches_in_flight_));
      std::optional<std::vector<int>> picked = gpus_.Allocate(1, 0);
      if (picked.has_value()) {
        gpu = *picked;
        gpus_.MarkBusy(gpu, 0);
        visible = gpus_.gpus()[gpu[0]].last.uuid;
      }
    }
    ++launches_in_flight_;  // an exit before the pid is recorded waits
  }
  if (placed != nullptr) *placed = gpu.empty() ? "cpu" : absl::StrCat("gpu ", visible);
  if (!gpu.empty()) request.argv.push_back("--device=gpu");
  std::vector<std::string> env = {absl::StrCat("CUDA_VISIBLE_DEVICES=", visible),
                                  "CUDA_DEVICE_ORDER=PCI_BUS_ID"};
  env.insert(env.end(), options_.worker_env.begin(), options_.worker_env.end());
  for (std::string& e : request.env) {
    if (!absl::StartsWith(e, "CUDA_VISIBLE_DEVICES=")) env.push_back(std::move(e));
  }
  request.env = std::move(env);
  absl::StatusOr<int> pid = side_launcher_->Launch(request);
  absl::MutexLock lock(&mu_);
  --launches_in_flight_;
  if (!pid.ok()) {
    gpus_.Release(gpu, clock_->Now());
    return pid.status();
  }
  if (!gpu.empty()) gpus_.MarkBusy(gpu, *pid);
  side_processes_[*pid];
  // Stop() began while it launched: it ends with the others.
  if (stopping_) side_launcher_->Signal(*pid, SIGKILL);
  auto exited = [this, p = *pid]()
                    ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return side_processes_[p].has_value(); };
  if (!mu_.AwaitWithTimeout(absl::Condition(&exited), timeout)) {
    LogWarning("process pid=%d (%s) ran past %s: killed", *pid, request.argv[0],
               absl::FormatDuration(timeout));
    side_launcher_->Signal(*pid, SIGKILL);
    mu_.Await(absl::Condition(&exited));
  }
  ProcessExit exit = *side_processes_[*pid];
  side_processes_.erase(*pid);
  gpus_.Release(gpu, clock_->Now());
  if (stopping_ && exit.signal != 0) {
    return absl::UnavailableError("traind is stopping: the process was stopped; retry later");
  }
  return exit;
}

void Scheduler::OnSideExit(const ProcessExit& exit) {
  absl::MutexLock lock(&mu_);
  auto known = [this, &exit]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return launches_in_flight_ == 0 || side_processes_.count(exit.pid) > 0;
  };
  mu_.Await(absl::Condition(&known));
  if (auto side = side_processes_.find(exit.pid); side != side_processes_.end()) {
    side->second = exit;
  }
}

}  // namespace traind::server
