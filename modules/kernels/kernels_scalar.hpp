// Scalar kernel bodies. The reference implementation, and the tail / odd-width fallback
// that the SIMD kernels call for the elements their vector loops do not cover.
#pragma once
#include "half.hpp"

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace kvlab::kernels::scalar {

inline unsigned code_at(const std::uint8_t *packed, std::size_t index, unsigned bits) noexcept {
  const std::size_t bit = index * bits;
  const std::size_t byte = bit / 8;
  const unsigned shift = bit % 8;
  // A code of up to 8 bits spans at most two bytes; read the second only when needed so
  // the last code of a buffer never reads past its end.
  unsigned window = packed[byte];
  if (shift + bits > 8) window |= unsigned{packed[byte + 1]} << 8;
  return (window >> shift) & ((1u << bits) - 1u);
}

inline float dot_codes(const float *query, const std::uint8_t *packed, std::size_t first, std::size_t n, unsigned bits,
                       const float *levels) noexcept {
  float sum = 0.0f;
  for (std::size_t i = 0; i < n; ++i) sum += query[i] * levels[code_at(packed, first + i, bits)];
  return sum;
}

inline void axpy_codes(float alpha, const std::uint8_t *packed, std::size_t first, std::size_t n, unsigned bits,
                       const float *levels, float *acc) noexcept {
  for (std::size_t i = 0; i < n; ++i) acc[i] += alpha * levels[code_at(packed, first + i, bits)];
}

inline float load_f32(const std::uint8_t *row, std::size_t i) noexcept {
  float value;
  std::memcpy(&value, row + 4 * i, 4);
  return value;
}
inline float load_f16(const std::uint8_t *row, std::size_t i) noexcept {
  std::uint16_t bits;
  std::memcpy(&bits, row + 2 * i, 2);
  return half_bits_to_float(bits);
}
inline float load_bf16(const std::uint8_t *row, std::size_t i) noexcept {
  std::uint16_t bits;
  std::memcpy(&bits, row + 2 * i, 2);
  return bf16_bits_to_float(bits);
}

template <float (*load)(const std::uint8_t *, std::size_t)>
float dot_row(const float *query, const std::uint8_t *row, std::size_t n) noexcept {
  float sum = 0.0f;
  for (std::size_t i = 0; i < n; ++i) sum += query[i] * load(row, i);
  return sum;
}

template <float (*load)(const std::uint8_t *, std::size_t)>
void axpy_row(float alpha, const std::uint8_t *row, std::size_t n, float *acc) noexcept {
  for (std::size_t i = 0; i < n; ++i) acc[i] += alpha * load(row, i);
}

inline constexpr auto dot_f32 = dot_row<load_f32>;
inline constexpr auto axpy_f32 = axpy_row<load_f32>;
inline constexpr auto dot_f16 = dot_row<load_f16>;
inline constexpr auto axpy_f16 = axpy_row<load_f16>;
inline constexpr auto dot_bf16 = dot_row<load_bf16>;
inline constexpr auto axpy_bf16 = axpy_row<load_bf16>;

} // namespace kvlab::kernels::scalar
