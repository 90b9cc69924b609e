// Complete validation of a JobSpec before it is queued (the task layout is
// spec/task_plan.h).
//
// Every error is an InvalidSpecError whose message starts with the field
// path as it is written in a spec file ("model.layers[1].dense.units: ...").
// The data file is opened to check what depends on it (the columns, the
// number of rows for the folds, the number of classes or targets for the
// last layer, the lengths of class_weights and pos_weight). Problems inside
// the data rows themselves (a ragged row, a non-numeric value) are not spec
// errors: the task fails with DATA_ERROR naming file, line and column when
// the worker loads the data.
#ifndef TRAIND_SPEC_VALIDATION_H_
#define TRAIND_SPEC_VALIDATION_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "traind/v1/job.pb.h"

namespace traind::spec {

struct ValidationContext {
  // GPUs this server can place tasks on.
  int gpus = 0;
  // Whether CPU tasks run where oneDNN has bf16 matmuls (training.precision:
  // bf16). One source of truth: oneDNN in the worker, under the workers'
  // environment (ONEDNN_MAX_CPU_ISA may cap it). traind asks
  // `traind-worker --capabilities` at start; the standalone worker asks
  // CpuSupportsBf16(). The worker checks again when it creates the backend.
  bool cpu_bf16 = false;
};

// What validation learned of the model's shape (when the data could be read).
struct ValidatedShape {
  int64_t features = 0;  // model inputs, after one-hot encoding
  int64_t outputs = 0;   // model outputs
  // The data's size, for the server's limits on what a spec may make it do.
  int64_t rows = 0;             // data rows of data.path
  int64_t validation_rows = 0;  // data rows of cross_validation.validation_path (0: none)
  int64_t columns = 0;          // header columns of data.path
  // The fewest rows any task of the job trains on: with training.batches,
  // the task that runs the most epochs (batches / ceil(rows / batch_size)).
  int64_t min_train_rows = 0;
  // Images: [C, H, W], from data.shape or the images' files; traind sets
  // data.shape to it at submit.
  std::vector<int32_t> image_shape;
};

// `shape` (optional) receives the model's input and output widths, for the
// memory estimate that places GPU tasks, and the data's size; all stay 0
// when the rows could not be read (the task then fails with DATA_ERROR).
absl::Status ValidateJobSpec(const traind::v1::JobSpec& spec, const ValidationContext& context,
                             ValidatedShape* shape = nullptr);

}  // namespace traind::spec

#endif  // TRAIND_SPEC_VALIDATION_H_
