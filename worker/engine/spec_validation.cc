#include "worker/engine/spec_validation.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <algorithm>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_split.h"
#include "worker/engine/data/csv.h"
#include "worker/engine/data/labels.h"
#include "worker/engine/status.h"

namespace traind::engine {
namespace {

using traind::v1::JobSpec;

absl::Status Err(absl::string_view path, absl::string_view what) {
  return InvalidSpecError(absl::StrCat(path, ": ", what));
}

absl::Status CheckPositive(absl::string_view path, double v) {
  if (!(v > 0) || !std::isfinite(v)) return Err(path, absl::StrCat("must be positive (got ", v, ")"));
  return absl::OkStatus();
}

absl::Status CheckUnitInterval(absl::string_view path, double v) {
  if (!(v >= 0 && v < 1)) return Err(path, absl::StrCat("must be in [0, 1) (got ", v, ")"));
  return absl::OkStatus();
}

// What the spec needs to know of the data file.
struct DataSummary {
  std::vector<std::string> header;
  bool rows_known = false;  // false when the rows could not be read (DATA_ERROR later)
  int64_t rows = 0;
  int64_t classes = 0;
};

absl::StatusOr<DataSummary> SummarizeData(const traind::v1::DataSpec& data) {
  DataSummary s;
  {
    int fd = open(data.path().c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      return Err("data.path", absl::StrCat("cannot open \"", data.path(), "\": ", strerror(errno)));
    }
    close(fd);
  }
  absl::StatusOr<CsvTable> table = ReadCsv(data.path());
  if (table.ok()) {
    s.header = table->header;
    s.rows_known = true;
    s.rows = static_cast<int64_t>(table->rows.size());
    auto it = std::find(s.header.begin(), s.header.end(), data.label());
    if (it != s.header.end()) {
      size_t col = it - s.header.begin();
      std::set<std::string> distinct;
      for (const auto& row : table->rows) distinct.insert(row[col]);
      s.classes = static_cast<int64_t>(distinct.size());
    }
    return s;
  }
  // The rows are broken (the worker reports where); the header still tells
  // whether the label column exists.
  std::ifstream in(data.path());
  std::string line;
  if (!std::getline(in, line) || line.empty()) {
    return Err("data.path", absl::StrCat("\"", data.path(), "\" has no header row"));
  }
  if (!line.empty() && line.back() == '\r') line.pop_back();
  for (absl::string_view f : absl::StrSplit(line, ',')) {
    std::string name(f);
    if (name.size() >= 2 && name.front() == '"' && name.back() == '"') {
      name = name.substr(1, name.size() - 2);
    }
    s.header.push_back(name);
  }
  return s;
}

absl::Status ValidateModel(const JobSpec& spec) {
  const auto& layers = spec.model().layers();
  if (layers.empty()) return Err("model.layers", "at least one layer is required");
  for (int i = 0; i < layers.size(); ++i) {
    std::string path = absl::StrCat("model.layers[", i, "]");
    const traind::v1::Layer& layer = layers[i];
    switch (layer.kind_case()) {
      case traind::v1::Layer::kDense: {
        const traind::v1::Dense& d = layer.dense();
        if (d.units() <= 0) {
          return Err(absl::StrCat(path, ".dense.units"),
                     absl::StrCat("must be positive (got ", d.units(), ")"));
        }
        if (!traind::v1::Activation_IsValid(d.activation())) {
          return Err(absl::StrCat(path, ".dense.activation"), "unknown activation");
        }
        if (!traind::v1::Initializer_IsValid(d.init())) {
          return Err(absl::StrCat(path, ".dense.init"), "unknown initializer");
        }
        break;
      }
      case traind::v1::Layer::KIND_NOT_SET:
        return Err(path, "empty layer: set one of dense");
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateMetrics(const JobSpec& spec) {
  for (const char* split : {"train", "val"}) {
    const auto& list = std::string(split) == "train" ? spec.metrics().train() : spec.metrics().val();
    std::set<int> seen;
    for (int i = 0; i < list.size(); ++i) {
      std::string path = absl::StrCat("metrics.", split, "[", i, "]");
      int m = list[i];
      if (m == traind::v1::METRIC_UNSPECIFIED || !traind::v1::Metric_IsValid(m)) {
        return Err(path, "unknown metric (use loss or accuracy)");
      }
      if (!seen.insert(m).second) {
        return Err(path, absl::StrCat("duplicate metric ",
                                      absl::AsciiStrToLower(traind::v1::Metric_Name(list[i]))));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateJobSpec(const JobSpec& spec, const ValidationContext& context) {
  if (spec.name().size() > 200) return Err("name", "longer than 200 characters");

  // Everything that does not need the data first: cheap, and the errors a
  // user fixes first.
  if (!spec.has_data() || spec.data().path().empty()) return Err("data.path", "required");
  if (spec.data().label().empty()) return Err("data.label", "required (the label column)");

  const bool cv = spec.has_cross_validation();
  if (cv && spec.cross_validation().folds() < 2) {
    return Err("cross_validation.folds",
               absl::StrCat("must be at least 2 (got ", spec.cross_validation().folds(), ")"));
  }

  TRAIND_RETURN_IF_ERROR(ValidateModel(spec));

  switch (spec.loss().kind_case()) {
    case traind::v1::LossSpec::kSoftmaxCrossEntropy:
      break;
    case traind::v1::LossSpec::KIND_NOT_SET:
      return Err("loss", "required: set softmax_cross_entropy");
  }

  switch (spec.optimizer().kind_case()) {
    case traind::v1::OptimizerSpec::kSgd:
      TRAIND_RETURN_IF_ERROR(
          CheckPositive("optimizer.sgd.learning_rate", spec.optimizer().sgd().learning_rate()));
      TRAIND_RETURN_IF_ERROR(
          CheckUnitInterval("optimizer.sgd.momentum", spec.optimizer().sgd().momentum()));
      break;
    case traind::v1::OptimizerSpec::kAdam: {
      const traind::v1::Adam& a = spec.optimizer().adam();
      TRAIND_RETURN_IF_ERROR(CheckPositive("optimizer.adam.learning_rate", a.learning_rate()));
      if (a.has_beta1()) TRAIND_RETURN_IF_ERROR(CheckUnitInterval("optimizer.adam.beta1", a.beta1()));
      if (a.has_beta2()) TRAIND_RETURN_IF_ERROR(CheckUnitInterval("optimizer.adam.beta2", a.beta2()));
      if (a.has_epsilon()) TRAIND_RETURN_IF_ERROR(CheckPositive("optimizer.adam.epsilon", a.epsilon()));
      break;
    }
    case traind::v1::OptimizerSpec::KIND_NOT_SET:
      return Err("optimizer", "required: set sgd or adam");
  }

  const traind::v1::TrainingSpec& t = spec.training();
  const bool has_epochs = t.epochs() != 0, has_batches = t.batches() != 0;
  if (has_epochs && has_batches) {
    return Err("training", "set exactly one of epochs and batches (both are set)");
  }
  if (!has_epochs && !has_batches) {
    return Err("training", "set exactly one of epochs and batches (neither is set)");
  }
  if (has_epochs && t.epochs() < 0) {
    return Err("training.epochs", absl::StrCat("must be positive (got ", t.epochs(), ")"));
  }
  if (has_batches && t.batches() < 0) {
    return Err("training.batches", absl::StrCat("must be positive (got ", t.batches(), ")"));
  }
  if (t.batch_size() <= 0) {
    return Err("training.batch_size", absl::StrCat("must be positive (got ", t.batch_size(), ")"));
  }

  TRAIND_RETURN_IF_ERROR(ValidateMetrics(spec));

  switch (spec.resources().device()) {
    case traind::v1::CPU:
      if (spec.resources().count() != 0) {
        return Err("resources.count", "only for device: gpu");
      }
      break;
    case traind::v1::GPU:
      if (context.gpus == 0) {
        return Err("resources.device", "gpu requested, but this server has no usable GPU");
      }
      if (spec.resources().count() < 1 || spec.resources().count() > context.gpus) {
        return Err("resources.count", absl::StrCat("must be between 1 and ", context.gpus,
                                                   " (got ", spec.resources().count(), ")"));
      }
      break;
    default:
      return Err("resources.device", "unknown device");
  }

  // Now the data file.
  absl::StatusOr<DataSummary> data = SummarizeData(spec.data());
  if (!data.ok()) return data.status();
  if (std::find(data->header.begin(), data->header.end(), spec.data().label()) ==
      data->header.end()) {
    return Err("data.label", absl::StrCat("column \"", spec.data().label(), "\" not found in ",
                                          spec.data().path(), " (columns: ",
                                          absl::StrJoin(data->header, ", "), ")"));
  }
  if (data->header.size() < 2) {
    return Err("data.path", absl::StrCat(spec.data().path(), " has no feature columns"));
  }
  if (data->rows_known) {
    if (data->rows == 0) return Err("data.path", absl::StrCat(spec.data().path(), " has no rows"));
    if (cv && spec.cross_validation().folds() > data->rows) {
      return Err("cross_validation.folds",
                 absl::StrCat(spec.cross_validation().folds(), " folds, but ", spec.data().path(),
                              " has only ", data->rows, " rows"));
    }
    const auto& layers = spec.model().layers();
    const int last = layers.size() - 1;
    if (layers[last].has_dense() && layers[last].dense().units() != data->classes) {
      return Err(absl::StrCat("model.layers[", last, "].dense.units"),
                 absl::StrCat("the last layer has ", layers[last].dense().units(),
                              " units, but data.label \"", spec.data().label(), "\" has ",
                              data->classes, " classes"));
    }
  }
  return absl::OkStatus();
}

int TaskCount(const JobSpec& spec) {
  return spec.has_cross_validation() ? spec.cross_validation().folds() : 1;
}

}  // namespace traind::engine
