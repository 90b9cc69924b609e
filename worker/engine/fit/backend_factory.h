// Which backend a task trains on. A backend is given (FitOptions::backend:
// the worker's CUDA backend) or made by a BackendFactory for the spec's
// precision (the CPU backend's by default), so Fit never picks one itself.
#ifndef TRAIND_WORKER_ENGINE_FIT_BACKEND_FACTORY_H_
#define TRAIND_WORKER_ENGINE_FIT_BACKEND_FACTORY_H_

#include <memory>

#include "absl/status/statusor.h"
#include "traind/v1/job.pb.h"
#include "worker/engine/backend/backend.h"

namespace traind::engine {

// Makes backends of one device kind.
class BackendFactory {
 public:
  virtual ~BackendFactory() = default;
  virtual traind::v1::DeviceKind device() const = 0;
  // A backend whose matmuls compute in `precision`. Errors: the backend's
  // (InvalidSpecError for a precision it cannot do).
  virtual absl::StatusOr<std::unique_ptr<Backend>> Create(traind::v1::Precision precision) = 0;
};

// The CPU backend (oneDNN; CreateCpuBackend).
std::unique_ptr<BackendFactory> NewCpuBackendFactory();

// The device a given backend computes on, as the spec names it
// (Backend::device(); a decorator says its inner backend's).
traind::v1::DeviceKind DeviceOf(const Backend* backend);

// The backend of a task, and whether it is owned here.
struct TaskBackend {
  Backend* backend = nullptr;
  std::unique_ptr<Backend> owned;  // set when made by the factory
  traind::v1::DeviceKind device = traind::v1::CPU;
};

// InvalidSpecError ("resources.device: gpu, ...") when the spec asks for a
// GPU and the backend would be a CPU one: `given` (when not null) or one
// `factory` (null: the CPU backend's) makes.
absl::Status CheckBackendDevice(const traind::v1::JobSpec& spec, Backend* given,
                                BackendFactory* factory);

// `given` (not owned) when not null, else one made by `factory` (null: the
// CPU backend's) for spec.training().precision(). Errors: InvalidSpecError
// ("resources.device: gpu, ...") for a GPU spec on a CPU backend (checked
// before the factory makes one); the factory's.
absl::StatusOr<TaskBackend> ChooseBackend(const traind::v1::JobSpec& spec, Backend* given,
                                          BackendFactory* factory);

}  // namespace traind::engine

#endif  // TRAIND_WORKER_ENGINE_FIT_BACKEND_FACTORY_H_
