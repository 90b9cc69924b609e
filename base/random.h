// Deterministic pseudo-random numbers for the training engine.
//
// Fold splits, weight initialization and batch shuffling must give the same
// result on every machine, compiler and standard library, and in every worker
// process of a job. std::shuffle and std::*_distribution are
// implementation-defined, so the engine uses only these functions.
//
// Thread safety: an Rng is a plain value; use one per thread.
#ifndef TRAIND_BASE_RANDOM_H_
#define TRAIND_BASE_RANDOM_H_

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <utility>

namespace traind {

// One step of SplitMix64's output function (Steele, Lea & Flood, 2014): a
// bijective 64-bit mixer with good avalanche.
constexpr uint64_t MixBits(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

// Independent streams of one job: a seed for (job seed, fold, purpose).
// Distinct arguments give unrelated seeds.
constexpr uint64_t DeriveSeed(uint64_t seed, uint64_t a, uint64_t b = 0) {
  uint64_t h = MixBits(seed + 0x9E3779B97F4A7C15ULL);
  h = MixBits(h ^ (a + 0x632BE59BD9B4E019ULL));
  return MixBits(h ^ (b + 0x85157AF5D6D35B1DULL));
}

// Purposes passed to DeriveSeed.
inline constexpr uint64_t kSplitStream = 1;
inline constexpr uint64_t kInitStream = 2;
inline constexpr uint64_t kShuffleStream = 3;
inline constexpr uint64_t kDropoutStream = 4;
inline constexpr uint64_t kAugmentStream = 5;
inline constexpr uint64_t kImportanceStream = 6;

// SplitMix64 generator: 64-bit state, period 2^64, passes BigCrush.
class Rng {
 public:
  explicit constexpr Rng(uint64_t seed) : state_(seed) {}

  // Uniform on [0, 2^64).
  constexpr uint64_t Next() {
    state_ += 0x9E3779B97F4A7C15ULL;
    return MixBits(state_);
  }

  // The generator's whole state (for checkpoints): Rng(state()) continues
  // the same sequence.
  constexpr uint64_t state() const { return state_; }

  // Uniform on [0, 1) with 53 random bits.
  double Uniform() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }

  // Uniform on [0, n), without bias (Lemire, 2019). REQUIRES: n > 0.
  uint64_t UniformInt(uint64_t n) {
    unsigned __int128 m = static_cast<unsigned __int128>(Next()) * n;
    uint64_t low = static_cast<uint64_t>(m);
    if (low < n) {
      const uint64_t threshold = (0 - n) % n;
      while (low < threshold) {
        m = static_cast<unsigned __int128>(Next()) * n;
        low = static_cast<uint64_t>(m);
      }
    }
    return static_cast<uint64_t>(m >> 64);
  }

  // Standard normal by the Box-Muller transform (one value per call).
  double Normal() {
    // 1 - Uniform() is in (0, 1], so the logarithm is finite.
    const double u1 = 1.0 - Uniform();
    const double u2 = Uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }

 private:
  uint64_t state_;
};

// Fisher-Yates shuffle of data[0, n).
template <typename T>
void Shuffle(T* data, size_t n, Rng& rng) {
  for (size_t i = n; i > 1; --i) {
    const size_t j = static_cast<size_t>(rng.UniformInt(i));
    using std::swap;
    swap(data[i - 1], data[j]);
  }
}

}  // namespace traind

#endif  // TRAIND_BASE_RANDOM_H_
