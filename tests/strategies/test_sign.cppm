// test_sign: 1-bit sign quantizer, value = +-mean|x| of the group. Exists only in the test
// build, to show that a strategy added as one file is registered, listed, usable in
// recipes and covered by the conformance tests with no other edit.
// Paper: sign quantization with a mean-magnitude scale, arXiv 1603.05279 (XNOR-Net), sec. 3.1.
module;
#include <array>
#include <cmath>
#include <cstdint>
#include <span>
#include <string>
export module kvlab.strategies.test_sign;
import kvlab.core;

export namespace kvlab::strategies::test_sign {

struct sign_bit {
  using component_concept = quantizer_tag;
  static constexpr std::array<float, 2> sign_levels{-1.0f, 1.0f};
  std::string name() const { return "test_sign"; }
  unsigned bits() const { return 1; }
  unsigned params_per_group() const { return 1; }
  element_format format() const { return element_format::codebook; }
  std::span<const float> levels() const { return sign_levels; }
  group_params fit(std::span<const float> group) const {
    float total = 0.0f;
    for (const float x : group) total += std::fabs(x);
    return {.scale = group.empty() ? 0.0f : total / static_cast<float>(group.size())};
  }
  std::uint32_t encode(float x, group_params) const { return x >= 0.0f ? 1u : 0u; }
  float decode(std::uint32_t code, group_params p) const { return p.scale * sign_levels[code]; }
};
static_assert(Quantizer<sign_bit>);

inline strategy_info info() {
  return {.name = "test_sign",
          .usage = "test_sign",
          .summary = "1-bit sign (test build only)",
          .paper = "arXiv 1603.05279 sec. 3.1"};
}

inline sign_bit make(const strategy_args&) { return sign_bit{}; }

} // namespace kvlab::strategies::test_sign

// The typed name recipes use (kvlab.compose).
export namespace kvlab::parts {
using test_sign = strategies::test_sign::sign_bit;
} // namespace kvlab::parts
