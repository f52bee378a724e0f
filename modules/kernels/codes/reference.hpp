// The scalar reference of bit-packed codes (reading and writing one code, dots, axpys and decoding): the oracle the
// vector kernels are tested against, and the tail and odd-width fallback they call for what their vector loops do not
// cover.
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

inline unsigned code_at(const std::uint8_t* packed, std::size_t index, unsigned bits) noexcept {
  const std::size_t bit = index * bits;
  const std::size_t byte = bit / 8;
  const unsigned shift = bit % 8;
  // A code of up to 8 bits spans at most two bytes; read the second only when needed so
  // the last code of a buffer never reads past its end.
  unsigned window = packed[byte];
  if (shift + bits > 8) window |= unsigned{packed[byte + 1]} << 8;
  return (window >> shift) & ((1u << bits) - 1u);
}

// Overwrites the code of element `index` (the other bits of its bytes are kept).
inline void put_code(std::uint8_t* packed, std::size_t index, unsigned bits, unsigned code) noexcept {
  const std::size_t bit = index * bits;
  const std::size_t byte = bit / 8;
  const unsigned shift = bit % 8;
  const unsigned mask = ((1u << bits) - 1u) << shift;
  const unsigned value = code << shift;
  packed[byte] = static_cast<std::uint8_t>((packed[byte] & ~mask) | (value & mask));
  if (shift + bits > 8)
    packed[byte + 1] = static_cast<std::uint8_t>((packed[byte + 1] & ~(mask >> 8)) | ((value & mask) >> 8));
}

inline void decode_codes(const std::uint8_t* packed, std::size_t first, std::size_t n, unsigned bits,
                         const float* levels, float scale, float zero, float* out) noexcept {
  for (std::size_t i = 0; i < n; ++i) out[i] = scale * levels[code_at(packed, first + i, bits)] + zero;
}

inline float dot_raw_codes(const float* query, const std::uint8_t* packed, std::size_t first, std::size_t n,
                           unsigned bits) noexcept {
  float sum = 0.0f;
  for (std::size_t i = 0; i < n; ++i) sum += query[i] * static_cast<float>(code_at(packed, first + i, bits));
  return sum;
}

inline void axpy_raw_codes(float alpha, const std::uint8_t* packed, std::size_t first, std::size_t n, unsigned bits,
                           float* acc) noexcept {
  for (std::size_t i = 0; i < n; ++i) acc[i] += alpha * static_cast<float>(code_at(packed, first + i, bits));
}

inline float dot_codes(const float* query, const std::uint8_t* packed, std::size_t first, std::size_t n, unsigned bits,
                       const float* levels) noexcept {
  float sum = 0.0f;
  for (std::size_t i = 0; i < n; ++i) sum += query[i] * levels[code_at(packed, first + i, bits)];
  return sum;
}

inline void axpy_codes(float alpha, const std::uint8_t* packed, std::size_t first, std::size_t n, unsigned bits,
                       const float* levels, float* acc) noexcept {
  for (std::size_t i = 0; i < n; ++i) acc[i] += alpha * levels[code_at(packed, first + i, bits)];
}

} // namespace
} // namespace kvlab::kernels::scalar
