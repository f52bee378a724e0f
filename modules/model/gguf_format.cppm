// kvlab.gguf:format: the constants of the GGUF format and ggml's tensor block formats.
// References: ggml's docs/gguf.md (the file layout and the metadata value types) and ggml's
// ggml-common.h / ggml-quants.c (each type's block of elements, its bytes, and the reference
// quantization and dequantization of Q8_0, Q4_0, Q4_K and Q6_K), as llama.cpp writes them.
//   ggml_type, ggml_type_name, ggml_block_size, ggml_block_bytes -> what a tensor type is
//   dequantize_blocks(type, bytes, out) / quantize_blocks(type, values, out) -> whole blocks
module;
#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
export module kvlab.gguf:format;
import kvlab.core;
import kvlab.npy;

export namespace kvlab {

// The types of metadata values (gguf_type in ggml's gguf.h); every one is stored little-endian.
enum class gguf_value_type : std::uint32_t {
  uint8 = 0,
  int8 = 1,
  uint16 = 2,
  int16 = 3,
  uint32 = 4,
  int32 = 5,
  float32 = 6,
  boolean = 7,
  string = 8,
  array = 9,
  uint64 = 10,
  int64 = 11,
  float64 = 12,
};

inline constexpr std::uint32_t gguf_value_type_count = 13;

inline std::string_view gguf_value_type_name(gguf_value_type type) noexcept {
  constexpr std::array<std::string_view, gguf_value_type_count> names = {
      "uint8", "int8",   "uint16", "int16",  "uint32", "int32",  "float32",
      "bool",  "string", "array",  "uint64", "int64",  "float64"};
  const auto id = static_cast<std::uint32_t>(type);
  return id < names.size() ? names[id] : "unknown";
}

// Bytes of a fixed-size value; 0 for strings and arrays, whose size depends on their contents.
inline std::size_t gguf_value_bytes(gguf_value_type type) noexcept {
  switch (type) {
  case gguf_value_type::uint8:
  case gguf_value_type::int8:
  case gguf_value_type::boolean: return 1;
  case gguf_value_type::uint16:
  case gguf_value_type::int16: return 2;
  case gguf_value_type::uint32:
  case gguf_value_type::int32:
  case gguf_value_type::float32: return 4;
  case gguf_value_type::uint64:
  case gguf_value_type::int64:
  case gguf_value_type::float64: return 8;
  case gguf_value_type::string:
  case gguf_value_type::array: return 0;
  }
  return 0;
}

inline bool gguf_is_integer(gguf_value_type type) noexcept {
  switch (type) {
  case gguf_value_type::uint8:
  case gguf_value_type::int8:
  case gguf_value_type::uint16:
  case gguf_value_type::int16:
  case gguf_value_type::uint32:
  case gguf_value_type::int32:
  case gguf_value_type::uint64:
  case gguf_value_type::int64: return true;
  default: return false;
  }
}

// ggml's tensor types with their ids as stored in GGUF files (enum ggml_type). Ids 4, 5
// (Q4_2, Q4_3) and 31-33, 36-38 (the repacked Q4_0_4_4 ... IQ4_NL_8_8) were removed from ggml.
enum class ggml_type : std::uint32_t {
  f32 = 0,
  f16 = 1,
  q4_0 = 2,
  q4_1 = 3,
  q5_0 = 6,
  q5_1 = 7,
  q8_0 = 8,
  q8_1 = 9,
  q2_k = 10,
  q3_k = 11,
  q4_k = 12,
  q5_k = 13,
  q6_k = 14,
  q8_k = 15,
  iq2_xxs = 16,
  iq2_xs = 17,
  iq3_xxs = 18,
  iq1_s = 19,
  iq4_nl = 20,
  iq3_s = 21,
  iq2_s = 22,
  iq4_xs = 23,
  i8 = 24,
  i16 = 25,
  i32 = 26,
  i64 = 27,
  f64 = 28,
  iq1_m = 29,
  bf16 = 30,
  tq1_0 = 34,
  tq2_0 = 35,
  mxfp4 = 39,
};

// A type's block: `block_size` consecutive elements of a row stored in `block_bytes` bytes.
struct ggml_type_traits {
  ggml_type type;
  std::string_view name;
  std::uint64_t block_size;
  std::uint64_t block_bytes;
};

namespace detail {

inline constexpr std::uint64_t qk_k = 256; // elements of a k-quant super-block

// Q8_1 is 36 bytes as ggml's block_q8_1 (two fp16) defines it; gguf-py's table says 40, from
// an older layout with two floats. ggml never writes Q8_1 tensors to files, only uses it for
// intermediate results, so the difference does not arise in practice.
inline constexpr std::array<ggml_type_traits, 32> ggml_types = {{
    {ggml_type::f32, "F32", 1, 4},
    {ggml_type::f16, "F16", 1, 2},
    {ggml_type::q4_0, "Q4_0", 32, 2 + 16},
    {ggml_type::q4_1, "Q4_1", 32, 2 + 2 + 16},
    {ggml_type::q5_0, "Q5_0", 32, 2 + 4 + 16},
    {ggml_type::q5_1, "Q5_1", 32, 2 + 2 + 4 + 16},
    {ggml_type::q8_0, "Q8_0", 32, 2 + 32},
    {ggml_type::q8_1, "Q8_1", 32, 2 + 2 + 32},
    {ggml_type::q2_k, "Q2_K", qk_k, 2 + 2 + qk_k / 16 + qk_k / 4},
    {ggml_type::q3_k, "Q3_K", qk_k, 2 + qk_k / 4 + qk_k / 8 + 12},
    {ggml_type::q4_k, "Q4_K", qk_k, 2 + 2 + 12 + qk_k / 2},
    {ggml_type::q5_k, "Q5_K", qk_k, 2 + 2 + 12 + qk_k / 8 + qk_k / 2},
    {ggml_type::q6_k, "Q6_K", qk_k, qk_k / 2 + qk_k / 4 + qk_k / 16 + 2},
    {ggml_type::q8_k, "Q8_K", qk_k, 4 + qk_k + qk_k / 8},
    {ggml_type::iq2_xxs, "IQ2_XXS", qk_k, 2 + qk_k / 4},
    {ggml_type::iq2_xs, "IQ2_XS", qk_k, 2 + qk_k / 4 + qk_k / 32},
    {ggml_type::iq3_xxs, "IQ3_XXS", qk_k, 2 + qk_k / 4 + qk_k / 8},
    {ggml_type::iq1_s, "IQ1_S", qk_k, 2 + qk_k / 8 + qk_k / 16},
    {ggml_type::iq4_nl, "IQ4_NL", 32, 2 + 16},
    {ggml_type::iq3_s, "IQ3_S", qk_k, 2 + qk_k / 4 + qk_k / 8 + qk_k / 32 + 4},
    {ggml_type::iq2_s, "IQ2_S", qk_k, 2 + qk_k / 4 + qk_k / 16},
    {ggml_type::iq4_xs, "IQ4_XS", qk_k, 2 + 2 + qk_k / 2 + qk_k / 64},
    {ggml_type::i8, "I8", 1, 1},
    {ggml_type::i16, "I16", 1, 2},
    {ggml_type::i32, "I32", 1, 4},
    {ggml_type::i64, "I64", 1, 8},
    {ggml_type::f64, "F64", 1, 8},
    {ggml_type::iq1_m, "IQ1_M", qk_k, qk_k / 8 + qk_k / 16 + qk_k / 32},
    {ggml_type::bf16, "BF16", 1, 2},
    {ggml_type::tq1_0, "TQ1_0", qk_k, 2 + 4 * 13},
    {ggml_type::tq2_0, "TQ2_0", qk_k, 2 + 64},
    {ggml_type::mxfp4, "MXFP4", 32, 1 + 16},
}};

inline constexpr std::array<ggml_type, 7> dequantizable_types = {ggml_type::f32,  ggml_type::f16,  ggml_type::bf16,
                                                                 ggml_type::q8_0, ggml_type::q4_0, ggml_type::q4_k,
                                                                 ggml_type::q6_k};
inline constexpr std::array<ggml_type, 5> quantizable_types = {ggml_type::f32, ggml_type::f16, ggml_type::bf16,
                                                               ggml_type::q8_0, ggml_type::q4_0};

inline const unsigned char* unsigned_bytes(const std::byte* bytes) noexcept {
  return reinterpret_cast<const unsigned char*>(bytes);
}

inline float load_half(const unsigned char* bytes) noexcept {
  return half_bits_to_float(detail::load_bits<std::uint16_t, false>(bytes));
}

// Stores `bits` little-endian at `out`, byte by byte so it is correct on any host.
template <class Bits>
inline void store_bits(Bits bits, std::byte* out) noexcept {
  for (std::size_t i = 0; i < sizeof(Bits); ++i) out[i] = static_cast<std::byte>((bits >> (8 * i)) & 0xff);
}

// Q4_0: fp16 d, then 16 bytes of nibbles; the low nibbles are elements 0-15, the high 16-31;
// x = (q - 8) * d.
inline void dequantize_q4_0(const unsigned char* block, float* out) noexcept {
  const float d = load_half(block);
  for (std::size_t j = 0; j < 16; ++j) {
    out[j] = static_cast<float>((block[2 + j] & 0x0f) - 8) * d;
    out[j + 16] = static_cast<float>((block[2 + j] >> 4) - 8) * d;
  }
}

// Q8_0: fp16 d, then 32 signed bytes; x = q * d.
inline void dequantize_q8_0(const unsigned char* block, float* out) noexcept {
  const float d = load_half(block);
  for (std::size_t j = 0; j < 32; ++j) out[j] = static_cast<float>(static_cast<std::int8_t>(block[2 + j])) * d;
}

// Q4_K's 12 bytes of 6-bit scales and mins of its eight sub-blocks of 32: bytes 0-3 hold the
// scales of sub-blocks 0-3 in their low 6 bits, bytes 4-7 the mins of 0-3; bytes 8-11 hold the
// low 4 bits of the scales (low nibble) and mins (high nibble) of sub-blocks 4-7, whose top 2
// bits are the top 2 bits of bytes 0-3 (scales) and 4-7 (mins).
inline void q4_k_scale_min(const unsigned char* packed, std::size_t sub_block, int& scale, int& min) noexcept {
  if (sub_block < 4) {
    scale = packed[sub_block] & 63;
    min = packed[sub_block + 4] & 63;
  } else {
    scale = (packed[sub_block + 4] & 0x0f) | ((packed[sub_block - 4] >> 6) << 4);
    min = (packed[sub_block + 4] >> 4) | ((packed[sub_block] >> 6) << 4);
  }
}

// Q4_K: fp16 d, fp16 dmin, 12 bytes of scales, 128 bytes of nibbles. Each 32 bytes of nibbles
// hold two sub-blocks: the low nibbles the first 32 elements, the high nibbles the next 32;
// x = d * scale * q - dmin * min.
inline void dequantize_q4_k(const unsigned char* block, float* out) noexcept {
  const float d = load_half(block), dmin = load_half(block + 2);
  const unsigned char* scales = block + 4;
  const unsigned char* qs = block + 16;
  for (std::size_t pair = 0; pair < 4; ++pair) {
    int scale_low = 0, min_low = 0, scale_high = 0, min_high = 0;
    q4_k_scale_min(scales, 2 * pair, scale_low, min_low);
    q4_k_scale_min(scales, 2 * pair + 1, scale_high, min_high);
    const float d_low = d * static_cast<float>(scale_low), m_low = dmin * static_cast<float>(min_low);
    const float d_high = d * static_cast<float>(scale_high), m_high = dmin * static_cast<float>(min_high);
    for (std::size_t l = 0; l < 32; ++l) {
      out[64 * pair + l] = d_low * static_cast<float>(qs[32 * pair + l] & 0x0f) - m_low;
      out[64 * pair + 32 + l] = d_high * static_cast<float>(qs[32 * pair + l] >> 4) - m_high;
    }
  }
}

// Q6_K: 128 bytes ql (low 4 bits), 64 bytes qh (high 2 bits), 16 signed 8-bit scales (one per
// 16 elements), fp16 d; x = d * scale * (q - 32). Each half of 128 elements uses 64 bytes of
// ql and 32 of qh: element l (l < 32) of its four quarters takes the low nibble of ql[l], the
// low nibble of ql[l + 32], the high nibble of ql[l], the high nibble of ql[l + 32], with bit
// pairs 0-1, 2-3, 4-5, 6-7 of qh[l] on top.
inline void dequantize_q6_k(const unsigned char* block, float* out) noexcept {
  const unsigned char* ql = block;
  const unsigned char* qh = block + 128;
  const auto* scales = reinterpret_cast<const signed char*>(block + 192);
  const float d = load_half(block + 208);
  for (std::size_t half = 0; half < 2; ++half) {
    for (std::size_t l = 0; l < 32; ++l) {
      const std::size_t group = l / 16;
      const int q1 = ((ql[l] & 0x0f) | ((qh[l] & 3) << 4)) - 32;
      const int q2 = ((ql[l + 32] & 0x0f) | (((qh[l] >> 2) & 3) << 4)) - 32;
      const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
      const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
      out[l] = d * static_cast<float>(scales[group]) * static_cast<float>(q1);
      out[l + 32] = d * static_cast<float>(scales[group + 2]) * static_cast<float>(q2);
      out[l + 64] = d * static_cast<float>(scales[group + 4]) * static_cast<float>(q3);
      out[l + 96] = d * static_cast<float>(scales[group + 6]) * static_cast<float>(q4);
    }
    out += 128;
    ql += 64;
    qh += 32;
    scales += 8;
  }
}

// ggml's reference Q4_0 (quantize_row_q4_0_ref): d is the value of largest magnitude, signed,
// over -8, so that value maps to code 0 exactly; q = min(15, trunc(x / d + 8.5)).
inline void quantize_q4_0(const float* values, std::byte* block) noexcept {
  float largest = 0.0f, largest_magnitude = 0.0f;
  for (std::size_t j = 0; j < 32; ++j)
    if (std::fabs(values[j]) > largest_magnitude) {
      largest_magnitude = std::fabs(values[j]);
      largest = values[j];
    }
  const float d = largest / -8.0f;
  const float inverse = d != 0.0f ? 1.0f / d : 0.0f;
  store_bits(float_to_half_bits(d), block);
  for (std::size_t j = 0; j < 16; ++j) {
    const int low = std::min(15, static_cast<int>(values[j] * inverse + 8.5f));
    const int high = std::min(15, static_cast<int>(values[j + 16] * inverse + 8.5f));
    block[2 + j] = static_cast<std::byte>(low | (high << 4));
  }
}

// ggml's reference Q8_0 (quantize_row_q8_0_ref): d = max |x| / 127, q = round(x / d), ties
// away from zero.
inline void quantize_q8_0(const float* values, std::byte* block) noexcept {
  float largest_magnitude = 0.0f;
  for (std::size_t j = 0; j < 32; ++j) largest_magnitude = std::max(largest_magnitude, std::fabs(values[j]));
  const float d = largest_magnitude / 127.0f;
  const float inverse = d != 0.0f ? 1.0f / d : 0.0f;
  store_bits(float_to_half_bits(d), block);
  for (std::size_t j = 0; j < 32; ++j)
    block[2 + j] = static_cast<std::byte>(static_cast<std::int8_t>(std::round(values[j] * inverse)));
}

} // namespace detail

// The traits of the type with this id, or nothing for an id ggml does not define.
inline std::optional<ggml_type_traits> find_ggml_type(std::uint32_t id) noexcept {
  for (const auto& traits : detail::ggml_types)
    if (static_cast<std::uint32_t>(traits.type) == id) return traits;
  return std::nullopt;
}

inline const ggml_type_traits& ggml_traits(ggml_type type) {
  for (const auto& traits : detail::ggml_types)
    if (traits.type == type) return traits;
  throw error("ggml type id " + std::to_string(static_cast<std::uint32_t>(type)) + " is not a known ggml type");
}

// ggml's name of the type ("Q4_K"), or "unknown" for an id ggml does not define.
inline std::string_view ggml_type_name(ggml_type type) noexcept {
  const auto traits = find_ggml_type(static_cast<std::uint32_t>(type));
  return traits ? traits->name : "unknown";
}

inline std::uint64_t ggml_block_size(ggml_type type) { return ggml_traits(type).block_size; }
inline std::uint64_t ggml_block_bytes(ggml_type type) { return ggml_traits(type).block_bytes; }

// The ids ggml defines, as text for messages: "0-3, 6-30, 34, 35, 39".
inline std::string ggml_known_type_ids() {
  std::string text;
  for (std::size_t i = 0; i < detail::ggml_types.size();) {
    std::size_t last = i;
    while (last + 1 < detail::ggml_types.size() && static_cast<std::uint32_t>(detail::ggml_types[last + 1].type) ==
                                                       static_cast<std::uint32_t>(detail::ggml_types[last].type) + 1)
      ++last;
    text += (text.empty() ? "" : ", ") + std::to_string(static_cast<std::uint32_t>(detail::ggml_types[i].type));
    if (last == i + 1) text += ", " + std::to_string(static_cast<std::uint32_t>(detail::ggml_types[last].type));
    if (last > i + 1) text += "-" + std::to_string(static_cast<std::uint32_t>(detail::ggml_types[last].type));
    i = last + 1;
  }
  return text;
}

namespace detail {

inline std::string type_list(std::span<const ggml_type> types) {
  std::string text;
  for (const ggml_type type : types) text += (text.empty() ? "" : ", ") + std::string(ggml_type_name(type));
  return text;
}

} // namespace detail

inline bool can_dequantize(ggml_type type) noexcept {
  return std::ranges::find(detail::dequantizable_types, type) != detail::dequantizable_types.end();
}
inline bool can_quantize(ggml_type type) noexcept {
  return std::ranges::find(detail::quantizable_types, type) != detail::quantizable_types.end();
}
inline std::string dequantizable_type_names() { return detail::type_list(detail::dequantizable_types); }
inline std::string quantizable_type_names() { return detail::type_list(detail::quantizable_types); }

// Decodes out.size() elements (a whole number of blocks) from `blocks`, which holds exactly
// their bytes. Throws kvlab::error for a type can_dequantize rejects or mismatched sizes.
inline void dequantize_blocks(ggml_type type, std::span<const std::byte> blocks, std::span<float> out) {
  const auto& traits = ggml_traits(type);
  if (!can_dequantize(type))
    throw error("cannot dequantize ggml type " + std::string(traits.name) +
                "; supported: " + dequantizable_type_names());
  if (out.size() % traits.block_size != 0 || blocks.size() != out.size() / traits.block_size * traits.block_bytes)
    throw error("dequantize " + std::string(traits.name) + ": " + std::to_string(out.size()) + " elements need " +
                std::to_string(out.size() / traits.block_size * traits.block_bytes) + " bytes in whole blocks of " +
                std::to_string(traits.block_size) + ", got " + std::to_string(blocks.size()) + " bytes");
  const unsigned char* bytes = detail::unsigned_bytes(blocks.data());
  const std::size_t block_count = out.size() / traits.block_size;
  switch (type) {
  case ggml_type::f32:
    for (std::size_t i = 0; i < out.size(); ++i)
      out[i] = std::bit_cast<float>(detail::load_bits<std::uint32_t, false>(bytes + 4 * i));
    return;
  case ggml_type::f16:
    for (std::size_t i = 0; i < out.size(); ++i) out[i] = detail::load_half(bytes + 2 * i);
    return;
  case ggml_type::bf16:
    for (std::size_t i = 0; i < out.size(); ++i)
      out[i] = bf16_bits_to_float(detail::load_bits<std::uint16_t, false>(bytes + 2 * i));
    return;
  case ggml_type::q8_0:
    for (std::size_t b = 0; b < block_count; ++b) detail::dequantize_q8_0(bytes + 34 * b, out.data() + 32 * b);
    return;
  case ggml_type::q4_0:
    for (std::size_t b = 0; b < block_count; ++b) detail::dequantize_q4_0(bytes + 18 * b, out.data() + 32 * b);
    return;
  case ggml_type::q4_k:
    for (std::size_t b = 0; b < block_count; ++b) detail::dequantize_q4_k(bytes + 144 * b, out.data() + 256 * b);
    return;
  case ggml_type::q6_k:
    for (std::size_t b = 0; b < block_count; ++b) detail::dequantize_q6_k(bytes + 210 * b, out.data() + 256 * b);
    return;
  default: return; // can_dequantize rejected every other type above
  }
}

// Encodes `values` (a whole number of blocks) into `blocks`, which must hold exactly their
// bytes, with ggml's reference rounding. Values of Q8_0 and Q4_0 must be finite (the caller checks).
inline void quantize_blocks(ggml_type type, std::span<const float> values, std::span<std::byte> blocks) {
  const auto& traits = ggml_traits(type);
  if (!can_quantize(type))
    throw error("cannot quantize to ggml type " + std::string(traits.name) +
                "; supported: " + quantizable_type_names());
  if (values.size() % traits.block_size != 0 || blocks.size() != values.size() / traits.block_size * traits.block_bytes)
    throw error("quantize " + std::string(traits.name) + ": " + std::to_string(values.size()) + " elements need " +
                std::to_string(values.size() / traits.block_size * traits.block_bytes) + " bytes in whole blocks of " +
                std::to_string(traits.block_size) + ", got " + std::to_string(blocks.size()) + " bytes");
  const std::size_t block_count = values.size() / traits.block_size;
  switch (type) {
  case ggml_type::f32:
    for (std::size_t i = 0; i < values.size(); ++i)
      detail::store_bits(std::bit_cast<std::uint32_t>(values[i]), &blocks[4 * i]);
    return;
  case ggml_type::f16:
    for (std::size_t i = 0; i < values.size(); ++i) detail::store_bits(float_to_half_bits(values[i]), &blocks[2 * i]);
    return;
  case ggml_type::bf16:
    for (std::size_t i = 0; i < values.size(); ++i) detail::store_bits(float_to_bf16_bits(values[i]), &blocks[2 * i]);
    return;
  case ggml_type::q8_0:
    for (std::size_t b = 0; b < block_count; ++b) detail::quantize_q8_0(values.data() + 32 * b, &blocks[34 * b]);
    return;
  case ggml_type::q4_0:
    for (std::size_t b = 0; b < block_count; ++b) detail::quantize_q4_0(values.data() + 32 * b, &blocks[18 * b]);
    return;
  default: return; // can_quantize rejected every other type above
  }
}

} // namespace kvlab
