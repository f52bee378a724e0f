// bf16: bfloat16 (8 exponent bits, 7 mantissa bits), the range of f32 at half the bytes.
// Paper: Kalamkar et al., "A Study of BFLOAT16 for Deep Learning Training", arXiv 1905.12322, sec. 2.
// Rounding is to nearest even; values beyond the largest finite bf16 saturate to it.
module;
#include <algorithm>
#include <cstdint>
#include <span>
#include <string>
export module kvlab.strategies.bf16;
import kvlab.core;

export namespace kvlab::strategies::bf16 {

struct bfloat16 {
  using component_concept = quantizer_tag;
  static constexpr float max_finite = 0x1.fep127f;
  std::string name() const { return "bf16"; }
  unsigned bits() const { return 16; }
  unsigned params_per_group() const { return 0; }
  element_format format() const { return element_format::bf16; }
  std::span<const float> levels() const { return {}; }
  group_params fit(std::span<const float>) const { return {}; }
  std::uint32_t encode(float x, group_params) const {
    return float_to_bf16_bits(std::clamp(x, -max_finite, max_finite));
  }
  float decode(std::uint32_t code, group_params) const { return bf16_bits_to_float(static_cast<std::uint16_t>(code)); }
};
static_assert(Quantizer<bfloat16>);

inline strategy_info info() {
  return {.name = "bf16", .usage = "bf16", .summary = "bfloat16 (saturating)", .paper = "arXiv 1905.12322 sec. 2"};
}

inline bfloat16 make(const strategy_args&) { return bfloat16{}; }

} // namespace kvlab::strategies::bf16

// The typed name recipes use (kvlab.compose).
export namespace kvlab::parts {
using bf16 = strategies::bf16::bfloat16;
} // namespace kvlab::parts
