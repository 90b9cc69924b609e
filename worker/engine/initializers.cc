#include "worker/engine/initializers.h"

#include <cmath>

#include "absl/strings/str_format.h"
#include "base/status.h"

namespace traind::engine {
namespace {

void Uniform(double a, int64_t n, Rng& rng, float* w) {
  for (int64_t i = 0; i < n; ++i) w[i] = static_cast<float>(a * (2.0 * rng.Uniform() - 1.0));
}

void Normal(double stddev, int64_t n, Rng& rng, float* w) {
  for (int64_t i = 0; i < n; ++i) w[i] = static_cast<float>(stddev * rng.Normal());
}

}  // namespace

void XavierUniform(int64_t fan_in, int64_t fan_out, Rng& rng, float* w, double gain) {
  Uniform(gain * std::sqrt(6.0 / static_cast<double>(fan_in + fan_out)), fan_in * fan_out, rng, w);
}

void XavierNormal(int64_t fan_in, int64_t fan_out, Rng& rng, float* w, double gain) {
  Normal(gain * std::sqrt(2.0 / static_cast<double>(fan_in + fan_out)), fan_in * fan_out, rng, w);
}

void HeUniform(int64_t fan_in, int64_t fan_out, Rng& rng, float* w, double gain) {
  Uniform(gain * std::sqrt(3.0 / static_cast<double>(fan_in)), fan_in * fan_out, rng, w);
}

void HeNormal(int64_t fan_in, int64_t fan_out, Rng& rng, float* w, double gain) {
  Normal(gain / std::sqrt(static_cast<double>(fan_in)), fan_in * fan_out, rng, w);
}

absl::Status InitializeWeights(traind::v1::Initializer init, const InitializerParams& params,
                               int64_t fan_in, int64_t fan_out, Rng& rng, float* w) {
  return InitializeWeightsWithFans(init, params, fan_in, fan_out, fan_in * fan_out, rng, w);
}

absl::Status InitializeWeightsWithFans(traind::v1::Initializer init,
                                       const InitializerParams& params, int64_t fan_in,
                                       int64_t fan_out, int64_t count, Rng& rng, float* w) {
  const int64_t n = count;
  const double in = static_cast<double>(fan_in);
  const double both = static_cast<double>(fan_in + fan_out);
  const double xavier_gain = params.gain > 0 ? params.gain : 1.0;
  const double he_gain = params.gain > 0 ? params.gain : std::sqrt(2.0);
  switch (init) {
    case traind::v1::INITIALIZER_UNSPECIFIED:
    case traind::v1::XAVIER_UNIFORM:
      Uniform(xavier_gain * std::sqrt(6.0 / both), n, rng, w);
      return absl::OkStatus();
    case traind::v1::XAVIER_NORMAL:
      Normal(xavier_gain * std::sqrt(2.0 / both), n, rng, w);
      return absl::OkStatus();
    case traind::v1::HE_UNIFORM:
      Uniform(he_gain * std::sqrt(3.0 / in), n, rng, w);
      return absl::OkStatus();
    case traind::v1::HE_NORMAL:
      Normal(he_gain / std::sqrt(in), n, rng, w);
      return absl::OkStatus();
    case traind::v1::NORMAL:
      Normal(params.stddev, n, rng, w);
      return absl::OkStatus();
    case traind::v1::UNIFORM:
      Uniform(params.limit, n, rng, w);
      return absl::OkStatus();
    case traind::v1::ZEROS:
      for (int64_t i = 0; i < n; ++i) w[i] = 0.0f;
      return absl::OkStatus();
    default:
      return InvalidSpecError(absl::StrFormat("unknown initializer %d", static_cast<int>(init)));
  }
}

absl::Status InitializeWeights(traind::v1::Initializer init, int64_t fan_in, int64_t fan_out,
                               Rng& rng, float* w) {
  return InitializeWeights(init, InitializerParams(), fan_in, fan_out, rng, w);
}

}  // namespace traind::engine
