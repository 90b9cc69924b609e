#include "server/scheduler/fair_share.h"

#include <cmath>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace traind::server {

absl::StatusOr<std::map<std::string, double>> ParseWeights(
    const std::vector<std::string>& entries) {
  std::map<std::string, double> out;
  for (size_t i = 0; i < entries.size(); ++i) {
    const std::string& e = entries[i];
    const size_t eq = e.rfind('=');
    const std::string where = absl::StrCat("scheduling.weights[", i, "] \"", e, "\"");
    if (eq == std::string::npos || eq == 0) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": expected OWNER=WEIGHT"));
    }
    const std::string owner = e.substr(0, eq);
    double w = 0;
    if (!absl::SimpleAtod(e.substr(eq + 1), &w) || !std::isfinite(w) || w <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": the weight must be a number above 0"));
    }
    if (!out.emplace(owner, w).second) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": ", owner, " is listed twice"));
    }
  }
  return out;
}

double FairShare::Weight(const std::string& owner) const {
  auto it = options_.weights.find(owner);
  return it == options_.weights.end() ? 1.0 : it->second;
}

double FairShare::UsageAt(const Account& a, absl::Time now) const {
  if (a.at == absl::InfinitePast() || now <= a.at) return a.usage;
  const double h = absl::ToDoubleSeconds(options_.half_life);
  const double dt = absl::ToDoubleSeconds(now - a.at);
  const double d = std::exp2(-dt / h);
  return a.usage * d + a.running * (h / std::log(2.0)) * (1 - d);
}

void FairShare::Advance(Account& a, absl::Time now) const {
  a.usage = UsageAt(a, now);
  if (a.at == absl::InfinitePast() || now > a.at) a.at = now;
}

void FairShare::Started(const std::string& owner, double units, absl::Time now, int gpus) {
  Account& a = accounts_[owner];
  Advance(a, now);
  a.running += units;
  a.tasks += 1;
  a.gpus += gpus;
  ++version_;
}

void FairShare::Ended(const std::string& owner, double units, absl::Time now, int gpus) {
  Account& a = accounts_[owner];
  Advance(a, now);
  a.running = std::max(0.0, a.running - units);
  a.tasks = std::max(0, a.tasks - 1);
  a.gpus = std::max(0, a.gpus - gpus);
  ++version_;
}

bool FairShare::AtOwnerLimit(const std::string& owner, int gpus) const {
  if (options_.max_tasks_per_owner > 0 && Tasks(owner) >= options_.max_tasks_per_owner) {
    return true;
  }
  return gpus > 0 && options_.max_gpus_per_owner > 0 &&
         Gpus(owner) + gpus > options_.max_gpus_per_owner;
}

int FairShare::Tasks(const std::string& owner) const {
  auto it = accounts_.find(owner);
  return it == accounts_.end() ? 0 : it->second.tasks;
}

int FairShare::Gpus(const std::string& owner) const {
  auto it = accounts_.find(owner);
  return it == accounts_.end() ? 0 : it->second.gpus;
}

double FairShare::Usage(const std::string& owner, absl::Time now) const {
  auto it = accounts_.find(owner);
  return it == accounts_.end() ? 0 : UsageAt(it->second, now);
}

double FairShare::Running(const std::string& owner) const {
  auto it = accounts_.find(owner);
  return it == accounts_.end() ? 0 : it->second.running;
}

}  // namespace traind::server
