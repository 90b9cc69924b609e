// model.ckpt: a trained model that leaves traind. Everything needed to score
// new rows without the training data: the network (its spec and its state),
// the fitted preprocessing (imputation values, scaling statistics, the
// categories of each string column) and the target's encoding (the class
// names, the target columns). The file format is documented in
// docs/spec.md ("The model file"); it is the checkpoint container
// (checkpoint.h: "TRAINDCK", version, size, CRC-32, named records) holding
// records named "model.*".
//
// Every task that trains writes one (its best or last model, as its
// selection says); predict (predict.h) and the ONNX export (onnx_export.h)
// read it.
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

  TargetKind target = TargetKind::kClasses;
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
};

// Writes atomically (temporary file, fsync, rename).
absl::Status WriteModelFile(const TrainedModel& model, const std::string& path);
// Errors: DataError naming the path and what is wrong (not a traind file,
// checksum mismatch, a missing or mis-sized record, a training checkpoint
// rather than a model).
absl::StatusOr<TrainedModel> ReadModelFile(const std::string& path);

}  // namespace traind::engine

#endif  // TRAIND_WORKER_ENGINE_MODEL_FILE_H_
