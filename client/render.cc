#include "client/render.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "client/format.h"
#include "client/json_numbers.h"
#include "google/protobuf/util/json_util.h"
#include "spec/search.h"
#include "spec/task_plan.h"
#include "yaml-cpp/yaml.h"

namespace traind::client {
namespace {

using ::traind::v1::Job;
using ::traind::v1::JobEvent;
using ::traind::v1::JobResult;
using ::traind::v1::JobSpec;
using ::traind::v1::Task;

std::string Time(const google::protobuf::Timestamp& ts) {
  return FormatLocalTime(ts.seconds(), ts.nanos());
}

template <typename Map>
std::vector<std::string> MetricNames(const Map& map) {
  std::vector<std::string> names;
  for (const auto& [name, value] : map) names.push_back(name);
  return OrderMetricNames(std::move(names));
}

// "loss 0.4123 accuracy 0.8750"
std::string MetricList(const google::protobuf::Map<std::string, double>& map) {
  std::vector<std::string> parts;
  for (const std::string& name : MetricNames(map)) {
    parts.push_back(absl::StrCat(name, " ", FormatMetric(map.at(name))));
  }
  return absl::StrJoin(parts, " ");
}

std::string TaskWord(const JobSpec& spec) { return spec.has_cross_validation() ? "fold" : "task"; }

}  // namespace

std::string ArtifactName(const std::string& path) {
  // <state_dir>/jobs/<job id>/<name> (docs/operations.md, "State directory").
  const size_t jobs = path.rfind("/jobs/");
  if (jobs == std::string::npos) return path;
  const size_t id_end = path.find('/', jobs + 6);
  if (id_end == std::string::npos || id_end + 1 >= path.size()) return path;
  return path.substr(id_end + 1);
}

std::string TaskLabel(const JobSpec& spec, int task) {
  if (!spec.has_search()) {
    if (spec.has_cross_validation() && spec::IsRefitTask(spec, task)) return "refit";
    return absl::StrCat(TaskWord(spec), " ", task);
  }
  const spec::SearchTask where = spec::LocateSearchTask(spec, task);
  if (where.trial < 0) return "refit of the best trial";
  return absl::StrCat("trial ", where.trial, " fold ", where.spec_task);
}

namespace {

std::string Upper(std::string s) {
  for (char& c : s) {
    if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
  }
  return s;
}

}  // namespace

std::string ToJson(const google::protobuf::Message& message, bool pretty) {
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = pretty;
  options.preserve_proto_field_names = true;
  // Default values too: fold 0 has "fold": 0 and a CPU device "kind": "CPU",
  // so `jq '.folds[].fold'` sees every fold.
  options.always_print_primitive_fields = true;
  std::string out;
  auto status = google::protobuf::util::MessageToJsonString(message, &out, options);
  if (!status.ok()) out = "{}";
  // 64-bit counts (rows, bytes, sequences) as numbers jq compares as such.
  out = Int64sAsNumbers(out, message.GetDescriptor());
  while (!out.empty() && out.back() == '\n') out.pop_back();
  out += '\n';
  return out;
}

namespace {
// Block style all the way down (JSON parses as flow style).
void Blockify(YAML::Node node) {
  node.SetStyle(YAML::EmitterStyle::Block);
  if (node.IsMap()) {
    for (auto kv : node) Blockify(kv.second);
  } else if (node.IsSequence()) {
    for (auto item : node) Blockify(item);
  }
}
}  // namespace

std::string ToYaml(const google::protobuf::Message& message) {
  const std::string json = ToJson(message, /*pretty=*/false);
  try {
    YAML::Node node = YAML::Load(json);
    Blockify(node);
    YAML::Emitter out;
    out << node;
    std::string text = out.c_str();
    if (text == "{}" || text.empty()) return "{}\n";
    return text + "\n";
  } catch (const YAML::Exception&) {
    return json;  // JSON is YAML too
  }
}

std::string JobStateName(Job::State state) {
  if (state == Job::STATE_UNSPECIFIED) return "-";
  const std::string& name = Job::State_Name(state);
  return name.empty() ? absl::StrCat(static_cast<int>(state)) : name;
}

std::string TaskStateName(Task::State state) {
  if (state == Task::STATE_UNSPECIFIED) return "-";
  const std::string& name = Task::State_Name(state);
  return name.empty() ? absl::StrCat(static_cast<int>(state)) : name;
}

std::string FailureText(const traind::v1::Failure& failure) {
  std::string text;
  if (failure.reason() != traind::v1::Failure::REASON_UNSPECIFIED) {
    text = traind::v1::Failure::Reason_Name(failure.reason());
  }
  if (!failure.message().empty()) {
    text = text.empty() ? failure.message() : absl::StrCat(text, ": ", failure.message());
  }
  std::vector<std::string> details;
  if (failure.exit_code() != 0) {
    details.push_back(absl::StrCat("exit code ", failure.exit_code()));
  }
  if (failure.signal() != 0) {
    details.push_back(absl::StrCat("signal ", failure.signal()));
  }
  if (!details.empty()) {
    absl::StrAppend(&text, text.empty() ? "" : " ", "(", absl::StrJoin(details, ", "), ")");
  }
  return text;
}

std::string RenderSubmitted(const Job& job) {
  return absl::StrCat("submitted job ", job.id(), " (", job.spec().name(), ")\n");
}

std::string RenderEvent(const JobEvent& event, const JobSpec& spec) {
  switch (event.kind_case()) {
    case JobEvent::kEpoch: {
      const auto& e = event.epoch();
      std::string line = TaskLabel(spec, e.task());
      if (e.attempt() > 1) absl::StrAppend(&line, " attempt ", e.attempt());
      absl::StrAppend(&line, "  epoch ", e.epoch());
      if (spec.training().epochs() > 0) {
        absl::StrAppend(&line, "/", spec.training().epochs());
      }
      std::vector<std::string> parts;
      if (!e.train().empty()) parts.push_back("train " + MetricList(e.train()));
      if (!e.val().empty()) parts.push_back("val " + MetricList(e.val()));
      if (!parts.empty()) absl::StrAppend(&line, "  ", absl::StrJoin(parts, " | "));
      absl::StrAppend(&line, "  (", FormatSeconds(e.seconds()), ")");
      return line;
    }
    case JobEvent::kTaskState: {
      const auto& t = event.task_state();
      std::string line = absl::StrCat(TaskLabel(spec, t.task()), " ", TaskStateName(t.state()));
      std::vector<std::string> details;
      if (t.attempt() > 0) details.push_back(absl::StrCat("attempt ", t.attempt()));
      if (t.pid() > 0) details.push_back(absl::StrCat("pid ", t.pid()));
      if (t.slurm_job_id() > 0) details.push_back(absl::StrCat("slurm job ", t.slurm_job_id()));
      if (!details.empty()) {
        absl::StrAppend(&line, " (", absl::StrJoin(details, ", "), ")");
      }
      std::string failure = FailureText(t.failure());
      if (!failure.empty()) absl::StrAppend(&line, ": ", failure);
      if (t.rung_epoch() > 0) {
        absl::StrAppend(&line, ": paused at the rung of epoch ", t.rung_epoch(),
                        " until its trial's other folds get there");
      }
      if (t.has_result()) {
        absl::StrAppend(&line, "  best epoch ", t.result().best_epoch());
        if (!t.result().val().empty()) {
          absl::StrAppend(&line, ": val ", MetricList(t.result().val()));
        }
      }
      return line;
    }
    case JobEvent::kJobState: {
      const auto& j = event.job_state();
      std::string line = absl::StrCat("job ", event.job_id(), " ", JobStateName(j.state()));
      std::string failure = FailureText(j.failure());
      if (!failure.empty()) absl::StrAppend(&line, ": ", failure);
      return line;
    }
    case JobEvent::kDevice: {
      // A device the job's tasks ran on changed state (a GPU that did not
      // drain is UNHEALTHY and no longer used).
      const auto& d = event.device();
      std::string line = absl::StrCat("device ", d.device_id(), " ", d.state());
      if (!d.message().empty()) absl::StrAppend(&line, ": ", d.message());
      return line;
    }
    case JobEvent::KIND_NOT_SET:
      break;
  }
  return absl::StrCat("event ", event.sequence());
}

std::string RenderMeanStdLine(const JobResult& result) {
  if (result.val().empty()) return "";
  std::vector<std::string> parts;
  for (const std::string& name : MetricNames(result.val())) {
    const auto& summary = result.val().at(name);
    parts.push_back(absl::StrCat(name, " ", FormatMeanStd(summary.mean(), summary.std())));
  }
  const int folds = result.folds_size();
  return absl::StrCat("val mean \xC2\xB1 std over ", folds,
                      folds == 1 ? " fold: " : " folds: ", absl::StrJoin(parts, "  "));
}

std::string RenderImportance(const JobResult& result, int width) {
  if (result.importance().empty()) return "";
  const int folds = result.folds_size();
  std::string text = absl::StrCat(
      "permutation importance, mean \xC2\xB1 std over ", folds, folds == 1 ? " fold\n" : " folds\n",
      "(how much ", result.importance_metric(), " worsens when the feature is shuffled)\n");
  // FEATURE (at most 24 columns), IMPORTANCE, STD, then a bar of the rest.
  size_t name_width = 7;
  double largest = 0;
  for (const auto& f : result.importance()) {
    name_width = std::max(name_width, std::min<size_t>(DisplayWidth(f.feature()), 24));
    largest = std::max(largest, f.mean());
  }
  const int bar_room = width - static_cast<int>(name_width) - 2 - 10 - 2 - 8 - 2 - 1;
  Table table({"FEATURE", "IMPORTANCE", "STD", ""});
  table.SetAlign(1, Align::kRight);
  table.SetAlign(2, Align::kRight);
  for (const auto& f : result.importance()) {
    std::string name = f.feature();
    if (DisplayWidth(name) > name_width) {
      // Cut at a character boundary, then an ellipsis.
      size_t cut = 0, shown = 0;
      while (cut < name.size() && shown + 1 < name_width) {
        ++cut;
        while (cut < name.size() && (static_cast<unsigned char>(name[cut]) & 0xC0) == 0x80) ++cut;
        ++shown;
      }
      name = name.substr(0, cut) + "\xE2\x80\xA6";
    }
    std::string bar;
    if (bar_room > 0 && largest > 0 && f.mean() > 0) {
      const int n = static_cast<int>(std::lround(bar_room * f.mean() / largest));
      for (int i = 0; i < n; ++i) bar += "\xE2\x96\x88";
    }
    table.AddRow({name, FormatMetric(f.mean()), FormatMetric(f.std()), bar});
  }
  return text + table.Render();
}

namespace {

// A job without validation rows (no cross-validation, no validation split):
// what each task trained to, and its model.
std::string RenderTrainOnlyResult(const JobResult& result) {
  std::vector<std::string> names;
  for (const auto& fold : result.folds()) {
    for (const auto& [name, value] : fold.final_train()) {
      if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
    }
  }
  names = OrderMetricNames(std::move(names));
  std::vector<std::string> headers = {"TASK", "EPOCHS", "TRAIN_ROWS"};
  for (const auto& name : names) headers.push_back("TRAIN_" + Upper(name));
  Table table(headers);
  for (size_t c = 0; c < headers.size(); ++c) table.SetAlign(c, Align::kRight);
  for (const auto& fold : result.folds()) {
    std::vector<std::string> row = {absl::StrCat(fold.fold()), absl::StrCat(fold.epochs_run()),
                                    absl::StrCat(fold.train_rows())};
    for (const auto& name : names) {
      auto it = fold.final_train().find(name);
      row.push_back(it == fold.final_train().end() ? "-" : FormatMetric(it->second));
    }
    table.AddRow(std::move(row));
  }
  std::string out = table.Render();
  absl::StrAppend(&out, "(no validation rows: training metrics of the last epoch)\n");
  if (!result.complete()) absl::StrAppend(&out, "(incomplete: tasks still running)\n");
  for (const auto& fold : result.folds()) {
    if (!fold.model_path().empty()) {
      absl::StrAppend(&out, "model (task ", fold.fold(), "): ", ArtifactName(fold.model_path()),
                      "\n");
    }
    if (!fold.predictions_path().empty()) {
      absl::StrAppend(&out, "predictions (task ", fold.fold(),
                      "): ", ArtifactName(fold.predictions_path()), "\n");
    }
  }
  return out;
}

}  // namespace

namespace {

std::string TrialStateName(traind::v1::TrialResult::State s) {
  std::string name = traind::v1::TrialResult::State_Name(s);
  return name == "STATE_UNSPECIFIED" ? "-" : name;
}

// The shortest '.'-separated suffix of each path that no other path ends
// with ("optimizer.adam.learning_rate" -> "learning_rate").
std::vector<std::string> ShortNames(const std::vector<std::string>& paths) {
  std::vector<std::vector<std::string>> parts;
  for (const auto& p : paths) parts.push_back(absl::StrSplit(p, '.'));
  std::vector<std::string> names(paths.size());
  for (size_t i = 0; i < paths.size(); ++i) {
    for (size_t take = 1; take <= parts[i].size(); ++take) {
      std::string name =
          absl::StrJoin(parts[i].end() - static_cast<std::ptrdiff_t>(take), parts[i].end(), ".");
      bool unique = true;
      for (size_t j = 0; j < paths.size() && unique; ++j) {
        unique = j == i || !(paths[j] == name || absl::EndsWith(paths[j], "." + name));
      }
      names[i] = name;
      if (unique) break;
    }
  }
  return names;
}

// The widest line of `text`.
size_t TextWidth(const std::string& text) {
  size_t widest = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    widest = std::max(widest, DisplayWidth(std::string(line)));
  }
  return widest;
}

// A table narrower than max_cols where it can be: the columns from `keep` on
// are left out from the right until it fits; *dropped counts them.
std::string FitColumns(const std::vector<std::string>& headers,
                       const std::vector<std::vector<std::string>>& rows,
                       const std::vector<Align>& align, size_t keep, size_t max_cols,
                       size_t* dropped) {
  *dropped = 0;
  for (size_t n = headers.size();; --n) {
    Table table(std::vector<std::string>(headers.begin(), headers.begin() + n));
    for (size_t c = 0; c < n; ++c) table.SetAlign(c, align[c]);
    for (const auto& row : rows) {
      table.AddRow(std::vector<std::string>(row.begin(), row.begin() + n));
    }
    std::string text = table.Render();
    if (TextWidth(text) <= max_cols || n <= keep) {
      *dropped = headers.size() - n;
      return text;
    }
  }
}

// "12" or "7.5": a mean of whole numbers.
std::string PerFold(int total, int folds) {
  if (folds <= 0) return absl::StrCat(total);
  if (total % folds == 0) return absl::StrCat(total / folds);
  return absl::StrFormat("%.1f", static_cast<double>(total) / folds);
}

// A search's trials, best first (scikit-learn's cv_results_ as a table): the
// parameters by their shortest distinct names (a legend gives the paths),
// the search's metric first; the columns that do not fit `width` are left
// out from the right, the search metric last, and counted.
std::string RenderTrials(const JobResult& result, const JobSpec* spec, int width) {
  std::vector<const traind::v1::TrialResult*> trials;
  for (const auto& t : result.trials()) trials.push_back(&t);
  std::stable_sort(trials.begin(), trials.end(), [](const auto* a, const auto* b) {
    const int ra = a->rank() > 0 ? a->rank() : INT32_MAX;
    const int rb = b->rank() > 0 ? b->rank() : INT32_MAX;
    return ra < rb;
  });
  std::vector<std::string> params, names;
  for (const auto* t : trials) {
    for (const auto& [path, value] : t->params()) {
      if (std::find(params.begin(), params.end(), path) == params.end()) params.push_back(path);
    }
    for (const auto& [name, s] : t->val()) {
      if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
    }
  }
  std::sort(params.begin(), params.end());
  names = OrderMetricNames(std::move(names));
  // The search's metric ("val.accuracy"; val.loss by default) leads.
  if (spec != nullptr && spec->has_search()) {
    std::string metric = spec->search().metric().empty() ? "val.loss" : spec->search().metric();
    if (absl::StartsWith(metric, "val.")) metric = metric.substr(4);
    auto it = std::find(names.begin(), names.end(), metric);
    if (it != names.end()) std::rotate(names.begin(), it, it + 1);
  }
  std::vector<std::string> short_params = ShortNames(params);
  std::vector<std::string> headers = {"RANK", "TRIAL", "STATE", "EPOCHS/FOLD"};
  for (const auto& p : short_params) headers.push_back(p);
  for (const auto& n : names) headers.push_back("VAL_" + Upper(n));
  std::vector<Align> align(headers.size(), Align::kLeft);
  align[0] = align[1] = align[3] = Align::kRight;
  std::vector<std::vector<std::string>> rows;
  for (const auto* t : trials) {
    std::vector<std::string> row = {t->rank() > 0 ? absl::StrCat(t->rank()) : "-",
                                    absl::StrCat(t->trial()), TrialStateName(t->state()),
                                    PerFold(t->epochs_run(), t->tasks())};
    for (const auto& p : params) {
      auto it = t->params().find(p);
      row.push_back(it == t->params().end() ? "-" : it->second);
    }
    for (const auto& n : names) {
      auto it = t->val().find(n);
      row.push_back(it == t->val().end() ? "-"
                                         : absl::StrCat(FormatMetric(it->second.mean()), " ± ",
                                                        FormatMetric(it->second.std())));
    }
    rows.push_back(std::move(row));
  }
  size_t dropped = 0;
  const size_t keep = 4 + params.size() + (names.empty() ? 0 : 1);
  const size_t max_cols = static_cast<size_t>(std::max(width, 20) - 1);
  std::string out = FitColumns(headers, rows, align, keep, max_cols, &dropped);
  // Still too wide: the parameters as p1, p2, ... (the legend names them).
  if (TextWidth(out) > max_cols && !params.empty()) {
    for (size_t i = 0; i < params.size(); ++i) {
      short_params[i] = absl::StrCat("p", i + 1);
      headers[4 + i] = short_params[i];
    }
    out = FitColumns(headers, rows, align, keep, max_cols, &dropped);
  }
  if (dropped > 0) {
    absl::StrAppend(&out, "(", dropped, dropped == 1 ? " more metric" : " more metrics",
                    ": trainctl result -o json)\n");
  }
  std::vector<std::string> legend;
  for (size_t i = 0; i < params.size(); ++i) {
    if (short_params[i] != params[i])
      legend.push_back(absl::StrCat(short_params[i], " = ", params[i]));
  }
  if (!legend.empty()) absl::StrAppend(&out, absl::StrJoin(legend, "\n"), "\n");
  if (result.best_trial() >= 0) {
    absl::StrAppend(&out, "best trial: ", result.best_trial(),
                    " (its score is optimistic: it was chosen on these folds;\n"
                    "nested cross-validation estimates it without bias). Its folds:\n");
  }
  return out;
}

}  // namespace

