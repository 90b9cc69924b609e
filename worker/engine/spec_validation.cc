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
#include "worker/engine/spec_check.h"
#include "worker/engine/status.h"

namespace traind::engine {
namespace {

using traind::v1::JobSpec;

absl::Status Err(absl::string_view path, absl::string_view what) {
  return InvalidSpecError(absl::StrCat(path, ": ", what));
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

  // Model, loss, optimizer, training and metrics: the engine's own checks,
  // the same the worker makes.
  TRAIND_RETURN_IF_ERROR(CheckTrainingSpec(spec));

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
