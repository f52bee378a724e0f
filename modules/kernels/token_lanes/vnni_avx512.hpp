// Keys in token lanes by integer dot products (AVX-512 VNNI): the isa::avx512_vnni
// table's dot_records for the formats where they pay.
#pragma once
#include "../encoders/vector.hpp"
#include "avx512.hpp"

namespace kvlab::kernels::simd {

struct integer_dot_kernels : token_lane_kernels {
  // vpdpbusd multiplies 4 unsigned bytes by 4 signed bytes and adds the 4 products to a
  // dword lane: 64 products per instruction against a float multiply-add's 16, and no
  // convert or table lookup per code. The codes are the unsigned bytes: a byte as it is,
  // 4-bit codes a mask (the low ones) or a shift and a mask (the high ones). The query
  // becomes signed bytes, split into integer slices as the Ozaki scheme splits its operands
  // to multiply them exactly on integer units (arXiv 2306.11975, its splitting step): per
  // unit of at most 32 channels inside one group,
  //   q = s * (q1 + q2 / 2^7 + q3 / 2^14) + e,  s = max |q| over the unit / 127,
  // q1 in [-127, 127], q2 and q3 in [-64, 64], |e| <= s / 2^15 (2.4e-7 of the unit's largest
  // |q|, about two of its ulps). The integer sums are exact; each unit's three are
  // converted and combined once per 16 tokens. The only new error is e, the size of the
  // float kernels' own rounding; per-unit scales keep an outlier channel from costing the
  // other units precision.
  static constexpr std::size_t query_slices = 3;
  static constexpr std::size_t max_units = max_head_dim / 4; // a unit holds at least a dword of codes
  // A unit: 32 channels when they divide the group, else the group.
  static std::size_t unit_channels(const record_format& f) noexcept {
    return f.group_channels % 32 == 0 ? 32 : f.group_channels;
  }
  struct sliced_query {
    // Slice p's bytes in code order: the byte multiplied with code position k of code dword
    // j is bytes[p][4 * (k * dwords + j) + b] for b < 4 (element (4 * j + b) * per_byte + k).
    alignas(64) std::int8_t bytes[query_slices][max_head_dim];
    float unit_scales[max_units]; // s / 2^14: one unit's integer sum times it is its dot
  };
  // A unit's step s and its inverse 127 / max |q| (0 for a zero unit), per lane, as the
  // slicing uses them: q1 = round(q / s), q2 = round(rest * 2^7 / s), q3 = round(rest * 2^14 / s).
  struct slice_factors {
    __m512 inverses[query_slices];
    __m512 steps[query_slices - 1];
  };
  static slice_factors slice_factors_of(__m512 step, __m512 inverse) noexcept {
    return {{inverse, _mm512_mul_ps(inverse, _mm512_set1_ps(0x1p7f)), _mm512_mul_ps(inverse, _mm512_set1_ps(0x1p14f))},
            {step, _mm512_mul_ps(step, _mm512_set1_ps(0x1p-7f))}};
  }
  // 16 query elements split into their slices: slice p of an element is the low byte of
  // the element's dword lane in slices[p] (the upper bytes are not its sign extension). Adding
  // 1.5 * 2^23 rounds rest / s to an integer in one multiply-add and leaves it in the low
  // mantissa bits (two's complement, as |slice| < 2^22); subtracting it again gives the
  // slice as a float, exactly: 7 operations per slicing against 10 with conversions.
  static void split_into_slices(__m512 rest, const slice_factors& factors, __m512i (&slices)[query_slices]) noexcept {
    const __m512 magic = _mm512_set1_ps(0x1.8p23f);
    for (std::size_t p = 0; p < query_slices; ++p) {
      const __m512 rounded = _mm512_fmadd_ps(rest, factors.inverses[p], magic); // to nearest
      slices[p] = _mm512_castps_si512(rounded);
      if (p + 1 < query_slices) rest = _mm512_fnmadd_ps(_mm512_sub_ps(rounded, magic), factors.steps[p], rest);
    }
  }
  // 8- or 4-bit codes. False if an element of the query is not finite (its dot is then the
  // float kernels').
  static bool slice_query(const record_format& f, const float* query, sliced_query& out) noexcept {
    const std::size_t n = f.head_dim, unit = unit_channels(f);
    alignas(64) std::int8_t natural[query_slices][max_head_dim]; // in channel order
    for (std::size_t u = 0; u * unit < n; ++u) {
      const float* q = query + u * unit;
      const float m = encoder_kernels<xsimd::avx512bw>::absmax(q, unit);
      if (!(m <= std::numeric_limits<float>::max())) return false;
      // Below 1e-30 the unit counts as zero: 127 / m and its multiples stay finite.
      const float s = m >= 1e-30f ? m / 127.0f : 0.0f, inverse = s > 0.0f ? 127.0f / m : 0.0f;
      out.unit_scales[u] = s * 0x1p-14f;
      const slice_factors factors = slice_factors_of(_mm512_set1_ps(s), _mm512_set1_ps(inverse));
      for (std::size_t c = 0; c < unit; c += 16) {
        const __mmask16 lanes = static_cast<__mmask16>(unit - c >= 16 ? 0xffff : (1u << (unit - c)) - 1);
        __m512i slices[query_slices];
        split_into_slices(_mm512_maskz_loadu_ps(lanes, q + c), factors, slices);
        for (std::size_t p = 0; p < query_slices; ++p)
          _mm512_mask_cvtepi32_storeu_epi8(natural[p] + u * unit + c, lanes, slices[p]);
      }
    }
    // Code order: bytes as they are for 8-bit codes; for 4-bit codes the even bytes (low
    // nibbles' query elements), then the odd ones.
    for (std::size_t p = 0; p < query_slices; ++p) {
      if (f.bits == 8) {
        std::memcpy(out.bytes[p], natural[p], n);
        continue;
      }
      for (std::size_t c = 0; c < n; c += 64) {
        const std::size_t bytes = std::min<std::size_t>(64, n - c), taken = bytes / 2;
        const __m512i v =
            _mm512_maskz_loadu_epi8(bytes == 64 ? ~__mmask64{0} : (__mmask64{1} << bytes) - 1, natural[p] + c);
        const __mmask32 stored = taken == 32 ? ~__mmask32{0} : (__mmask32{1} << taken) - 1;
        _mm256_mask_storeu_epi8(out.bytes[p] + c / 2, stored, _mm512_cvtepi16_epi8(v));
        _mm256_mask_storeu_epi8(out.bytes[p] + n / 2 + c / 2, stored, _mm512_cvtepi16_epi8(_mm512_srli_epi16(v, 8)));
      }
    }
    return true;
  }

