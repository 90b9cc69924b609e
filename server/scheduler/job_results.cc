#include "server/scheduler/job_results.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <utility>

#include "absl/strings/numbers.h"
#include "base/log.h"
#include "spec/search.h"
#include "spec/task_plan.h"
#include "spec/validation.h"

namespace traind::server {

using traind::v1::Job;
using traind::v1::Task;

namespace {

void Summarize(const std::map<std::string, std::vector<double>>& values,
               google::protobuf::Map<std::string, traind::v1::MetricSummary>* out) {
  out->clear();
  for (const auto& [name, vs] : values) {
    double mean = 0;
    for (double v : vs) mean += v;
    mean /= vs.size();
    double var = 0;
    for (double v : vs) var += (v - mean) * (v - mean);
    var /= vs.size();
    traind::v1::MetricSummary& s = (*out)[name];
    s.set_mean(mean);
    s.set_std(std::sqrt(var));
  }
}

using traind::v1::TrialResult;

// The folds' permutation importance, per feature in the first fold's order:
// the mean and population std of the folds' means, most important first
// (ties: that order).
void SummarizeImportance(traind::v1::JobResult* r) {
  r->clear_importance();
  r->clear_importance_metric();
  std::vector<std::string> order;
  std::map<std::string, std::vector<double>> means;
  for (const traind::v1::FoldResult& f : r->folds()) {
    if (f.importance().empty()) continue;
    if (r->importance_metric().empty()) r->set_importance_metric(f.importance_metric());
    for (const traind::v1::FeatureImportance& i : f.importance()) {
      auto [it, added] = means.try_emplace(i.feature());
      if (added) order.push_back(i.feature());
      it->second.push_back(i.mean());
    }
  }
  for (const std::string& feature : order) {
    const std::vector<double>& v = means[feature];
    double sum = 0;
    for (double x : v) sum += x;
    const double mean = sum / static_cast<double>(v.size());
    double squares = 0;
    for (double x : v) squares += (x - mean) * (x - mean);
    traind::v1::FeatureImportance* out = r->add_importance();
    out->set_feature(feature);
    out->set_mean(mean);
    out->set_std(std::sqrt(squares / static_cast<double>(v.size())));
    for (double x : v) out->add_values(x);
  }
  std::stable_sort(r->mutable_importance()->begin(), r->mutable_importance()->end(),
                   [](const traind::v1::FeatureImportance& a,
                      const traind::v1::FeatureImportance& b) { return a.mean() > b.mean(); });
}

// A search: each trial's state, metrics over its folds, score and rank; the
// best trial's folds are the job's folds and summary.
void AggregateSearch(Job* job) {
  traind::v1::JobResult* r = job->mutable_result();
  const traind::v1::JobSpec& spec = job->spec();
  const spec::SearchScore score = spec::SearchScoreOf(spec);
  const std::string& key = score.key;
  const bool maximize = score.maximize;
  std::vector<int> scored;
  for (TrialResult& tr : *r->mutable_trials()) {
    std::map<std::string, std::vector<double>> values;
    int succeeded = 0, failed = 0, cancelled = 0, pruned = 0, active = 0, epochs = 0;
    tr.clear_val_folds();
    for (int k = 0; k < tr.tasks(); ++k) {
      const Task& t = job->tasks(tr.first_task() + k);
      switch (t.state()) {
        case Task::SUCCEEDED:
          ++succeeded;
          epochs += t.result().epochs_run();
          for (const auto& [name, v] : t.result().val()) {
            values[name].push_back(v);
            (*tr.mutable_val_folds())[name].add_values(v);
          }
          if (!t.result().selection().empty()) r->set_selection(t.result().selection());
          break;
        case Task::FAILED:
          ++failed;
          epochs += t.epochs_done();
          break;
        case Task::CANCELLED:
          ++cancelled;
          epochs += t.epochs_done();
          break;
        case Task::PRUNED:
          ++pruned;
          epochs += t.epochs_done();
          break;
        case Task::STARTING:
        case Task::RUNNING:
          ++active;
          epochs += t.epochs_done();
          break;
        default:
          break;
      }
    }
    Summarize(values, tr.mutable_val());
    tr.set_epochs_run(epochs);
    if (failed > 0) {
      tr.set_state(TrialResult::FAILED);
    } else if (pruned > 0) {
      tr.set_state(TrialResult::PRUNED);
    } else if (succeeded == tr.tasks()) {
      tr.set_state(TrialResult::SUCCEEDED);
    } else if (cancelled > 0 && active == 0 && succeeded + cancelled == tr.tasks()) {
      tr.set_state(TrialResult::CANCELLED);
    } else if (active > 0 || succeeded > 0) {
      tr.set_state(TrialResult::RUNNING);
    } else {
      tr.set_state(TrialResult::QUEUED);
    }
    tr.set_rank(0);
    tr.set_score(0);
    auto it = tr.val().find(key);
    if (tr.state() == TrialResult::SUCCEEDED && it != tr.val().end()) {
      tr.set_score(it->second.mean());
      scored.push_back(tr.trial());
    }
  }
  // Rank 1 = best; ties share the lower rank (scikit-learn's rank_test_score).
  r->set_best_trial(-1);
  for (int i : scored) {
    const double s = r->trials(i).score();
    int better = 0;
    for (int j : scored) {
      const double o = r->trials(j).score();
      better += maximize ? o > s : o < s;
    }
    r->mutable_trials(i)->set_rank(better + 1);
    if (better == 0 && r->best_trial() < 0) r->set_best_trial(i);
  }
  // The job's folds and summary: the best trial's.
  r->clear_folds();
  r->clear_val();
  r->clear_refit();
  std::map<std::string, std::vector<double>> best_values;
  for (const Task& t : job->tasks()) {
    if (t.state() != Task::SUCCEEDED) continue;
    if (spec::IsRefitTask(spec, t.index())) {
      *r->mutable_refit() = t.result();
      continue;
    }
    if (r->best_trial() < 0 || spec::LocateSearchTask(spec, t.index()).trial != r->best_trial()) {
      continue;
    }
    *r->add_folds() = t.result();
    for (const auto& [name, v] : t.result().val()) best_values[name].push_back(v);
  }
  Summarize(best_values, r->mutable_val());
  SummarizeImportance(r);
}

}  // namespace

void AggregateFoldResults(Job* job) {
  if (job->spec().has_search()) {
    if (job->result().selection().empty()) job->mutable_result()->set_selection("val.loss (min)");
    AggregateSearch(job);
    return;
  }
  traind::v1::JobResult* r = job->mutable_result();
  r->clear_folds();
  r->clear_val();
  r->set_selection("val.loss (min)");
  std::map<std::string, std::vector<double>> values;
  r->clear_refit();
  for (const Task& t : job->tasks()) {
    if (t.state() != Task::SUCCEEDED) continue;
    if (spec::IsRefitTask(job->spec(), t.index())) {
      *r->mutable_refit() = t.result();
      continue;
    }
    *r->add_folds() = t.result();
    if (!t.result().selection().empty()) r->set_selection(t.result().selection());
    for (const auto& [name, v] : t.result().val()) values[name].push_back(v);
  }
  Summarize(values, r->mutable_val());
  SummarizeImportance(r);
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
