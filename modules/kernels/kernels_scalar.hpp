// Scalar kernel bodies. The reference implementation, and the tail / odd-width fallback
// that the SIMD kernels call for the elements their vector loops do not cover.
#pragma once
#include "half.hpp"
#include "kernels.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

namespace kvlab::kernels::scalar {
// Internal linkage: every kernel TU keeps its own copies. The ISA TUs are built with -mfma,
// where a + b * c contracts to one fused multiply-add; with shared (inline) definitions the
// linker keeps one TU's copy for all, so the scalar reference's arithmetic would depend on
// link order (its fold_channel_params could be the AVX-512 TU's, fused).
namespace {

inline unsigned code_at(const std::uint8_t* packed, std::size_t index, unsigned bits) noexcept {
  const std::size_t bit = index * bits;
  const std::size_t byte = bit / 8;
  const unsigned shift = bit % 8;
  // A code of up to 8 bits spans at most two bytes; read the second only when needed so
  // the last code of a buffer never reads past its end.
  unsigned window = packed[byte];
  if (shift + bits > 8) window |= unsigned{packed[byte + 1]} << 8;
  return (window >> shift) & ((1u << bits) - 1u);
}

// Overwrites the code of element `index` (the other bits of its bytes are kept).
inline void put_code(std::uint8_t* packed, std::size_t index, unsigned bits, unsigned code) noexcept {
  const std::size_t bit = index * bits;
  const std::size_t byte = bit / 8;
  const unsigned shift = bit % 8;
  const unsigned mask = ((1u << bits) - 1u) << shift;
  const unsigned value = code << shift;
  packed[byte] = static_cast<std::uint8_t>((packed[byte] & ~mask) | (value & mask));
  if (shift + bits > 8)
    packed[byte + 1] = static_cast<std::uint8_t>((packed[byte + 1] & ~(mask >> 8)) | ((value & mask) >> 8));
}

inline unsigned uniform_code(float x, float scale, float zero, int offset, unsigned max_code) noexcept {
  if (scale == 0.0f) return static_cast<unsigned>(offset);
  const float q = std::nearbyint((x - zero) / scale) + static_cast<float>(offset);
  // written so that NaN gives code 0, not an undefined float-to-integer conversion
  return q > 0.0f ? static_cast<unsigned>(std::min(q, static_cast<float>(max_code))) : 0u;
}

inline unsigned nearest_code(float x, float scale, float zero, const float* thresholds, unsigned count) noexcept {
  const float y = scale == 0.0f ? 0.0f : (x - zero) / scale;
  unsigned code = 0;
  for (unsigned j = 0; j < count; ++j) code += thresholds[j] < y ? 1u : 0u;
  return code;
}

inline void encode_uniform(const float* x, std::size_t n, float scale, float zero, int offset, unsigned max_code,
                           unsigned bits, std::uint8_t* packed, std::size_t first) noexcept {
  for (std::size_t i = 0; i < n; ++i)
    put_code(packed, first + i, bits, uniform_code(x[i], scale, zero, offset, max_code));
}

inline void encode_nearest(const float* x, std::size_t n, float scale, float zero, const float* thresholds,
                           unsigned count, unsigned bits, std::uint8_t* packed, std::size_t first) noexcept {
  for (std::size_t i = 0; i < n; ++i)
    put_code(packed, first + i, bits, nearest_code(x[i], scale, zero, thresholds, count));
}

// Rounds a group's fitted scale and zero as storage holds them and writes the first
// params_per_group of them; false when one is not finite (or overflows fp16).
template <auto to_half, auto from_half>
bool put_group_params(const record_format& f, std::uint8_t* record, std::size_t group, float& scale,
                      float& zero) noexcept {
  float values[2] = {scale, zero};
  std::uint8_t* at = record + f.code_bytes() + group * f.params_per_group * (f.params_f32 ? 4 : 2);
  for (unsigned i = 0; i < 2; ++i) {
    if (f.params_f32) {
      if (!std::isfinite(values[i])) return false;
      if (i < f.params_per_group) std::memcpy(at + 4 * i, &values[i], 4);
      continue;
    }
    const std::uint16_t half = to_half(values[i]);
    if ((half & 0x7c00u) == 0x7c00u) return false;
    values[i] = from_half(half);
    if (i < f.params_per_group) std::memcpy(at + 2 * i, &half, 2);
  }
  scale = values[0];
  zero = values[1];
  return true;
}

// The fused per-token encoder over a kernel set's statistics, uniform encoder and fp16
// conversions (the scalar reference and every SIMD table share it, so they differ only in those).
template <auto absmax, auto min_max, auto encode_uniform, auto to_half = float_to_half_bits,
          auto from_half = half_bits_to_float>
bool encode_uniform_record(const record_format& f, uniform_fit fit, unsigned max_code, const float* x,
                           std::uint8_t* record) noexcept {
  // A batch of groups' parameters first, then their codes: the groups' dependency chains
  // (statistics, division, rounding, encoding) then overlap instead of queueing.
  constexpr std::size_t batch = 64;
  float scales[batch], zeros[batch];
  const std::size_t n = f.group_channels, groups = f.groups();
  for (std::size_t first = 0; first < groups; first += batch) {
    const std::size_t count = std::min(batch, groups - first);
    for (std::size_t k = 0; k < count; ++k) {
      const float* group = x + (first + k) * n;
      zeros[k] = 0.0f;
      if (fit == uniform_fit::absmax) {
        scales[k] = absmax(group, n) / f.offset;
      } else {
        float lo, hi;
        min_max(group, n, &lo, &hi);
        scales[k] = (hi - lo) / static_cast<float>(max_code);
        zeros[k] = lo;
      }
      if (!put_group_params<to_half, from_half>(f, record, first + k, scales[k], zeros[k])) return false;
    }
    for (std::size_t k = 0; k < count; ++k)
      encode_uniform(x + (first + k) * n, n, scales[k], zeros[k], static_cast<int>(f.offset), max_code, f.bits, record,
                     (first + k) * n);
  }
  return true;
}

inline void decode_codes(const std::uint8_t* packed, std::size_t first, std::size_t n, unsigned bits,
                         const float* levels, float scale, float zero, float* out) noexcept {
  for (std::size_t i = 0; i < n; ++i) out[i] = scale * levels[code_at(packed, first + i, bits)] + zero;
}

inline float dot_raw_codes(const float* query, const std::uint8_t* packed, std::size_t first, std::size_t n,
                           unsigned bits) noexcept {
  float sum = 0.0f;
  for (std::size_t i = 0; i < n; ++i) sum += query[i] * static_cast<float>(code_at(packed, first + i, bits));
  return sum;
}

inline void axpy_raw_codes(float alpha, const std::uint8_t* packed, std::size_t first, std::size_t n, unsigned bits,
                           float* acc) noexcept {
  for (std::size_t i = 0; i < n; ++i) acc[i] += alpha * static_cast<float>(code_at(packed, first + i, bits));
}

inline float absmax(const float* x, std::size_t n) noexcept {
  float m = 0.0f;
  for (std::size_t i = 0; i < n; ++i) m = std::max(m, std::fabs(x[i]));
  return m;
}

// Zeros come out as +0 (x + 0.0f): which of -0 and +0 a min or max returns depends on the
// order of comparison, and that differs between the scalar and vector kernels.
inline void min_max(const float* x, std::size_t n, float* lo, float* hi) noexcept {
  float a = n ? x[0] : 0.0f, b = a;
  for (std::size_t i = 1; i < n; ++i) a = std::min(a, x[i]), b = std::max(b, x[i]);
  *lo = a + 0.0f;
  *hi = b + 0.0f;
}

inline float softmax(float* scores, std::size_t n) noexcept {
  const float max = *std::max_element(scores, scores + n);
  double sum = 0.0; // in double: contexts of 100k tokens would lose digits in a float sum
  for (std::size_t i = 0; i < n; ++i) sum += (scores[i] = std::exp(scores[i] - max));
  const float inverse = static_cast<float>(1.0 / sum);
  for (std::size_t i = 0; i < n; ++i) scores[i] *= inverse;
  return max + static_cast<float>(std::log(sum));
}

inline float dot_codes(const float* query, const std::uint8_t* packed, std::size_t first, std::size_t n, unsigned bits,
                       const float* levels) noexcept {
  float sum = 0.0f;
  for (std::size_t i = 0; i < n; ++i) sum += query[i] * levels[code_at(packed, first + i, bits)];
  return sum;
}

inline void axpy_codes(float alpha, const std::uint8_t* packed, std::size_t first, std::size_t n, unsigned bits,
                       const float* levels, float* acc) noexcept {
  for (std::size_t i = 0; i < n; ++i) acc[i] += alpha * levels[code_at(packed, first + i, bits)];
}

inline float load_f32(const std::uint8_t* row, std::size_t i) noexcept {
  float value;
  std::memcpy(&value, row + 4 * i, 4);
  return value;
}
inline float load_f16(const std::uint8_t* row, std::size_t i) noexcept {
  std::uint16_t bits;
  std::memcpy(&bits, row + 2 * i, 2);
  return half_bits_to_float(bits);
}
inline float load_bf16(const std::uint8_t* row, std::size_t i) noexcept {
  std::uint16_t bits;
  std::memcpy(&bits, row + 2 * i, 2);
  return bf16_bits_to_float(bits);
}

template <float (*load)(const std::uint8_t*, std::size_t)>
float dot_row(const float* query, const std::uint8_t* row, std::size_t n) noexcept {
  float sum = 0.0f;
  for (std::size_t i = 0; i < n; ++i) sum += query[i] * load(row, i);
  return sum;
}

template <float (*load)(const std::uint8_t*, std::size_t)>
void axpy_row(float alpha, const std::uint8_t* row, std::size_t n, float* acc) noexcept {
  for (std::size_t i = 0; i < n; ++i) acc[i] += alpha * load(row, i);
}

inline constexpr auto dot_f32 = dot_row<load_f32>;
inline constexpr auto axpy_f32 = axpy_row<load_f32>;
inline constexpr auto dot_f16 = dot_row<load_f16>;
inline constexpr auto axpy_f16 = axpy_row<load_f16>;
inline constexpr auto dot_bf16 = dot_row<load_bf16>;
inline constexpr auto axpy_bf16 = axpy_row<load_bf16>;

// One block of per-channel parameters (KIVI's keys, arXiv 2402.02750 section 3.2: a scale
// and a zero per channel for a block of tokens) folded into the queries: q . (s * level + z)
// = (q * s) . level + q . z.
inline void fold_channel_params(const std::uint8_t* params, std::size_t n, unsigned per_channel, bool params_f32,
                                const float* queries, std::size_t heads, float* scaled, float* zero_terms) noexcept {
  const auto param = [&](std::size_t i) { return params_f32 ? load_f32(params, i) : load_f16(params, i); };
  for (std::size_t h = 0; h < heads; ++h) {
    float zero_term = 0.0f;
    for (std::size_t c = 0; c < n; ++c) {
      scaled[h * n + c] = queries[h * n + c] * param(c * per_channel);
      if (per_channel > 1) zero_term += queries[h * n + c] * param(c * per_channel + 1);
    }
    zero_terms[h] = zero_term;
  }
}

// Parameter `which` (0 scale, 1 zero) of group g of a record.
inline float record_param(const record_format& f, const std::uint8_t* record, std::size_t group,
                          unsigned which) noexcept {
  const std::uint8_t* at = record + f.code_bytes() + (group * f.params_per_group + which) * (f.params_f32 ? 4 : 2);
  if (f.params_f32) {
    float value;
    std::memcpy(&value, at, 4);
    return value;
  }
  std::uint16_t half;
  std::memcpy(&half, at, 2);
  return half_bits_to_float(half);
}

// Calls use(i, value) for every element of a record: raw floats as stored, codes as
// scale * level + constant per group (constant = zero, minus scale * offset for affine
// codes), the form the SIMD kernels fold into one multiply-add.
template <class Use>
void for_each_value(const record_format& f, const std::uint8_t* record, Use&& use) noexcept {
  switch (f.kind) {
  case element_kind::f32:
    for (std::size_t i = 0; i < f.head_dim; ++i) use(i, load_f32(record, i));
    return;
  case element_kind::f16:
    for (std::size_t i = 0; i < f.head_dim; ++i) use(i, load_f16(record, i));
    return;
  case element_kind::bf16:
    for (std::size_t i = 0; i < f.head_dim; ++i) use(i, load_bf16(record, i));
    return;
  case element_kind::affine_codes:
  case element_kind::table_codes: break;
  }
  const bool affine = f.kind == element_kind::affine_codes;
  for (std::size_t g = 0; g < f.groups(); ++g) {
    const float scale = f.params_per_group > 0 ? record_param(f, record, g, 0) : 1.0f;
    const float zero = f.params_per_group > 1 ? record_param(f, record, g, 1) : 0.0f;
    const float constant = affine ? zero - scale * f.offset : zero;
    for (std::size_t i = g * f.group_channels; i < (g + 1) * f.group_channels; ++i) {
      const unsigned code = code_at(record, i, f.bits);
      use(i, scale * (affine ? static_cast<float>(code) : f.levels[code]) + constant);
    }
  }
}

inline void dot_records(const record_format& f, const float* queries, std::size_t heads, const std::uint8_t* records,
                        std::size_t count, float* scores, std::size_t stride) noexcept {
  for (std::size_t h = 0; h < heads; ++h)
    for (std::size_t t = 0; t < count; ++t) {
      const float* query = queries + h * f.head_dim;
      float sum = 0.0f;
      for_each_value(f, records + t * f.record_bytes, [&](std::size_t i, float value) { sum += query[i] * value; });
      scores[h * stride + t] = sum;
    }
}

// scores[h * stride + t] += zero_terms[h] for h < heads, t < count: a per-channel block's
// q . z, after its rows' dots.
inline void add_zero_terms(const float* zero_terms, std::size_t heads, std::size_t count, float* scores,
                           std::size_t stride) noexcept {
  for (std::size_t h = 0; h < heads; ++h)
    for (std::size_t t = 0; t < count; ++t) scores[h * stride + t] += zero_terms[h];
}

// Per-channel blocks one head at a time (each head's fold and dots are its own).
inline void dot_channel_blocks(const record_format& f, const channel_block* blocks, std::size_t count,
                               unsigned per_channel, bool params_f32, const float* queries, std::size_t heads,
                               float* scores, std::size_t stride) noexcept {
  std::vector<float> scaled(f.head_dim);
  float zero_term;
  for (std::size_t h = 0; h < heads; ++h)
    for (std::size_t b = 0; b < count; ++b) {
      const channel_block& block = blocks[b];
      fold_channel_params(block.params, f.head_dim, per_channel, params_f32, queries + h * f.head_dim, 1, scaled.data(),
                          &zero_term);
      float* block_scores = scores + h * stride + block.first;
      dot_records(f, scaled.data(), 1, block.rows, block.count, block_scores, stride);
      add_zero_terms(&zero_term, 1, block.count, block_scores, stride);
    }
}

inline void axpy_records(const record_format& f, const float* weights, std::size_t stride, std::size_t heads,
                         const std::uint8_t* records, std::size_t count, float* acc) noexcept {
  for (std::size_t h = 0; h < heads; ++h)
    for (std::size_t t = 0; t < count; ++t) {
      const float w = weights[h * stride + t];
      float* out = acc + h * f.head_dim;
      for_each_value(f, records + t * f.record_bytes, [&](std::size_t i, float value) { out[i] += w * value; });
    }
}

inline void floats_to_f16(const float* x, std::size_t n, std::uint16_t* out) noexcept {
  for (std::size_t i = 0; i < n; ++i) out[i] = float_to_half_bits(x[i]);
}
inline void f16_to_floats(const std::uint16_t* h, std::size_t n, float* out) noexcept {
  for (std::size_t i = 0; i < n; ++i) out[i] = half_bits_to_float(h[i]);
}

// One token's weight times one group scale on a fixed-point grid (axpy_records_fixed).
inline std::uint32_t fixed_weight(float weight, float grid, float scale) noexcept {
  const float x = weight * grid * scale;
  if (!(x < 4294967296.0f)) return 0xFFFFFFFFu; // what vcvtps2udq gives out of range
  return static_cast<std::uint32_t>(std::nearbyint(x));
}
// One token's weight times one group zero, signed, on a fixed-point grid.
inline std::int32_t fixed_zero(float weight, float grid, float zero) noexcept {
  const float x = weight * grid * zero;
  if (!(std::fabs(x) < 2147483648.0f)) return INT32_MIN; // what vcvtps2dq gives out of range
  return static_cast<std::int32_t>(std::nearbyint(x));
}

inline void axpy_records_fixed(const record_format& f, const float* weights, std::size_t stride, std::size_t heads,
                               const float* grid, const std::uint8_t* records, std::size_t count, std::int64_t* sums,
                               std::uint64_t* weight_sums, std::int64_t* zero_sums) noexcept {
  const std::size_t groups = f.groups(), per_group = f.params_per_group;
  for (std::size_t h = 0; h < heads; ++h)
    for (std::size_t t = 0; t < count; ++t) {
      const std::uint8_t* record = records + t * f.record_bytes;
      const float w = weights[h * stride + t];
      for (std::size_t g = 0; g < groups; ++g) {
        const float* grids = grid + (h * groups + g) * per_group;
        const std::uint32_t fixed = fixed_weight(w, grids[0], record_param(f, record, g, 0));
        weight_sums[h * groups + g] += fixed;
        if (per_group == 2) zero_sums[h * groups + g] += fixed_zero(w, grids[1], record_param(f, record, g, 1));
        for (std::size_t i = g * f.group_channels; i < (g + 1) * f.group_channels; ++i)
          sums[h * f.head_dim + i] += std::int64_t{fixed} * code_at(record, i, f.bits);
      }
    }
}

} // namespace
} // namespace kvlab::kernels::scalar
