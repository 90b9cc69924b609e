// model.onnx: a trained model (model_file.h) as one ONNX graph that scores
// raw rows in any ONNX runtime: the fitted preprocessing (imputation,
// scaling, one-hot encoding of string columns), the network in its
// evaluation form (batch norm with its running statistics, dropout as the
// identity) and the head of the target (softmax, sigmoid, the class labels).
// The interface is documented in docs/spec.md ("The ONNX model").
//
//   inputs   one per feature column, named by the column, [N, 1]:
//            tensor(float) for numeric columns (NaN: missing), in
//            feature_names order, then tensor(string) for categorical ones
//   outputs  classes:     "label" [N] string, "probabilities" [N, C] float
//            binary:      "label" [N] string, "probabilities" [N, 2] float
//                         ([1 - p, p]: classes[0], classes[1])
//            multi-label: "probabilities" [N, K] float
//            regression:  "predictions" [N, K] float
//
// Opsets "" 17 and "ai.onnx.ml" 3, IR version 8 (ONNX 1.12). Only the
// engine links libonnx; this header includes none of it.
#ifndef TRAIND_WORKER_ENGINE_ONNX_EXPORT_H_
#define TRAIND_WORKER_ENGINE_ONNX_EXPORT_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/engine/model_file.h"

namespace traind::engine {

// The serialized onnx.ModelProto of `model`, checked by ONNX's checker and
// by its strict shape inference. Errors: InvalidArgumentError naming what
// does not fit (a state tensor missing or of the wrong shape, a column name
// used twice or equal to an output's name, an output width that does not
// match the classes or targets), InvalidSpecError for a model spec
// CheckModelSpec rejects, InternalError naming the check that failed.
absl::StatusOr<std::string> ExportOnnx(const TrainedModel& model);

// ExportOnnx written to `path` atomically (a temporary file beside it,
// fsync, rename). Errors: those of ExportOnnx; InternalError naming the path
// when it cannot be written.
absl::Status WriteOnnxFile(const TrainedModel& model, const std::string& path);

// Registers ONNX's operator schemas, which the checker and shape inference
// read, so that the first export does not (the worker zygote calls it before
// it forks). Creates no thread.
void PrewarmOnnxExport();

}  // namespace traind::engine

#endif  // TRAIND_WORKER_ENGINE_ONNX_EXPORT_H_