std::string RenderResult(const JobResult& result, const JobSpec* spec, int width) {
  if (!result.trials().empty()) {
    // The best trial's folds, numbered as folds of that trial (not as the
    // job's tasks).
    std::string folds;
    if (!result.folds().empty()) {
      JobResult best = result;
      best.clear_trials();
      int first = 0;
      for (const auto& t : result.trials()) {
        if (t.trial() == result.best_trial()) first = t.first_task();
      }
      for (auto& f : *best.mutable_folds()) f.set_fold(f.fold() - first);
      folds = RenderResult(best, nullptr, width);
    }
    return RenderTrials(result, spec, width) + folds;
  }
  if (result.folds().empty()) return "";
  bool any_val = false;
  for (const auto& fold : result.folds()) any_val = any_val || !fold.val().empty();
  if (!any_val && !result.has_refit()) return RenderTrainOnlyResult(result);
  // Columns: every validation metric of any fold.
  std::vector<std::string> names;
  for (const auto& fold : result.folds()) {
    for (const auto& [name, value] : fold.val()) {
      if (std::find(names.begin(), names.end(), name) == names.end()) {
        names.push_back(name);
      }
    }
  }
  names = OrderMetricNames(std::move(names));
  std::vector<std::string> headers = {"FOLD", "BEST_EPOCH"};
  for (const auto& name : names) headers.push_back("VAL_" + Upper(name));
  Table table(headers);
  for (size_t c = 0; c < headers.size(); ++c) table.SetAlign(c, Align::kRight);
  for (const auto& fold : result.folds()) {
    std::vector<std::string> row = {absl::StrCat(fold.fold()), absl::StrCat(fold.best_epoch())};
    for (const auto& name : names) {
      auto it = fold.val().find(name);
      row.push_back(it == fold.val().end() ? "-" : FormatMetric(it->second));
    }
    table.AddRow(std::move(row));
  }
  std::string out = table.Render();
  std::string mean = RenderMeanStdLine(result);
  if (!mean.empty()) absl::StrAppend(&out, mean, "\n");
  if (!result.complete()) {
    absl::StrAppend(&out, "(incomplete: folds still running)\n");
  }
  // Out-of-fold predictions, when the server wrote them: artifact names, as
  // `trainctl download JOB NAME` takes them (the server's paths are of no
  // use on another machine).
  bool any_predictions = false;
  for (const auto& fold : result.folds()) {
    if (fold.predictions_path().empty()) continue;
    if (!any_predictions) {
      absl::StrAppend(&out, "out-of-fold predictions (trainctl download JOB NAME):\n");
    }
    any_predictions = true;
    absl::StrAppend(&out, "  fold ", fold.fold(), "  ", ArtifactName(fold.predictions_path()),
                    "\n");
  }
  if (!result.predictions_path().empty()) {
    absl::StrAppend(&out, "  all folds, by row  ", ArtifactName(result.predictions_path()), "\n");
  }
  if (result.has_refit() && !result.refit().model_path().empty()) {
    absl::StrAppend(&out, "refit model (all rows): ", ArtifactName(result.refit().model_path()),
                    "\n");
  }
  return out;
}

