// Deterministic random numbers: every (seed, stream) pair is an independent, reproducible
// sequence, so generated data and random rotations never depend on order or threads.
module;
#include <cmath>
#include <cstdint>
#include <numbers>
export module kvlab.core:random;

export namespace kvlab {

// splitmix64 (Steele et al., "Fast splittable pseudorandom number generators", OOPSLA
// 2014): tiny, fast, and every (seed, stream) pair gives an independent, reproducible
// sequence, so generation order never changes the data.
class random_stream {
public:
  random_stream(std::uint64_t seed, std::uint64_t stream) : state_(mix(seed) ^ mix(stream + 0x632be59bd9b4e019ull)) {}
  std::uint64_t next() noexcept { return mix(state_ += 0x9e3779b97f4a7c15ull); }
  // Uniform in (0, 1): never 0, so log() is safe.
  double uniform() noexcept { return (static_cast<double>(next() >> 11) + 0.5) * 0x1p-53; }
  // Standard normal by Box-Muller (one value per call, the pair's sine half is discarded
  // so the value depends only on the call count).
  double normal() noexcept {
    const double radius = std::sqrt(-2.0 * std::log(uniform()));
    return radius * std::cos(2.0 * std::numbers::pi * uniform());
  }

private:
  static std::uint64_t mix(std::uint64_t z) noexcept {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  std::uint64_t state_;
};

} // namespace kvlab
