#include "worker/engine/fit/backend_factory.h"

#include <utility>

#include "base/status.h"
#include "worker/engine/backend/cpu/cpu_backend.h"

namespace traind::engine {
namespace {

class CpuBackendFactory final : public BackendFactory {
 public:
  traind::v1::DeviceKind device() const override { return traind::v1::CPU; }
  absl::StatusOr<std::unique_ptr<Backend>> Create(traind::v1::Precision precision) override {
    return CreateCpuBackend(precision);
  }
};

absl::Status CheckDevice(const traind::v1::JobSpec& spec, traind::v1::DeviceKind device) {
  if (spec.resources().device() == traind::v1::GPU && device == traind::v1::CPU) {
    return InvalidSpecError(
        "resources.device: gpu, but this run trains on the CPU backend (a GPU job needs the "
        "CUDA backend)");
  }
  return absl::OkStatus();
}

}  // namespace

std::unique_ptr<BackendFactory> NewCpuBackendFactory() {
  return std::make_unique<CpuBackendFactory>();
}

traind::v1::DeviceKind DeviceOf(const Backend* backend) {
  return backend->device() == BackendDevice::kGpu ? traind::v1::GPU : traind::v1::CPU;
}

absl::Status CheckBackendDevice(const traind::v1::JobSpec& spec, Backend* given,
                                BackendFactory* factory) {
  if (given != nullptr) {
    return CheckDevice(spec, DeviceOf(given));
  }
  return CheckDevice(spec, factory != nullptr ? factory->device() : traind::v1::CPU);
}

absl::StatusOr<TaskBackend> ChooseBackend(const traind::v1::JobSpec& spec, Backend* given,
                                          BackendFactory* factory) {
  TaskBackend chosen;
  if (given != nullptr) {
    chosen.device = DeviceOf(given);
    TRAIND_RETURN_IF_ERROR(CheckDevice(spec, chosen.device));
    chosen.backend = given;
    return chosen;
  }
  std::unique_ptr<BackendFactory> cpu;
  if (factory == nullptr) {
    cpu = NewCpuBackendFactory();
    factory = cpu.get();
  }
  chosen.device = factory->device();
  TRAIND_RETURN_IF_ERROR(CheckDevice(spec, chosen.device));
  TRAIND_ASSIGN_OR_RETURN(chosen.owned, factory->Create(spec.training().precision()));
  chosen.backend = chosen.owned.get();
  return chosen;
}

}  // namespace traind::engine