std::string RenderJob(const Job& job) {
  Table fields({"", ""});
  fields.AddRow({"id:", job.id()});
  fields.AddRow({"name:", job.spec().name()});
  if (!job.owner().empty()) fields.AddRow({"owner:", job.owner()});
  // The bytes a job trains on when its spec names a stored dataset.
  const traind::v1::DataSpec& data = job.spec().data();
  const traind::v1::CrossValidationSpec& cv = job.spec().cross_validation();
  if (!data.dataset_sha256().empty() || !cv.validation_dataset_sha256().empty()) {
    std::vector<std::string> parts;
    auto describe = [&parts](const std::string& ref, const std::string& sha256,
                             const std::string& role) {
      if (sha256.empty()) return;
      std::string text = absl::StrCat(role, "sha256:", sha256);
      if (!ref.empty() && ref != "sha256:" + sha256) absl::StrAppend(&text, " (", ref, ")");
      parts.push_back(std::move(text));
    };
    describe(data.dataset(), data.dataset_sha256(), "");
    describe(cv.validation_dataset(), cv.validation_dataset_sha256(), "validation ");
    fields.AddRow({"dataset:", absl::StrJoin(parts, "; ")});
  }
  fields.AddRow({"state:", JobStateName(job.state())});
  fields.AddRow({"created:", Time(job.create_time())});
  fields.AddRow({"started:", Time(job.start_time())});
  fields.AddRow({"ended:", Time(job.end_time())});
  std::string failure = FailureText(job.failure());
  if (!failure.empty()) fields.AddRow({"failure:", failure});
  // Drop the (empty) header line of the key/value table.
  std::string out = fields.Render().substr(1);

  if (!job.tasks().empty()) {
    Table tasks({"TASK", "STATE", "ATTEMPTS", "EPOCHS", "PID", "WAIT"});
    tasks.SetAlign(0, Align::kRight);
    std::vector<std::string> failures;
    for (const auto& task : job.tasks()) {
      std::string epochs = absl::StrCat(task.epochs_done());
      if (task.epochs_total() > 0) absl::StrAppend(&epochs, "/", task.epochs_total());
      std::string pid = "-";
      if (!task.attempts().empty() && task.attempts().rbegin()->pid() > 0) {
        pid = absl::StrCat(task.attempts().rbegin()->pid());
      } else if (!task.attempts().empty() && task.attempts().rbegin()->slurm_job_id() > 0) {
        pid = absl::StrCat("slurm:", task.attempts().rbegin()->slurm_job_id());
      }
      std::string wait = "-";
      if (!task.wait_detail().empty()) {
        // Started, but waiting in the cluster's queue.
        wait =
            absl::StrCat(Task::WaitReason_Name(task.wait_reason()), " (", task.wait_detail(), ")");
      } else if (task.state() == Task::QUEUED) {
        std::vector<std::string> parts;
        if (task.wait_reason() != Task::WAIT_REASON_UNSPECIFIED) {
          parts.push_back(Task::WaitReason_Name(task.wait_reason()));
        }
        if (task.tasks_ahead() > 0) {
          parts.push_back(absl::StrCat("(", task.tasks_ahead(), " ahead)"));
        }
        if (!parts.empty()) wait = absl::StrJoin(parts, " ");
      }
      tasks.AddRow({absl::StrCat(task.index()), TaskStateName(task.state()),
                    absl::StrCat(task.attempts_size()), epochs, pid, wait});
      std::string task_failure = FailureText(task.failure());
      if (!task_failure.empty()) {
        failures.push_back(absl::StrCat("task ", task.index(), ": ", task_failure));
      }
    }
    absl::StrAppend(&out, "\n", tasks.Render());
    for (const auto& line : failures) absl::StrAppend(&out, line, "\n");
  }
  if (job.has_result()) {
    std::string result = RenderResult(job.result(), &job.spec());
    if (!result.empty()) absl::StrAppend(&out, "\n", result);
  }
  return out;
}

