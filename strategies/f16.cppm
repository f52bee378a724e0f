// f16: IEEE binary16, what inference engines store by default (the "uncompressed" baseline).
// Paper: - (IEEE 754-2008 binary16). Values beyond +-65504 saturate to +-65504 instead of
// becoming infinite, so a finite input never decodes to a non-finite value.
module;
#include <algorithm>
#include <cstdint>
#include <span>
#include <string>
export module kvlab.strategies.f16;
import kvlab.core;

export namespace kvlab::strategies::f16 {

struct float16 {
  using component_concept = quantizer_tag;
  static constexpr float max_finite = 65504.0f;
  std::string name() const { return "f16"; }
  unsigned bits() const { return 16; }
  unsigned params_per_group() const { return 0; }
  element_format format() const { return element_format::f16; }
  std::span<const float> levels() const { return {}; }
  group_params fit(std::span<const float>) const { return {}; }
  std::uint32_t encode(float x, group_params) const {
    return float_to_half_bits(std::clamp(x, -max_finite, max_finite));
  }
  float decode(std::uint32_t code, group_params) const { return half_bits_to_float(static_cast<std::uint16_t>(code)); }
};
static_assert(Quantizer<float16>);

inline strategy_info info() {
  return {.name = "f16", .usage = "f16", .summary = "IEEE binary16 (saturating)", .paper = "-"};
}

inline float16 make(const strategy_args&) { return float16{}; }

} // namespace kvlab::strategies::f16

// The typed name recipes use (kvlab.compose).
export namespace kvlab::parts {
using f16 = strategies::f16::float16;
} // namespace kvlab::parts
