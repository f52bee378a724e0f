// The scalar reference of the encoders and the group statistics that fit their parameters: the oracle the vector
// kernels are tested against, and the tail and odd-width fallback they call for what their vector loops do not cover.
#pragma once
#include "../codes/reference.hpp"

namespace kvlab::kernels::scalar {
// Internal linkage (see kernels_scalar.hpp).
namespace {

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

// encode_nearest over a codebook's thresholds; the reference compares with each of them.
inline void encode_nearest_indexed(const float* x, std::size_t n, float scale, float zero,
                                   const nearest_thresholds& thresholds, unsigned bits, std::uint8_t* packed,
                                   std::size_t first) noexcept {
  encode_nearest(x, n, scale, zero, thresholds.values, thresholds.count, bits, packed, first);
}

inline void encode_fp8(const float* x, std::size_t n, float scale, const fp8_rounding& r,
                       std::uint8_t* codes) noexcept {
  for (std::size_t i = 0; i < n; ++i)
    codes[i] = scale == 0.0f ? 0 : static_cast<std::uint8_t>(fp8_code(x[i] / scale, r));
}

// Rounds a group's fitted scale and zero as storage holds them and writes the first
// params_per_group of them into the run of parameters at `params`; false when one is not
// finite (or overflows fp16).
template <auto to_half, auto from_half>
bool put_group_params(const record_format& f, std::uint8_t* params, std::size_t group, float& scale,
                      float& zero) noexcept {
  float values[2] = {scale, zero};
  std::uint8_t* at = params + group * f.params_per_group * (f.params_f32 ? 4 : 2);
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
template <auto all_finite, auto absmax, auto min_max, auto encode_uniform, auto to_half = float_to_half_bits,
          auto from_half = half_bits_to_float>
bool encode_uniform_record(const record_format& f, uniform_fit fit, unsigned max_code, const float* x,
                           std::uint8_t* record) noexcept {
  // A batch of groups' parameters first, then their codes: the groups' dependency chains
  // (statistics, division, rounding, encoding) then overlap instead of queueing.
  constexpr std::size_t batch = 64;
  float scales[batch], zeros[batch];
  const std::size_t n = f.group_channels, groups = f.groups();
  // min and max may pass over a NaN: such a token is the caller's to report.
  if (!all_finite(x, f.head_dim)) return false;
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
      if (!put_group_params<to_half, from_half>(f, record + f.code_bytes(), first + k, scales[k], zeros[k]))
        return false;
    }
    for (std::size_t k = 0; k < count; ++k)
      encode_uniform(x + (first + k) * n, n, scales[k], zeros[k], static_cast<int>(f.offset), max_code, f.bits, record,
                     (first + k) * n);
  }
  return true;
}

// The fused per-token encoder of sorted codebooks (nf4, arXiv 2305.14314 sec. 3; lloyd<b>):
// each group's scale fitted (absmax, or root_mean_square for lloyd<b>), rounded as stored,
// then codes as encode_nearest gives them under it. False, the record unspecified, when a
// value is not finite or the scale overflows fp16: the caller's generic path reports it.
template <auto all_finite, auto absmax, auto root_mean_square, auto encode_nearest_indexed,
          auto to_half = float_to_half_bits, auto from_half = half_bits_to_float>
bool encode_nearest_record(const record_format& f, codebook_scale fit, const nearest_thresholds& thresholds,
                           const float* x, std::uint8_t* record) noexcept {
  if (!all_finite(x, f.head_dim)) return false;
  const std::size_t n = f.group_channels;
  for (std::size_t group = 0; group * n < f.head_dim; ++group) {
    const float* values = x + group * n;
    float scale = fit == codebook_scale::absmax ? absmax(values, n) : root_mean_square(values, n), zero = 0.0f;
    if (!put_group_params<to_half, from_half>(f, record + f.code_bytes(), group, scale, zero)) return false;
    encode_nearest_indexed(x + group * n, n, scale, zero, thresholds, f.bits, record, group * n);
  }
  return true;
}

// The fused per-token fp8 encoder: each group scaled by absmax / max_finite (rounded as
// stored, as put_group_params does), then its codes as encode_fp8 gives them under the
// stored scale. False, the record unspecified, when a value or the scale is not finite or
// the largest code would decode past float's range: the caller's generic path reports it.
template <auto all_finite, auto absmax, auto encode_fp8, auto to_half = float_to_half_bits,
          auto from_half = half_bits_to_float>
bool encode_fp8_record(const record_format& f, const fp8_rounding& r, const float* x, std::uint8_t* record) noexcept {
  // absmax may pass over a NaN: such a token is the caller's to report.
  if (!all_finite(x, f.head_dim)) return false;
  const std::size_t n = f.group_channels;
  for (std::size_t group = 0; group * n < f.head_dim; ++group) {
    float scale = absmax(x + group * n, n) / r.max_finite, zero = 0.0f;
    if (!put_group_params<to_half, from_half>(f, record + f.code_bytes(), group, scale, zero)) return false;
    if (!std::isfinite(scale * r.max_finite)) return false;
    encode_fp8(x + group * n, n, scale, r, record + group * n);
  }
  return true;
}

// `count` consecutive rows into consecutive records by encode_one(row, record), one call per
// row of a loop the record encoder is inlined into: returns how many leading records it
// wrote before the first row encode_one refused (count when none).
template <class EncodeOne>
std::size_t encode_each_record(const record_format& f, const float* x, std::size_t count, std::uint8_t* records,
                               EncodeOne&& encode_one) noexcept {
  for (std::size_t row = 0; row < count; ++row)
    if (!encode_one(x + row * f.head_dim, records + row * f.record_bytes)) return row;
  return count;
}

template <auto all_finite, auto absmax, auto min_max, auto encode_uniform, auto to_half = float_to_half_bits,
          auto from_half = half_bits_to_float>
std::size_t encode_uniform_records(const record_format& f, uniform_fit fit, unsigned max_code, const float* x,
                                   std::size_t count, std::uint8_t* records) noexcept {
  return encode_each_record(f, x, count, records, [&](const float* row, std::uint8_t* record) {
    return encode_uniform_record<all_finite, absmax, min_max, encode_uniform, to_half, from_half>(f, fit, max_code, row,
                                                                                                  record);
  });
}

template <auto all_finite, auto absmax, auto root_mean_square, auto encode_nearest_indexed,
          auto to_half = float_to_half_bits, auto from_half = half_bits_to_float>
std::size_t encode_nearest_records(const record_format& f, codebook_scale fit, const nearest_thresholds& thresholds,
                                   const float* x, std::size_t count, std::uint8_t* records) noexcept {
  return encode_each_record(f, x, count, records, [&](const float* row, std::uint8_t* record) {
    return encode_nearest_record<all_finite, absmax, root_mean_square, encode_nearest_indexed, to_half, from_half>(
        f, fit, thresholds, row, record);
  });
}

template <auto all_finite, auto absmax, auto encode_fp8, auto to_half = float_to_half_bits,
          auto from_half = half_bits_to_float>
std::size_t encode_fp8_records(const record_format& f, const fp8_rounding& r, const float* x, std::size_t count,
                               std::uint8_t* records) noexcept {
  return encode_each_record(f, x, count, records, [&](const float* row, std::uint8_t* record) {
    return encode_fp8_record<all_finite, absmax, encode_fp8, to_half, from_half>(f, r, row, record);
  });
}

// The fused encoder of one per-channel block (KIVI's keys, arXiv 2402.02750 sec. 3.2):
// `tokens` rows of f.head_dim values, each channel's column fitted by `fit` (rounded as
// stored) and encoded as encode_uniform does under the stored parameters. The block is the
// rows' codes (f.code_bytes() each, token after token), then each channel's parameters
// (f.params_per_group of them). False, the block unspecified, when a value is not finite or
// a parameter overflows fp16: the caller's generic path reports it.
template <auto all_finite, auto to_half = float_to_half_bits, auto from_half = half_bits_to_float>
bool encode_uniform_channels(const record_format& f, uniform_fit fit, unsigned max_code, std::size_t tokens,
                             const float* x, std::uint8_t* block) noexcept {
  const std::size_t n = f.head_dim, row_bytes = f.code_bytes();
  if (tokens == 0 || !all_finite(x, tokens * n)) return false;
  for (std::size_t c = 0; c < n; ++c) {
    float lo = x[c], hi = fit == uniform_fit::absmax ? std::fabs(lo) : lo;
    for (std::size_t j = 1; j < tokens; ++j) {
      const float v = x[j * n + c];
      if (fit == uniform_fit::absmax) {
        hi = std::max(hi, std::fabs(v));
      } else {
        lo = std::min(lo, v);
        hi = std::max(hi, v);
      }
    }
    // As absmax and min_max have them: +0 for any zero.
    float scale = fit == uniform_fit::absmax ? hi / f.offset : (hi + 0.0f - (lo + 0.0f)) / static_cast<float>(max_code);
    float zero = fit == uniform_fit::absmax ? 0.0f : lo + 0.0f;
    if (!put_group_params<to_half, from_half>(f, block + tokens * row_bytes, c, scale, zero)) return false;
    for (std::size_t j = 0; j < tokens; ++j)
      put_code(block + j * row_bytes, c, f.bits,
               uniform_code(x[j * n + c], scale, zero, static_cast<int>(f.offset), max_code));
  }
  return true;
}

inline bool all_finite(const float* x, std::size_t n) noexcept {
  for (std::size_t i = 0; i < n; ++i)
    if (!std::isfinite(x[i])) return false;
  return true;
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

} // namespace
} // namespace kvlab::kernels::scalar
