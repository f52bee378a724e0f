// uint<b>: asymmetric min-max integer quantization with a zero point, b = 1..8 bits:
// scale = (max - min) / (2^b - 1), zero = min, code = round((x - zero) / scale) in [0, 2^b - 1].
// Paper: Jacob et al., arXiv 1712.05877, sec. 2.1; the KV format of KIVI, arXiv 2402.02750, sec. 3.
module;
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <span>
#include <string>
export module kvlab.strategies.uint_asymmetric;
import kvlab.core;

export namespace kvlab::strategies::uint_asymmetric {

class asymmetric_uint {
public:
  using component_concept = quantizer_tag;

  explicit asymmetric_uint(unsigned bits) : bits_(bits), max_code_((1u << bits) - 1u) {
    if (bits < 1 || bits > 8) throw error("uint<b>: b must be in 1..8, got " + std::to_string(bits));
    for (unsigned code = 0; code <= max_code_; ++code) levels_[code] = static_cast<float>(code);
  }

  std::string name() const { return "uint" + std::to_string(bits_); }
  unsigned bits() const { return bits_; }
  unsigned params_per_group() const { return 2; }
  element_format format() const { return element_format::codebook; }
  std::span<const float> levels() const { return std::span(levels_).first(max_code_ + 1); }
  encoding_rule encoding() const {
    return {.kind = encoding_kind::uniform, .offset = 0, .max_code = max_code_, .fit = uniform_fit::min_max};
  }

  group_params fit(std::span<const float> group) const {
    const auto [lo, hi] = min_max(group);
    return {.scale = (hi - lo) / static_cast<float>(max_code_), .zero = lo};
  }
  std::uint32_t encode(float x, group_params params) const {
    if (params.scale == 0.0f) return 0; // constant group: everything decodes to the zero point
    const float q = std::nearbyint((x - params.zero) / params.scale);
    // NaN gives code 0, not an undefined float-to-integer conversion
    return q > 0.0f ? static_cast<std::uint32_t>(std::min(q, static_cast<float>(max_code_))) : 0u;
  }
  float decode(std::uint32_t code, group_params params) const { return params.scale * levels_[code] + params.zero; }

private:
  unsigned bits_;
  unsigned max_code_;
  std::array<float, 256> levels_{};
};
static_assert(Quantizer<asymmetric_uint>);

inline strategy_info info() {
  return {.name = "uint",
          .usage = "uint<b> (b = 1..8)",
          .summary = "asymmetric min-max integer with zero point",
          .paper = "arXiv 1712.05877 sec. 2.1; arXiv 2402.02750 sec. 3",
          .min_width = 1,
          .max_width = 8};
}

inline asymmetric_uint make(const strategy_args& args) { return asymmetric_uint{*args.width}; }

} // namespace kvlab::strategies::uint_asymmetric

// The typed name recipes use (kvlab.compose).
export namespace kvlab::parts {
using uint_q = strategies::uint_asymmetric::asymmetric_uint;
} // namespace kvlab::parts
