// IEEE binary16 and bfloat16 conversions, exact and round-to-nearest-even.
// Plain header (not a module) so the per-ISA kernel translation units can use it too.
#pragma once
#include <bit>
#include <cstdint>

namespace kvlab::kernels {

inline float half_bits_to_float(std::uint16_t h) noexcept {
  const std::uint32_t sign = std::uint32_t{h & 0x8000u} << 16;
  const std::uint32_t exponent = (h >> 10) & 0x1fu;
  std::uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0x1f) return std::bit_cast<float>(sign | 0x7f800000u | (mantissa << 13));
  if (exponent != 0) return std::bit_cast<float>(sign | ((exponent + 112) << 23) | (mantissa << 13));
  // Subnormal half: value = mantissa * 2^-24, exact in float.
  const float magnitude = static_cast<float>(mantissa) * 0x1p-24f;
  return sign ? -magnitude : magnitude;
}

inline std::uint16_t float_to_half_bits(float f) noexcept {
  const std::uint32_t x = std::bit_cast<std::uint32_t>(f);
  const std::uint16_t sign = static_cast<std::uint16_t>((x >> 16) & 0x8000u);
  const std::uint32_t magnitude = x & 0x7fffffffu;
  if (magnitude > 0x7f800000u) return static_cast<std::uint16_t>(sign | 0x7e00u);  // NaN stays NaN
  if (magnitude >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u); // rounds past 65504
  if (magnitude < 0x38800000u) {
    // Result is subnormal (or zero) in half: scale to units of 2^-24 and round to even.
    const float scaled = std::bit_cast<float>(magnitude) * 0x1p24f;
    const auto truncated = static_cast<std::uint32_t>(scaled);
    const float remainder = scaled - static_cast<float>(truncated);
    std::uint32_t rounded = truncated;
    if (remainder > 0.5f || (remainder == 0.5f && (truncated & 1u))) ++rounded;
    return static_cast<std::uint16_t>(sign | rounded);
  }
  // Normal: rebias the exponent, round the 13 dropped mantissa bits to nearest even.
  const std::uint32_t rebased = magnitude - (112u << 23);
  const std::uint32_t round_bit = 1u << 12;
  std::uint32_t half = rebased >> 13;
  const std::uint32_t dropped = rebased & 0x1fffu;
  if (dropped > round_bit || (dropped == round_bit && (half & 1u))) ++half;
  return static_cast<std::uint16_t>(sign | half);
}

inline float bf16_bits_to_float(std::uint16_t b) noexcept { return std::bit_cast<float>(std::uint32_t{b} << 16); }

inline std::uint16_t float_to_bf16_bits(float f) noexcept {
  const std::uint32_t x = std::bit_cast<std::uint32_t>(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((x >> 16) | 0x40u);
  const std::uint32_t rounding = 0x7fffu + ((x >> 16) & 1u);
  return static_cast<std::uint16_t>((x + rounding) >> 16);
}

} // namespace kvlab::kernels
