// mxfp4, nvfp4: 4-bit floats (E2M1: 0, ±0.5, ±1, ±1.5, ±2, ±3, ±4, ±6) sharing a one-byte
// scale per block, as ggml defines them (llama.cpp's MXFP4 and NVFP4 types), bit for bit:
//   mxfp4  blocks of 32 (group(32)), an E8M0 scale (a power of two):
//          e = floor(log2(amax)) - 2 + 127 (0 for an all-zero block), scale 2^(e - 127)
//   nvfp4  blocks of 16 (group(16)), a UE4M3 scale (unsigned, 4 exponent bits, bias 7, 3
//          mantissa bits) of amax / 6, rounded half up on the fourth mantissa bit;
//          nvfp4(S) adds NVIDIA's per-tensor fp32 scale S: blocks of x / S as nvfp4, decoded
//          times S (a constant of the recipe: a streaming cache cannot fit it to tokens that
//          have not arrived; NVIDIA's recipe calibrates S = amax / (6 * 448) offline)
// Each value takes the nearest scaled E2M1 value, the first of ggml's table on a tie (the
// one nearer zero). Levels are ggml's kvalues_mxfp4, E2M1 doubled (0, 1, 2, 3, 4, 6, 8, 12
// and their negatives), with the stored scale halved to match. Codes are chosen against
// the stored scale, as for kvlab's own quantizers. Other group sizes apply the same rule.
// Where kvlab differs from ggml: an mxfp4 block with amax below 2^-125 (ggml's conversion
// of a negative exponent to a byte is undefined in C) takes e = 0; an nvfp4 block with amax
// beyond 2688 S (12 times the largest scale, where ggml saturates the scale and clips the
// values) is an error that names S. ggml's NVFP4 has no per-tensor scale: nvfp4 (S = 1)
// is its format.
// Definition: ggml/src/ggml-quants.c (quantize_row_mxfp4_ref, quantize_row_nvfp4_ref,
// best_index_mxfp4), ggml/src/ggml-impl.h (ggml_e8m0_to_fp32_half, ggml_fp32_to_ue4m3,
// ggml_ue4m3_to_fp32), ggml/src/ggml-common.h (block_mxfp4, block_nvfp4), ggml-org/llama.cpp.
// Paper: OCP Microscaling Formats (MX) Specification v1.0, sec. 5 (E2M1 elements, E8M0
// scales); Rouhani et al., "Microscaling Data Formats for Deep Learning", arXiv 2310.10537.
module;
#include <algorithm>
#include <array>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <vector>
export module kvlab.strategies.microscaling;
import kvlab.core;