  // The token-lane kernel (token_lanes/avx512.hpp) with integer dots, for records with per-token parameters:
  // Dwords, GroupDwords and UnitDwords fixed at compile time for the common shapes (0: known
  // at run time).
  template <unsigned Bits, std::size_t H, std::size_t Dwords, std::size_t GroupDwords, std::size_t UnitDwords>
  __attribute__((target("avx512vnni"))) static void
  dot_token_lanes_vnni(const record_format& f, const sliced_query* sliced, const float* queries,
                       const std::uint8_t* records, std::size_t count, float* scores, std::size_t stride) noexcept {
    constexpr std::size_t per_dword = 32 / Bits, per_byte = 8 / Bits;
    constexpr std::size_t fixed_chunk = Dwords == 0                 ? 0
                                        : Dwords <= token_lanes     ? Dwords
                                        : Dwords % token_lanes == 0 ? token_lanes
                                                                    : 0;
    const std::size_t record_bytes = f.record_bytes, params = f.params_per_group;
    const std::size_t dwords = Dwords ? Dwords : f.code_bytes() / 4;
    const std::size_t group_dwords = GroupDwords ? GroupDwords : f.group_channels / per_dword;
    const std::size_t unit_dwords = UnitDwords ? UnitDwords : unit_channels(f) / per_dword;
    const __m512i code_mask = _mm512_set1_epi8(static_cast<char>((1u << Bits) - 1));
    // Per head and group: the sum of the query (times the zeros) and offset times it (the
    // integer dots count codes, not code - offset).
    float query_sums[max_heads][max_groups], offset_terms[max_heads][max_groups] = {};
    if (params == 2 || f.offset != 0.0f) group_query_sums(f, queries, H, query_sums);
    for (std::size_t h = 0; h < H && f.offset != 0.0f; ++h)
      for (std::size_t g = 0; g < dwords / group_dwords; ++g) offset_terms[h][g] = f.offset * query_sums[h][g];
    const std::size_t param_count = params * (dwords / group_dwords);
    __m512 batch_params[2 * max_groups];
    for (std::size_t first = 0; first < count; first += token_lanes) {
      const auto [batch, valid, batch_records, ahead] =
          start_batch(f, records, first, count, param_count, batch_params);
      __m512 sums[H], parts[H];
      __m512i dots[H][query_slices];
      for (std::size_t h = 0; h < H; ++h) sums[h] = _mm512_setzero_ps();
      for (std::size_t chunk = 0; chunk < dwords; chunk += token_lanes) {
        const std::size_t chunk_dwords = std::min(token_lanes, dwords - chunk);
        __m512i columns[token_lanes];
        load_columns(batch_records, record_bytes, batch, chunk, chunk_dwords, columns);
        const auto column = [&](std::size_t d) __attribute__((always_inline, target("avx512vnni"))) {
          const std::size_t j = chunk + d;
          prefetch_part(ahead, j, dwords);
          if (j % group_dwords == 0) std::fill_n(parts, H, _mm512_setzero_ps());
          if (j % unit_dwords == 0)
            for (std::size_t h = 0; h < H; ++h) std::fill_n(dots[h], query_slices, _mm512_setzero_si512());
#pragma clang loop unroll(full)
          for (std::size_t k = 0; k < per_byte; ++k) {
            const __m512i shifted =
                k == 0 ? columns[d] : _mm512_srli_epi32(columns[d], static_cast<unsigned>(k * Bits));
            const __m512i codes = Bits == 8 ? shifted : _mm512_and_si512(shifted, code_mask);
            for (std::size_t h = 0; h < H; ++h)
              for (std::size_t p = 0; p < query_slices; ++p) {
                std::int32_t query_bytes;
                std::memcpy(&query_bytes, sliced[h].bytes[p] + 4 * (k * dwords + j), 4);
                dots[h][p] = _mm512_dpbusd_epi32(dots[h][p], codes, _mm512_set1_epi32(query_bytes));
              }
          }
          if ((j + 1) % unit_dwords == 0) {
            const std::size_t u = j / unit_dwords;
            for (std::size_t h = 0; h < H; ++h) {
              __m512 dot = _mm512_cvtepi32_ps(dots[h][0]);
              dot = _mm512_fmadd_ps(dot, _mm512_set1_ps(0x1p7f), _mm512_cvtepi32_ps(dots[h][1]));
              dot = _mm512_fmadd_ps(dot, _mm512_set1_ps(0x1p7f), _mm512_cvtepi32_ps(dots[h][2]));
              parts[h] = _mm512_fmadd_ps(dot, _mm512_set1_ps(sliced[h].unit_scales[u]), parts[h]);
            }
          }
          if ((j + 1) % group_dwords != 0) return;
          const std::size_t g = j / group_dwords;
          for (std::size_t h = 0; h < H; ++h) {
            const __m512 part = _mm512_sub_ps(parts[h], _mm512_set1_ps(offset_terms[h][g]));
            sums[h] = _mm512_fmadd_ps(part, batch_params[g * params], sums[h]);
            if (params > 1)
              sums[h] = _mm512_fmadd_ps(batch_params[g * params + 1], _mm512_set1_ps(query_sums[h][g]), sums[h]);
          }
        };
        if constexpr (fixed_chunk > 0) {
#pragma clang loop unroll(full)
          for (std::size_t d = 0; d < fixed_chunk; ++d) column(d);
        } else {
          for (std::size_t d = 0; d < chunk_dwords; ++d) column(d);
        }
      }
      for (std::size_t h = 0; h < H; ++h) _mm512_mask_storeu_ps(scores + h * stride + first, valid, sums[h]);
    }
  }

