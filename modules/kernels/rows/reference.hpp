// The scalar reference of rows of raw floats (f32, IEEE f16, bf16) and fp16 conversions: the oracle the vector kernels
// are tested against, and the tail and odd-width fallback they call for what their vector loops do not cover.
#pragma once
#include "../half.hpp"
#include "../kernels.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace kvlab::kernels::scalar {
// Internal linkage (see kernels_scalar.hpp).
namespace {

inline float load_f32(const std::uint8_t* row, std::size_t i) noexcept {
  float value;
  std::memcpy(&value, row + 4 * i, 4);
  return value;
}
inline float load_f16(const std::uint8_t* row, std::size_t i) noexcept {
  std::uint16_t bits;
  std::memcpy(&bits, row + 2 * i, 2);
  return half_bits_to_float(bits);
}
inline float load_bf16(const std::uint8_t* row, std::size_t i) noexcept {
  std::uint16_t bits;
  std::memcpy(&bits, row + 2 * i, 2);
  return bf16_bits_to_float(bits);
}

template <float (*load)(const std::uint8_t*, std::size_t)>
float dot_row(const float* query, const std::uint8_t* row, std::size_t n) noexcept {
  float sum = 0.0f;
  for (std::size_t i = 0; i < n; ++i) sum += query[i] * load(row, i);
  return sum;
}

template <float (*load)(const std::uint8_t*, std::size_t)>
void axpy_row(float alpha, const std::uint8_t* row, std::size_t n, float* acc) noexcept {
  for (std::size_t i = 0; i < n; ++i) acc[i] += alpha * load(row, i);
}

inline constexpr auto dot_f32 = dot_row<load_f32>;
inline constexpr auto axpy_f32 = axpy_row<load_f32>;
inline constexpr auto dot_f16 = dot_row<load_f16>;
inline constexpr auto axpy_f16 = axpy_row<load_f16>;
inline constexpr auto dot_bf16 = dot_row<load_bf16>;
inline constexpr auto axpy_bf16 = axpy_row<load_bf16>;

inline void floats_to_f16(const float* x, std::size_t n, std::uint16_t* out) noexcept {
  for (std::size_t i = 0; i < n; ++i) out[i] = float_to_half_bits(x[i]);
}
inline void f16_to_floats(const std::uint16_t* h, std::size_t n, float* out) noexcept {
  for (std::size_t i = 0; i < n; ++i) out[i] = half_bits_to_float(h[i]);
}

// In-place normalized fast Walsh-Hadamard transform of a block of n = 2^k floats
// (self-inverse): butterflies (a + b, a - b) of stride 1, 2, 4, ... in turn, then every
// element times 1 / sqrt(n). Each output is the same sequence of float operations whatever
// order a stage's butterflies run in, so a vector kernel gives these bits exactly.
inline void walsh_hadamard(float* block, std::size_t n) noexcept {
  for (std::size_t half = 1; half < n; half *= 2)
    for (std::size_t start = 0; start < n; start += 2 * half)
      for (std::size_t i = start; i < start + half; ++i) {
        const float a = block[i], b = block[i + half];
        block[i] = a + b;
        block[i + half] = a - b;
      }
  const float norm = 1.0f / std::sqrt(static_cast<float>(n));
  for (std::size_t i = 0; i < n; ++i) block[i] *= norm;
}

inline constexpr float f16_max_finite = 65504.0f, bf16_max_finite = 0x1.fep127f;

inline bool encode_raw(element_kind kind, const float* x, std::size_t n, std::uint8_t* out) noexcept {
  bool finite = true;
  for (std::size_t i = 0; i < n; ++i) finite = finite && std::isfinite(x[i]);
  if (kind == element_kind::f32) return std::memcpy(out, x, n * sizeof(float)), finite;
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint16_t bits = kind == element_kind::f16
                                   ? float_to_half_bits(std::clamp(x[i], -f16_max_finite, f16_max_finite))
                                   : float_to_bf16_bits(std::clamp(x[i], -bf16_max_finite, bf16_max_finite));
    std::memcpy(out + 2 * i, &bits, 2);
  }
  return finite;
}

} // namespace
} // namespace kvlab::kernels::scalar