std::string RenderJobList(const traind::v1::ListJobsResponse& response) {
  Table table({"ID", "NAME", "STATE", "TASKS", "CREATED"});
  for (const auto& job : response.jobs()) {
    std::string tasks = "-";
    if (!job.tasks().empty()) {
      int done = 0;
      for (const auto& task : job.tasks()) {
        if (task.state() == Task::SUCCEEDED) ++done;
      }
      tasks = absl::StrCat(done, "/", job.tasks_size());
    }
    table.AddRow(
        {job.id(), job.spec().name(), JobStateName(job.state()), tasks, Time(job.create_time())});
  }
  std::string out = table.Render();
  if (!response.next_page_token().empty()) {
    absl::StrAppend(&out, "next page: --page-token ", response.next_page_token(), "\n");
  }
  return out;
}

std::string RenderJobState(const Job& job) {
  return absl::StrCat("job ", job.id(), " ", JobStateName(job.state()), "\n");
}

std::string RenderDevices(const traind::v1::ListDevicesResponse& response) {
  Table table({"ID", "KIND", "NAME", "STATE", "SLOTS", "CORES", "MEM_FREE", "MEM_TOTAL"});
  for (size_t c = 4; c < 8; ++c) table.SetAlign(c, Align::kRight);
  for (const auto& d : response.devices()) {
    const std::string& state = traind::v1::Device::State_Name(d.state());
    table.AddRow({d.id(), traind::v1::DeviceKind_Name(d.kind()), d.name(),
                  d.state() == traind::v1::Device::STATE_UNSPECIFIED ? "-" : state,
                  d.slots() > 0 ? absl::StrCat(d.slots_in_use(), "/", d.slots()) : "-",
                  d.cores() > 0 ? absl::StrCat(d.cores()) : "-",
                  d.memory_total_bytes() > 0 ? FormatBytes(d.memory_available_bytes()) : "-",
                  d.memory_total_bytes() > 0 ? FormatBytes(d.memory_total_bytes()) : "-"});
  }
  std::string out = table.Render();
  if (!response.gpu_note().empty()) {
    absl::StrAppend(&out, "note: ", response.gpu_note(), "\n");
  }
  return out;
}

