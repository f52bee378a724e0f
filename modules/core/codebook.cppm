// Helpers for codebook quantizers: the encoding rules fused kernels understand, and the
// group statistics parameter fitting uses.
module;
#include "kernels.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <utility>
export module kvlab.core:codebook;

export namespace kvlab {

// How a quantizer picks codes, when kernels can do it for a whole group at once.
enum class encoding_kind {
  per_element, // only the quantizer's own encode() knows
  uniform,     // code = clamp(round_to_even((x - zero) / scale) + offset, 0, max_code); offset if scale == 0
  nearest,     // code = number of thresholds below (x - zero) / scale (0 if scale == 0); levels ascending
  float8       // code = fp8_code(x / scale, fp8) (0 if scale == 0); 8-bit codes
};

using kernels::codebook_scale;
using kernels::fp8_code;
using kernels::fp8_rounding;
using kernels::uniform_fit;

struct encoding_rule {
  encoding_kind kind = encoding_kind::per_element;
  int offset = 0;                    // uniform
  unsigned max_code = 0;             // uniform
  std::span<const float> thresholds; // nearest: midpoints between adjacent ascending levels
  // nearest: set when fit() is this standard scale with zero 0, so kernels fit and encode a
  // record at once
  std::optional<codebook_scale> scale_fit;
  // uniform: set when fit() is this standard rule, so kernels fit and encode a record at once
  std::optional<uniform_fit> fit;
  std::optional<fp8_rounding> fp8; // float8
};

// Midpoints between adjacent levels of an ascending codebook: the decision thresholds of
// nearest-level encoding (a value exactly on a threshold goes to the lower level).
template <std::size_t N>
constexpr std::array<float, N - 1> midpoints(const std::array<float, N>& levels) {
  std::array<float, N - 1> out{};
  for (std::size_t i = 0; i + 1 < N; ++i) out[i] = (levels[i] + levels[i + 1]) / 2;
  return out;
}

inline std::uint32_t count_below(std::span<const float> thresholds, float y) noexcept {
  return static_cast<std::uint32_t>(std::ranges::count_if(thresholds, [y](float t) { return t < y; }));
}

// Group statistics through the fastest kernels this CPU runs; max and min are exact, so
// the result does not depend on which.
inline float absmax(std::span<const float> group) noexcept {
  return kernels::active_kernels().absmax(group.data(), group.size());
}

inline std::pair<float, float> min_max(std::span<const float> group) noexcept {
  float lo, hi;
  kernels::active_kernels().min_max(group.data(), group.size(), &lo, &hi);
  return {lo, hi};
}

// The normalized Walsh-Hadamard transform of a power-of-two block, in place, by the same
// kernels (the same bits on every ISA).
inline void walsh_hadamard(std::span<float> block) noexcept {
  kernels::active_kernels().walsh_hadamard(block.data(), block.size());
}

// Accumulated in double so the scale does not depend on summation order noise.
inline float root_mean_square(std::span<const float> group) noexcept {
  return kernels::root_mean_square(group.data(), group.size());
}

} // namespace kvlab
