// model.ckpt: a trained model that leaves traind. Everything needed to score
// new rows without the training data: the network (its spec and its state),
// the fitted preprocessing (imputation values, scaling statistics, the
// categories of each string column) and the target's encoding (the class
// names, the target columns). The file format is documented in
// docs/spec.md ("The model file"); it is the checkpoint container
// (checkpoint.h: "TRAINDCK", version, size, CRC-32, named records) holding
// only records named "model.*":
//
//   model.format_version  i64 [1]  kModelFormatVersion
//   model.spec            string   the JobSpec, serialized (binary protobuf)
//   model.task, model.epoch        i64 [1]
//   model.features        strings  numeric feature columns, in input order
//   model.impute, model.offset, model.scale   f64 [features]
//   model.categorical.count        i64 [1]  K
//   model.categorical.<k>.name     string   (k = 0 .. K-1)
//   model.categorical.<k>.categories  strings
//   model.target          string   "classes", "binary", "multi_label",
//                                  "regression"
//   model.classes, model.target_names  strings (may be empty)
//   model.state.names     strings  Network::state() names, in order
//   model.state.<name>.shape   i64 [rank]
//   model.state.<name>.values  f32 [product of shape]
//
// "strings" is a list of strings in one string record: per item its byte
// count (u32 little-endian), then its bytes; any byte (a newline in a
// quoted CSV header) may appear in an item.
//
// A newer format version than this reader's is refused, never guessed at;
// a later version adds records (older readers refuse it) rather than
// changing what a record means.
//
// Every task that trains writes one (its best or last model, as its
// selection says); predict (predict.h) and the ONNX export read it.
#ifndef TRAIND_WORKER_ENGINE_MODEL_FILE_H_
#define TRAIND_WORKER_ENGINE_MODEL_FILE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "spec/checks.h"
#include "traind/v1/job.pb.h"

namespace traind::engine {

// The version of the "model.*" records that WriteModelFile writes and
// ReadModelFile reads.
inline constexpr int64_t kModelFormatVersion = 1;

struct TrainedModel {
  // The job's spec: spec.model() builds the network (Network::Create with
  // inputs = InputWidth()); spec.data() names the columns.
  traind::v1::JobSpec spec;
  int32_t task = 0;   // the task that trained it
  int32_t epoch = 0;  // the epoch its state is from (best or last)

  // Numeric feature columns, in the network's input order. Column i:
  // missing (NaN) -> impute[i]; then x' = (x - offset[i]) / scale[i].
  std::vector<std::string> feature_names;
  std::vector<double> impute;
  std::vector<double> offset;
  std::vector<double> scale;
  // String feature columns, after the numeric ones: one 0/1 input per
  // category seen in training, in this order. An unseen or missing value
  // encodes as all zeros.
  struct Categorical {
    std::string name;
    std::vector<std::string> categories;
  };
  std::vector<Categorical> categorical;

  data::TargetKind target = data::TargetKind::kClasses;
  // kClasses: output c is classes[c] (softmax). kBinary: 2 classes, the one
  // output is the logit of classes[1].
  std::vector<std::string> classes;
  // kMultiLabel and kRegression: the target columns, one output each.
  std::vector<std::string> target_names;

  // Network::state() of the trained network, by parameter name
  // ("layers[0].weight" [in, out] row-major, "layers[0].bias", batch norm's
  // running statistics ...), in Network::state() order.
  struct NamedTensor {
    std::string name;
    std::vector<int64_t> shape;
    std::vector<float> values;
  };
  std::vector<NamedTensor> state;

  // Network inputs: feature_names.size() + every categorical's categories.
  int64_t InputWidth() const;
  // Network outputs the target needs: classes.size() (kClasses), 1
  // (kBinary), else target_names.size().
  int64_t Outputs() const;
};

// Writes atomically (temporary file, fsync, rename). Errors:
// InvalidArgumentError for a model whose sizes disagree (impute/offset/scale
// not one per feature, a state tensor whose values are not its shape's);
// InternalError naming the file when it cannot be written.
absl::Status WriteModelFile(const TrainedModel& model, const std::string& path);
// Reads and checks a model file: the container (checkpoint.h), the format
// version, every record's presence, type and size, the target against the
// spec's loss (2 classes for kBinary), finite preprocessing values. It does
// not build the network: whether the state fits spec.model() is predict's
// check (predict.h).
// Errors: DataError naming the path and what is wrong ("<path>: not a
// traind checkpoint (bad header)", "<path>: checksum mismatch (file
// corrupt)", "<path>: truncated or extended: ...", "<path>: no record
// \"model.scale\"", "<path>: model format version 2 (this traind reads
// version 1)", and for a training checkpoint (epoch-*.ckpt, best.ckpt:
// "meta.*" records, no "model.*") "<path>: a training checkpoint ..., not a
// model; give the task's model.ckpt").
absl::StatusOr<TrainedModel> ReadModelFile(const std::string& path);

}  // namespace traind::engine

#endif  // TRAIND_WORKER_ENGINE_MODEL_FILE_H_
