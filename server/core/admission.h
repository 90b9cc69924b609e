// Admission: what makes a submitted spec a queued job, whichever front end
// it came in on. In order: an idempotent retry's answer, the spec built from
// the request (text or message, overrides, relative paths), its size
// limits, the confinement of its data paths, the stored datasets it names
// (their digests recorded, pinned until the job is stored), its complete validation
// against the data and this server's devices, the limits that depend on the
// data, the memory each task needs (spec/memory_estimate.h), then the
// scheduler's insert.
//
// Thread-safety: thread-safe. Submit reads the data file: call it on a
// work pool, never on a front end's event thread.
#ifndef TRAIND_SERVER_CORE_ADMISSION_H_
#define TRAIND_SERVER_CORE_ADMISSION_H_

#include "absl/status/statusor.h"
#include "server/core/auth.h"
#include "server/core/policy.h"
#include "server/datasets/dataset_catalog.h"
#include "server/scheduler/scheduler.h"
#include "traind/v1/training_service.pb.h"

namespace traind::server {

class Admission final {
 public:
  // Both must outlive the object.
  // `datasets` may be null (a spec naming a dataset is then refused).
  Admission(Scheduler* scheduler, const AccessPolicy* policy, DatasetCatalog* datasets = nullptr)
      : scheduler_(scheduler), policy_(policy), datasets_(datasets) {}

  // The job `req` creates for `caller` (or the one an earlier request with
  // the same idempotency key created). Errors are INVALID_ARGUMENT naming
  // the field ("spec.model.layers[1].dense.units: ..."), PERMISSION_DENIED
  // for a data path outside the data roots, RESOURCE_EXHAUSTED for a full
  // queue, or the scheduler's.
  absl::StatusOr<traind::v1::Job> Submit(const traind::v1::SubmitJobRequest& req,
                                         const Caller& caller) const;

 private:
  Scheduler* const scheduler_;
  const AccessPolicy* const policy_;
  DatasetCatalog* const datasets_;
};

}  // namespace traind::server

#endif  // TRAIND_SERVER_CORE_ADMISSION_H_
