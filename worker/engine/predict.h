// Predict: the rows of a CSV file scored by a trained model (model_file.h),
// or by the mean of several (an ensemble, e.g. a cross-validation's fold
// models). A model of images (data.shape) also scores the images of an IDX
// or NPY file or an image folder (data/images.h; the format by the path or
// the bytes, the model's data.layout; a folder's images converted to the
// model's channels and resized to its height and width): each pixel's value, a byte
// or a float as the file holds it, goes through the model's offset and
// scale; the images must have the model's shape, and the pixel type its
// training data had.
//
// The file is read with the dataset loader's CSV reader (data/csv.h) and
// the model's data.delimiter. Each feature column is found by name in the
// header; other columns (the labels among them) are ignored and need not be
// there. Each cell goes through the model's preprocessing exactly as
// training's FeaturePipeline::Transform does: a numeric cell is parsed as a
// float32 (ParseFeature), a missing one (IsMissing) is imputed when the
// spec's data.missing imputes, else an error; then x' = (x - offset) /
// scale. A categorical cell is one-hot encoded with the model's categories;
// an unseen or (imputing) missing one encodes as all zeros. The network
// (Network::Create of spec.model() for InputWidth() inputs, its state loaded
// by name) runs forward in inference mode (dropout off, batch norm's running
// statistics), and its outputs become predictions as in training (Loss::Predict:
// class probabilities, P(label), values).
//
// An ensemble's prediction is the mean over the models of each output: of
// the probabilities (class, binary, multi-label targets) or of the values
// (regression); the label is the class the mean probabilities choose. Its
// models must agree on the feature columns (numeric and categorical, by
// name and order), the target kind, the classes, the target columns and
// data.delimiter; their fitted statistics and categories may differ.
//
// Thread safety: Predict may be called concurrently (each call makes its
// own network, and its own backend unless given one).
#ifndef TRAIND_WORKER_ENGINE_PREDICT_H_
#define TRAIND_WORKER_ENGINE_PREDICT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "data/csv.h"
#include "spec/checks.h"
#include "worker/engine/fit/artifacts.h"
#include "worker/engine/model_file.h"

namespace traind::engine {

class Backend;

struct PredictOptions {
  // Where the network runs (not owned; outlives the call). Null: a CPU
  // backend made for the call, in fp32, or in bf16 for a model trained with
  // training.precision: bf16 when this CPU has bf16 matmuls (as training
  // computed them). A model trained on a GPU is predicted on the CPU unless
  // a GPU backend is given; the results equal the GPU's within float
  // rounding.
  Backend* backend = nullptr;
  // Rows per forward pass.
  int64_t batch_rows = 1024;
  // Threads that decode an image folder's files.
  int decode_threads = 1;
};

// The predictions of a file's rows and what their columns are named after.
struct Predictions {
  data::TargetKind target = data::TargetKind::kClasses;
  std::vector<std::string> classes;
  std::vector<std::string> target_names;
  int64_t rows = 0;           // data rows of the file (0-based indices in the CSV)
  int64_t outputs = 0;        // per row
  std::vector<float> values;  // [rows, outputs]
  // What the file says of each row (InputLeadColumns): its id columns and
  // true targets, where it has them.
  LeadColumns lead;

  // The CSV of predictions.csv (fit/artifacts.h, PredictionsCsv): row (the
  // 0-based data row of the file: its header and blank lines are not rows),
  // the lead columns, label (class targets), then p_<class> / p_<label> /
  // prediction / <target> columns.
  std::string Csv() const;
};

// The columns of a scored CSV file that predictions carry (lead columns,
// fit/artifacts.h), those of them the file has: the model's id columns
// (data.id, else data.ignore but names IsPredictionColumnName gives), then
// the true target (true_<column> per target column: the cell as the file
// holds it). An image folder's rows carry their "file" instead.
LeadColumns InputLeadColumns(const TrainedModel& model, const data::CsvTable& table);

// The rows of `data_path` scored by the models of `model_paths` (one: that
// model; several: their mean, see above).
//
// Errors (DataError unless said otherwise): no model (InvalidArgumentError);
// a model file that ReadModelFile refuses (a training checkpoint among
// them), or whose state does not fit its spec's model ("<model>: state
// \"layers[0].weight\" has shape [4, 16], the network's is [5, 16]");
// models that cannot be averaged ("<model2>: cannot be averaged with
// <model1>: the feature columns differ (a, b vs a, c)"); the CSV reader's
// errors (an empty file: "<file>: the file is empty (no header row)"); a
// feature column missing from the header ("<file>: column \"x\" not found;
// columns: a, b, c") or there twice; a cell that is not a number
// ("<file>:<line>: column \"x\" (column 3): \"abc\" is not a number", as
// LoadDataset words it) or missing when the model does not impute
// ("<file>:<line>: column \"x\" (column 3): missing value (data.missing:
// error)"); the backend's errors.
absl::StatusOr<Predictions> Predict(const std::vector<std::string>& model_paths,
                                    const std::string& data_path,
                                    const PredictOptions& options = {});

// One model's predictions of the rows of `table` ([rows, model.Outputs()]),
// on `backend` (null: as PredictOptions says). `model_path` names the model
// in messages.
absl::StatusOr<std::vector<float>> PredictTable(const TrainedModel& model,
                                                const std::string& model_path,
                                                const data::CsvTable& table,
                                                const PredictOptions& options = {});

}  // namespace traind::engine

#endif  // TRAIND_WORKER_ENGINE_PREDICT_H_
