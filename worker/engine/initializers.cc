#include "worker/engine/initializers.h"

#include <cmath>

#include "absl/strings/str_format.h"
#include "worker/engine/status.h"

namespace traind::engine {

void XavierUniform(int64_t fan_in, int64_t fan_out, Rng& rng, float* w) {
  const double a = std::sqrt(6.0 / static_cast<double>(fan_in + fan_out));
  const int64_t n = fan_in * fan_out;
  for (int64_t i = 0; i < n; ++i) w[i] = static_cast<float>(a * (2.0 * rng.Uniform() - 1.0));
}

void XavierNormal(int64_t fan_in, int64_t fan_out, Rng& rng, float* w) {
  const double stddev = std::sqrt(2.0 / static_cast<double>(fan_in + fan_out));
  const int64_t n = fan_in * fan_out;
  for (int64_t i = 0; i < n; ++i) w[i] = static_cast<float>(stddev * rng.Normal());
}

absl::Status InitializeWeights(traind::v1::Initializer init, int64_t fan_in, int64_t fan_out,
                               Rng& rng, float* w) {
  switch (init) {
    case traind::v1::INITIALIZER_UNSPECIFIED:
    case traind::v1::XAVIER_UNIFORM:
      XavierUniform(fan_in, fan_out, rng, w);
      return absl::OkStatus();
    case traind::v1::XAVIER_NORMAL:
      XavierNormal(fan_in, fan_out, rng, w);
      return absl::OkStatus();
    default:
      return InvalidSpecError(absl::StrFormat("unknown initializer %d", static_cast<int>(init)));
  }
}

}  // namespace traind::engine
