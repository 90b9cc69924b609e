#include "server/scheduler/asha.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "spec/search.h"
#include "spec/task_plan.h"

namespace traind::server {

double Percentile(std::vector<double> values, double q) {
  std::sort(values.begin(), values.end());
  const double pos = q / 100.0 * static_cast<double>(values.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(pos));
  const size_t hi = std::min(lo + 1, values.size() - 1);
  return values[lo] + (pos - static_cast<double>(lo)) * (values[hi] - values[lo]);
}

std::optional<AshaRungs> AshaRungs::ForJob(const traind::v1::JobSpec& spec, std::string key,
                                           bool maximize) {
  if (!spec.has_search() || !spec.search().has_asha()) return std::nullopt;
  const traind::v1::AshaSpec& a = spec.search().asha();
  const int grace = a.grace_epochs() > 0 ? a.grace_epochs() : 1;
  const int eta = a.reduction_factor() > 0 ? a.reduction_factor() : 3;
  std::vector<int> rungs;
  for (int64_t r = grace; r < spec.training().epochs(); r *= eta)
    rungs.push_back(static_cast<int>(r));
  const spec::TaskPlan plan = spec::PlanTasks(spec);
  return AshaRungs(std::move(rungs), plan.trials, plan.tasks_per_trial, eta, std::move(key),
                   maximize);
}

std::optional<AshaRungs> AshaRungs::ForJob(const traind::v1::JobSpec& spec) {
  spec::SearchScore score = spec::SearchScoreOf(spec);
  return ForJob(spec, std::move(score.key), score.maximize);
}

AshaRungs::AshaRungs(std::vector<int> rungs, int trials, int folds, int reduction_factor,
                     std::string key, bool maximize)
    : rungs_(std::move(rungs)),
      folds_(folds),
      reduction_factor_(reduction_factor),
      key_(std::move(key)),
      maximize_(maximize) {
  const size_t k = rungs_.size();
  values_.assign(trials, std::vector<std::vector<double>>(k, std::vector<double>(folds, 0)));
  have_.assign(trials, std::vector<std::vector<bool>>(k, std::vector<bool>(folds, false)));
  decided_.assign(trials, std::vector<int>(k, 0));
  recorded_.assign(k, {});
}

int AshaRungs::RungIndex(int epoch) const {
  for (size_t k = 0; k < rungs_.size(); ++k) {
    if (rungs_[k] == epoch) return static_cast<int>(k);
  }
  return -1;
}

AshaRungs::Decision AshaRungs::Record(int trial, int fold, int epoch, double value) {
  const int k = RungIndex(epoch);
  if (k < 0 || trial < 0 || trial >= static_cast<int>(values_.size()) || fold < 0 ||
      fold >= folds_) {
    return Decision::kNone;
  }
  if (have_[trial][k][fold] || decided_[trial][k] != 0) return Decision::kNone;
  have_[trial][k][fold] = true;
  values_[trial][k][fold] = value;
  for (bool h : have_[trial][k]) {
    if (!h) return Decision::kNone;  // the trial's other folds are not there yet
  }
  double mean = 0;
  for (double v : values_[trial][k]) mean += v / folds_;
  // Rewards: larger is better.
  const double reward = maximize_ ? mean : -mean;
  bool prune = false;
  if (!recorded_[k].empty()) {
    std::vector<double> rewards;
    for (double m : recorded_[k]) rewards.push_back(maximize_ ? m : -m);
    prune = reward < Percentile(rewards, (1.0 - 1.0 / reduction_factor_) * 100.0);
  }
  recorded_[k].push_back(mean);
  decided_[trial][k] = prune ? -1 : 1;
  return prune ? Decision::kPrune : Decision::kPromote;
}

bool AshaRungs::Pruned(int trial) const {
  if (trial < 0 || trial >= static_cast<int>(decided_.size())) return false;
  for (int d : decided_[trial]) {
    if (d < 0) return true;
  }
  return false;
}

int AshaRungs::PauseAfter(int trial) const {
  if (trial < 0 || trial >= static_cast<int>(decided_.size())) return 0;
  for (size_t k = 0; k < rungs_.size(); ++k) {
    if (decided_[trial][k] != 1) return rungs_[k];
  }
  return 0;
}

bool AshaRungs::WaitsAtRung(int trial, int epochs) const {
  if (trial < 0 || trial >= static_cast<int>(decided_.size())) return false;
  for (size_t k = 0; k < rungs_.size(); ++k) {
    if (rungs_[k] <= epochs && decided_[trial][k] == 0) return true;
  }
  return false;
}

}  // namespace traind::server
