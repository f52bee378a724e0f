// Rounding a float to an 8-bit float code (fp8_e4m3, fp8_e4m3fnuz, fp8_e5m2; arXiv
// 2209.05433, sec. 3): the definition the fp8 quantizer encodes with and the vector
// encoders reproduce bit for bit.
#pragma once
#include <bit>
#include <cmath>
#include <cstdint>

namespace kvlab::kernels {

// What rounding to an 8-bit float format needs: its mantissa width, exponent bias and
// largest finite value (which encoding saturates at), and two numbers derived from them:
// the smallest normal, 2^(1 - bias), and the subnormal codes per unit, 2^(mantissa_bits -
// 1 + bias) (below the smallest normal a code is a multiple of the subnormal step).
struct fp8_rounding {
  unsigned mantissa_bits;
  int bias;
  float max_finite;
  float smallest_normal;
  float subnormal_codes_per_unit;

  static fp8_rounding of(unsigned mantissa_bits, int bias, float max_finite) noexcept {
    return {mantissa_bits, bias, max_finite, std::ldexp(1.0f, 1 - bias),
            std::ldexp(1.0f, static_cast<int>(mantissa_bits) - 1 + bias)};
  }
};

// Nearest finite code to y (a value already divided by its scale), ties to the even code
// (even mantissa), saturating; NaN and zero give code 0 (one zero code: FNUZ has no
// negative zero). The magnitude is rounded on the float's own bits: below the smallest
// normal in units of the subnormal step (an exact scaling, rounded to nearest even); above
// it by rounding the float's mantissa to the format's bits, to nearest even, the carry
// running into the exponent, and rebiasing the exponent. Non-negative codes are in the
// order of their values, so that is the nearest code.
inline std::uint32_t fp8_code(float y, const fp8_rounding& r) noexcept {
  const float magnitude = std::fabs(y) < r.max_finite ? std::fabs(y) : r.max_finite;
  if (!(std::fabs(y) > 0.0f)) return 0; // zero or NaN
  std::uint32_t code;
  if (magnitude < r.smallest_normal) {
    code = static_cast<std::uint32_t>(std::nearbyint(magnitude * r.subnormal_codes_per_unit));
  } else {
    const unsigned dropped = 23 - r.mantissa_bits; // the float's mantissa bits below the format's
    const auto bits = std::bit_cast<std::uint32_t>(magnitude);
    const std::uint32_t rounded = (bits + (1u << (dropped - 1)) - 1u + ((bits >> dropped) & 1u)) >> dropped;
    code = rounded - (static_cast<std::uint32_t>(127 - r.bias) << r.mantissa_bits);
  }
  if (code == 0) return 0;
  return std::signbit(y) ? (code | 0x80u) : code;
}

} // namespace kvlab::kernels
