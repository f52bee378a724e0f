// A quantizer defined outside kvlab: ternary codes {-s, 0, +s} per group, s = mean |x| of
// the group (ternary weight networks, arXiv 1605.04711, sec. 2.2, with the threshold at
// s / 2). Two bits per element, one scale per group.
module;
#include <array>
#include <cmath>
#include <cstdint>
#include <span>
#include <string>
export module outside.ternary;
import kvlab;

export struct ternary {
  using component_concept = kvlab::quantizer_tag;
  static constexpr std::array<float, 4> ternary_levels{-1.0f, 0.0f, 1.0f, 0.0f};
  std::string name() const { return "ternary"; }
  unsigned bits() const { return 2; }
  unsigned params_per_group() const { return 1; }
  kvlab::element_format format() const { return kvlab::element_format::codebook; }
  std::span<const float> levels() const { return ternary_levels; }
  kvlab::group_params fit(std::span<const float> group) const {
    float total = 0.0f;
    for (const float x : group) total += std::fabs(x);
    return {.scale = group.empty() ? 0.0f : total / static_cast<float>(group.size())};
  }
  std::uint32_t encode(float x, kvlab::group_params p) const {
    if (x > p.scale / 2) return 2;
    if (x < -p.scale / 2) return 0;
    return 1;
  }
  float decode(std::uint32_t code, kvlab::group_params p) const { return p.scale * ternary_levels[code]; }
};
static_assert(kvlab::Quantizer<ternary>);
