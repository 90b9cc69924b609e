// Complete validation of a JobSpec before it is queued.
//
// Every error is an InvalidSpecError whose message starts with the field
// path as it is written in a spec file ("model.layers[1].dense.units: ...").
// The data file is opened to check what depends on it (the label column, the
// number of rows for the folds, the number of classes for the last layer).
// Problems inside the data rows themselves (a ragged row, a non-numeric
// value) are not spec errors: the task fails with DATA_ERROR naming file,
// line and column when the worker loads the data.
#ifndef TRAIND_WORKER_ENGINE_SPEC_VALIDATION_H_
#define TRAIND_WORKER_ENGINE_SPEC_VALIDATION_H_

#include "absl/status/status.h"
#include "traind/v1/job.pb.h"

namespace traind::engine {

struct ValidationContext {
  // GPUs this server can place tasks on.
  int gpus = 0;
};

absl::Status ValidateJobSpec(const traind::v1::JobSpec& spec, const ValidationContext& context);

// Number of tasks the spec expands to: the folds of a cross-validation job,
// else 1. REQUIRES: ValidateJobSpec(spec) is ok.
int TaskCount(const traind::v1::JobSpec& spec);

}  // namespace traind::engine

#endif  // TRAIND_WORKER_ENGINE_SPEC_VALIDATION_H_
