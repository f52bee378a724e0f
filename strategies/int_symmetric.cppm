// int<b>: symmetric absmax integer quantization, b = 2..8 bits, codes in
// [-(2^(b-1)-1), 2^(b-1)-1] (the symmetric range: no lonely most-negative code), scale =
// absmax / (2^(b-1)-1), rounding to nearest, ties to even.
// Paper: Jacob et al., arXiv 1712.05877, sec. 2 (affine quantization with zero point 0);
// the per-token int8 KV cache of e.g. arXiv 2211.10438 (SmoothQuant), sec. 4.
module;
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <span>
#include <string>
export module kvlab.strategies.int_symmetric;
import kvlab.core;

export namespace kvlab::strategies::int_symmetric {

class symmetric_int {
public:
  using component_concept = quantizer_tag;

  explicit symmetric_int(unsigned bits) : bits_(bits), max_code_(static_cast<int>((1u << (bits - 1)) - 1)) {
    if (bits < 2 || bits > 8) throw error("int<b>: b must be in 2..8, got " + std::to_string(bits));
    // Stored code c + max_code decodes to level c; the one unused top code maps to max_code.
    for (unsigned code = 0; code < (1u << bits_); ++code)
      levels_[code] = static_cast<float>(std::min(static_cast<int>(code) - max_code_, max_code_));
  }

  std::string name() const { return "int" + std::to_string(bits_); }
  unsigned bits() const { return bits_; }
  unsigned params_per_group() const { return 1; }
  element_format format() const { return element_format::codebook; }
  std::span<const float> levels() const { return std::span(levels_).first(std::size_t{1} << bits_); }

  encoding_rule encoding() const {
    return {.kind = encoding_kind::uniform,
            .offset = max_code_,
            .max_code = 2u * static_cast<unsigned>(max_code_),
            .fit = uniform_fit::absmax};
  }

  group_params fit(std::span<const float> group) const {
    return {.scale = absmax(group) / static_cast<float>(max_code_), .zero = 0.0f};
  }
  std::uint32_t encode(float x, group_params params) const {
    if (params.scale == 0.0f) return static_cast<std::uint32_t>(max_code_); // all-zero group
    const float q = std::nearbyint(x / params.scale);
    const float top = static_cast<float>(max_code_);
    // NaN gives the zero code, not an undefined float-to-integer conversion
    const float clamped = q > -top ? std::min(q, top) : (std::isnan(q) ? 0.0f : -top);
    return static_cast<std::uint32_t>(static_cast<int>(clamped) + max_code_);
  }
  float decode(std::uint32_t code, group_params params) const { return params.scale * levels_[code]; }

private:
  unsigned bits_;
  int max_code_;
  std::array<float, 256> levels_{};
};
static_assert(Quantizer<symmetric_int>);

inline strategy_info info() {
  return {.name = "int",
          .usage = "int<b> (b = 2..8)",
          .summary = "symmetric absmax integer, codes in [-(2^(b-1)-1), 2^(b-1)-1]",
          .paper = "arXiv 1712.05877 sec. 2",
          .min_width = 2,
          .max_width = 8};
}

inline symmetric_int make(const strategy_args& args) { return symmetric_int{*args.width}; }

} // namespace kvlab::strategies::int_symmetric

// The typed name recipes use (kvlab.compose).
export namespace kvlab::parts {
using int_q = strategies::int_symmetric::symmetric_int;
} // namespace kvlab::parts
