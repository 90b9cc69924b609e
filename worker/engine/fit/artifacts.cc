#include "worker/engine/fit/artifacts.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <system_error>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "spec/task_plan.h"

namespace traind::engine {
namespace {

namespace fs = std::filesystem;

std::string CsvField(const std::string& s) {
  if (s.find_first_of(",\"\r\n") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}

// The epoch of a periodic checkpoint's file name, or -1.
int32_t EpochOfName(const std::string& name) {
  absl::string_view n = name;
  if (!absl::ConsumePrefix(&n, "epoch-") || !absl::ConsumeSuffix(&n, ".ckpt") || n.empty()) {
    return -1;
  }
  int32_t epoch = 0;
  if (!std::all_of(n.begin(), n.end(), [](char c) { return c >= '0' && c <= '9'; }) ||
      !absl::SimpleAtoi(n, &epoch) || name != absl::StrFormat("epoch-%06d.ckpt", epoch)) {
    return -1;
  }
  return epoch;
}

}  // namespace

absl::Status MakeDirs(const std::string& path) {
  std::error_code error;
  fs::create_directories(path, error);
  if (error) return absl::InternalError(absl::StrCat(path, ": cannot create: ", error.message()));
  return absl::OkStatus();
}

absl::Status WriteTextFile(const std::string& path, const std::string& text) {
  const std::string tmp = absl::StrCat(path, ".tmp.", getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
    out.close();
    if (!out) {
      std::error_code ignored;
      fs::remove(tmp, ignored);
      return absl::InternalError(absl::StrCat(path, ": cannot write"));
    }
  }
  std::error_code error;
  fs::rename(tmp, path, error);
  if (error) {
    std::error_code ignored;
    fs::remove(tmp, ignored);
    return absl::InternalError(absl::StrCat(path, ": cannot write: ", error.message()));
  }
  return absl::OkStatus();
}

std::string PeriodicCheckpointPath(const std::string& dir, int32_t epoch) {
  return absl::StrCat(dir, "/", absl::StrFormat("epoch-%06d.ckpt", epoch));
}

std::string BestCheckpointPath(const std::string& dir) { return dir + "/best.ckpt"; }

std::vector<std::pair<int32_t, std::string>> PeriodicCheckpoints(const std::string& dir) {
  std::vector<std::pair<int32_t, std::string>> files;
  std::error_code error;
  for (fs::directory_iterator it(dir, error), end; !error && it != end; it.increment(error)) {
    const std::string name = it->path().filename().string();
    const int32_t epoch = EpochOfName(name);
    if (epoch >= 0) files.emplace_back(epoch, dir + "/" + name);
  }
  std::sort(files.rbegin(), files.rend());
  return files;
}

absl::Status PrunePeriodicCheckpoints(const std::string& dir, int keep) {
  const auto files = PeriodicCheckpoints(dir);
  for (size_t i = static_cast<size_t>(std::max(keep, 0)); i < files.size(); ++i) {
    std::error_code error;
    fs::remove(files[i].second, error);
    if (error) {
      return absl::InternalError(
          absl::StrCat(files[i].second, ": cannot remove: ", error.message()));
    }
  }
  return absl::OkStatus();
}

std::string PredictionsCsv(const PredictionColumns& columns, int64_t outputs,
                           absl::Span<const int64_t> rows, const float* pred,
                           const LeadColumns& lead) {
  std::vector<std::string> header = {"row"};
  for (const std::string& name : lead.names) header.push_back(CsvField(name));
  const bool label =
      columns.target == data::TargetKind::kClasses || columns.target == data::TargetKind::kBinary;
  if (label) header.push_back("label");
  switch (columns.target) {
    case data::TargetKind::kClasses:
      for (const std::string& c : columns.classes) header.push_back(CsvField("p_" + c));
      break;
    case data::TargetKind::kBinary:
      header.push_back(CsvField("p_" + columns.classes[1]));
      break;
    case data::TargetKind::kMultiLabel:
      for (const std::string& c : columns.target_names) header.push_back(CsvField("p_" + c));
      break;
    case data::TargetKind::kRegression:
      if (outputs == 1) {
        header.push_back("prediction");
      } else {
        for (const std::string& c : columns.target_names) header.push_back(CsvField(c));
      }
      break;
  }
  // Each class name quoted once.
  std::vector<std::string> names;
  if (label) {
    for (const std::string& c : columns.classes) names.push_back(CsvField(c));
  }
  std::string text = absl::StrJoin(header, ",") + "\n";
  for (size_t i = 0; i < rows.size(); ++i) {
    const float* p = pred + static_cast<int64_t>(i) * outputs;
    absl::StrAppend(&text, rows[i]);
    for (size_t k = 0; k < lead.names.size(); ++k) {
      absl::StrAppend(&text, ",", CsvField(lead.cells[i * lead.names.size() + k]));
    }
    if (columns.target == data::TargetKind::kClasses) {
      int64_t best = 0;
      for (int64_t j = 1; j < outputs; ++j) {
        if (p[j] > p[best]) best = j;
      }
      absl::StrAppend(&text, ",", names[static_cast<size_t>(best)]);
    } else if (columns.target == data::TargetKind::kBinary) {
      absl::StrAppend(&text, ",", names[p[0] > 0.5f ? 1 : 0]);
    }
    for (int64_t j = 0; j < outputs; ++j) {
      absl::StrAppend(&text, ",", absl::StrFormat("%.9g", p[j]));
    }
    text += "\n";
  }
  return text;
}

std::string TrueColumnName(const data::Dataset& data, size_t k) {
  return "true_" + (k < data.target_names.size() ? data.target_names[k] : std::string("label"));
}

LeadColumns ValidationLeadColumns(const traind::v1::JobSpec& spec, const data::Dataset& data,
                                  int task, absl::Span<const int64_t> rows) {
  LeadColumns lead;
  const size_t ids = data.id_names.size();
  const bool files = ids == 0 && !data.row_names.empty();
  lead.names = data.id_names;
  if (files) lead.names.push_back("file");
  const spec::TaskPlan plan = spec::PlanTasks(spec);
  const bool repeats = plan.repeats > 1;
  lead.names.push_back("fold");
  if (repeats) lead.names.push_back("repeat");
  const bool classes =
      data.target == data::TargetKind::kClasses || data.target == data::TargetKind::kBinary;
  const size_t truths = classes ? 1 : static_cast<size_t>(data.outputs);
  for (size_t k = 0; k < truths; ++k) lead.names.push_back(TrueColumnName(data, k));
  const int folds = std::max(plan.folds, 1);
  const std::string fold = absl::StrCat(task % folds);
  const std::string repeat = absl::StrCat(task / folds);
  lead.cells.reserve(rows.size() * lead.names.size());
  for (const int64_t row : rows) {
    const size_t r = static_cast<size_t>(row);
    for (size_t k = 0; k < ids; ++k) lead.cells.push_back(data.ids[r * ids + k]);
    if (files) lead.cells.push_back(data.row_names[r]);
    lead.cells.push_back(fold);
    if (repeats) lead.cells.push_back(repeat);
    if (classes) {
      lead.cells.push_back(data.classes[static_cast<size_t>(data.y[r])]);
    } else {
      for (size_t k = 0; k < truths; ++k) {
        lead.cells.push_back(absl::StrFormat("%.9g", data.targets[r * truths + k]));
      }
    }
  }
  return lead;
}

std::string ValidationPredictionsCsv(const traind::v1::JobSpec& spec, const data::Dataset& data,
                                     int task, int64_t outputs, absl::Span<const int64_t> rows,
                                     const float* pred) {
  PredictionColumns columns;
  columns.target = data.target;
  columns.classes = data.classes;
  columns.target_names = data.target_names;
  return PredictionsCsv(columns, outputs, rows, pred,
                        ValidationLeadColumns(spec, data, task, rows));
}

}  // namespace traind::engine
