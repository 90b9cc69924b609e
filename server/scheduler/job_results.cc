#include "server/scheduler/job_results.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <utility>

#include "absl/strings/numbers.h"
#include "server/log.h"
#include "spec/task_plan.h"
#include "spec/validation.h"

namespace traind::server {

using traind::v1::Job;
using traind::v1::Task;

void AggregateFoldResults(Job* job) {
  traind::v1::JobResult* r = job->mutable_result();
  r->clear_folds();
  r->clear_val();
  r->set_selection("val.loss (min)");
  std::map<std::string, std::vector<double>> values;
  r->clear_refit();
  for (const Task& t : job->tasks()) {
    if (t.state() != Task::SUCCEEDED) continue;
    if (engine::IsRefitTask(job->spec(), t.index())) {
      *r->mutable_refit() = t.result();
      continue;
    }
    *r->add_folds() = t.result();
    if (!t.result().selection().empty()) r->set_selection(t.result().selection());
    for (const auto& [name, v] : t.result().val()) values[name].push_back(v);
  }
  for (const auto& [name, vs] : values) {
    double mean = 0;
    for (double v : vs) mean += v;
    mean /= vs.size();
    double var = 0;
    for (double v : vs) var += (v - mean) * (v - mean);
    var /= vs.size();
    traind::v1::MetricSummary& s = (*r->mutable_val())[name];
    s.set_mean(mean);
    s.set_std(std::sqrt(var));
  }
}

std::optional<PredictionsMerge> PlanPredictionsMerge(const Job& job, const std::string& state_dir) {
  PredictionsMerge merge;
  merge.job_id = job.id();
  for (const auto& f : job.result().folds()) {
    if (!f.predictions_path().empty()) merge.inputs.push_back(f.predictions_path());
  }
  if (merge.inputs.empty()) return std::nullopt;
  merge.output =
      (std::filesystem::path(state_dir) / "jobs" / job.id() / "predictions.csv").string();
  return merge;
}

std::optional<std::string> MergePredictions(const PredictionsMerge& merge) {
  std::string header;
  std::vector<std::pair<int64_t, std::string>> rows;
  for (const std::string& p : merge.inputs) {
    std::ifstream in(p);
    std::string line;
    if (!std::getline(in, line)) {
      LogWarning("predictions of job=%s: cannot read %s", merge.job_id, p);
      return std::nullopt;
    }
    if (header.empty()) header = line;
    while (std::getline(in, line)) {
      int64_t row = 0;
      if (!absl::SimpleAtoi(line.substr(0, line.find(',')), &row)) continue;
      rows.emplace_back(row, line);
    }
  }
  std::sort(rows.begin(), rows.end());
  std::ofstream file(merge.output);
  file << header << "\n";
  for (const auto& [row, line] : rows) file << line << "\n";
  file.close();
  if (!file) {
    LogWarning("predictions of job=%s: cannot write %s", merge.job_id, merge.output);
    return std::nullopt;
  }
  return merge.output;
}

}  // namespace traind::server
