// f32: keys or values stored as IEEE binary32, the lossless reference format.
// Paper: - (plain IEEE 754 format; the baseline every compression result is compared to)
module;
#include <bit>
#include <cstdint>
#include <span>
#include <string>
export module kvlab.strategies.f32;
import kvlab.core;

export namespace kvlab::strategies::f32 {

struct float32 {
  using component_concept = quantizer_tag;
  std::string name() const { return "f32"; }
  unsigned bits() const { return 32; }
  unsigned params_per_group() const { return 0; }
  element_format format() const { return element_format::f32; }
  std::span<const float> levels() const { return {}; }
  group_params fit(std::span<const float>) const { return {}; }
  std::uint32_t encode(float x, group_params) const { return std::bit_cast<std::uint32_t>(x); }
  float decode(std::uint32_t code, group_params) const { return std::bit_cast<float>(code); }
};
static_assert(Quantizer<float32>);

inline strategy_info info() {
  return {.name = "f32", .usage = "f32", .summary = "IEEE binary32, lossless", .paper = "-"};
}

inline float32 make(const strategy_args&) { return float32{}; }

} // namespace kvlab::strategies::f32

// The typed name recipes use (kvlab.compose).
export namespace kvlab::parts {
using f32 = strategies::f32::float32;
} // namespace kvlab::parts
