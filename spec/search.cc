#include "spec/search.h"

#include <cmath>
#include <cstdlib>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/random.h"
#include "base/status.h"
#include "google/protobuf/util/json_util.h"
#include "spec/checks.h"
#include "spec/loader.h"
#include "spec/task_plan.h"

namespace traind::spec {
namespace {

using traind::v1::JobSpec;
using traind::v1::SearchDimension;

absl::Status Err(const std::string& path, const std::string& what) {
  return InvalidSpecError(absl::StrCat(path, ": ", what));
}

// Fields every trial shares: they decide the data, the folds and where the
// tasks run.
constexpr const char* kFixedPrefixes[] = {"data", "cross_validation", "seed", "search", "resources",
                                          "name", "priority"};

// The first field name of a --set path ("optimizer" of "optimizer.adam.x",
// "model" of "model.layers[0]"), in snake_case.
std::string FirstField(const std::string& path) {
  const size_t end = path.find_first_of(".[");
  std::string head = path.substr(0, end);
  std::string snake;
  for (char c : head) {
    if (c >= 'A' && c <= 'Z') {
      snake += '_';
      snake += static_cast<char>(c - 'A' + 'a');
    } else {
      snake += c;
    }
  }
  return snake;
}

// SplitMix64 (base/random.h's mixer after its increment): a fixed
// generator, so that trials are the same everywhere.
uint64_t Mix(uint64_t x) { return MixBits(x + 0x9E3779B97F4A7C15ULL); }
// A uniform double in [0, 1) for (seed, trial, dimension).
double Uniform01(uint64_t seed, int trial, int dim) {
  const uint64_t x = Mix(Mix(Mix(seed) ^ static_cast<uint64_t>(trial)) ^
                         (static_cast<uint64_t>(dim) << 32 | 0x5eedULL));
  return static_cast<double>(x >> 11) * 0x1.0p-53;
}

// The shortest decimal text that reads back as `v`; a whole number as one
// (10000000, not 1e+07).
std::string DoubleText(double v) {
  if (v == std::floor(v) && std::fabs(v) < 9007199254740992.0) {
    return absl::StrCat(static_cast<int64_t>(v));
  }
  for (int precision = 1; precision <= 17; ++precision) {
    std::string s = absl::StrFormat("%.*g", precision, v);
    if (std::strtod(s.c_str(), nullptr) == v) return s;
  }
  return absl::StrFormat("%.17g", v);
}

std::string ValueText(const google::protobuf::Value& v) {
  if (v.kind_case() == google::protobuf::Value::kNumberValue) return DoubleText(v.number_value());
  std::string json;
  (void)google::protobuf::util::MessageToJsonString(v, &json);
  return json;
}

absl::Status CheckRange(const std::string& field, double low, double high, bool log) {
  if (!std::isfinite(low) || !std::isfinite(high)) {
    return Err(field, "low and high must be finite numbers");
  }
  if (log && low <= 0) return Err(field + ".low", absl::StrCat("must be > 0, got ", low));
  if (!(low < high)) {
    return Err(field, absl::StrCat("low must be less than high (got ", low, " and ", high, ")"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckSearchSpec(const JobSpec& spec) {
  if (!spec.has_search()) return absl::OkStatus();
  const traind::v1::SearchSpec& s = spec.search();
  if (!HasValidation(spec)) {
    return Err("search",
               "needs validation to score trials (cross_validation: folds, validation_fraction "
               "or validation_path)");
  }
  if (spec.cross_validation().refit()) {
    return Err("cross_validation.refit", "not with search: use search.refit_best");
  }
  if (s.space_size() == 0) return Err("search.space", "required (at least one dimension)");
  const bool grid = s.sampler().has_grid();
  if (!grid && !s.sampler().has_random()) {
    return Err("search.sampler", "required: {random: {trials: N}} or {grid: {}}");
  }
  if (!grid && s.sampler().random().trials() < 1) {
    return Err("search.sampler.random.trials",
               absl::StrCat("must be at least 1, got ", s.sampler().random().trials()));
  }
  if (!grid && s.sampler().random().trials() > kMaxSearchTrials) {
    return Err("search.sampler.random.trials",
               absl::StrCat("at most ", kMaxSearchTrials, ", got ", s.sampler().random().trials()));
  }
  if (s.max_concurrent_trials() < 0) {
    return Err("search.max_concurrent_trials",
               absl::StrCat("must be >= 0, got ", s.max_concurrent_trials()));
  }
  if (!traind::v1::Mode_IsValid(s.mode())) return Err("search.mode", "unknown value");
  if (s.has_asha()) {
    if (spec.training().validate_every() > 1) {
      return Err("search.asha",
                 "needs the metric at every epoch (training.validate_every: 1 or absent)");
    }
    if (s.asha().grace_epochs() < 0) {
      return Err("search.asha.grace_epochs",
                 absl::StrCat("must be >= 1, got ", s.asha().grace_epochs()));
    }
    if (s.asha().reduction_factor() != 0 && s.asha().reduction_factor() < 2) {
      return Err("search.asha.reduction_factor",
                 absl::StrCat("must be >= 2, got ", s.asha().reduction_factor()));
    }
  }
  for (int d = 0; d < s.space_size(); ++d) {
    const SearchDimension& dim = s.space(d);
    const std::string field = absl::StrCat("search.space[", d, "]");
    if (dim.path().empty()) return Err(field + ".path", "required (a --set path)");
    const std::string first = FirstField(dim.path());
    for (const char* fixed : kFixedPrefixes) {
      if (first == fixed) {
        return Err(field + ".path",
                   absl::StrCat(dim.path(),
                                " cannot vary between trials: every trial shares data, "
                                "cross_validation, seed, resources, name and priority"));
      }
    }
    for (int e = 0; e < d; ++e) {
      if (s.space(e).path() == dim.path()) {
        return Err(field + ".path", absl::StrCat(dim.path(), " is also search.space[", e, "]"));
      }
    }
    switch (dim.kind_case()) {
      case SearchDimension::kValues:
        if (dim.values().values_size() == 0) {
          return Err(field + ".values", "must hold at least one value");
        }
        break;
      case SearchDimension::kUniform:
        if (grid) return Err(field, "grid takes `values` lists only");
        TRAIND_RETURN_IF_ERROR(
            CheckRange(field + ".uniform", dim.uniform().low(), dim.uniform().high(), false));
        break;
      case SearchDimension::kLogUniform:
        if (grid) return Err(field, "grid takes `values` lists only");
        TRAIND_RETURN_IF_ERROR(CheckRange(field + ".log_uniform", dim.log_uniform().low(),
                                          dim.log_uniform().high(), true));
        break;
      case SearchDimension::kIntUniform:
        if (grid) return Err(field, "grid takes `values` lists only");
        if (dim.int_uniform().low() > dim.int_uniform().high()) {
          return Err(field + ".int_uniform",
                     absl::StrCat("low must not exceed high (got ", dim.int_uniform().low(),
                                  " and ", dim.int_uniform().high(), ")"));
        }
        break;
      default:
        return Err(field, "one of values, uniform, log_uniform or int_uniform is required");
    }
  }
  if (grid && SearchTrials(spec) > kMaxSearchTrials) {
    return Err("search.space",
               absl::StrCat("the grid has more than ", kMaxSearchTrials, " combinations"));
  }
  return absl::OkStatus();
}

int64_t SearchTrials(const JobSpec& spec) {
  if (!spec.has_search()) return 0;
  const traind::v1::SearchSpec& s = spec.search();
  if (!s.sampler().has_grid()) return s.sampler().random().trials();
  int64_t n = 1;
  for (const SearchDimension& dim : s.space()) {
    n *= std::max(1, dim.values().values_size());
    if (n > kMaxSearchTrials) return kMaxSearchTrials + 1;
  }
  return n;
}

absl::StatusOr<Trial> MakeTrial(const JobSpec& spec, int index) {
  const traind::v1::SearchSpec& s = spec.search();
  Trial trial;
  trial.index = index;
  trial.spec = spec;
  trial.spec.clear_search();
  const bool grid = s.sampler().has_grid();
  // Grid: mixed radix over the lists, the last dimension fastest.
  int64_t rest = index;
  std::vector<int> grid_pick(s.space_size(), 0);
  if (grid) {
    for (int d = s.space_size() - 1; d >= 0; --d) {
      const int n = s.space(d).values().values_size();
      grid_pick[d] = static_cast<int>(rest % n);
      rest /= n;
    }
  }
  for (int d = 0; d < s.space_size(); ++d) {
    const SearchDimension& dim = s.space(d);
    const double u = Uniform01(spec.seed(), index, d);
    std::string text;
    switch (dim.kind_case()) {
      case SearchDimension::kValues: {
        const int n = dim.values().values_size();
        const int pick = grid ? grid_pick[d] : std::min(n - 1, static_cast<int>(u * n));
        text = ValueText(dim.values().values(pick));
        break;
      }
      case SearchDimension::kUniform:
        text = DoubleText(dim.uniform().low() + u * (dim.uniform().high() - dim.uniform().low()));
        break;
      case SearchDimension::kLogUniform: {
        const double lo = std::log(dim.log_uniform().low());
        const double hi = std::log(dim.log_uniform().high());
        text = DoubleText(std::exp(lo + u * (hi - lo)));
        break;
      }
      case SearchDimension::kIntUniform: {
        const int64_t lo = dim.int_uniform().low();
        const double span = static_cast<double>(dim.int_uniform().high() - lo) + 1;
        text = absl::StrCat(
            std::min(dim.int_uniform().high(), lo + static_cast<int64_t>(std::floor(u * span))));
        break;
      }
      default:
        break;
    }
    if (absl::Status set = SetJobSpecField(&trial.spec, dim.path(), text); !set.ok()) {
      return InvalidSpecError(absl::StrCat("search.space[", d, "] (", dim.path(), " = ", text,
                                           ", trial ", index, "): ", set.message()));
    }
    trial.params.emplace_back(dim.path(), text);
  }
  return trial;
}

SearchScore SearchScoreOf(const JobSpec& spec) {
  SearchScore score;
  JobSpec base = spec;
  base.clear_search();
  absl::StatusOr<ResolvedMetrics> metrics = ResolveSpecMetrics(base);
  if (!metrics.ok()) return score;
  absl::StatusOr<Monitor> m =
      ResolveMonitor(spec.search().metric(), spec.search().mode(), *metrics, "search.metric");
  if (!m.ok()) return score;
  score.key = m->key();
  score.maximize = m->maximize;
  return score;
}

SearchTask LocateSearchTask(const JobSpec& spec, int task) {
  // No copy of the spec: the dispatch loop asks this for every queued task.
  const TaskPlan plan = PlanTasks(spec);
  SearchTask where;
  if (task >= plan.fold_tasks) return where;  // the refit of the best trial
  where.trial = task / plan.tasks_per_trial;
  where.spec_task = task % plan.tasks_per_trial;
  return where;
}

absl::StatusOr<std::pair<JobSpec, int>> RefitBestSpec(const JobSpec& spec, int best) {
  absl::StatusOr<Trial> trial = MakeTrial(spec, best);
  if (!trial.ok()) return trial.status();
  trial->spec.mutable_cross_validation()->set_refit(true);
  const int refit_task = PlanTasks(trial->spec).fold_tasks;
  return std::make_pair(std::move(trial->spec), refit_task);
}

}  // namespace traind::spec
