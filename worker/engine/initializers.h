// Weight initializers (host side, from the engine's deterministic PRNG).
#ifndef TRAIND_WORKER_ENGINE_INITIALIZERS_H_
#define TRAIND_WORKER_ENGINE_INITIALIZERS_H_

#include <cstdint>

#include "absl/status/status.h"
#include "traind/v1/job.pb.h"
#include "worker/engine/random.h"

namespace traind::engine {

// Glorot & Bengio (2010), as PyTorch's xavier_uniform_ (gain 1):
// w ~ U(-a, a), a = sqrt(6 / (fan_in + fan_out)). w: [fan_in * fan_out]
void XavierUniform(int64_t fan_in, int64_t fan_out, Rng& rng, float* w);

// As PyTorch's xavier_normal_ (gain 1): w ~ N(0, 2 / (fan_in + fan_out)).
void XavierNormal(int64_t fan_in, int64_t fan_out, Rng& rng, float* w);

// Dispatches on the spec's enum; INITIALIZER_UNSPECIFIED is xavier_uniform.
// An unknown value is an InvalidSpecError.
absl::Status InitializeWeights(traind::v1::Initializer init, int64_t fan_in, int64_t fan_out,
                               Rng& rng, float* w);

}  // namespace traind::engine

#endif  // TRAIND_WORKER_ENGINE_INITIALIZERS_H_
