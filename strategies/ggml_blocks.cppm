// q8_0, q4_0, q4_1, q5_0, q5_1, iq4_nl: the block quantizers llama.cpp offers as KV cache
// types (--cache-type-k/-v), with ggml's reference rounding bit for bit. Each block of 32
// values (group(32) in a recipe; other group sizes apply the same rule) keeps an fp16 scale
// d, and q4_1/q5_1 an fp16 minimum m:
//   q8_0  d = absmax / 127,               q = round(x / d), ties away from zero, in -127..127
//   q4_0  d = (signed value of largest magnitude) / -8, q = min(15, trunc(x / d + 8.5)),
//         levels q - 8 (-8..7: 16 levels, the largest magnitude on -8 exactly)
//   q5_0  the same with 32 levels: d = that value / -16, q = min(31, trunc(x / d + 16.5))
//   q4_1  d = (max - min) / 15, m = min,  q = min(15, trunc((x - m) / d + 0.5))
//   q5_1  d = (max - min) / 31, m = min,  q = min(31, trunc((x - m) / d + 0.5))
//   iq4_nl  16 non-uniform levels V = {-127, -104, ..., 89, 113}: codes are the nearest V
//         (ties to the upper) to x / d0, d0 = (signed value of largest magnitude) / -127;
//         then d = sum(w q x) / sum(w q q) over the chosen levels q with weights w = x^2 (a
//         least-squares scale for those codes, no second pass); blocks whose largest
//         magnitude is below 1e-15 store d = 0
// "x / d" is x times the float reciprocal of d as fitted, before d is rounded to fp16: ggml
// chooses codes against that d and stores its fp16 rounding, so codes come from the whole
// group (encode_group), not from the stored parameters. Under rht(...) a group's codes come
// from its stored parameters, as for every other quantizer: ggml has no rotated format.
// Definition: ggml/src/ggml-quants.c, quantize_row_{q8_0,q4_0,q4_1,q5_0,q5_1,iq4_nl}_ref
// (iq4_nl: quantize_row_iq4_nl_impl with no importance weights and ntry = -1, the path
// ggml's CPU backend takes for a cache; llama-quantize searches more scales for model
// files), and the block structs of ggml/src/ggml-common.h (ggml-org/llama.cpp at 01243c5). The
// reference is what llama.cpp writes into model files; its x86 CPU path for a q8_0 cache
// (quantize_row_q8_0) multiplies by 127 / amax and rounds halves to even, so its bytes can
// differ from these in rare values. Where 1/d overflows float or a quotient passes the top
// code (|d| below 2^-126, a scale fp16 stores as 0), ggml's conversion to an integer is
// undefined in C; kvlab takes the nearest end code, and the block decodes the same. An
// iq4_nl block whose largest magnitude is below 1e-15 has d = 0 and codes 0, as in ggml.
// Paper: none; the format of llama.cpp (Gerganov et al.) and GGUF.
module;
#include <algorithm>
#include <array>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>
export module kvlab.strategies.ggml_blocks;
import kvlab.core;

export namespace kvlab::strategies::ggml_blocks {

struct ggml_format {
  const char* name;
  unsigned bits;
  int level_offset;     // level = code - level_offset
  bool keeps_minimum;   // q4_1, q5_1: d = (max - min) / top, m = min
  float signed_divisor; // q4_0, q5_0: d = (value of largest magnitude) / signed_divisor
  const std::array<std::int8_t, 16>* nonlinear_levels = nullptr; // iq4_nl
};

inline constexpr std::array<std::int8_t, 16> iq4_nl_levels{-127, -104, -83, -65, -49, -35, -22, -10,
                                                           1,    13,   25,  38,  53,  69,  89,  113};

inline constexpr ggml_format q8_0{"q8_0", 8, 127, false, 0.0f};
inline constexpr ggml_format q4_0{"q4_0", 4, 8, false, -8.0f};
inline constexpr ggml_format q4_1{"q4_1", 4, 0, true, 0.0f};
inline constexpr ggml_format q5_0{"q5_0", 5, 16, false, -16.0f};
inline constexpr ggml_format q5_1{"q5_1", 5, 0, true, 0.0f};
inline constexpr ggml_format iq4_nl{"iq4_nl", 4, 0, false, 0.0f, &iq4_nl_levels};
inline constexpr const ggml_format* formats[] = {&q8_0, &q4_0, &q4_1, &q5_0, &q5_1, &iq4_nl};

class ggml_block_quantizer {
public:
  using component_concept = quantizer_tag;

