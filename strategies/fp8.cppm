// fp8_e4m3, fp8_e4m3fnuz, fp8_e5m2: 8-bit floating point codes, each group scaled by
// absmax / max_finite so its largest value lands on the format's largest finite value;
// encoding rounds to nearest with ties to even and saturates (never produces Inf or NaN).
// Paper: Micikevicius et al., "FP8 Formats for Deep Learning", arXiv 2209.05433, sec. 3
// (E4M3 without infinities, max 448; E5M2 IEEE-like, max 57344); OCP 8-bit Floating Point
// Specification (OFP8) rev. 1.0, sec. 5; E4M3FNUZ (bias 8, no negative zero, max 240) as in
// Graphcore/AMD's formats, arXiv 2206.02915, sec. 3.
module;
#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <vector>
export module kvlab.strategies.fp8;
import kvlab.core;

export namespace kvlab::strategies::fp8 {

struct fp8_layout {
  const char* name;
  unsigned exponent_bits;
  unsigned mantissa_bits;
  int bias;
  bool ieee_specials; // all-ones exponent is Inf (mantissa 0) or NaN (E5M2)
  bool unsigned_zero; // 0x80 is the only NaN and there is no negative zero (FNUZ)
};

inline constexpr fp8_layout e4m3{"fp8_e4m3", 4, 3, 7, false, false};
inline constexpr fp8_layout e4m3fnuz{"fp8_e4m3fnuz", 4, 3, 8, false, true};
inline constexpr fp8_layout e5m2{"fp8_e5m2", 5, 2, 15, true, false};

// Value of a code by the format's definition; NaN and Inf codes decode to NaN and Inf.
inline float decode_fp8(const fp8_layout& f, unsigned code) {
  const bool negative = code & 0x80u;
  const unsigned exponent = (code >> f.mantissa_bits) & ((1u << f.exponent_bits) - 1u);
  const unsigned mantissa = code & ((1u << f.mantissa_bits) - 1u);
  const unsigned all_ones = (1u << f.exponent_bits) - 1u;
  constexpr float nan = std::numeric_limits<float>::quiet_NaN();
  if (f.unsigned_zero && code == 0x80u) return nan;
  if (f.ieee_specials && exponent == all_ones) return mantissa == 0 ? (negative ? -INFINITY : INFINITY) : nan;
  if (!f.ieee_specials && !f.unsigned_zero && exponent == all_ones && mantissa == (1u << f.mantissa_bits) - 1u)
    return nan; // E4M3FN: S.1111.111 is NaN, the rest of the top binade is finite
  const float fraction = static_cast<float>(mantissa) / static_cast<float>(1u << f.mantissa_bits);
  const float magnitude = exponent == 0 ? std::ldexp(fraction, 1 - f.bias)
                                        : std::ldexp(1.0f + fraction, static_cast<int>(exponent) - f.bias);
  return negative ? -magnitude : magnitude;
}

class fp8_codec {
public:
  using component_concept = quantizer_tag;

  explicit fp8_codec(const fp8_layout& layout) : layout_(&layout) {
    for (unsigned code = 0; code < 256; ++code) levels_[code] = decode_fp8(layout, code);
    // Non-negative finite codes in ascending value: 0x00 up to the largest finite code.
    while (largest_code_ + 1 < 0x80u && std::isfinite(levels_[largest_code_ + 1])) ++largest_code_;
    rounding_ = fp8_rounding::of(layout.mantissa_bits, layout.bias, levels_[largest_code_]);
  }

  std::string name() const { return layout_->name; }
  unsigned bits() const { return 8; }
  unsigned params_per_group() const { return 1; }
  element_format format() const { return element_format::codebook; }
  std::span<const float> levels() const { return levels_; }
  float max_finite() const { return levels_[largest_code_]; }

  group_params fit(std::span<const float> group) const { return {.scale = absmax(group) / max_finite()}; }

  // Nearest finite code to x / scale, ties to the even code, saturating; NaN gives 0.
  std::uint32_t encode(float x, group_params p) const { return p.scale == 0.0f ? 0 : fp8_code(x / p.scale, rounding_); }
  encoding_rule encoding() const { return {.kind = encoding_kind::float8, .fp8 = rounding_}; }
  float decode(std::uint32_t code, group_params p) const { return p.scale * levels_[code]; }

private:
  const fp8_layout* layout_;
  unsigned largest_code_ = 0;
  fp8_rounding rounding_{};
  std::array<float, 256> levels_{};
};
static_assert(Quantizer<fp8_codec>);

inline constexpr const fp8_layout* layouts[] = {&e4m3, &e4m3fnuz, &e5m2};

inline std::vector<strategy_info> info() {
  std::vector<strategy_info> infos;
  for (const fp8_layout* layout : layouts) {
    const fp8_codec codec(*layout);
    infos.push_back(
        {.name = layout->name,
         .usage = layout->name,
         .summary = "FP8 E" + std::to_string(layout->exponent_bits) + "M" + std::to_string(layout->mantissa_bits) +
                    " (bias " + std::to_string(layout->bias) + ", max " + format_number(codec.max_finite()) +
                    "), absmax scale",
         .paper = layout->unsigned_zero ? "arXiv 2206.02915 sec. 3" : "arXiv 2209.05433 sec. 3; OCP OFP8 v1.0"});
  }
  return infos;
}

// The registry calls this only for the names info() lists, which take no arguments.
inline fp8_codec make(const strategy_args& args) {
  for (const fp8_layout* layout : layouts)
    if (args.text == layout->name) return fp8_codec(*layout);
  throw error("unknown fp8 format '" + args.text + "'");
}

} // namespace kvlab::strategies::fp8

// The typed names recipes use (kvlab.compose): one type per format.
export namespace kvlab::parts {
struct fp8_e4m3 : strategies::fp8::fp8_codec {
  fp8_e4m3() : fp8_codec(strategies::fp8::e4m3) {}
};
struct fp8_e4m3fnuz : strategies::fp8::fp8_codec {
  fp8_e4m3fnuz() : fp8_codec(strategies::fp8::e4m3fnuz) {}
};
struct fp8_e5m2 : strategies::fp8::fp8_codec {
  fp8_e5m2() : fp8_codec(strategies::fp8::e5m2) {}
};
} // namespace kvlab::parts
