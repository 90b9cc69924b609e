#include "worker/engine/predict.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "base/status.h"
#include "data/dataset.h"
#include "data/images.h"
#include "data/text.h"
#include "worker/engine/backend/backend.h"
#include "worker/engine/backend/cpu/cpu_backend.h"
#include "worker/engine/fit/artifacts.h"
#include "worker/engine/losses.h"
#include "worker/engine/network.h"

namespace traind::engine {
namespace {

char DelimiterOf(const TrainedModel& model) {
  const std::string& d = model.spec.data().delimiter();
  return d.empty() ? ',' : d[0];
}

// The column of `name` in table's header: exactly one.
absl::StatusOr<size_t> FindColumn(const data::CsvTable& table, const std::string& name) {
  size_t found = 0;
  int count = 0;
  for (size_t c = 0; c < table.header.size(); ++c) {
    if (table.header[c] == name && count++ == 0) found = c;
  }
  if (count == 0) {
    return DataError(absl::StrFormat("%s: column %s not found; columns: %s", table.path,
                                     data::QuoteForMessage(name),
                                     data::JoinForMessage(table.header)));
  }
  if (count > 1) {
    return DataError(absl::StrFormat("%s: column %s appears %d times", table.path,
                                     data::QuoteForMessage(name), count));
  }
  return found;
}

std::string Where(const data::CsvTable& table, size_t row, size_t column) {
  return absl::StrFormat("%s:%d: column %s (column %d)", table.path, table.lines[row],
                         data::QuoteForMessage(table.header[column]), column + 1);
}

// The network inputs of every row of `table`: [rows, model.InputWidth()],
// as FeaturePipeline::Transform computes them.
absl::Status Features(const TrainedModel& model, const data::CsvTable& table,
                      std::vector<float>* out) {
  const bool impute = model.spec.data().missing() != traind::v1::MISSING_ERROR;
  const size_t f = model.feature_names.size();
  std::vector<size_t> numeric(f);
  for (size_t j = 0; j < f; ++j) {
    TRAIND_ASSIGN_OR_RETURN(numeric[j], FindColumn(table, model.feature_names[j]));
  }
  // Per categorical column: its file column, the input of its first
  // category and each category's offset from it.
  struct OneHot {
    size_t column = 0;
    int64_t first = 0;
    std::map<std::string, int64_t> index;
  };
  std::vector<OneHot> one_hot(model.categorical.size());
  int64_t next = static_cast<int64_t>(f);
  for (size_t k = 0; k < model.categorical.size(); ++k) {
    const TrainedModel::Categorical& c = model.categorical[k];
    TRAIND_ASSIGN_OR_RETURN(one_hot[k].column, FindColumn(table, c.name));
    one_hot[k].first = next;
    for (size_t i = 0; i < c.categories.size(); ++i) {
      one_hot[k].index.emplace(c.categories[i], static_cast<int64_t>(i));
    }
    next += static_cast<int64_t>(c.categories.size());
  }
  const int64_t width = next;
  out->assign(table.rows.size() * static_cast<size_t>(width), 0.0f);
  const auto missing = [&](size_t r, size_t column) {
    return DataError(
        absl::StrCat(Where(table, r, column), ": missing value (data.missing: error)"));
  };
  for (size_t r = 0; r < table.rows.size(); ++r) {
    const std::vector<std::string>& cells = table.rows[r];
    float* x = out->data() + r * static_cast<size_t>(width);
    for (size_t j = 0; j < f; ++j) {
      const std::string& cell = cells[numeric[j]];
      double v = 0;
      if (data::IsMissing(cell)) {
        if (!impute) return missing(r, numeric[j]);
        v = model.impute[j];
      } else {
        float parsed = 0;
        if (const char* wrong = data::ParseFeature(cell, &parsed); wrong != nullptr) {
          return DataError(absl::StrFormat("%s: %s %s", Where(table, r, numeric[j]),
                                           data::QuoteForMessage(cell), wrong));
        }
        v = parsed;
      }
      x[j] = static_cast<float>((v - model.offset[j]) / model.scale[j]);
    }
    for (const OneHot& c : one_hot) {
      const std::string& cell = cells[c.column];
      if (data::IsMissing(cell)) {
        if (!impute) return missing(r, c.column);
        continue;
      }
      auto it = c.index.find(cell);
      if (it != c.index.end()) x[c.first + it->second] = 1.0f;
    }
  }
  return absl::OkStatus();
}

std::string ShapeText(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

// The model's state into `network`, by name: every tensor of the network
// once, with its shape, and nothing else.
absl::Status LoadState(const TrainedModel& model, const std::string& path, Backend* backend,
                       Network* network) {
  std::map<std::string, const TrainedModel::NamedTensor*> by_name;
  for (const TrainedModel::NamedTensor& t : model.state) by_name[t.name] = &t;
  const std::vector<Parameter> state = network->state();
  for (const Parameter& p : state) {
    auto it = by_name.find(p.name);
    if (it == by_name.end()) {
      return DataError(absl::StrFormat(
          "%s: no state \"%s\" (the file's state does not fit its spec's model)", path, p.name));
    }
    const Tensor& value = *p.value;
    const std::vector<int64_t> shape = value.rank() == 2
                                           ? std::vector<int64_t>{value.rows(), value.cols()}
                                           : std::vector<int64_t>{value.size()};
    if (it->second->shape != shape) {
      return DataError(absl::StrFormat("%s: state \"%s\" has shape %s, the network's is %s", path,
                                       p.name, ShapeText(it->second->shape), ShapeText(shape)));
    }
    TRAIND_RETURN_IF_ERROR(backend->CopyFromHost(it->second->values.data(), p.value));
    by_name.erase(it);
  }
  if (!by_name.empty()) {
    return DataError(absl::StrFormat("%s: state \"%s\" is not part of its spec's model", path,
                                     by_name.begin()->first));
  }
  return absl::OkStatus();
}

std::vector<std::string> CategoricalNames(const TrainedModel& m) {
  std::vector<std::string> names;
  for (const TrainedModel::Categorical& c : m.categorical) names.push_back(c.name);
  return names;
}

// What the models of an ensemble must share.
absl::Status CheckSameColumns(const TrainedModel& first, const std::string& first_path,
                              const TrainedModel& other, const std::string& other_path) {
  const auto differ = [&](absl::string_view what, const std::vector<std::string>& a,
                          const std::vector<std::string>& b) {
    return DataError(absl::StrFormat("%s: cannot be averaged with %s: the %s differ (%s vs %s)",
                                     other_path, first_path, what, data::JoinForMessage(b),
                                     data::JoinForMessage(a)));
  };
  if (other.target != first.target) {
    return DataError(
        absl::StrFormat("%s: cannot be averaged with %s: another kind of target (another loss)",
                        other_path, first_path));
  }
  if (other.feature_names != first.feature_names) {
    return differ("feature columns", first.feature_names, other.feature_names);
  }
  if (CategoricalNames(other) != CategoricalNames(first)) {
    return differ("categorical columns", CategoricalNames(first), CategoricalNames(other));
  }
  if (other.classes != first.classes) return differ("classes", first.classes, other.classes);
  if (other.target_names != first.target_names) {
    return differ("target columns", first.target_names, other.target_names);
  }
  if (DelimiterOf(other) != DelimiterOf(first)) {
    return DataError(absl::StrFormat("%s: cannot be averaged with %s: another data.delimiter",
                                     other_path, first_path));
  }
  return absl::OkStatus();
}

}  // namespace

std::string Predictions::Csv() const {
  std::vector<int64_t> row_ids(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) row_ids[static_cast<size_t>(r)] = r;
  PredictionColumns columns;
  columns.target = target;
  columns.classes = classes;
  columns.target_names = target_names;
  return PredictionsCsv(columns, outputs, row_ids, values.data(), lead);
}

LeadColumns InputLeadColumns(const TrainedModel& model, const data::CsvTable& table) {
  const traind::v1::DataSpec& d = model.spec.data();
  std::vector<std::string> wanted, names;
  for (const std::string& id : d.id_size() > 0 ? d.id() : d.ignore()) {
    if (!data::IsPredictionColumnName(id)) wanted.push_back(id);
  }
  const size_t ids = wanted.size();
  if (!d.label().empty()) wanted.push_back(d.label());
  wanted.insert(wanted.end(), d.labels().begin(), d.labels().end());
  LeadColumns lead;
  std::vector<size_t> columns;
  for (size_t i = 0; i < wanted.size(); ++i) {
    const auto it = std::find(table.header.begin(), table.header.end(), wanted[i]);
    if (it == table.header.end()) continue;
    if (std::find(wanted.begin(), wanted.begin() + i, wanted[i]) != wanted.begin() + i) continue;
    lead.names.push_back(i < ids ? wanted[i] : "true_" + wanted[i]);
    columns.push_back(static_cast<size_t>(it - table.header.begin()));
  }
  lead.cells.reserve(table.rows.size() * columns.size());
  for (const auto& row : table.rows) {
    for (size_t c : columns) lead.cells.push_back(row[c]);
  }
  return lead;
}

namespace {

// The network inputs of `images` for `model`: [count, C·H·W], each pixel's
// value (a byte, or a float) through the model's offset and scale.
absl::Status ImageFeatures(const TrainedModel& model, const std::string& data_path,
                           const data::ImageSet& images, std::vector<float>* out) {
  const auto& shape = model.spec.data().shape();
  if (shape.size() != 3 || shape[0] != images.channels || shape[1] != images.height ||
      shape[2] != images.width) {
    return DataError(absl::StrFormat("%s: %d×%d×%d images, but the model takes [%s]", data_path,
                                     images.channels, images.height, images.width,
                                     absl::StrJoin(shape, ", ")));
  }
  const int64_t f = images.features();
  if (static_cast<int64_t>(model.offset.size()) != f || model.InputWidth() != f) {
    return DataError(absl::StrFormat("%s: the model takes %d inputs, the images have %d pixels",
                                     data_path, model.InputWidth(), f));
  }
  out->resize(static_cast<size_t>(images.count * f));
  for (int64_t r = 0; r < images.count; ++r) {
    for (int64_t j = 0; j < f; ++j) {
      const size_t i = static_cast<size_t>(r * f + j);
      const double v = images.bytes.empty() ? images.values[i] : images.bytes[i];
      (*out)[i] = static_cast<float>((v - model.offset[j]) / model.scale[j]);
    }
  }
  return absl::OkStatus();
}

// One model's predictions of `rows` rows whose network inputs `features`
// computes.
absl::StatusOr<std::vector<float>> PredictRows(
    const TrainedModel& model, const std::string& model_path, int64_t rows,
    const std::function<absl::Status(std::vector<float>*)>& make_features,
    const PredictOptions& options) {
  const int64_t width = model.InputWidth();
  const int64_t outputs = model.Outputs();
  if (width <= 0) return DataError(absl::StrCat(model_path, ": the model has no inputs"));
  std::vector<float> features;
  TRAIND_RETURN_IF_ERROR(make_features(&features));

  Backend* backend = options.backend;
  std::unique_ptr<Backend> owned;
  if (backend == nullptr) {
    const bool bf16 = model.spec.training().precision() == traind::v1::BF16 && CpuSupportsBf16();
    TRAIND_ASSIGN_OR_RETURN(owned, CreateCpuBackend(bf16 ? traind::v1::BF16 : traind::v1::FP32));
    backend = owned.get();
  }
  absl::StatusOr<spec::ValueShape> input = spec::ModelInputShape(model.spec.data(), width);
  absl::StatusOr<Network> created = input.ok()
                                        ? Network::Create(backend, *input, model.spec.model())
                                        : absl::StatusOr<Network>(input.status());
  if (!created.ok()) {
    return DataError(absl::StrCat(model_path, ": its spec's model: ", created.status().message()));
  }
  Network network = std::move(created).value();
  if (network.outputs() != outputs) {
    return DataError(absl::StrFormat("%s: the network has %d outputs, the target needs %d",
                                     model_path, network.outputs(), outputs));
  }
  TRAIND_RETURN_IF_ERROR(LoadState(model, model_path, backend, &network));
  TRAIND_ASSIGN_OR_RETURN(std::unique_ptr<Loss> loss,
                          Loss::Create(model.spec.loss(), model.target, outputs));

  const int64_t batch = std::max<int64_t>(1, options.batch_rows);
  std::vector<float> predictions(static_cast<size_t>(rows * outputs));
  std::vector<float> raw(static_cast<size_t>(std::min(rows, batch) * outputs));
  ForwardMode mode;
  mode.training = false;
  Tensor x;
  for (int64_t start = 0; start < rows; start += batch) {
    const int64_t n = std::min(batch, rows - start);
    if (x.empty() || x.rows() != n) {
      TRAIND_ASSIGN_OR_RETURN(x, backend->Allocate2d(DType::kF32, n, width));
    }
    TRAIND_RETURN_IF_ERROR(backend->CopyFromHost(features.data() + start * width, &x));
    TRAIND_ASSIGN_OR_RETURN(Tensor * out, network.Forward(x, mode));
    TRAIND_RETURN_IF_ERROR(backend->CopyToHost(*out, raw.data()));
    loss->Predict(raw.data(), n, predictions.data() + start * outputs);
  }
  return predictions;
}

}  // namespace

absl::StatusOr<std::vector<float>> PredictTable(const TrainedModel& model,
                                                const std::string& model_path,
                                                const data::CsvTable& table,
                                                const PredictOptions& options) {
  return PredictRows(
      model, model_path, static_cast<int64_t>(table.rows.size()),
      [&](std::vector<float>* out) { return Features(model, table, out); }, options);
}

absl::StatusOr<Predictions> Predict(const std::vector<std::string>& model_paths,
                                    const std::string& data_path, const PredictOptions& options) {
  if (model_paths.empty()) return absl::InvalidArgumentError("predict: no model");
  std::vector<TrainedModel> models;
  for (const std::string& path : model_paths) {
    TRAIND_ASSIGN_OR_RETURN(TrainedModel model, ReadModelFile(path));
    if (!models.empty()) {
      TRAIND_RETURN_IF_ERROR(CheckSameColumns(models[0], model_paths[0], model, path));
    }
    models.push_back(std::move(model));
  }
  // An image model reads images (their format by the path: a folder, .npy,
  // IDX) unless given a CSV of pixel columns.
  traind::v1::DataSpec image_spec = models[0].spec.data();
  image_spec.clear_format();
  if (image_spec.shape_size() == 3) {
    // An image folder is read as the model takes it: its channels (1 or 3),
    // each image resized to its height and width.
    if (image_spec.shape(0) == 1 || image_spec.shape(0) == 3) {
      image_spec.set_channels(image_spec.shape(0));
    }
    image_spec.clear_image_size();
    image_spec.add_image_size(image_spec.shape(1));
    image_spec.add_image_size(image_spec.shape(2));
  }
  const bool images = !models[0].spec.data().shape().empty() &&
                      data::FormatOf(image_spec, data_path) != traind::v1::CSV;
  data::CsvTable table;
  data::ImageSet image_set;
  if (images) {
    TRAIND_ASSIGN_OR_RETURN(image_set,
                            data::ReadImages(image_spec, {"input", data_path, "", ""},
                                             /*header_only=*/false, options.decode_threads));
  } else {
    TRAIND_ASSIGN_OR_RETURN(table, data::ReadCsv(data_path, DelimiterOf(models[0])));
  }
  Predictions p;
  p.target = models[0].target;
  p.classes = models[0].classes;
  p.target_names = models[0].target_names;
  p.rows = images ? image_set.count : static_cast<int64_t>(table.rows.size());
  p.outputs = models[0].Outputs();
  if (!images) {
    p.lead = InputLeadColumns(models[0], table);
  } else if (!image_set.names.empty()) {
    p.lead.names = {"file"};
    p.lead.cells = image_set.names;
  }
  // The mean, summed in double in model order.
  std::vector<double> sum(static_cast<size_t>(p.rows * p.outputs), 0.0);
  for (size_t m = 0; m < models.size(); ++m) {
    absl::StatusOr<std::vector<float>> one =
        images ? PredictRows(
                     models[m], model_paths[m], p.rows,
                     [&](std::vector<float>* out) {
                       return ImageFeatures(models[m], data_path, image_set, out);
                     },
                     options)
               : PredictTable(models[m], model_paths[m], table, options);
    if (!one.ok()) return one.status();
    for (size_t i = 0; i < sum.size(); ++i) sum[i] += (*one)[i];
  }
  p.values.resize(sum.size());
  const double count = static_cast<double>(models.size());
  for (size_t i = 0; i < sum.size(); ++i) p.values[i] = static_cast<float>(sum[i] / count);
  return p;
}

}  // namespace traind::engine