  // Where integer dots in token lanes measured faster: 4- and 8-bit codes with per-token
  // parameters. 2-bit codes with parameters measured the same as their pair tables (so
  // they keep those, in floats); 2-bit rows without them (KIVI's per-channel blocks) take
  // pair tables for one head (dot_records) and the float kernel for more: slicing the
  // query once per block of 32 tokens for each head costs more than it saves there.
  static bool integer_dots_pay(const record_format& f) noexcept {
    return token_lanes_fit(f) && f.bits >= 4 && f.params_per_group > 0;
  }
  // dot_records with integer dots in token lanes for `heads` heads; a pass of heads whose
  // query is not finite takes `fallback`.
  static void dot_records(const record_format& f, const float* queries, std::size_t heads, const std::uint8_t* records,
                          std::size_t count, float* scores, std::size_t stride,
                          decltype(kernel_table::dot_records) fallback) noexcept {
    const std::size_t n = f.head_dim;
    for_each_head_pass(heads, [&]<std::size_t H>(std::size_t h) {
      sliced_query sliced[H];
      for (std::size_t k = 0; k < H; ++k)
        if (!slice_query(f, queries + (h + k) * n, sliced[k]))
          return fallback(f, queries + h * n, H, records, count, scores + h * stride, stride);
      const auto run = [&]<unsigned Bits>() {
        with_token_lane_shape<Bits>(f, [&]<std::size_t Dwords, std::size_t GroupDwords>() {
          // the fixed group shapes are whole units of 32 channels, Bits dwords
          constexpr std::size_t unit_dwords = GroupDwords ? Bits : 0;
          dot_token_lanes_vnni<Bits, H, Dwords, GroupDwords, unit_dwords>(f, sliced, queries + h * n, records, count,
                                                                          scores + h * stride, stride);
        });
      };
      if (f.bits == 8) return run.template operator()<8>();
      run.template operator()<4>();
    });
  }
};

} // namespace kvlab::kernels::simd
