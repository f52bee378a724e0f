// nf4: 4-bit NormalFloat, 16 levels at quantiles of N(0,1) normalised to [-1, 1] with an
// exact zero, scaled by the group's absmax; each value takes the nearest level.
// Paper: Dettmers et al., QLoRA, arXiv 2305.14314, sec. 3 ("4-bit NormalFloat Quantization")
// and appendix E (the 16 values).
module;
#include <array>
#include <cstdint>
#include <span>
#include <string>
export module kvlab.strategies.nf4;
import kvlab.core;

export namespace kvlab::strategies::nf4 {

struct normal_float4 {
  using component_concept = quantizer_tag;
  static constexpr std::array<float, 16> nf4_levels{
      -1.0f,        -0.6961928f, -0.52507305f, -0.39491749f, -0.28444138f, -0.18477343f, -0.091050036f, 0.0f,
      0.079580299f, 0.16093020f, 0.24611230f,  0.33791524f,  0.44070983f,  0.56261700f,  0.72295684f,   1.0f};
  static constexpr std::array<float, 15> thresholds = midpoints(nf4_levels);

  std::string name() const { return "nf4"; }
  unsigned bits() const { return 4; }
  unsigned params_per_group() const { return 1; }
  element_format format() const { return element_format::codebook; }
  std::span<const float> levels() const { return nf4_levels; }
  encoding_rule encoding() const {
    return {.kind = encoding_kind::nearest, .thresholds = thresholds, .scale_fit = codebook_scale::absmax};
  }
  group_params fit(std::span<const float> group) const { return {.scale = absmax(group)}; }
  std::uint32_t encode(float x, group_params p) const {
    return count_below(thresholds, p.scale == 0.0f ? 0.0f : x / p.scale);
  }
  float decode(std::uint32_t code, group_params p) const { return p.scale * nf4_levels[code]; }
};
static_assert(Quantizer<normal_float4>);

inline strategy_info info() {
  return {.name = "nf4",
          .usage = "nf4",
          .summary = "4-bit NormalFloat (QLoRA), absmax scale",
          .paper = "arXiv 2305.14314 sec. 3, app. E"};
}

inline normal_float4 make(const strategy_args&) { return normal_float4{}; }

} // namespace kvlab::strategies::nf4

// The typed name recipes use (kvlab.compose).
export namespace kvlab::parts {
using nf4 = strategies::nf4::normal_float4;
} // namespace kvlab::parts