  explicit ggml_block_quantizer(const ggml_format& format) : format_(&format) {
    // q8_0 stores q + 127 (q in -127..127); its one unused top code decodes as 127.
    const int top_level = format.bits == 8 ? 127 : static_cast<int>(max_code()) - format.level_offset;
    for (unsigned code = 0; code < (1u << format.bits); ++code)
      levels_[code] = format.nonlinear_levels
                          ? static_cast<float>((*format.nonlinear_levels)[code])
                          : static_cast<float>(std::min(static_cast<int>(code) - format.level_offset, top_level));
  }

  std::string name() const { return format_->name; }
  unsigned bits() const { return format_->bits; }
  unsigned params_per_group() const { return format_->keeps_minimum ? 2 : 1; }
  element_format format() const { return element_format::codebook; }
  std::span<const float> levels() const { return std::span(levels_).first(std::size_t{1} << format_->bits); }

  // d and m as ggml computes them, in ggml's order of comparisons (the first value of
  // largest magnitude wins a tie).
  group_params fit(std::span<const float> group) const {
    if (format_->nonlinear_levels) return {.scale = least_squares_scale(group), .zero = 0.0f};
    if (format_->keeps_minimum) {
      float lowest = FLT_MAX, highest = -FLT_MAX;
      for (const float v : group) {
        if (v < lowest) lowest = v;
        if (v > highest) highest = v;
      }
      return {.scale = (highest - lowest) / static_cast<float>(max_code()), .zero = lowest};
    }
    const auto [largest_magnitude, largest] = largest_value(group);
    if (format_->signed_divisor != 0.0f) return {.scale = largest / format_->signed_divisor, .zero = 0.0f};
    return {.scale = largest_magnitude / 127.0f, .zero = 0.0f};
  }

  // A group's codes: against the fitted parameters, as ggml chooses them (the stored ones
  // are their fp16 rounding); iq4_nl's against its first scale d0.
  void encode_group(std::span<const float> values, group_params, std::span<std::uint32_t> codes) const {
    const group_params fitted = format_->nonlinear_levels ? group_params{first_scale(values), 0.0f} : fit(values);
    for (std::size_t i = 0; i < values.size(); ++i) codes[i] = code(values[i], fitted);
    if (format_->nonlinear_levels && fitted.scale == 0.0f) std::ranges::fill(codes, 0u); // ggml zeroes the block
  }
  // One value under parameters as given (groups go through encode_group).
  std::uint32_t encode(float x, group_params params) const { return code(x, params); }
  float decode(std::uint32_t code, group_params params) const { return params.scale * levels_[code] + params.zero; }

private:
  unsigned max_code() const { return (1u << format_->bits) - 1u; }

  // The magnitude and signed value of the first value of largest magnitude.
  static std::pair<float, float> largest_value(std::span<const float> group) {
    float largest_magnitude = 0.0f, largest = 0.0f;
    for (const float v : group)
      if (largest_magnitude < std::fabs(v)) {
        largest_magnitude = std::fabs(v);
        largest = v;
      }
    return {largest_magnitude, largest};
  }
  // iq4_nl: d0 puts the largest magnitude on level -127 (0 below ggml's GROUP_MAX_EPS).
  static float first_scale(std::span<const float> group) {
    const auto [largest_magnitude, largest] = largest_value(group);
    return largest_magnitude < 1e-15f ? 0.0f : largest / -127.0f;
  }
  // iq4_nl's stored d: the weighted least-squares scale of the codes chosen against d0,
  // weights x^2, each product and sum its own statement as in ggml (no fused multiply-add).
  float least_squares_scale(std::span<const float> group) const {
    const float d0 = first_scale(group);
    if (d0 == 0.0f) return 0.0f;
    float sum_qx = 0.0f, sum_qq = 0.0f;
    for (const float x : group) {
      const float q = levels_[code(x, {d0, 0.0f})];
      const float weight = x * x;
      const float weighted_q = weight * q;
      const float weighted_qx = weighted_q * x;
      const float weighted_qq = weighted_q * q;
      sum_qx += weighted_qx;
      sum_qq += weighted_qq;
    }
    return sum_qx / sum_qq;
  }
  // iq4_nl: ggml's best_index_int8, the nearest level with ties to the upper one.
  std::uint32_t nearest_level(float scaled) const {
    const auto& levels = *format_->nonlinear_levels;
    if (!(scaled > levels.front())) return 0; // NaN from a caller's own parameters too
    if (scaled >= levels.back()) return 15;
    std::uint32_t upper = 1;
    while (scaled >= levels[upper]) ++upper;
    const float below = scaled - static_cast<float>(levels[upper - 1]);
    const float above = static_cast<float>(levels[upper]) - scaled;
    return below < above ? upper - 1 : upper;
  }

