#include "worker/engine/schedules.h"

#include <algorithm>
#include <cmath>

namespace traind::engine {

LearningRateSchedule::LearningRateSchedule(const traind::v1::LearningRateSchedule& spec,
                                           double base, int64_t epochs)
    : spec_(spec), base_(base), epochs_(epochs), current_(base) {}

double LearningRateSchedule::LearningRate(int64_t epoch) const {
  switch (spec_.kind_case()) {
    case traind::v1::LearningRateSchedule::kStep: {
      const double gamma = spec_.step().has_gamma() ? spec_.step().gamma() : 0.1;
      return base_ * std::pow(gamma, static_cast<double>(epoch / spec_.step().step_size()));
    }
    case traind::v1::LearningRateSchedule::kCosine: {
      const auto& c = spec_.cosine();
      const int64_t warmup = c.warmup_epochs();
      const int64_t total = c.total_epochs() > 0 ? c.total_epochs() : epochs_;
      if (epoch < warmup) {
        return base_ * static_cast<double>(epoch + 1) / static_cast<double>(warmup);
      }
      const double t = std::min(1.0, static_cast<double>(epoch - warmup) /
                                         static_cast<double>(std::max<int64_t>(1, total - warmup)));
      return c.min_lr() + (base_ - c.min_lr()) * 0.5 * (1 + std::cos(M_PI * t));
    }
    case traind::v1::LearningRateSchedule::kExponential:
      return base_ * std::pow(spec_.exponential().gamma(), static_cast<double>(epoch));
    case traind::v1::LearningRateSchedule::kReduceOnPlateau:
      return current_;
    case traind::v1::LearningRateSchedule::KIND_NOT_SET:
      break;
  }
  return base_;
}

void LearningRateSchedule::Observe(double value, bool maximize) {
  if (!spec_.has_reduce_on_plateau()) return;
  const auto& r = spec_.reduce_on_plateau();
  const double factor = r.has_factor() ? r.factor() : 0.1;
  const int64_t patience = r.has_patience() ? r.patience() : 10;
  const bool better =
      !has_best_ || (maximize ? value > best_ + r.min_delta() : value < best_ - r.min_delta());
  if (better) {
    best_ = value;
    has_best_ = true;
    bad_epochs_ = 0;
  } else {
    ++bad_epochs_;
  }
  if (cooldown_ > 0) {
    --cooldown_;
    bad_epochs_ = 0;
  }
  if (bad_epochs_ > patience) {
    current_ = std::max(current_ * factor, r.min_lr());
    cooldown_ = r.cooldown();
    bad_epochs_ = 0;
  }
}

std::vector<double> LearningRateSchedule::State() const {
  return {current_, best_, has_best_ ? 1.0 : 0.0, static_cast<double>(bad_epochs_),
          static_cast<double>(cooldown_)};
}

void LearningRateSchedule::Restore(const std::vector<double>& state) {
  if (state.size() != 5) return;
  current_ = state[0];
  best_ = state[1];
  has_best_ = state[2] != 0;
  bad_epochs_ = static_cast<int64_t>(state[3]);
  cooldown_ = static_cast<int64_t>(state[4]);
}

}  // namespace traind::engine