std::string RenderArtifacts(const traind::v1::ListArtifactsResponse& response) {
  if (response.artifacts().empty()) return "no artifacts yet\n";
  Table table({"NAME", "KIND", "TASK", "SIZE", "MODIFIED"});
  table.SetAlign(2, Align::kRight);
  table.SetAlign(3, Align::kRight);
  for (const traind::v1::Artifact& a : response.artifacts()) {
    std::string kind = absl::AsciiStrToLower(traind::v1::Artifact::Kind_Name(a.kind()));
    table.AddRow({a.name(), kind, a.task() >= 0 ? absl::StrCat(a.task()) : "-",
                  FormatBytes(a.size_bytes()), Time(a.modify_time())});
  }
  return table.Render();
}

std::string RenderServerInfo(const traind::v1::ServerInfo& info) {
  Table fields({"", ""});
  fields.AddRow({"version:", info.version()});
  fields.AddRow({"started:", Time(info.start_time())});
  fields.AddRow({"state_dir:", info.state_dir()});
  fields.AddRow({"state_dir_size:", FormatBytes(info.state_dir_bytes())});
  fields.AddRow(
      {"store:", info.store_error().empty()
                     ? "writable"
                     : absl::StrCat("NOT WRITABLE (new jobs are refused): ", info.store_error())});
  fields.AddRow({"listen:", absl::StrJoin(info.listen_addresses(), ", ")});
  fields.AddRow({"http:", info.http_url().empty() ? "off" : info.http_url()});
  if (!info.launcher().empty()) fields.AddRow({"launcher:", info.launcher()});
  // Where a spec's data.path may point on the server (files elsewhere, e.g.
  // on the client's machine, are uploaded as datasets).
  if (!info.data_roots().empty()) {
    fields.AddRow({"data_roots:", absl::StrJoin(info.data_roots(), ", ")});
  }
  auto limit = [](int64_t bytes) { return bytes > 0 ? FormatBytes(bytes) : std::string("none"); };
  fields.AddRow({"dataset_max:", limit(info.max_dataset_bytes())});
  fields.AddRow({"dataset_quota:", limit(info.dataset_quota_bytes())});
  fields.AddRow({"cpu_slots:", absl::StrCat(info.cpu_slots())});
  fields.AddRow({"worker_threads:", absl::StrCat(info.worker_threads())});
  fields.AddRow({"jobs_active:", absl::StrCat(info.jobs_active())});
  fields.AddRow({"tasks_running:", absl::StrCat(info.tasks_running())});
  fields.AddRow({"tasks_queued:", absl::StrCat(info.tasks_queued())});
  return fields.Render().substr(1);
}

}  // namespace traind::client