  // ggml's rounding: x times the reciprocal, then round half away (q8_0) or truncate after
  // adding the offset and a half (the others), clamped to the codes there are. Values are
  // finite here (stored_params checks); NaN from a caller's own parameters gives code 0.
  std::uint32_t code(float x, group_params p) const {
    const float inverse = p.scale != 0.0f ? 1.0f / p.scale : 0.0f;
    const float scaled = (x - p.zero) * inverse;
    if (format_->nonlinear_levels) return nearest_level(scaled);
    // 8.5f and 16.5f are one constant in ggml: one rounding of the sum, not two
    const float half_past_offset = static_cast<float>(format_->level_offset) + 0.5f;
    const float shifted = format_->bits == 8 ? std::round(scaled) + 127.0f : std::trunc(scaled + half_past_offset);
    if (!(shifted > 0.0f)) return 0;
    return static_cast<std::uint32_t>(std::min(shifted, static_cast<float>(format_->bits == 8 ? 254 : max_code())));
  }

  const ggml_format* format_;
  std::array<float, 256> levels_{};
};
static_assert(Quantizer<ggml_block_quantizer>);
static_assert(encodes_groups<ggml_block_quantizer>);

// One block as ggml stores it, from a group's codes (kvlab's, as encode_group gives them)
// and stored parameters: fp16 d (and m), then for q5 the 32 fifth bits (qh, little-endian),
// then the codes, values j and j + 16 sharing a byte (low nibble j) for 4 and 5 bits, or
// one signed byte each for q8_0. `codes` holds 32 codes.
inline std::vector<std::uint8_t> ggml_block(const ggml_format& format, std::span<const std::uint32_t> codes,
                                            group_params stored) {
  if (codes.size() != 32)
    throw error(std::string(format.name) + ": a ggml block has 32 values, got " + std::to_string(codes.size()));
  std::vector<std::uint8_t> block;
  const auto put_half = [&](float value) {
    const std::uint16_t bits = float_to_half_bits(value);
    block.push_back(static_cast<std::uint8_t>(bits & 0xff));
    block.push_back(static_cast<std::uint8_t>(bits >> 8));
  };
  put_half(stored.scale);
  if (format.keeps_minimum) put_half(stored.zero);
  if (format.bits == 8) {
    for (const std::uint32_t c : codes) block.push_back(static_cast<std::uint8_t>(static_cast<int>(c) - 127));
    return block;
  }
  if (format.bits == 5) {
    std::uint32_t high_bits = 0;
    for (std::size_t j = 0; j < 32; ++j) high_bits |= ((codes[j] >> 4) & 1u) << j;
    for (int byte = 0; byte < 4; ++byte) block.push_back(static_cast<std::uint8_t>(high_bits >> (8 * byte)));
  }
  for (std::size_t j = 0; j < 16; ++j)
    block.push_back(static_cast<std::uint8_t>((codes[j] & 0xfu) | ((codes[j + 16] & 0xfu) << 4)));
  return block;
}

inline std::vector<strategy_info> info() {
  std::vector<strategy_info> infos;
  for (const ggml_format* format : formats)
    infos.push_back({.name = format->name,
                     .usage = format->name,
                     .summary = std::string("llama.cpp's ") + format->name + " cache type (" +
                                std::to_string(format->bits) + "-bit " +
                                (format->nonlinear_levels ? "non-uniform " : "") + "codes, fp16 scale" +
                                (format->keeps_minimum ? " and minimum" : "") +
                                " per block; ggml's rounding; group(32) is its block)",
                     .paper = "ggml-quants.c quantize_row_" + std::string(format->name) + "_ref (llama.cpp)"});
  return infos;
}

// The registry calls this only for the names info() lists, which take no arguments.
inline ggml_block_quantizer make(const strategy_args& args) {
  for (const ggml_format* format : formats)
    if (args.text == format->name) return ggml_block_quantizer(*format);
  throw error("unknown ggml block format '" + args.text + "'");
}

} // namespace kvlab::strategies::ggml_blocks

// The typed names recipes use (kvlab.compose): one type per format.
export namespace kvlab::parts {
template <const strategies::ggml_blocks::ggml_format& Format>
struct ggml_block_format : strategies::ggml_blocks::ggml_block_quantizer {
  ggml_block_format() : ggml_block_quantizer(Format) {}
};
using q8_0 = ggml_block_format<strategies::ggml_blocks::q8_0>;
using q4_0 = ggml_block_format<strategies::ggml_blocks::q4_0>;
using q4_1 = ggml_block_format<strategies::ggml_blocks::q4_1>;
using q5_0 = ggml_block_format<strategies::ggml_blocks::q5_0>;
using q5_1 = ggml_block_format<strategies::ggml_blocks::q5_1>;
using iq4_nl = ggml_block_format<strategies::ggml_blocks::iq4_nl>;
} // namespace kvlab::parts
