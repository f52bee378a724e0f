// The scalar reference of runs of records for the heads of a GQA group: the oracle the vector kernels are tested
// against, and the tail and odd-width fallback they call for what their vector loops do not cover.
#pragma once
#include "../codes/reference.hpp"
#include "../rows/reference.hpp"

namespace kvlab::kernels::scalar {
// Internal linkage (see kernels_scalar.hpp).
namespace {

// Parameter `which` (0 scale, 1 zero) of group g of a record.
inline float record_param(const record_format& f, const std::uint8_t* record, std::size_t group,
                          unsigned which) noexcept {
  if (f.scale_levels) return f.scale_levels[record[f.code_bytes() + group * f.params_per_group + which]];
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
  case element_kind::group_codes: return; // dot_records and axpy_records decode these whole
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

// A group_codes record is decoded once for every head: its codec is the costly part.
inline void dot_group_codes(const record_format& f, const float* queries, std::size_t heads,
                            const std::uint8_t* records, std::size_t count, float* scores,
                            std::size_t stride) noexcept {
  float decoded[max_group_coded_head_dim];
  for (std::size_t t = 0; t < count; ++t) {
    f.decode_record(f.codec, records + t * f.record_bytes, f.head_dim, decoded);
    for (std::size_t h = 0; h < heads; ++h) {
      const float* query = queries + h * f.head_dim;
      float sum = 0.0f;
      for (std::size_t i = 0; i < f.head_dim; ++i) sum += query[i] * decoded[i];
      scores[h * stride + t] = sum;
    }
  }
}
inline void axpy_group_codes(const record_format& f, const float* weights, std::size_t stride, std::size_t heads,
                             const std::uint8_t* records, std::size_t count, float* acc) noexcept {
  float decoded[max_group_coded_head_dim];
  for (std::size_t t = 0; t < count; ++t) {
    f.decode_record(f.codec, records + t * f.record_bytes, f.head_dim, decoded);
    for (std::size_t h = 0; h < heads; ++h) {
      const float w = weights[h * stride + t];
      float* out = acc + h * f.head_dim;
      for (std::size_t i = 0; i < f.head_dim; ++i) out[i] += w * decoded[i];
    }
  }
}

inline void dot_records(const record_format& f, const float* queries, std::size_t heads, const std::uint8_t* records,
                        std::size_t count, float* scores, std::size_t stride) noexcept {
  if (f.kind == element_kind::group_codes) return dot_group_codes(f, queries, heads, records, count, scores, stride);
  for (std::size_t h = 0; h < heads; ++h)
    for (std::size_t t = 0; t < count; ++t) {
      const float* query = queries + h * f.head_dim;
      float sum = 0.0f;
      for_each_value(f, records + t * f.record_bytes, [&](std::size_t i, float value) { sum += query[i] * value; });
      scores[h * stride + t] = sum;
    }
}

inline void axpy_records(const record_format& f, const float* weights, std::size_t stride, std::size_t heads,
                         const std::uint8_t* records, std::size_t count, float* acc) noexcept {
  if (f.kind == element_kind::group_codes) return axpy_group_codes(f, weights, stride, heads, records, count, acc);
  for (std::size_t h = 0; h < heads; ++h)
    for (std::size_t t = 0; t < count; ++t) {
      const float w = weights[h * stride + t];
      float* out = acc + h * f.head_dim;
      for_each_value(f, records + t * f.record_bytes, [&](std::size_t i, float value) { out[i] += w * value; });
    }
}

} // namespace
} // namespace kvlab::kernels::scalar
