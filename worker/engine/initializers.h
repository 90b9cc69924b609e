// Weight initializers (host side, from the engine's deterministic PRNG).
#ifndef TRAIND_WORKER_ENGINE_INITIALIZERS_H_
#define TRAIND_WORKER_ENGINE_INITIALIZERS_H_

#include <cstdint>

#include "absl/status/status.h"
#include "base/random.h"
#include "traind/v1/job.pb.h"

namespace traind::engine {

// Glorot & Bengio (2010), as PyTorch's xavier_uniform_:
// w ~ U(-a, a), a = gain sqrt(6 / (fan_in + fan_out)). w: [fan_in * fan_out]
void XavierUniform(int64_t fan_in, int64_t fan_out, Rng& rng, float* w, double gain = 1.0);

// As PyTorch's xavier_normal_: w ~ N(0, gain² 2 / (fan_in + fan_out)).
void XavierNormal(int64_t fan_in, int64_t fan_out, Rng& rng, float* w, double gain = 1.0);

// He et al. (2015), as PyTorch's kaiming_uniform_ / kaiming_normal_ (mode
// fan_in): a = gain sqrt(3 / fan_in); std = gain / sqrt(fan_in).
void HeUniform(int64_t fan_in, int64_t fan_out, Rng& rng, float* w, double gain);
void HeNormal(int64_t fan_in, int64_t fan_out, Rng& rng, float* w, double gain);

// Parameters of the initializers; 0 gain means the kind's default (1 for
// xavier, sqrt(2) for he).
struct InitializerParams {
  double gain = 0;
  double stddev = 0.01;  // normal
  double limit = 0.05;   // uniform
};

// Dispatches on the spec's enum; INITIALIZER_UNSPECIFIED is xavier_uniform.
// An unknown value is an InvalidSpecError.
absl::Status InitializeWeights(traind::v1::Initializer init, const InitializerParams& params,
                               int64_t fan_in, int64_t fan_out, Rng& rng, float* w);
absl::Status InitializeWeights(traind::v1::Initializer init, int64_t fan_in, int64_t fan_out,
                               Rng& rng, float* w);
// As InitializeWeights, for `count` weights whose fans are given apart from
// their number (a convolution's: fan_in = (C/G)·kh·kw, fan_out = F·kh·kw,
// count = F·(C/G)·kh·kw, as PyTorch computes them). w: [count]
absl::Status InitializeWeightsWithFans(traind::v1::Initializer init,
                                       const InitializerParams& params, int64_t fan_in,
                                       int64_t fan_out, int64_t count, Rng& rng, float* w);

}  // namespace traind::engine

#endif  // TRAIND_WORKER_ENGINE_INITIALIZERS_H_