export namespace kvlab::strategies::microscaling {

enum class scale_kind { e8m0, ue4m3 };

// ggml's kvalues_mxfp4: E2M1 values doubled, in ggml's code order.
inline constexpr std::array<float, 16> e2m1_doubled{0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

// Half the value of E8M0 byte e: 2^(e - 128), subnormal floats for e < 2.
inline float e8m0_half(std::uint8_t e) {
  const std::uint32_t bits = e < 2 ? 0x00200000u << e : static_cast<std::uint32_t>(e - 1) << 23;
  float value;
  std::memcpy(&value, &bits, 4);
  return value;
}
// Half the value of UE4M3 byte b (0 and 0x7f decode as 0).
inline float ue4m3_half(std::uint8_t b) {
  if (b == 0 || b == 0x7f) return 0.0f;
  const int exponent = (b >> 3) & 0xf, mantissa = b & 0x7;
  const float raw = exponent == 0 ? std::ldexp(static_cast<float>(mantissa), -9)
                                  : std::ldexp(1.0f + static_cast<float>(mantissa) / 8.0f, exponent - 7);
  return raw * 0.5f;
}
// ggml_fp32_to_ue4m3: round half up on the fourth mantissa bit, saturate at 0x7e.
inline std::uint8_t ue4m3_of(float x) {
  if (!(x > 0.0f)) return 0;
  if (x > 448.0f) x = 448.0f;
  std::uint32_t bits;
  std::memcpy(&bits, &x, 4);
  int exponent = static_cast<int>((bits >> 23) & 0xff) - 127 + 7;
  if (exponent <= 0) { // subnormal: mantissa * 2^-9
    const int mantissa = static_cast<int>(x * 512.0f + 0.5f);
    return static_cast<std::uint8_t>(mantissa > 7 ? 7 : mantissa < 1 ? 0 : mantissa);
  }
  if (exponent >= 15) return 0x7e;
  int mantissa = static_cast<int>((bits >> 20) & 0x7) + static_cast<int>((bits >> 19) & 1);
  if (mantissa > 7) {
    mantissa = 0;
    if (++exponent >= 15) return 0x7e;
  }
  return static_cast<std::uint8_t>((exponent << 3) | mantissa);
}

struct microscaling_format {
  const char* name;
  scale_kind scale;
  std::size_t block; // ggml's block of one scale
};
inline constexpr microscaling_format mxfp4{"mxfp4", scale_kind::e8m0, 32};
inline constexpr microscaling_format nvfp4{"nvfp4", scale_kind::ue4m3, 16};
inline constexpr const microscaling_format* formats[] = {&mxfp4, &nvfp4};

class microscaling_quantizer {
public:
  using component_concept = quantizer_tag;

  explicit microscaling_quantizer(const microscaling_format& format, float tensor_scale = 1.0f)
      : format_(&format), tensor_scale_(tensor_scale) {
    if (!(tensor_scale > 0.0f) || !std::isfinite(largest_nvfp4 * tensor_scale))
      throw error(std::string(format.name) + ": per-tensor scale " + format_number(tensor_scale) +
                  " must be positive and at most " + format_number(FLT_MAX / largest_nvfp4));
    if (format.scale == scale_kind::e8m0 && tensor_scale != 1.0f)
      throw error("mxfp4 has no per-tensor scale (its E8M0 block scales span every float exponent)");
    for (unsigned b = 0; b < 256; ++b)
      scales_[b] = format.scale == scale_kind::e8m0 ? e8m0_half(static_cast<std::uint8_t>(b))
                                                    : tensor_scale * ue4m3_half(static_cast<std::uint8_t>(b));
  }

  std::string name() const {
    return format_->name + (tensor_scale_ == 1.0f ? std::string() : "(" + format_number(tensor_scale_) + ")");
  }
  unsigned bits() const { return 4; }
  unsigned params_per_group() const { return 1; }
  element_format format() const { return element_format::codebook; }
  std::span<const float> levels() const { return e2m1_doubled; }
  std::span<const float> scale_levels() const { return scales_; }
  std::uint8_t scale_code(float scale) const {
    if (format_->scale == scale_kind::e8m0) return static_cast<std::uint8_t>(std::ilogb(scale) + 128); // 2^(e - 128)
    // UE4M3 bytes 0..0x7e ascend; fit() returns one of their scales
    const auto found = std::lower_bound(scales_.begin(), scales_.begin() + 0x7f, scale);
    return static_cast<std::uint8_t>(found - scales_.begin());
  }

  // The block's scale as ggml stores it (halved, as the doubled levels need).
  group_params fit(std::span<const float> group) const {
    float amax = 0.0f;
    for (const float v : group)
      if (amax < std::fabs(v)) amax = std::fabs(v);
    if (format_->scale == scale_kind::ue4m3) {
      if (amax > largest_nvfp4 * tensor_scale_)
        throw error(name() + ": a block's largest magnitude " + format_number(amax) + " is beyond its range (" +
                    format_number(largest_nvfp4 * tensor_scale_) + ", 2688 times the per-tensor scale " +
                    format_number(tensor_scale_) + "); give nvfp4(S) a larger S");
      return {.scale = scales_[ue4m3_of(amax / tensor_scale_ / 6.0f)], .zero = 0.0f};
    }
    const float exponent = amax > 0.0f ? std::floor(std::log2(amax)) - 2.0f + 127.0f : 0.0f;
    return {.scale = scales_[static_cast<std::uint8_t>(exponent < 0.0f ? 0.0f : exponent)], .zero = 0.0f};
  }
  // ggml's best_index_mxfp4: the first level of least |level * scale - x|.
  std::uint32_t encode(float x, group_params p) const {
    std::uint32_t best = 0;
    float best_error = std::fabs(e2m1_doubled[0] * p.scale - x);
    for (std::uint32_t i = 1; i < 16; ++i) {
      const float error = std::fabs(e2m1_doubled[i] * p.scale - x);
      if (error < best_error) {
        best = i;
        best_error = error;
      }
    }
    return best;
  }
  float decode(std::uint32_t code, group_params p) const { return p.scale * e2m1_doubled[code]; }

private:
  static constexpr float largest_nvfp4 = 2688.0f; // 12 * ue4m3_half(0x7e) = 12 * 448 / 2

  const microscaling_format* format_;
  float tensor_scale_;
  std::array<float, 256> scales_{};
};
static_assert(Quantizer<microscaling_quantizer>);
static_assert(stores_scale_bytes<microscaling_quantizer>);

// ggml's block of `format` from kvlab's codes and scale bytes, one per `format.block`
// values: mxfp4 (32 values) its E8M0 byte, then values j and j + 16 sharing a byte (low
// nibble j); nvfp4 (64 values, four scales) its four UE4M3 bytes, then per 16 values
// values j and j + 8 sharing a byte.
inline std::vector<std::uint8_t> ggml_block(const microscaling_format& format, std::span<const std::uint32_t> codes,
                                            std::span<const std::uint8_t> scale_bytes) {
  const std::size_t values = format.scale == scale_kind::e8m0 ? 32 : 64, blocks = values / format.block;
  if (codes.size() != values || scale_bytes.size() != blocks)
    throw error(std::string(format.name) + ": a ggml block has " + std::to_string(values) + " values and " +
                std::to_string(blocks) + " scale bytes, got " + std::to_string(codes.size()) + " and " +
                std::to_string(scale_bytes.size()));
  std::vector<std::uint8_t> block(scale_bytes.begin(), scale_bytes.end());
  const std::size_t half = format.block / 2;
  for (std::size_t b = 0; b < blocks; ++b)
    for (std::size_t j = 0; j < half; ++j) {
      const std::size_t first = b * format.block + j;
      block.push_back(static_cast<std::uint8_t>(codes[first] | codes[first + half] << 4));
    }
  return block;
}

inline std::vector<strategy_info> info() {
  return {{.name = "mxfp4",
           .usage = "mxfp4",
           .summary = "OCP MXFP4 as ggml defines it: E2M1 codes, an E8M0 scale byte per block; group(32) is its block",
           .paper = "OCP MX spec v1.0 sec. 5; arXiv 2310.10537; ggml-quants.c quantize_row_mxfp4_ref (llama.cpp)"},
          {.name = "nvfp4",
           .usage = "nvfp4 or nvfp4(S)",
           .summary = "NVFP4 as ggml defines it: E2M1 codes, a UE4M3 scale byte per block, S a per-tensor fp32 "
                      "scale (default 1, ggml's format); group(16) is its block",
           .paper = "ggml-quants.c quantize_row_nvfp4_ref (llama.cpp); NVIDIA Blackwell NVFP4",
           .examples = {"nvfp4", "nvfp4(0.25)"}}};
}

// The registry calls this only for the names info() lists: mxfp4, nvfp4 and nvfp4(S).
inline microscaling_quantizer make(const strategy_args& args) {
  if (args.text.starts_with("mxfp4")) {
    args.expect_arguments(0, "mxfp4");
    return microscaling_quantizer(mxfp4);
  }
  if (args.args.size() > 1) args.expect_arguments(1, "nvfp4 or nvfp4(S)");
  return microscaling_quantizer(nvfp4, args.args.empty() ? 1.0f : args.number<float>(0, "per-tensor scale S"));
}

} // namespace kvlab::strategies::microscaling

// The typed names recipes use (kvlab.compose).
export namespace kvlab::parts {
struct mxfp4 : strategies::microscaling::microscaling_quantizer {
  mxfp4() : microscaling_quantizer(strategies::microscaling::mxfp4) {}
};
struct nvfp4 : strategies::microscaling::microscaling_quantizer {
  explicit nvfp4(float tensor_scale = 1.0f) : microscaling_quantizer(strategies::microscaling::nvfp4, tensor_scale) {}
};
} // namespace kvlab::parts
