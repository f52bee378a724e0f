// SIMD kernel bodies, templated on the xsimd architecture. Included only by the per-ISA
// translation units (kernels_avx2.cpp, kernels_avx512.cpp), which are compiled with the
// matching -m flags. Elements the vector loops do not cover go to the scalar reference.
#pragma once
#include "kernels.hpp"
#include "kernels_scalar.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <immintrin.h>
#include <limits>
#include <numeric>
#include <type_traits>
#include <xsimd/xsimd.hpp>

namespace kvlab::kernels::simd {

template <class Arch>
struct kernels {
  using floats = xsimd::batch<float, Arch>;
  using ints = xsimd::batch<std::int32_t, Arch>;
  static constexpr std::size_t width = floats::size;
  static constexpr bool is_avx512 = std::is_same_v<Arch, xsimd::avx512bw>;

  // Fused multiply-add as one instruction (xsimd 8.1 spells AVX-512's as multiply then add).
  static floats fmadd(floats a, floats b, floats c) noexcept {
    if constexpr (is_avx512)
      return _mm512_fmadd_ps(a, b, c);
    else
      return _mm256_fmadd_ps(a, b, c);
  }

  // c - a * b as one instruction.
  static floats fnmadd(floats a, floats b, floats c) noexcept {
    if constexpr (is_avx512)
      return _mm512_fnmadd_ps(a, b, c);
    else
      return _mm256_fnmadd_ps(a, b, c);
  }

  static floats load_f32(const std::uint8_t* p) noexcept {
    return floats::load_unaligned(reinterpret_cast<const float*>(p));
  }
  static floats load_f16(const std::uint8_t* p) noexcept {
    if constexpr (is_avx512)
      return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    else
      return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static floats load_bf16(const std::uint8_t* p) noexcept {
    if constexpr (is_avx512)
      return _mm512_castsi512_ps(
          _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))), 16));
    else
      return _mm256_castsi256_ps(
          _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))), 16));
  }
  // `width` 8-bit codes starting at byte p.
  static ints load_u8_codes(const std::uint8_t* p) noexcept {
    if constexpr (is_avx512)
      return _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    else
      return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
  }
  // `width` 4-bit codes starting at byte p (low nibble first).
  static ints load_u4_codes(const std::uint8_t* p) noexcept {
    const __m128i duplicate_bytes = _mm_setr_epi8(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
    if constexpr (is_avx512) {
      const __m128i bytes = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
      const __m512i wide = _mm512_cvtepu8_epi32(_mm_shuffle_epi8(bytes, duplicate_bytes));
      const __m512i shifts = _mm512_setr_epi32(0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4);
      return _mm512_and_si512(_mm512_srlv_epi32(wide, shifts), _mm512_set1_epi32(0xf));
    } else {
      std::int32_t four_bytes;
      std::memcpy(&four_bytes, p, 4);
      const __m128i bytes = _mm_cvtsi32_si128(four_bytes);
      const __m256i wide = _mm256_cvtepu8_epi32(_mm_shuffle_epi8(bytes, duplicate_bytes));
      const __m256i shifts = _mm256_setr_epi32(0, 4, 0, 4, 0, 4, 0, 4);
      return _mm256_and_si256(_mm256_srlv_epi32(wide, shifts), _mm256_set1_epi32(0xf));
    }
  }

  template <floats (*load)(const std::uint8_t*), std::size_t element_bytes,
            float (*scalar_load)(const std::uint8_t*, std::size_t)>
  static float dot_row(const float* query, const std::uint8_t* row, std::size_t n) noexcept {
    floats sum(0.0f);
    std::size_t i = 0;
    for (; i + width <= n; i += width)
      sum = fmadd(floats::load_unaligned(query + i), load(row + i * element_bytes), sum);
    float tail = 0.0f;
    for (; i < n; ++i) tail += query[i] * scalar_load(row, i);
    return xsimd::hadd(sum) + tail;
  }

  // Lane k of the result is the sum of rows[k]'s lanes. (xsimd 8.1's AVX-512 haddp returns
  // the sums in a permuted order, so this is written out.)
  static __m256 sum_each_of_8(const __m256* rows) noexcept {
    const __m256 pairs0 = _mm256_hadd_ps(rows[0], rows[1]), pairs1 = _mm256_hadd_ps(rows[2], rows[3]);
    const __m256 pairs2 = _mm256_hadd_ps(rows[4], rows[5]), pairs3 = _mm256_hadd_ps(rows[6], rows[7]);
    const __m256 quads0 = _mm256_hadd_ps(pairs0, pairs1), quads1 = _mm256_hadd_ps(pairs2, pairs3);
    return _mm256_add_ps(_mm256_permute2f128_ps(quads0, quads1, 0x20), _mm256_permute2f128_ps(quads0, quads1, 0x31));
  }
  static floats sum_each(const floats* rows) noexcept {
    if constexpr (is_avx512) {
      // A transposing tree: pairs of rows within 128-bit lanes, then quads, then across
      // lanes; every row is summed in the same order wherever it sits.
      __m512 pairs[8], quads[4];
      for (std::size_t k = 0; k < 8; ++k)
        pairs[k] = _mm512_add_ps(_mm512_unpacklo_ps(rows[2 * k], rows[2 * k + 1]),
                                 _mm512_unpackhi_ps(rows[2 * k], rows[2 * k + 1]));
      for (std::size_t k = 0; k < 4; ++k) {
        const __m512d a = _mm512_castps_pd(pairs[2 * k]), b = _mm512_castps_pd(pairs[2 * k + 1]);
        quads[k] =
            _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(a, b)), _mm512_castpd_ps(_mm512_unpackhi_pd(a, b)));
      }
      const auto lanes = [](__m512 a, __m512 b) { // lanes 0+1 and 2+3 of a, then of b
        return _mm512_add_ps(_mm512_shuffle_f32x4(a, b, 0x88), _mm512_shuffle_f32x4(a, b, 0xdd));
      };
      return lanes(lanes(quads[0], quads[1]), lanes(quads[2], quads[3]));
    } else {
      __m256 plain[8];
      for (std::size_t k = 0; k < 8; ++k) plain[k] = rows[k];
      return sum_each_of_8(plain);
    }
  }

  template <floats (*load)(const std::uint8_t*), std::size_t element_bytes,
            float (*scalar_load)(const std::uint8_t*, std::size_t)>
  static void axpy_row(float alpha, const std::uint8_t* row, std::size_t n, float* acc) noexcept {
    const floats weight(alpha);
    std::size_t i = 0;
    for (; i + width <= n; i += width) {
      const floats updated = fmadd(weight, load(row + i * element_bytes), floats::load_unaligned(acc + i));
      updated.store_unaligned(acc + i);
    }
    for (; i < n; ++i) acc[i] += alpha * scalar_load(row, i);
  }

  // Looks codes up in a table of up to 16 levels held in registers (permutes, no memory).
  struct small_table {
    floats low, high; // levels 0..7 and 8..15 (AVX2); AVX-512 uses `low` for all 16
    explicit small_table(const float* levels, unsigned bits) {
      alignas(64) float padded[16] = {};
      for (unsigned i = 0; bits > 0 && i < (1u << bits); ++i) padded[i] = levels[i];
      low = floats::load_aligned(padded);
      if constexpr (!is_avx512) high = floats::load_aligned(padded + 8);
    }
    floats operator()(ints codes) const noexcept {
      if constexpr (is_avx512) {
        return _mm512_permutexvar_ps(codes, low);
      } else {
        const __m256 from_low = _mm256_permutevar8x32_ps(low, codes);
        const __m256 from_high = _mm256_permutevar8x32_ps(high, codes);
        // Codes 8..15 have bit 3 set: move it to the sign bit to select the high half.
        return _mm256_blendv_ps(from_low, from_high, _mm256_castsi256_ps(_mm256_slli_epi32(codes, 28)));
      }
    }
  };

  // Runs `step(codes)` over `width`-element chunks the vector loaders handle (8-bit codes,
  // byte-aligned 4-bit codes) and returns how many elements it covered.
  template <class Step>
  static std::size_t for_each_chunk(const std::uint8_t* packed, std::size_t first, std::size_t n, unsigned bits,
                                    Step&& step) noexcept {
    std::size_t i = 0;
    if (bits == 8) {
      for (; i + width <= n; i += width) step(i, load_u8_codes(packed + first + i));
    } else if (bits == 4 && first % 2 == 0) {
      for (; i + width <= n; i += width) step(i, load_u4_codes(packed + (first + i) / 2));
    }
    return i;
  }

  // Level lookup: register permutes for up to 4 bits, a gather for 8.
  template <class Use>
  static std::size_t with_levels(const std::uint8_t* packed, std::size_t first, std::size_t n, unsigned bits,
                                 const float* levels, Use&& use) noexcept {
    if (bits <= 4) {
      const small_table table(levels, bits);
      return for_each_chunk(packed, first, n, bits, [&](std::size_t i, ints codes) { use(i, table(codes)); });
    }
    return for_each_chunk(packed, first, n, bits,
                          [&](std::size_t i, ints codes) { use(i, floats::gather(levels, codes)); });
  }

  static float dot_codes(const float* query, const std::uint8_t* packed, std::size_t first, std::size_t n,
                         unsigned bits, const float* levels) noexcept {
    floats sum(0.0f);
    const std::size_t done = with_levels(packed, first, n, bits, levels, [&](std::size_t i, floats values) {
      sum = fmadd(floats::load_unaligned(query + i), values, sum);
    });
    return xsimd::hadd(sum) + scalar::dot_codes(query + done, packed, first + done, n - done, bits, levels);
  }

  static void axpy_codes(float alpha, const std::uint8_t* packed, std::size_t first, std::size_t n, unsigned bits,
                         const float* levels, float* acc) noexcept {
    const floats weight(alpha);
    const std::size_t done = with_levels(packed, first, n, bits, levels, [&](std::size_t i, floats values) {
      fmadd(weight, values, floats::load_unaligned(acc + i)).store_unaligned(acc + i);
    });
    scalar::axpy_codes(alpha, packed, first + done, n - done, bits, levels, acc + done);
  }

  static float dot_raw_codes(const float* query, const std::uint8_t* packed, std::size_t first, std::size_t n,
                             unsigned bits) noexcept {
    floats sum(0.0f);
    const std::size_t done = for_each_chunk(packed, first, n, bits, [&](std::size_t i, ints codes) {
      sum = fmadd(floats::load_unaligned(query + i), xsimd::to_float(codes), sum);
    });
    return xsimd::hadd(sum) + scalar::dot_raw_codes(query + done, packed, first + done, n - done, bits);
  }

  static void axpy_raw_codes(float alpha, const std::uint8_t* packed, std::size_t first, std::size_t n, unsigned bits,
                             float* acc) noexcept {
    const floats weight(alpha);
    const std::size_t done = for_each_chunk(packed, first, n, bits, [&](std::size_t i, ints codes) {
      fmadd(weight, xsimd::to_float(codes), floats::load_unaligned(acc + i)).store_unaligned(acc + i);
    });
    scalar::axpy_raw_codes(alpha, packed, first + done, n - done, bits, acc + done);
  }

  // max(|a|, |b|) lane by lane (one instruction on AVX-512).
  static floats abs_max(floats a, floats b) noexcept {
    if constexpr (is_avx512)
      return _mm512_range_ps(a, b, 0x0b); // the larger magnitude, sign cleared
    else
      return xsimd::max(xsimd::abs(a), xsimd::abs(b));
  }

  // Horizontal max and min as shuffle trees: a serial scalar loop over the lanes would be
  // the longest dependency chain of a group's encoding. Lane k of the result is op over
  // every lane of v[k], for four vectors at once.
  template <class Op>
  static __m128 reduce_four(const floats* v, Op op) noexcept {
    // A 4x4 transpose within each 128-bit block: lane k of block j then holds op over
    // block j of v[k] (in-lane shuffles, the cheap ones); then the blocks are combined.
    const auto pairs = [&](floats a, floats b) {
      if constexpr (is_avx512)
        return op(floats(_mm512_unpacklo_ps(a, b)), floats(_mm512_unpackhi_ps(a, b)));
      else
        return op(floats(_mm256_unpacklo_ps(a, b)), floats(_mm256_unpackhi_ps(a, b)));
    };
    const floats t = pairs(v[0], v[1]), u = pairs(v[2], v[3]);
    if constexpr (is_avx512) {
      floats w = op(floats(_mm512_shuffle_ps(t, u, 0x44)), floats(_mm512_shuffle_ps(t, u, 0xee)));
      w = op(w, floats(_mm512_shuffle_f32x4(w, w, 0x4e)));
      return _mm512_castps512_ps128(op(w, floats(_mm512_shuffle_f32x4(w, w, 0xb1))));
    } else {
      const floats w = op(floats(_mm256_shuffle_ps(t, u, 0x44)), floats(_mm256_shuffle_ps(t, u, 0xee)));
      return _mm256_castps256_ps128(op(w, floats(_mm256_permute2f128_ps(w, w, 0x01))));
    }
  }
  static constexpr auto max_op = [](floats a, floats b) { return xsimd::max(a, b); };
  static constexpr auto min_op = [](floats a, floats b) { return xsimd::min(a, b); };
  static float reduce(floats v, auto op) noexcept {
    const floats copies[4] = {v, v, v, v};
    return _mm_cvtss_f32(reduce_four(copies, op));
  }

  static float absmax(const float* x, std::size_t n) noexcept {
    floats m(0.0f);
    std::size_t i = 0;
    for (; i + width <= n; i += width) m = xsimd::max(m, xsimd::abs(floats::load_unaligned(x + i)));
    return std::max(reduce(m, max_op), scalar::absmax(x + i, n - i));
  }

  static void min_max(const float* x, std::size_t n, float* lo, float* hi) noexcept {
    if (n < width) return scalar::min_max(x, n, lo, hi);
    floats a = floats::load_unaligned(x), b = a;
    std::size_t i = width;
    for (; i + width <= n; i += width) {
      const floats v = floats::load_unaligned(x + i);
      a = xsimd::min(a, v);
      b = xsimd::max(b, v);
    }
    *lo = reduce(a, min_op);
    *hi = reduce(b, max_op);
    if (i < n) {
      float tail_lo, tail_hi;
      scalar::min_max(x + i, n - i, &tail_lo, &tail_hi);
      *lo = std::min(*lo, tail_lo);
      *hi = std::max(*hi, tail_hi);
    }
    *lo += 0.0f; // +0 for any zero, as the scalar reference
    *hi += 0.0f;
  }

  // fp16 rounding of fitted parameters (to nearest even, like float_to_half_bits) in one
  // instruction each way.
  static std::uint16_t to_half(float x) noexcept { return _cvtss_sh(x, _MM_FROUND_TO_NEAREST_INT); }
  static float from_half(std::uint16_t h) noexcept { return _cvtsh_ss(h); }

  static void decode_codes(const std::uint8_t* packed, std::size_t first, std::size_t n, unsigned bits,
                           const float* levels, float scale, float zero, float* out) noexcept {
    const floats scales(scale), zeros(zero);
    // Multiply then add (not fma), to round exactly as the scalar reference does.
    const std::size_t done = with_levels(packed, first, n, bits, levels, [&](std::size_t i, floats values) {
      (scales * values + zeros).store_unaligned(out + i);
    });
    scalar::decode_codes(packed, first + done, n - done, bits, levels, scale, zero, out + done);
  }

  // Stores `width` codes (each < 2^bits) of 8 or 4 bits; 4-bit stores need `first` even.
  static void store_codes(ints codes, unsigned bits, std::uint8_t* packed, std::size_t element) noexcept {
    if constexpr (is_avx512) {
      if (bits == 8) return _mm_storeu_si128(reinterpret_cast<__m128i*>(packed + element), _mm512_cvtepi32_epi8(codes));
      // The low byte of 64-bit lane k of (c | c >> 28) holds code 2k in its low and code 2k+1
      // in its high nibble.
      const __m128i pairs = _mm512_cvtepi64_epi8(_mm512_or_si512(codes, _mm512_srli_epi64(codes, 28)));
      _mm_storel_epi64(reinterpret_cast<__m128i*>(packed + element / 2), pairs);
    } else {
      const __m128i words = _mm_packs_epi32(_mm256_castsi256_si128(codes), _mm256_extracti128_si256(codes, 1));
      const __m128i bytes = _mm_packus_epi16(words, words); // the codes as bytes, in order
      if (bits == 8) return _mm_storel_epi64(reinterpret_cast<__m128i*>(packed + element), bytes);
      // Byte k of (b | b >> 4) holds code 2k in its low and code 2k+1 in its high nibble.
      const __m128i paired = _mm_or_si128(bytes, _mm_srli_epi64(bytes, 4));
      const __m128i even_bytes =
          _mm_shuffle_epi8(paired, _mm_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, -1, -1, -1, -1, -1, -1, -1, -1));
      const std::int32_t four = _mm_cvtsi128_si32(even_bytes);
      std::memcpy(packed + element / 2, &four, 4);
    }
  }

  static bool vector_packable(unsigned bits, std::size_t first) noexcept {
    return bits == 8 || (bits == 4 && first % 2 == 0);
  }

  static void encode_uniform(const float* x, std::size_t n, float scale, float zero, int offset, unsigned max_code,
                             unsigned bits, std::uint8_t* packed, std::size_t first) noexcept {
    std::size_t i = 0;
    if (scale != 0.0f && vector_packable(bits, first)) {
      const floats scales(scale), zeros(zero), offsets(static_cast<float>(offset)), top(static_cast<float>(max_code)),
          bottom(0.0f);
      for (; i + width <= n; i += width) {
        // Divide (not multiply by 1/scale) so codes equal the scalar reference bit for bit.
        const floats q = xsimd::nearbyint((floats::load_unaligned(x + i) - zeros) / scales) + offsets;
        store_codes(xsimd::to_int(xsimd::min(xsimd::max(q, bottom), top)), bits, packed, first + i);
      }
    }
    scalar::encode_uniform(x + i, n - i, scale, zero, offset, max_code, bits, packed, first + i);
  }

  static void encode_nearest(const float* x, std::size_t n, float scale, float zero, const float* thresholds,
                             unsigned count, unsigned bits, std::uint8_t* packed, std::size_t first) noexcept {
    std::size_t i = 0;
    if (vector_packable(bits, first)) {
      const floats scales(scale), zeros(zero), one(1.0f), nothing(0.0f);
      for (; i + width <= n; i += width) {
        const floats y = scale == 0.0f ? nothing : (floats::load_unaligned(x + i) - zeros) / scales;
        floats code(0.0f); // a small count, exact in float
        for (unsigned j = 0; j < count; ++j) code += xsimd::select(floats(thresholds[j]) < y, one, nothing);
        store_codes(xsimd::to_int(code), bits, packed, first + i);
      }
    }
    scalar::encode_nearest(x + i, n - i, scale, zero, thresholds, count, bits, packed, first + i);
  }

  // --- Fused per-token record encoder -------------------------------------------------

  // Records of 8- or 4-bit codes whose groups are whole vectors: the parameters of four
  // groups at once (one lane each: one division, one fp16 round trip), and codes by
  // multiplying with the reciprocal of the scale instead of dividing by it. Other records
  // take the generic fused encoder.
  static bool encode_uniform_record(const record_format& f, uniform_fit fit, unsigned max_code, const float* x,
                                    std::uint8_t* record) noexcept {
    if ((f.bits != 8 && f.bits != 4) || f.group_channels % width != 0)
      return scalar::encode_uniform_record<&absmax, &min_max, &encode_uniform, &to_half, &from_half>(f, fit, max_code,
                                                                                                     x, record);
    const auto run = [&]<uniform_fit Fit, unsigned Bits>() {
      for (std::size_t group = 0; group * f.group_channels < f.head_dim; group += 4)
        if (!encode_four_groups<Fit, Bits>(f, max_code, x, record, group)) return false;
      return true;
    };
    if (fit == uniform_fit::absmax)
      return f.bits == 8 ? run.template operator()<uniform_fit::absmax, 8>()
                         : run.template operator()<uniform_fit::absmax, 4>();
    return f.bits == 8 ? run.template operator()<uniform_fit::min_max, 8>()
                       : run.template operator()<uniform_fit::min_max, 4>();
  }

  // The (up to) four groups of a record from group `group` on.
  template <uniform_fit Fit, unsigned Bits>
  static bool encode_four_groups(const record_format& f, unsigned max_code, const float* x, std::uint8_t* record,
                                 std::size_t group) noexcept {
    const std::size_t n = f.group_channels, first = group * n;
    std::size_t count = 1; // the groups there are, without an integer division
    while (count < 4 && first + count * n < f.head_dim) ++count;
    floats highs[4], lows[4]; // lane-wise statistics of each group (0 past the last)
    for (std::size_t k = 0; k < 4; ++k) {
      floats a(0.0f), b(0.0f);
      if (k < count) {
        const float* values = x + first + k * n;
        a = floats::load_unaligned(values);
        b = Fit == uniform_fit::absmax ? xsimd::abs(a) : a;
        for (std::size_t i = width; i < n; i += width) {
          const floats v = floats::load_unaligned(values + i);
          if constexpr (Fit == uniform_fit::absmax) {
            b = abs_max(b, v);
          } else {
            a = xsimd::min(a, v);
            b = xsimd::max(b, v);
          }
        }
      }
      highs[k] = b;
      lows[k] = a;
    }
    // The scalar reference's arithmetic, lane by lane (+0 for zeros, as it has them).
    const __m128 hi = _mm_add_ps(reduce_four(highs, max_op), _mm_setzero_ps());
    __m128 scale, zero = _mm_setzero_ps();
    if constexpr (Fit == uniform_fit::absmax) {
      scale = _mm_div_ps(hi, _mm_set1_ps(f.offset));
    } else {
      zero = _mm_add_ps(reduce_four(lows, min_op), _mm_setzero_ps());
      scale = _mm_div_ps(_mm_sub_ps(hi, zero), _mm_set1_ps(static_cast<float>(max_code)));
    }
    alignas(16) float scales[4], zeros[4];
    std::uint8_t* params = record + f.code_bytes() + group * f.params_per_group * (f.params_f32 ? 4 : 2);
    if (f.params_f32) {
      _mm_store_ps(scales, scale);
      _mm_store_ps(zeros, zero);
      for (std::size_t k = 0; k < count; ++k)
        if (!std::isfinite(scales[k]) || !std::isfinite(zeros[k])) return false;
      write_params(params, count, f.params_per_group, scales, zeros);
    } else {
      const auto to_half = [](__m128 v) { return _mm_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); };
      const __m128i scale_halves = to_half(scale);
      const __m128i zero_halves = Fit == uniform_fit::min_max ? to_half(zero) : _mm_setzero_si128();
      // An fp16 infinity or NaN: the parameter overflowed.
      const __m128i exponent = _mm_set1_epi16(0x7c00);
      const auto overflowed = [&](__m128i h) { return _mm_cmpeq_epi16(_mm_and_si128(h, exponent), exponent); };
      if (_mm_movemask_epi8(_mm_or_si128(overflowed(scale_halves), overflowed(zero_halves))) != 0) return false;
      scale = _mm_cvtph_ps(scale_halves);
      if constexpr (Fit == uniform_fit::min_max) zero = _mm_cvtph_ps(zero_halves);
      if (count == 4 && f.params_per_group == 1) {
        _mm_storel_epi64(reinterpret_cast<__m128i*>(params), scale_halves);
      } else if (count == 4 && f.params_per_group == 2) {
        _mm_storeu_si128(reinterpret_cast<__m128i*>(params), _mm_unpacklo_epi16(scale_halves, zero_halves));
      } else {
        alignas(16) std::uint16_t halves[2][8];
        _mm_store_si128(reinterpret_cast<__m128i*>(halves[0]), scale_halves);
        _mm_store_si128(reinterpret_cast<__m128i*>(halves[1]), zero_halves);
        write_params(params, count, f.params_per_group, halves[0], halves[1]);
      }
      _mm_store_ps(scales, scale);
      _mm_store_ps(zeros, zero);
    }
    // Codes through the reciprocal where it is a normal float (always for fp16 scales);
    // scale 0 gets reciprocal 0, so every code is the offset as the reference has it.
    const __m128 normal =
        _mm_and_ps(_mm_cmpge_ps(scale, _mm_set1_ps(0x1p-125f)), _mm_cmple_ps(scale, _mm_set1_ps(0x1p125f)));
    if (_mm_movemask_ps(_mm_or_ps(normal, _mm_cmpeq_ps(scale, _mm_setzero_ps()))) == 0xf) {
      const __m128 reciprocal = _mm_and_ps(normal, _mm_div_ps(_mm_set1_ps(1.0f), scale));
      if (encode_by_reciprocal<Fit, Bits>(f, max_code, x, record, first, count, zero, reciprocal)) return true;
    }
    for (std::size_t k = 0; k < count; ++k)
      encode_uniform(x + first + k * n, n, scales[k], zeros[k], static_cast<int>(f.offset), max_code, Bits, record,
                     first + k * n);
    return true;
  }

  // Scale (and zero, when per_group is 2) of `count` groups.
  template <class T>
  static void write_params(std::uint8_t* at, std::size_t count, unsigned per_group, const T* scales,
                           const T* zeros) noexcept {
    for (std::size_t k = 0; k < count; ++k, at += per_group * sizeof(T)) {
      if (per_group > 0) std::memcpy(at, &scales[k], sizeof(T));
      if (per_group > 1) std::memcpy(at + sizeof(T), &zeros[k], sizeof(T));
    }
  }

  // Lane k of v in every lane.
  static floats lane(__m128 v, std::size_t k) noexcept {
    if constexpr (is_avx512)
      return _mm512_permutexvar_ps(_mm512_set1_epi32(static_cast<int>(k)), _mm512_castps128_ps512(v));
    else
      return _mm256_permutevar8x32_ps(_mm256_castps128_ps256(v), _mm256_set1_epi32(static_cast<int>(k)));
  }

  // Codes as rint(fma(x - zero, 1/scale, offset)), clamped; false if some may differ from
  // the reference's (rare: near ties), which the caller then encodes by dividing. With
  // r = 1/scale rounded, q differs from the reference's rounded quotient t plus offset by
  // at most 2^-24 * 2|t| + ulp(q)/2. Codes in [0, max_code] (b <= 8) have |t| <= 256 and
  // |q| <= 256, so that is below 2^-23 * 256 + 2^-16 < 2^-14, and q rounds as the reference
  // does when it lies at least 2^-14 from a half-integer; codes past either end clamp to
  // the same end either way.
  template <uniform_fit Fit, unsigned Bits>
  static bool encode_by_reciprocal(const record_format& f, unsigned max_code, const float* x, std::uint8_t* record,
                                   std::size_t first, std::size_t count, __m128 zeros, __m128 reciprocals) noexcept {
    const std::size_t n = f.group_channels;
    const floats offset(f.offset), top(static_cast<float>(max_code)), bottom(0.0f);
    floats worst(0.0f); // the largest |q - rint(q)|
    for (std::size_t k = 0; k < count; ++k) {
      const floats zero = lane(zeros, k), reciprocal = lane(reciprocals, k);
#pragma clang loop unroll_count(2) // groups of 32 are two AVX-512 vectors: one trip, no tail
      for (std::size_t i = first + k * n, end = i + n; i < end; i += width) {
        floats d = floats::load_unaligned(x + i);
        if constexpr (Fit == uniform_fit::min_max) d = d - zero;
        const floats q = fmadd(d, reciprocal, offset);
        if constexpr (is_avx512)
          worst = abs_max(worst, _mm512_reduce_ps(q, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
        else
          worst = abs_max(worst, q - xsimd::nearbyint(q));
        const floats clamped = xsimd::min(xsimd::max(q, bottom), top);
        if constexpr (is_avx512)
          store_codes(_mm512_cvtps_epi32(clamped), Bits, record, i);
        else
          store_codes(_mm256_cvtps_epi32(clamped), Bits, record, i);
      }
    }
    return xsimd::all(worst <= floats(0.5f - 0x1p-14f));
  }

  // --- Runs of records for the query heads of one GQA group: the attention hot loop ----
  // Each record's values are decoded once per block of `width` code bytes (or `width`
  // floats) and then used by every head, up to max_heads at a time with their sums in
  // registers.

  static constexpr std::size_t max_heads = heads_per_pass;
  static constexpr std::size_t max_head_dim = 1024;
  static constexpr std::size_t max_groups = 64;

  // One core's hardware prefetcher does not keep a per-token loop fed from DRAM: each batch
  // of up to 16 records asks for the lines that start inside the batch 8 KiB ahead, into L2
  // (L2 to L1 the hardware keeps up), so every line is asked for once; prefetches never
  // fault, so reaching past the run is harmless. Without it f16 attention at 32k context
  // ran about 1.5x slower; a second prefetch into L1 at 2 KiB measured no better and costs
  // L2-resident loops time. The span is worked out once per batch: per record it cost as
  // much scalar work as a 4-bit record's vector work (per batch, int4 and int8 values read
  // 1.1-1.2x faster from DRAM).
  static constexpr std::size_t prefetch_distance = 8192;
  // The lines that start inside [begin, begin + bytes) 8 KiB ahead: where they start and
  // how many.
  struct prefetch_span {
    std::uintptr_t first;
    std::size_t lines;
  };
  static prefetch_span lines_ahead(const std::uint8_t* begin, std::size_t bytes) noexcept {
    const std::uintptr_t start = reinterpret_cast<std::uintptr_t>(begin) + prefetch_distance;
    const std::uintptr_t first = (start + 63) & ~std::uintptr_t{63};
    return {first, first < start + bytes ? (start + bytes - first + 63) / 64 : 0};
  }
  // Every line [begin, begin + bytes) touches.
  static prefetch_span lines_covering(const std::uint8_t* begin, std::size_t bytes) noexcept {
    const std::uintptr_t start = reinterpret_cast<std::uintptr_t>(begin), first = start & ~std::uintptr_t{63};
    return {first, bytes == 0 ? 0 : (start + bytes - first + 63) / 64};
  }
  // A request waits for a free L1 fill buffer, so a burst of them stalls the loop: loops
  // over many records spread their requests over their work, asking in part `part` of
  // `parts` for lines part, part + parts, ... (measured 5-10 % faster from DRAM than one
  // burst per 16 records).
  template <int Hint = _MM_HINT_T1>
  static void prefetch_part(prefetch_span span, std::size_t part, std::size_t parts) noexcept {
    for (std::size_t line = part; line < span.lines; line += parts)
      _mm_prefetch(reinterpret_cast<const char*>(span.first + 64 * line), Hint);
  }

  // scores[h * stride + t] = sum of the lanes of token(t)[h] for t < count and h < H,
  // reducing `width` tokens at a time with one transposing horizontal add instead of one
  // per token. A short last batch is padded, so every token is reduced in the same order
  // wherever it falls: results do not depend on how a caller splits a run of records.
  // `token` is inlined and returns its sums by value (results written through references
  // would make the compiler reload every captured value after each store).
  template <std::size_t H, class Token>
  static void reduce_tokens(const std::uint8_t* records, std::size_t record_bytes, std::size_t count, float* scores,
                            std::size_t stride, Token&& token) noexcept {
    floats rows[H][width];
    alignas(64) float sums[width];
    for (std::size_t t = 0; t < count; t += width) {
      const std::size_t batch = std::min(width, count - t);
      const prefetch_span ahead = lines_ahead(records + t * record_bytes, batch * record_bytes);
      const auto row = [&](std::size_t k) __attribute__((always_inline)) {
        prefetch_part(ahead, k, batch);
        const auto lanes = token(t + k);
        for (std::size_t h = 0; h < H; ++h) rows[h][k] = lanes[h];
      };
      if (batch == width) { // no per-token branch: the compiler interleaves neighbouring tokens
#pragma clang loop unroll_count(2)
        for (std::size_t k = 0; k < width; ++k) row(k);
      } else {
        for (std::size_t k = 0; k < width; ++k)
          if (k < batch)
            row(k);
          else
            for (std::size_t h = 0; h < H; ++h) rows[h][k] = floats(0.0f);
      }
      for (std::size_t h = 0; h < H; ++h) {
        const floats total = sum_each(rows[h]);
        if (batch == width) {
          total.store_unaligned(scores + h * stride + t);
        } else {
          total.store_aligned(sums);
          std::copy_n(sums, batch, scores + h * stride + t);
        }
      }
    }
  }
  template <std::size_t H>
  struct head_sums {
    floats lanes[H];
    floats operator[](std::size_t h) const noexcept { return lanes[h]; }
  };
  // x in lane 0, zeros elsewhere.
  static floats first_lane(float x) noexcept {
    if constexpr (is_avx512)
      return _mm512_zextps128_ps512(_mm_set_ss(x));
    else
      return _mm256_zextps128_ps256(_mm_set_ss(x));
  }

  // Raw float rows: vectors of `width` elements, then a scalar tail.
  template <floats (*load)(const std::uint8_t*), std::size_t element_bytes,
            float (*scalar_load)(const std::uint8_t*, std::size_t), std::size_t H, std::size_t N = 0>
  static void dot_rows(const record_format& f, const float* queries, const std::uint8_t* records, std::size_t count,
                       float* scores, std::size_t stride) noexcept {
    if constexpr (N == 0)
      if (f.head_dim == 128)
        return dot_rows<load, element_bytes, scalar_load, H, 128>(f, queries, records, count, scores, stride);
    const std::size_t n = N ? N : f.head_dim, vector_end = n - n % width;
    const std::size_t record_bytes = f.record_bytes;
    reduce_tokens<H>(records, record_bytes, count, scores, stride, [=](std::size_t t) __attribute__((always_inline)) {
      const std::uint8_t* row = records + t * record_bytes;
      // Even and odd vectors in separate sums: twice the independent multiply-add chains.
      floats even[H], odd[H];
      std::fill_n(even, H, floats(0.0f));
      std::fill_n(odd, H, floats(0.0f));
      std::size_t i = 0;
      for (; i + 2 * width <= vector_end; i += 2 * width) {
        const floats first = load(row + i * element_bytes);
        const floats second = load(row + (i + width) * element_bytes);
        for (std::size_t h = 0; h < H; ++h) {
          even[h] = fmadd(floats::load_unaligned(queries + h * n + i), first, even[h]);
          odd[h] = fmadd(floats::load_unaligned(queries + h * n + i + width), second, odd[h]);
        }
      }
      if (i < vector_end)
        for (std::size_t h = 0; h < H; ++h)
          even[h] = fmadd(floats::load_unaligned(queries + h * n + i), load(row + i * element_bytes), even[h]);
      head_sums<H> sums;
      for (std::size_t h = 0; h < H; ++h) {
        sums.lanes[h] = even[h] + odd[h];
        if (vector_end < n) { // the elements past the last vector, in lane 0
          float tail = 0.0f;
          for (std::size_t i = vector_end; i < n; ++i) tail += queries[h * n + i] * scalar_load(row, i);
          sums.lanes[h] = sums.lanes[h] + first_lane(tail);
        }
      }
      return sums;
    });
  }

  // acc[h * head_dim + i] += sum over t of weights[h * stride + t] * row_t[i], one vector
  // of every head's accumulator in registers across the whole run.
  template <floats (*load)(const std::uint8_t*), std::size_t element_bytes,
            float (*scalar_load)(const std::uint8_t*, std::size_t), std::size_t H>
  static void axpy_rows(const record_format& f, const float* weights, std::size_t stride, const std::uint8_t* records,
                        std::size_t count, float* acc) noexcept {
    constexpr std::size_t chunk = 16;
    const std::size_t n = f.head_dim, vector_end = n - n % width;
    for (std::size_t first = 0; first < count; first += chunk) {
      const std::size_t tokens = std::min(chunk, count - first);
      const std::uint8_t* rows = records + first * f.record_bytes;
      const prefetch_span ahead = lines_ahead(rows, tokens * f.record_bytes);
      // V vectors per pass give every pass at least 8 independent multiply-add chains (fewer
      // would wait on the multiply-add latency); a last odd vector takes a pass of its own.
      const auto pass = [&]<std::size_t V>(std::size_t i) __attribute__((always_inline)) {
        floats sums[H][V];
        for (std::size_t h = 0; h < H; ++h)
          for (std::size_t v = 0; v < V; ++v) sums[h][v] = floats::load_unaligned(acc + h * n + i + v * width);
        for (std::size_t t = 0; t < tokens; ++t) {
          if (i == 0) prefetch_part(ahead, t, tokens);
          const std::uint8_t* row = rows + t * f.record_bytes + i * element_bytes;
          floats values[V];
          for (std::size_t v = 0; v < V; ++v) values[v] = load(row + v * width * element_bytes);
          for (std::size_t h = 0; h < H; ++h) {
            const floats weight(weights[h * stride + first + t]);
            for (std::size_t v = 0; v < V; ++v) sums[h][v] = fmadd(weight, values[v], sums[h][v]);
          }
        }
        for (std::size_t h = 0; h < H; ++h)
          for (std::size_t v = 0; v < V; ++v) sums[h][v].store_unaligned(acc + h * n + i + v * width);
      };
      constexpr std::size_t per_pass = std::max<std::size_t>(1, 8 / H);
      std::size_t i = 0;
      for (; i + per_pass * width <= vector_end; i += per_pass * width) pass.template operator()<per_pass>(i);
      for (; i < vector_end; i += width) pass.template operator()<1>(i);
    }
    for (std::size_t h = 0; h < H; ++h)
      for (std::size_t t = 0; t < count; ++t)
        for (std::size_t i = vector_end; i < n; ++i)
          acc[h * n + i] += weights[h * stride + t] * scalar_load(records + t * f.record_bytes, i);
  }

  // Coded records of 8-, 4- or 2-bit codes. A block is `width` code bytes; lane k of its
  // j-th vector holds element per_byte * k + j of the block (code j of byte k). The kernels
  // work in that "split order", so one byte load feeds per_byte vectors; queries and
  // accumulators are reordered once per call. Values are scale * level + constant per
  // group (constant = zero, minus scale * offset for affine codes), both folded into one
  // multiply-add per vector, shared by every head.
  static std::size_t codes_per_byte(unsigned bits) noexcept { return 8 / bits; }
  static bool vector_records(const record_format& f) noexcept {
    if (f.bits != 8 && f.bits != 4 && f.bits != 2) return false;
    const std::size_t per_byte = codes_per_byte(f.bits), block = per_byte * width, group = f.group_channels;
    const bool blocks_fit_groups = group % block == 0 || (block % group == 0 && group % per_byte == 0);
    return f.head_dim % block == 0 && f.head_dim <= max_head_dim &&
           (f.params_per_group == 0 || (blocks_fit_groups && f.groups() <= max_groups));
  }
  // Lane k of vector j of each block is element PerByte * k + j: one strided gather (or
  // scatter) per vector.
  template <std::size_t PerByte>
  static void split_order(const float* in, std::size_t n, float* out) noexcept {
    const ints stride = lane_index() * ints(static_cast<std::int32_t>(PerByte));
    for (std::size_t b = 0; b < n; b += PerByte * width)
      for (std::size_t j = 0; j < PerByte; ++j) floats::gather(in + b + j, stride).store_aligned(out + b + j * width);
  }
  template <std::size_t PerByte>
  static void merge_order(const float* in, std::size_t n, float* out) noexcept {
    const ints stride = lane_index() * ints(static_cast<std::int32_t>(PerByte));
    for (std::size_t b = 0; b < n; b += PerByte * width)
      for (std::size_t j = 0; j < PerByte; ++j) floats::load_aligned(in + b + j * width).scatter(out + b + j, stride);
  }
  static ints lane_index() noexcept {
    alignas(64) std::int32_t lanes[width];
    for (std::size_t k = 0; k < width; ++k) lanes[k] = static_cast<std::int32_t>(k);
    return ints::load_aligned(lanes);
  }
  static ints shift_right(ints x, unsigned n) noexcept {
    if constexpr (is_avx512)
      return _mm512_srli_epi32(x, n);
    else
      return _mm256_srli_epi32(x, n);
  }
  static floats permute(floats x, ints index) noexcept {
    if constexpr (is_avx512)
      return _mm512_permutexvar_ps(index, x);
    else
      return _mm256_permutevar8x32_ps(x, index);
  }

  // --- 8-bit float codes (fp8_e4m3, fp8_e4m3fnuz, fp8_e5m2; arXiv 2209.05433, sec. 3) -----
  // Each of them is fp16 with fewer bits: the code's sign, exponent and mantissa moved into
  // fp16's fields give the value times a power of two (E5M2 is fp16's top byte; E4M3 is
  // fp16 / 2^8 with the exponent field one bit shorter, E4M3FNUZ fp16 / 2^7). So 16 codes
  // decode with a widen, two shifts, a bit select, one fp16 conversion and an exact
  // multiply, instead of a 16-element gather from the levels table. NaN codes become the
  // canonical quiet NaN. A record format's levels table takes this path only when it is, bit for
  // bit, what this decoder gives for all 256 codes (checked once per call), so results
  // equal the table's.
  enum class fp8_layout : std::uint8_t { none, e4m3, e4m3fnuz, e5m2 };

  // fp16 bits of 16 codes, each in the high byte of a word (the code shifted left by 8):
  // the code's level over fp8_unit for every code but E4M3's and E4M3FNUZ's NaN codes (which
  // give some finite value; E5M2's give fp16 NaNs).
  template <fp8_layout Layout>
  static __m256i fp8_half_bits(__m256i high_bytes) noexcept {
    if constexpr (Layout == fp8_layout::e5m2) {
      return high_bytes;
    } else { // sign stays in bit 15, exponent and mantissa move to bits 13..7 (bit 14 cleared)
      return _mm256_and_si256(_mm256_srai_epi16(high_bytes, 1), _mm256_set1_epi16(static_cast<short>(0xbfff)));
    }
  }
  // fp8_half_bits with every NaN code fp16's quiet NaN 0x7e00 (which converts to the
  // canonical float NaN): a compare into a vector and a bit select.
  template <fp8_layout Layout>
  static __m256i fp8_exact_half_bits(__m256i high_bytes) noexcept {
    __m256i nan;
    if constexpr (Layout == fp8_layout::e5m2) // all-ones exponent, mantissa != 0
      nan = _mm256_cmpgt_epi16(_mm256_and_si256(high_bytes, _mm256_set1_epi16(0x7fff)), _mm256_set1_epi16(0x7c00));
    else if constexpr (Layout == fp8_layout::e4m3fnuz)
      nan = _mm256_cmpeq_epi16(high_bytes, _mm256_set1_epi16(static_cast<short>(0x8000)));
    else
      nan = _mm256_cmpeq_epi16(_mm256_and_si256(high_bytes, _mm256_set1_epi16(0x7f00)), _mm256_set1_epi16(0x7f00));
    return _mm256_ternarylogic_epi32(nan, _mm256_set1_epi16(0x7e00), fp8_half_bits<Layout>(high_bytes),
                                     0xca); // nan ? 0x7e00 : half
  }
  // Whether any of the code bytes added holds an E4M3 or E4M3FNUZ NaN code, kept in one
  // saturating max or min per 32 codes (NaN codes are rare: the quantizer never writes
  // them, so the pair kernels find them per token and decode exactly only where they are).
  // E5M2 needs none: its NaN codes are fp16 NaNs.
  template <fp8_layout Layout>
  struct fp8_nan_marks {
    static constexpr bool fnuz = Layout == fp8_layout::e4m3fnuz;
    // E4M3: the maximum of code | 0x80 (0xff: a NaN); E4M3FNUZ: the minimum of code ^ 0x80 (0: a NaN)
    __m256i marks = fnuz ? _mm256_set1_epi8(-1) : _mm256_setzero_si256();
    void add(__m256i bytes) noexcept {
      if constexpr (Layout == fp8_layout::e4m3)
        marks = _mm256_max_epu8(marks, _mm256_or_si256(bytes, _mm256_set1_epi8(static_cast<char>(0x80))));
      else if constexpr (fnuz)
        marks = _mm256_min_epu8(marks, _mm256_xor_si256(bytes, _mm256_set1_epi8(static_cast<char>(0x80))));
    }
    bool any() const noexcept {
      if constexpr (Layout == fp8_layout::e5m2) return false;
      const __m256i nan = fnuz ? _mm256_setzero_si256() : _mm256_set1_epi8(-1);
      return _mm256_movemask_epi8(_mm256_cmpeq_epi8(marks, nan)) != 0;
    }
  };
  // What the fp16 value of fp8_half_bits is multiplied by to give the level.
  template <fp8_layout Layout>
  static constexpr float fp8_unit = Layout == fp8_layout::e5m2       ? 1.0f
                                    : Layout == fp8_layout::e4m3fnuz ? 0x1p7f
                                                                     : 0x1p8f;
  // 32 codes as two vectors of their levels over fp8_unit, in the in-lane order of
  // vpunpck{l,h}bw: out[0] holds codes 0-7 and 16-23, out[1] codes 8-15 and 24-31.
  // Unpacking the codes under zero bytes widens them in place, where vpmovzxbw (decode_fp8)
  // crosses lanes and so takes a slot of the two pipes that multiply on AMD Zen 5; the unit
  // is left to the caller to fold into the query or the scale once. Exact: NaN codes give
  // the canonical quiet NaN. Otherwise the bytes go to `marks`, and E4M3's NaN codes decode
  // to some finite value, E5M2's to an fp16 NaN's payload.
  template <fp8_layout Layout, bool Exact>
  static void decode_fp8_pair(const std::uint8_t* codes, __m512 (&out)[2], fp8_nan_marks<Layout>& marks) noexcept {
    const __m256i bytes = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes)), zero = _mm256_setzero_si256();
    if constexpr (!Exact) marks.add(bytes);
    const __m256i high_bytes[2] = {_mm256_unpacklo_epi8(zero, bytes), _mm256_unpackhi_epi8(zero, bytes)};
    for (std::size_t k = 0; k < 2; ++k)
      out[k] =
          _mm512_cvtph_ps(Exact ? fp8_exact_half_bits<Layout>(high_bytes[k]) : fp8_half_bits<Layout>(high_bytes[k]));
  }
  // Where channel c lands in a row laid out as decode_fp8_pair's vector pairs, 32 channels
  // per pair.
  static constexpr std::size_t fp8_pair_position(std::size_t c) noexcept {
    const std::size_t i = c % 32;
    return c - i + (i % 16 >= 8 ? 16 : 0) + (i >= 16 ? 8 : 0) + i % 8;
  }

  // The `width` codes at `codes` (AVX-512 only; other ISAs never see a layout).
  template <fp8_layout Layout>
  static floats decode_fp8(const std::uint8_t* codes) noexcept {
    if constexpr (is_avx512) {
      const __m256i words = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(codes)));
      const __m256i half = fp8_exact_half_bits<Layout>(_mm256_slli_epi16(words, 8));
      return _mm512_mul_ps(_mm512_cvtph_ps(half), _mm512_set1_ps(fp8_unit<Layout>));
    } else {
      static_assert(is_avx512, "fp8 codes decode through fp16 on AVX-512 only");
    }
  }

  static fp8_layout fp8_levels(const float* levels) noexcept {
    if constexpr (!is_avx512) {
      return fp8_layout::none;
    } else {
      if (levels == nullptr) return fp8_layout::none;
      alignas(64) std::uint8_t codes[256];
      std::iota(codes, codes + 256, std::uint8_t{0});
      const auto decodes_as = [&]<fp8_layout Layout>() {
        alignas(64) float decoded[256];
        for (std::size_t c = 0; c < 256; c += width) decode_fp8<Layout>(codes + c).store_aligned(decoded + c);
        return std::memcmp(decoded, levels, sizeof decoded) == 0;
      };
      if (decodes_as.template operator()<fp8_layout::e4m3>()) return fp8_layout::e4m3;
      if (decodes_as.template operator()<fp8_layout::e4m3fnuz>()) return fp8_layout::e4m3fnuz;
      if (decodes_as.template operator()<fp8_layout::e5m2>()) return fp8_layout::e5m2;
      return fp8_layout::none;
    }
  }

  // How a block's lanes find their parameters: none (rows whose parameters the caller
  // folded in), one group per block, or several groups per block (a lane permute).
  enum class param_shape { none, whole, spanning };

  // Decodes the blocks of one record format (per call: tables and lane maps; per token:
  // each group's scale and constant).
  template <bool Affine, unsigned Bits>
  struct coded_values {
    static constexpr std::size_t per_byte = 8 / Bits, block = per_byte * width;
    // Each group's scale and constant, padded so a vector load from any group stays inside.
    struct terms {
      alignas(64) float scales[max_groups + width], constants[max_groups + width];
    };

    const record_format& f;
    small_table table;
    bool whole_groups;             // every block inside one group (else: each block spans several)
    std::size_t groups, params_at; // per token, no division: groups, and where parameters start
    bool one_load;                 // fp16 parameters that one vector load ending at the record's end holds
    ints lane_group;               // group of each lane, counted from the block's first group
    ints scale_lane, zero_lane;    // one_load: where group g's scale and zero land in that vector
    floats fixed_constant;
    std::uint16_t block_group[max_head_dim / width]; // first group of each block
    fp8_layout fp8 = fp8_layout::none;               // levels that decode_fp8 reproduces

    // On AVX-512, affine codes of up to 4 bits take their values from a table of the codes
    // themselves: vpermps reads only the low 4 bits of each lane, so one permute replaces a
    // mask and a convert (2-bit codes: the table repeats every 4 entries, past the next code).
    static constexpr bool code_table = is_avx512 && Affine && Bits <= 4;
    // Width of the codes small_table looks up: the code table, table codes of up to 4 bits,
    // or none (affine codes convert, 8-bit table codes gather).
    static constexpr unsigned table_bits = code_table ? 4 : Affine || Bits > 4 ? 0 : Bits;
    static constexpr std::array<float, 16> table_of_codes = [] {
      std::array<float, 16> codes{};
      for (unsigned i = 0; i < 16; ++i) codes[i] = static_cast<float>(i % (1u << Bits));
      return codes;
    }();

    explicit coded_values(const record_format& format)
        : f(format), table(code_table ? table_of_codes.data() : format.levels, table_bits),
          whole_groups(format.group_channels % block == 0), fixed_constant(Affine ? -format.offset : 0.0f) {
      groups = f.groups();
      params_at = f.code_bytes();
      const std::size_t params = f.params_per_group, n = groups * params;
      one_load = params > 0 && !f.params_f32 && n <= width && params_at + 2 * n >= 2 * width;
      alignas(64) std::int32_t lanes[width], scales[width], zeros[width];
      for (std::size_t k = 0; k < width; ++k) {
        lanes[k] = static_cast<std::int32_t>(per_byte * k / f.group_channels);
        const std::size_t g = std::min(k, groups - 1); // lanes past the last group repeat it
        scales[k] = static_cast<std::int32_t>(width - n + g * params);
        zeros[k] = scales[k] + 1;
      }
      lane_group = ints::load_aligned(lanes);
      scale_lane = ints::load_aligned(scales);
      zero_lane = ints::load_aligned(zeros);
      for (std::size_t b = 0; b < f.head_dim / block; ++b)
        block_group[b] = static_cast<std::uint16_t>(b * block / f.group_channels);
      if constexpr (!Affine && Bits == 8) fp8 = fp8_levels(f.levels);
    }

    void read(const std::uint8_t* record, terms& out) const noexcept {
      const std::size_t params = f.params_per_group;
      if (params == 0) return;
      if (one_load) { // the common case: one conversion and two permutes per token
        const floats all = load_f16(record + params_at + 2 * groups * params - 2 * width);
        const floats scales = permute(all, scale_lane), zeros = params > 1 ? permute(all, zero_lane) : floats(0.0f);
        scales.store_aligned(out.scales);
        (Affine ? fnmadd(scales, floats(f.offset), zeros) : zeros).store_aligned(out.constants);
        return;
      }
      alignas(64) float values[2 * max_groups];
      read_params(record + params_at, groups * params, f.params_f32, values);
      for (std::size_t g = 0; g < groups; ++g) {
        const float scale = values[g * params], zero = params > 1 ? values[g * params + 1] : 0.0f;
        out.scales[g] = scale;
        out.constants[g] = Affine ? zero - scale * f.offset : zero;
      }
    }

    // The per_byte vectors of unscaled levels of block b (for one head, which applies each
    // group's scale and constant once per group instead of once per vector). Fp8: the
    // layout fp8_levels found for this format (a template argument: no branch per block).
    template <fp8_layout Fp8 = fp8_layout::none>
    void levels(const std::uint8_t* record, std::size_t b, floats (&out)[per_byte]) const noexcept {
      if constexpr (Fp8 != fp8_layout::none) {
        out[0] = decode_fp8<Fp8>(record + b * width);
        return;
      }
      const ints bytes = load_u8_codes(record + b * width);
      for (std::size_t j = 0; j < per_byte; ++j) {
        ints codes = j == 0 ? bytes : shift_right(bytes, static_cast<unsigned>(j * Bits));
        if constexpr (code_table) {
          out[j] = table(codes);
          continue;
        }
        if (j + 1 < per_byte) codes = codes & ints((1 << Bits) - 1); // the last code is the byte's top bits
        if constexpr (Affine)
          out[j] = xsimd::to_float(codes);
        else if constexpr (Bits <= 4)
          out[j] = table(codes);
        else
          out[j] = floats::gather(f.levels, codes);
      }
    }

    // The per_byte value vectors of block b, parameters laid out as Shape says (a template
    // argument, so the hot loops carry no branch on it).
    template <param_shape Shape, fp8_layout Fp8>
    void values(const std::uint8_t* record, std::size_t b, const terms& t, floats (&out)[per_byte]) const noexcept {
      if constexpr (code_table && Shape == param_shape::whole) {
        // The block's group has 16 values, fma(code, scale, constant): one multiply-add
        // makes them all, and each code vector is then one permute of them (the same bits
        // as converting each code and multiply-adding it, one multiply-add per block
        // instead of one per vector).
        const std::size_t g = block_group[b];
        const floats group_values =
            fmadd(floats::load_unaligned(table_of_codes.data()), floats(t.scales[g]), floats(t.constants[g]));
        const ints bytes = load_u8_codes(record + b * width);
        for (std::size_t j = 0; j < per_byte; ++j)
          out[j] = permute(group_values, j == 0 ? bytes : shift_right(bytes, static_cast<unsigned>(j * Bits)));
        return;
      }
      levels<Fp8>(record, b, out);
      if constexpr (Shape == param_shape::none) {
        // scale 1: the constant alone (level * 1 + constant rounds as level + constant)
        if constexpr (Affine)
          for (std::size_t j = 0; j < per_byte; ++j) out[j] = out[j] + fixed_constant;
        return;
      } else {
        const std::size_t g = block_group[b];
        floats scale, constant;
        if constexpr (Shape == param_shape::whole) {
          scale = floats(t.scales[g]);
          constant = floats(t.constants[g]);
        } else {
          scale = permute(floats::load_unaligned(t.scales + g), lane_group);
          constant = permute(floats::load_unaligned(t.constants + g), lane_group);
        }
        for (std::size_t j = 0; j < per_byte; ++j) out[j] = fmadd(out[j], scale, constant);
      }
    }

    param_shape shape() const noexcept {
      if (f.params_per_group == 0) return param_shape::none;
      return whole_groups ? param_shape::whole : param_shape::spanning;
    }
  };

  // Calls use.template operator()<Blocks, Shape, Fp8>() with the record's parameter shape,
  // its number of blocks fixed at compile time for head_dim 128 (0: known at run time), so
  // the common shapes get fully unrolled loops with every sum in a register, and the fp8
  // layout of 8-bit table codes in whole groups (other shapes gather from the table).
  template <bool Affine, unsigned Bits, class Use>
  static void with_layout(const coded_values<Affine, Bits>& decode, Use&& use) noexcept {
    constexpr std::size_t blocks_of_128 = 128 / coded_values<Affine, Bits>::block;
    const auto with_shape = [&]<std::size_t Blocks>() {
      switch (decode.shape()) {
      case param_shape::none: return use.template operator()<Blocks, param_shape::none, fp8_layout::none>();
      case param_shape::whole:
        if constexpr (is_avx512 && !Affine && Bits == 8) {
          constexpr auto whole = param_shape::whole;
          switch (decode.fp8) {
          case fp8_layout::e4m3: return use.template operator()<Blocks, whole, fp8_layout::e4m3>();
          case fp8_layout::e4m3fnuz: return use.template operator()<Blocks, whole, fp8_layout::e4m3fnuz>();
          case fp8_layout::e5m2: return use.template operator()<Blocks, whole, fp8_layout::e5m2>();
          case fp8_layout::none: break;
          }
        }
        return use.template operator()<Blocks, param_shape::whole, fp8_layout::none>();
      case param_shape::spanning: return use.template operator()<Blocks, param_shape::spanning, fp8_layout::none>();
      }
    };
    if (decode.f.head_dim == 128) return with_shape.template operator()<blocks_of_128>();
    with_shape.template operator()<0>();
  }

  // n parameters (fp16 or f32) starting at `at` as floats: fp16 ones four per instruction,
  // the last four overlapping the previous ones rather than reading past the record.
  static void read_params(const std::uint8_t* at, std::size_t n, bool f32, float* out) noexcept {
    if (f32) return static_cast<void>(std::memcpy(out, at, 4 * n));
    if (n < 4) {
      for (std::size_t j = 0; j < n; ++j) out[j] = scalar::load_f16(at, j);
      return;
    }
    const auto four = [&](std::size_t j) {
      _mm_storeu_ps(out + j, _mm_cvtph_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(at + 2 * j))));
    };
    for (std::size_t j = 0; j + 4 <= n; j += 4) four(j);
    if (n % 4 != 0) four(n - 4);
  }

  template <bool Affine, unsigned Bits, std::size_t H>
  static void dot_coded(const record_format& f, const float* queries, const std::uint8_t* records, std::size_t count,
                        float* scores, std::size_t stride) noexcept {
    using values = coded_values<Affine, Bits>;
    const values decode(f);
    if constexpr (is_avx512 && !Affine && Bits == 8) { // fp8 layouts: the pair kernel where it fits
      bool done = false;
      with_layout(decode, [&]<std::size_t, param_shape, fp8_layout Fp8>() {
        if constexpr (Fp8 != fp8_layout::none)
          done = dot_fp8_heads<Fp8, H>(decode, queries, records, count, scores, stride);
      });
      if (done) return;
    }
    if constexpr (H == 1)
      if (decode.shape() == param_shape::whole)
        return with_layout(decode, [&]<std::size_t Blocks, param_shape, fp8_layout Fp8>() {
          const auto run = [&]<bool Folded>() {
            const auto one_head = [&]<std::size_t B, std::size_t PerGroup>() {
              dot_coded_one_head<Affine, Bits, B, PerGroup, Folded, Fp8>(decode, queries, records, count, scores);
            };
            switch (f.group_channels / values::block) {
            case 1: return one_head.template operator()<Blocks, 1>();
            case 2: return one_head.template operator()<Blocks, 2>();
            case 4: return one_head.template operator()<Blocks, 4>();
            case 8: return one_head.template operator()<Blocks, 8>();
            default: return one_head.template operator()<0, 0>();
            }
          };
          if (Affine && f.params_per_group == 1 && decode.one_load) return run.template operator()<Affine>();
          run.template operator()<false>();
        });
    with_layout(decode, [&]<std::size_t Blocks, param_shape Shape, fp8_layout Fp8>() {
      dot_coded_heads<Affine, Bits, H, Blocks, Shape, Fp8>(decode, queries, records, count, scores, stride);
    });
  }

  template <bool Affine, unsigned Bits, std::size_t H, std::size_t Blocks, param_shape Shape, fp8_layout Fp8>
  static void dot_coded_heads(const coded_values<Affine, Bits>& decode, const float* queries,
                              const std::uint8_t* records, std::size_t count, float* scores,
                              std::size_t stride) noexcept {
    using values = coded_values<Affine, Bits>;
    const std::size_t n = decode.f.head_dim, blocks = Blocks ? Blocks : n / values::block;
    const std::size_t record_bytes = decode.f.record_bytes;
    reduce_tokens<H>(records, record_bytes, count, scores, stride, [&](std::size_t t) __attribute__((always_inline)) {
      const std::uint8_t* record = records + t * record_bytes;
      typename values::terms terms;
      if constexpr (Shape != param_shape::none) decode.read(record, terms);
      // Two sums per head (even and odd vectors) halve the chains of
      // dependent multiply-adds; local, so they stay in registers.
      floats even[H], odd[H];
      std::fill_n(even, H, floats(0.0f));
      std::fill_n(odd, H, floats(0.0f));
      for (std::size_t b = 0; b < blocks; ++b) {
        floats v[values::per_byte];
        decode.template values<Shape, Fp8>(record, b, terms, v);
        for (std::size_t j = 0; j < values::per_byte; ++j)
          for (std::size_t h = 0; h < H; ++h) {
            floats& sum = (b * values::per_byte + j) % 2 == 0 ? even[h] : odd[h];
            sum = fmadd(floats::load_unaligned(queries + h * n + b * values::block + j * width), v[j], sum);
          }
      }
      head_sums<H> sums;
      for (std::size_t h = 0; h < H; ++h) sums.lanes[h] = even[h] + odd[h];
      return sums;
    });
  }

  // One head over groups of whole blocks: q . (s L + c) = s (q . L) + c (sum of q) per group,
  // so each vector costs one multiply-add and each group one more; the constant terms are
  // one vector multiply with the query's group sums (taken once per call). Blocks per
  // record and per group are fixed at compile time for the common shapes (0: at run time).
  // Symmetric codes with fp16 scales (Folded: c = -s * offset) need no constants at all:
  // each group's sum starts at -offset * (sum of q), and the scales are used straight from
  // their one converted load.
  template <bool Affine, unsigned Bits, std::size_t Blocks, std::size_t BlocksPerGroup, bool Folded, fp8_layout Fp8>
  static void dot_coded_one_head(const coded_values<Affine, Bits>& decode, const float* query,
                                 const std::uint8_t* records, std::size_t count, float* scores) noexcept {
    using values = coded_values<Affine, Bits>;
    const record_format& f = decode.f;
    // Compile-time constants where the shape is (captured run-time values are not unrolled).
    constexpr std::size_t fixed_groups = Blocks != 0 && BlocksPerGroup != 0 ? Blocks / BlocksPerGroup : 0;
    const std::size_t blocks_per_group = BlocksPerGroup ? BlocksPerGroup : f.group_channels / values::block;
    const std::size_t groups = fixed_groups ? fixed_groups : decode.groups;
    const std::size_t record_bytes = f.record_bytes, params_at = decode.params_at;
    alignas(64) float query_sums[max_groups + width] = {};
    for (std::size_t g = 0; g < groups; ++g)
      query_sums[g] = std::accumulate(query + g * f.group_channels, query + (g + 1) * f.group_channels, 0.0f);
    // Lanes past the last group are masked (their constants may be any bits, NaN included).
    using mask = typename floats::batch_bool_type;
    mask in_range[max_groups / width + 1];
    floats starts[max_groups]; // Folded: -offset * (sum of q) in lane 0
    if constexpr (Folded) {
      for (std::size_t g = 0; g < groups; ++g) starts[g] = first_lane(-f.offset * query_sums[g]);
    } else {
      const floats lanes = xsimd::to_float(lane_index());
      for (std::size_t g = 0; g < groups; g += width)
        in_range[g / width] = lanes < floats(static_cast<float>(groups - g));
    }
    reduce_tokens<1>(records, record_bytes, count, scores, 0, [&](std::size_t t) __attribute__((always_inline)) {
      const std::size_t group_count = fixed_groups ? fixed_groups : groups;
      const std::size_t group_blocks = BlocksPerGroup ? BlocksPerGroup : blocks_per_group;
      const std::uint8_t* record = records + t * record_bytes;
      typename values::terms terms;
      alignas(64) float loaded[width];
      const float* scales = terms.scales;
      if constexpr (Folded) { // group g's scale is lane width - groups + g of the one load
        load_f16(record + params_at + 2 * group_count - 2 * width).store_aligned(loaded);
        scales = loaded + (width - group_count);
        // Hide where `scales` points, so each group's scale is one broadcast load (a load
        // port) rather than the stored vector forwarded through two shuffles per group.
        asm("" : "+r"(scales));
      } else {
        decode.read(record, terms);
      }
      floats total(0.0f);
      for (std::size_t g = 0; g < group_count; ++g) {
        floats part = Folded ? starts[g] : floats(0.0f);
        const float* q = query + g * group_blocks * values::block;
        for (std::size_t b = 0; b < group_blocks; ++b) {
          floats levels[values::per_byte];
          decode.template levels<Fp8>(record, g * group_blocks + b, levels);
          for (std::size_t j = 0; j < values::per_byte; ++j)
            part = fmadd(floats::load_unaligned(q + b * values::block + j * width), levels[j], part);
        }
        total = fmadd(part, floats(scales[g]), total);
      }
      if constexpr (!Folded)
        for (std::size_t g = 0; g < group_count; g += width) {
          const floats constants =
              xsimd::select(in_range[g / width], floats::load_unaligned(terms.constants + g), floats(0.0f));
          total = fmadd(constants, floats::load_aligned(query_sums + g), total);
        }
      return head_sums<1>{{total}};
    });
  }

  // fp8 records the pair kernels take: fp16 scales, one per group of whole 32-code pairs.
  static bool fp8_pairs_fit(const record_format& f) noexcept {
    return f.group_channels % 32 == 0 && f.params_per_group == 1 && !f.params_f32;
  }
  // Calls use.template operator()<Pairs, PairsPerGroup>() with both fixed at compile time
  // for head_dim 64 and 128 in groups of 32 to 128 channels (0: known at run time), so the
  // common shapes get fully unrolled loops.
  template <class Use>
  static void with_fp8_pairs(const record_format& f, Use&& use) noexcept {
    if (f.head_dim == 128) switch (f.group_channels) {
      case 32: return use.template operator()<4, 1>();
      case 64: return use.template operator()<4, 2>();
      case 128: return use.template operator()<4, 4>();
      }
    if (f.head_dim == 64) switch (f.group_channels) {
      case 32: return use.template operator()<2, 1>();
      case 64: return use.template operator()<2, 2>();
      }
    use.template operator()<0, 0>();
  }
  // Token t's fp16 scales, one per group, times the layout's unit (exact: a power of two,
  // and an fp16 scale times it stays finite), `stride` floats apart.
  template <fp8_layout Layout>
  static void fp8_scales(const std::uint8_t* params, std::size_t groups, float* out, std::size_t stride) noexcept {
    for (std::size_t g = 0; g < groups; ++g) {
      std::uint16_t bits;
      std::memcpy(&bits, params + 2 * g, 2);
      out[g * stride] = from_half(bits) * fp8_unit<Layout>;
    }
  }

  // fp8 codes (fp8_pairs_fit), H heads: each query is put in decode_fp8_pair's order and
  // multiplied by the layout's unit once per call, so each 16 codes cost a conversion and
  // a multiply-add per head. Products are exactly decode_fp8's (the unit is a power of
  // two); the sums run in another order, within the float kernels' rounding. False
  // (nothing written) for other records and for a query the unit would overflow.
  template <fp8_layout Layout, std::size_t H>
  static bool dot_fp8_heads(const coded_values<false, 8>& decode, const float* queries, const std::uint8_t* records,
                            std::size_t count, float* scores, std::size_t stride) noexcept {
    const record_format& f = decode.f;
    if (!fp8_pairs_fit(f)) return false;
    const std::size_t n = f.head_dim;
    alignas(64) float folded[H][max_head_dim];
    for (std::size_t h = 0; h < H; ++h)
      for (std::size_t c = 0; c < n; ++c) {
        const float scaled = queries[h * n + c] * fp8_unit<Layout>;
        if (!(std::fabs(scaled) <= std::numeric_limits<float>::max())) return false;
        folded[h][fp8_pair_position(c)] = scaled;
      }
    with_fp8_pairs(f, [&]<std::size_t Pairs, std::size_t PairsPerGroup>() {
      const std::size_t pairs_per_group = PairsPerGroup ? PairsPerGroup : f.group_channels / 32;
      const std::size_t groups = PairsPerGroup ? Pairs / PairsPerGroup : decode.groups;
      const std::size_t record_bytes = f.record_bytes, params_at = decode.params_at;
      reduce_tokens<H>(records, record_bytes, count, scores, stride, [&](std::size_t t) __attribute__((always_inline)) {
        const std::uint8_t* record = records + t * record_bytes;
        head_sums<H> totals;
        std::fill_n(totals.lanes, H, floats(0.0f));
        fp8_nan_marks<Layout> marks;
        for (std::size_t g = 0; g < groups; ++g) {
          floats even[H], odd[H];
          std::fill_n(even, H, floats(0.0f));
          std::fill_n(odd, H, floats(0.0f));
          for (std::size_t p = g * pairs_per_group; p < (g + 1) * pairs_per_group; ++p) {
            __m512 halves[2];
            decode_fp8_pair<Layout, false>(record + 32 * p, halves, marks);
            for (std::size_t h = 0; h < H; ++h) {
              even[h] = fmadd(floats::load_aligned(folded[h] + 32 * p), halves[0], even[h]);
              odd[h] = fmadd(floats::load_aligned(folded[h] + 32 * p + 16), halves[1], odd[h]);
            }
          }
          std::uint16_t scale;
          std::memcpy(&scale, record + params_at + 2 * g, 2);
          const floats group_scale(from_half(scale));
          for (std::size_t h = 0; h < H; ++h) totals.lanes[h] = fmadd(even[h] + odd[h], group_scale, totals.lanes[h]);
        }
        // a NaN code makes every score NaN, whatever the query elements
        if (marks.any()) std::fill_n(totals.lanes, H, floats(std::numeric_limits<float>::quiet_NaN()));
        return totals;
      });
    });
    return true;
  }

  // Block by block, every head's accumulators of the block in registers across a chunk of
  // tokens, whose terms are read once.
  template <bool Affine, unsigned Bits, std::size_t H>
  static void axpy_coded(const record_format& f, const float* weights, std::size_t stride, const std::uint8_t* records,
                         std::size_t count, float* acc) noexcept {
    const coded_values<Affine, Bits> decode(f);
    with_layout(decode, [&]<std::size_t Blocks, param_shape Shape, fp8_layout Fp8>() {
      if constexpr (Fp8 != fp8_layout::none)
        if (axpy_fp8_heads<Fp8, H>(decode, weights, stride, records, count, acc)) return;
      axpy_coded_heads<Affine, Bits, H, Blocks, Shape, Fp8>(decode, weights, stride, records, count, acc);
    });
  }

  // fp8 codes (fp8_pairs_fit), H heads: each head's sums are kept in decode_fp8_pair's
  // order for the call, each token's scales are multiplied by the layout's unit once
  // (fp8_scales) and each head's weight by them once per pair, so each 16 codes cost a
  // conversion and a multiply-add per head (values from DRAM 4.1-4.2 ns per token against
  // 4.8-4.9 multiplying each code by its scale first). One rounding before the sum,
  // as in axpy_coded_heads, but of w * s rather than of s * level: within the float
  // kernels' rounding, and exactly s * level for a weight of 1. False (nothing done) for
  // other records.
  template <fp8_layout Layout, std::size_t H>
  static bool axpy_fp8_heads(const coded_values<false, 8>& decode, const float* weights, std::size_t stride,
                             const std::uint8_t* records, std::size_t count, float* acc) noexcept {
    const record_format& f = decode.f;
    if (!fp8_pairs_fit(f)) return false;
    const std::size_t n = f.head_dim;
    alignas(64) float sums[H][max_head_dim];
    for (std::size_t h = 0; h < H; ++h)
      for (std::size_t c = 0; c < n; ++c) sums[h][fp8_pair_position(c)] = acc[h * n + c];
    with_fp8_pairs(f, [&]<std::size_t Pairs, std::size_t PairsPerGroup>() {
      const std::size_t pairs = Pairs ? Pairs : n / 32;
      const std::size_t pairs_per_group = PairsPerGroup ? PairsPerGroup : f.group_channels / 32;
      const std::size_t groups = PairsPerGroup ? Pairs / PairsPerGroup : decode.groups;
      const std::size_t record_bytes = f.record_bytes, params_at = decode.params_at;
      constexpr std::size_t chunk = 16;
      // Pairs per pass: at least 8 independent multiply-add chains (fewer wait on latency).
      constexpr std::size_t per_pass = std::max<std::size_t>(1, 4 / H);
      // weighted[h][g][t] (more than one head): head h's weight of token t times the token's
      // scale of group g, for the chunk. One vector multiply per head and group, where a
      // scalar multiply and a broadcast per head, pair and token take as many vector slots
      // as the multiply-adds (the same products, bit for bit); the pass's multiply-adds read
      // them as broadcasts from memory. Four heads' values, 2048 tokens in L2 (AMD Zen 5):
      // 14.5-14.7 us against 17.4-17.7 (fp8_e4m3@token), 15.2-15.8 against 16.4-16.6
      // (group(32)).
      // One head keeps the multiply in the pass and its scales token by token (scales[t][g]):
      // with the table its group(32) values took 9.0-9.4 us against 8.2-8.5.
      float scales[H == 1 ? chunk : 1][max_groups], group_scales[H > 1 ? max_groups : 1][chunk] = {};
      float weighted[H > 1 ? H : 1][max_groups][chunk], head_weights[chunk] = {};
      for (std::size_t first = 0; first < count; first += chunk) {
        const std::size_t tokens = std::min(chunk, count - first);
        const std::uint8_t* chunk_records = records + first * record_bytes;
        const prefetch_span ahead = lines_ahead(chunk_records, tokens * record_bytes);
        if constexpr (H == 1) {
          for (std::size_t t = 0; t < tokens; ++t)
            fp8_scales<Layout>(chunk_records + t * record_bytes + params_at, groups, scales[t], 1);
        } else {
          for (std::size_t t = 0; t < tokens; ++t)
            fp8_scales<Layout>(chunk_records + t * record_bytes + params_at, groups, &group_scales[0][t], chunk);
          for (std::size_t h = 0; h < H; ++h) {
            // a short last chunk: its weights copied, the rest of head_weights 0 (lanes past
            // its tokens, never read, multiply finite scales by 0)
            const float* chunk_weights = weights + h * stride + first;
            if (tokens < chunk) {
              std::copy_n(chunk_weights, tokens, head_weights);
              chunk_weights = head_weights;
            }
            for (std::size_t g = 0; g < groups; ++g)
              for (std::size_t i = 0; i < chunk; i += width)
                (floats::load_unaligned(chunk_weights + i) * floats::load_unaligned(group_scales[g] + i))
                    .store_unaligned(weighted[h][g] + i);
          }
        }
        const auto pass = [&]<std::size_t P>(std::size_t first_pair) __attribute__((always_inline)) {
          floats vectors[H][P][2];
          for (std::size_t h = 0; h < H; ++h)
            for (std::size_t p = 0; p < P; ++p)
              for (std::size_t k = 0; k < 2; ++k)
                vectors[h][p][k] = floats::load_aligned(sums[h] + 32 * (first_pair + p) + 16 * k);
          for (std::size_t t = 0; t < tokens; ++t) {
            if (first_pair == 0) prefetch_part(ahead, t, tokens);
            const std::uint8_t* pair_codes = chunk_records + t * record_bytes + 32 * first_pair;
            __m512 halves[P][2];
            fp8_nan_marks<Layout> marks;
            for (std::size_t p = 0; p < P; ++p) decode_fp8_pair<Layout, false>(pair_codes + 32 * p, halves[p], marks);
            if (marks.any()) [[unlikely]]
              for (std::size_t p = 0; p < P; ++p) decode_fp8_pair<Layout, true>(pair_codes + 32 * p, halves[p], marks);
            for (std::size_t h = 0; h < H; ++h) {
              for (std::size_t p = 0; p < P; ++p) {
                const std::size_t g = (first_pair + p) / pairs_per_group;
                floats weight;
                if constexpr (H > 1)
                  weight = floats(weighted[h][g][t]);
                else
                  weight = floats(weights[first + t] * scales[t][g]);
                for (std::size_t k = 0; k < 2; ++k)
                  vectors[h][p][k] = fmadd(weight, floats(halves[p][k]), vectors[h][p][k]);
              }
            }
          }
          for (std::size_t h = 0; h < H; ++h)
            for (std::size_t p = 0; p < P; ++p)
              for (std::size_t k = 0; k < 2; ++k)
                vectors[h][p][k].store_aligned(sums[h] + 32 * (first_pair + p) + 16 * k);
        };
        std::size_t p = 0;
        for (; p + per_pass <= pairs; p += per_pass) pass.template operator()<per_pass>(p);
        for (; p < pairs; ++p) pass.template operator()<1>(p);
      }
    });
    for (std::size_t h = 0; h < H; ++h)
      for (std::size_t c = 0; c < n; ++c) acc[h * n + c] = sums[h][fp8_pair_position(c)];
    return true;
  }

  template <bool Affine, unsigned Bits, std::size_t H, std::size_t Blocks, param_shape Shape, fp8_layout Fp8>
  static void axpy_coded_heads(const coded_values<Affine, Bits>& decode, const float* weights, std::size_t stride,
                               const std::uint8_t* records, std::size_t count, float* acc) noexcept {
    using values = coded_values<Affine, Bits>;
    constexpr std::size_t chunk = 16, per_byte = values::per_byte;
    // Blocks per pass: at least 8 independent multiply-add chains (fewer wait on latency).
    constexpr std::size_t per_pass = std::max<std::size_t>(1, 8 / (H * per_byte));
    const std::size_t n = decode.f.head_dim, blocks = Blocks ? Blocks : n / values::block;
    const std::size_t record_bytes = decode.f.record_bytes;
    typename values::terms terms[chunk];
    for (std::size_t first = 0; first < count; first += chunk) {
      const std::size_t tokens = std::min(chunk, count - first);
      const std::uint8_t* chunk_records = records + first * record_bytes;
      const prefetch_span ahead = lines_ahead(chunk_records, tokens * record_bytes);
      if constexpr (Shape != param_shape::none)
        for (std::size_t t = 0; t < tokens; ++t) decode.read(chunk_records + t * record_bytes, terms[t]);
      const auto pass = [&]<std::size_t P>(std::size_t b) __attribute__((always_inline)) {
        floats sums[H][P][per_byte];
        for (std::size_t h = 0; h < H; ++h)
          for (std::size_t p = 0; p < P; ++p)
            for (std::size_t j = 0; j < per_byte; ++j)
              sums[h][p][j] = floats::load_unaligned(acc + h * n + (b + p) * values::block + j * width);
        for (std::size_t t = 0; t < tokens; ++t) {
          if (b == 0) prefetch_part(ahead, t, tokens);
          floats v[P][per_byte];
          for (std::size_t p = 0; p < P; ++p)
            decode.template values<Shape, Fp8>(chunk_records + t * record_bytes, b + p, terms[t], v[p]);
          for (std::size_t h = 0; h < H; ++h) {
            const floats w(weights[h * stride + first + t]);
            for (std::size_t p = 0; p < P; ++p)
              for (std::size_t j = 0; j < per_byte; ++j) sums[h][p][j] = fmadd(w, v[p][j], sums[h][p][j]);
          }
        }
        for (std::size_t h = 0; h < H; ++h)
          for (std::size_t p = 0; p < P; ++p)
            for (std::size_t j = 0; j < per_byte; ++j)
              sums[h][p][j].store_unaligned(acc + h * n + (b + p) * values::block + j * width);
      };
      std::size_t b = 0;
      for (; b + per_pass <= blocks; b += per_pass) pass.template operator()<per_pass>(b);
      for (; b < blocks; ++b) pass.template operator()<1>(b);
    }
  }

  // --- Keys in token lanes (AVX-512): the multi-head dot over affine codes -------------
  // The kernels above put channels in lanes, so each token ends with a horizontal sum and
  // each vector of codes costs an unpack, a convert and a scale. Here lane t is token t of
  // a batch of 16:
  // - the batch's code bytes are transposed once (16 x 16 dwords: vector j holds dword j
  //   of every record);
  // - a 2- or 4-bit code is then a shift and a 16-entry table lookup (vpermps reads the low
  //   4 bits of each lane), a byte a shift, a mask merged into 2^23's mantissa and a
  //   subtraction;
  // - each multiply-add serves 16 tokens with one broadcast query element, and the sums
  //   come out as one score per lane.
  // Same fp32 arithmetic, channels summed in order: per group, scale * (sum of q * (code -
  // offset)) + zero * (sum of q). Every lane is computed alone, so results do not depend on
  // where a token falls in a batch. L2-resident, against the channel-lane kernels: 2-bit
  // codes 1.6-3.9x faster, 4-bit codes 1.2-1.6x for 4 heads and 1.0-1.3x for one, 8-bit
  // codes 1.1-1.4x for 4 heads (for one head they stay in channel lanes, where they are
  // faster).
  static constexpr std::size_t token_lanes = 16;
  static bool token_lanes_fit(const record_format& f) noexcept {
    if (!is_avx512 || f.kind != element_kind::affine_codes) return false;
    if (f.bits != 8 && f.bits != 4 && f.bits != 2) return false;
    const std::size_t per_dword = 32 / f.bits;
    return f.head_dim % per_dword == 0 && f.head_dim <= max_head_dim &&
           (f.params_per_group == 0 || (f.group_channels % per_dword == 0 && f.groups() <= max_groups));
  }

  // rows[t] lane j becomes rows[j] lane t: 16 x 16 dwords in four rounds of 16 shuffles.
  static void transpose_dwords(__m512i (&rows)[token_lanes]) noexcept {
    __m512i t[token_lanes];
    for (std::size_t i = 0; i < 16; i += 2) {
      t[i] = _mm512_unpacklo_epi32(rows[i], rows[i + 1]);
      t[i + 1] = _mm512_unpackhi_epi32(rows[i], rows[i + 1]);
    }
    for (std::size_t i = 0; i < 16; i += 4) {
      rows[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
      rows[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
      rows[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
      rows[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
    }
    // 128-bit lanes: first pairs four rows apart, then groups of two eight rows apart.
    const __m512i low_pairs = _mm512_setr_epi64(0, 1, 8, 9, 4, 5, 12, 13);
    const __m512i high_pairs = _mm512_setr_epi64(2, 3, 10, 11, 6, 7, 14, 15);
    for (std::size_t i = 0; i < 4; ++i) {
      t[i] = _mm512_permutex2var_epi64(rows[i], low_pairs, rows[i + 4]);
      t[i + 4] = _mm512_permutex2var_epi64(rows[i], high_pairs, rows[i + 4]);
      t[i + 8] = _mm512_permutex2var_epi64(rows[i + 8], low_pairs, rows[i + 12]);
      t[i + 12] = _mm512_permutex2var_epi64(rows[i + 8], high_pairs, rows[i + 12]);
    }
    const __m512i low_halves = _mm512_setr_epi64(0, 1, 2, 3, 8, 9, 10, 11);
    const __m512i high_halves = _mm512_setr_epi64(4, 5, 6, 7, 12, 13, 14, 15);
    for (std::size_t i = 0; i < 8; ++i) {
      rows[i] = _mm512_permutex2var_epi64(t[i], low_halves, t[i + 8]);
      rows[i + 8] = _mm512_permutex2var_epi64(t[i], high_halves, t[i + 8]);
    }
  }

  // Four rows of 4 x 4 dwords, row i lane 4 m + d element (4 i + m, d) of a 16 x 4 matrix,
  // transposed: lane t of columns[d] is element (t, d), for the first `used` columns. Round
  // 1 takes rows 0-7 (or 8-15) of two columns from two rows, round 2 puts the halves side by side.
  static void transpose_16x4(const __m512i (&rows)[4], std::size_t used, __m512i* columns) noexcept {
    const __m512i first_two = _mm512_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28, 1, 5, 9, 13, 17, 21, 25, 29);
    const __m512i last_two = _mm512_setr_epi32(2, 6, 10, 14, 18, 22, 26, 30, 3, 7, 11, 15, 19, 23, 27, 31);
    const __m512i low_halves = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23);
    const __m512i high_halves = _mm512_setr_epi32(8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31);
    const __m512i low_a = _mm512_permutex2var_epi32(rows[0], first_two, rows[1]);
    const __m512i high_a = _mm512_permutex2var_epi32(rows[2], first_two, rows[3]);
    columns[0] = _mm512_permutex2var_epi32(low_a, low_halves, high_a);
    if (used > 1) columns[1] = _mm512_permutex2var_epi32(low_a, high_halves, high_a);
    if (used > 2) {
      const __m512i low_b = _mm512_permutex2var_epi32(rows[0], last_two, rows[1]);
      const __m512i high_b = _mm512_permutex2var_epi32(rows[2], last_two, rows[3]);
      columns[2] = _mm512_permutex2var_epi32(low_b, low_halves, high_b);
      if (used > 3) columns[3] = _mm512_permutex2var_epi32(low_b, high_halves, high_b);
    }
  }

  // The `bytes` bytes from `at` in each of `size` (at most 16) records `record_bytes` apart,
  // as dwords transposed: lane t of out[d] is dword d of record t, for d < ceil(bytes / 4);
  // bytes past `bytes`, and lanes past `size`, are 0 and never read. Masked loads and
  // permutes, in place of one vpgatherdd per dword, which on AMD Zen 5 took about a quarter
  // of the 2-bit values kernel's time.
  static void load_dword_columns(const std::uint8_t* at, std::size_t record_bytes, std::size_t size, std::size_t bytes,
                                 __m512i* out) noexcept {
    for (std::size_t offset = 0; offset < bytes; offset += 16) {
      const std::size_t taken = std::min<std::size_t>(16, bytes - offset);
      const __mmask16 mask = static_cast<__mmask16>(taken == 16 ? 0xffff : (1u << taken) - 1);
      // 16 whole rows (the common case) take plain loads, which the inserts take from
      // memory, and no per-row check
      const bool whole = size == 16 && taken == 16;
      const auto row = [&](std::size_t t) __attribute__((always_inline)) {
        if (whole) return _mm_loadu_si128(reinterpret_cast<const __m128i*>(at + t * record_bytes + offset));
        return t < size ? _mm_maskz_loadu_epi8(mask, at + t * record_bytes + offset) : _mm_setzero_si128();
      };
      __m512i rows[4];
      for (std::size_t i = 0; i < 4; ++i) {
        rows[i] = _mm512_inserti32x4(_mm512_castsi128_si512(row(4 * i)), row(4 * i + 1), 1);
        rows[i] = _mm512_inserti32x4(_mm512_inserti32x4(rows[i], row(4 * i + 2), 2), row(4 * i + 3), 3);
      }
      transpose_16x4(rows, (taken + 3) / 4, out + offset / 4);
    }
  }

  // fp16 parameter k of dwords holding two each, the first in the low half, as floats.
  static __m512 fp16_parameter(const __m512i* dwords, std::size_t k) noexcept {
    const __m512i dword = k % 2 == 0 ? dwords[k / 2] : _mm512_srli_epi32(dwords[k / 2], 16);
    return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(dword));
  }
  // Every parameter of a batch of records, one vector each (lanes past the batch: 0),
  // loaded when the batch starts so that the loads' latency overlaps the codes' work. Two
  // fp16 parameters share a dword, the first in its low half.
  static void load_batch_params(const record_format& f, const std::uint8_t* batch, std::size_t size,
                                std::size_t param_count, __m512* out) noexcept {
    __m512i dwords[2 * max_groups];
    const std::size_t param_bytes = param_count * (f.params_f32 ? 4 : 2);
    load_dword_columns(batch + f.code_bytes(), f.record_bytes, size, param_bytes, dwords);
    for (std::size_t p = 0; p < param_count; ++p) {
      out[p] = f.params_f32 ? _mm512_castsi512_ps(dwords[p]) : fp16_parameter(dwords, p);
    }
  }

  // The batch of up to 16 records from `first`: how many, their lanes, where they start and
  // the lines to prefetch while they are worked on; their parameters loaded.
  struct token_batch {
    std::size_t size;
    __mmask16 valid;
    const std::uint8_t* records;
    prefetch_span ahead;
  };
  static token_batch start_batch(const record_format& f, const std::uint8_t* records, std::size_t first,
                                 std::size_t count, std::size_t param_count, __m512* params) noexcept {
    const std::size_t size = std::min(token_lanes, count - first);
    const __mmask16 valid = static_cast<__mmask16>((1u << size) - 1);
    const std::uint8_t* batch_records = records + first * f.record_bytes;
    load_batch_params(f, batch_records, size, param_count, params);
    return {size, valid, batch_records, lines_ahead(batch_records, size * f.record_bytes)};
  }
  // sums[h][g]: the sum of query h's elements in group g.
  static void group_query_sums(const record_format& f, const float* queries, std::size_t heads,
                               float (&sums)[max_heads][max_groups]) noexcept {
    const std::size_t n = f.head_dim, group = f.params_per_group ? f.group_channels : n;
    for (std::size_t h = 0; h < heads; ++h)
      for (std::size_t g = 0; g < n / group; ++g)
        sums[h][g] = std::accumulate(queries + h * n + g * group, queries + h * n + (g + 1) * group, 0.0f);
  }

  // Dwords [chunk, chunk + chunk_dwords) of the first `batch` records, transposed: lane t
  // of columns[d] is dword chunk + d of record t (0 past the batch or the chunk).
  static void load_columns(const std::uint8_t* batch_records, std::size_t record_bytes, std::size_t batch,
                           std::size_t chunk, std::size_t chunk_dwords, __m512i (&columns)[token_lanes]) noexcept {
    const __mmask64 bytes = chunk_dwords == token_lanes ? ~__mmask64{0} : (__mmask64{1} << 4 * chunk_dwords) - 1;
    const auto row = [&](std::size_t t) __attribute__((always_inline)) {
      if (t >= batch) return _mm512_setzero_si512();
      const std::uint8_t* at = batch_records + t * record_bytes + 4 * chunk;
      if (chunk_dwords == token_lanes) return _mm512_loadu_si512(at); // whole: no mask (as the values' passes)
      return _mm512_maskz_loadu_epi8(bytes, at);
    };
    for (std::size_t t = 0; t < token_lanes; ++t) columns[t] = row(t);
    transpose_dwords(columns);
  }

  // 2-bit codes by pairs of channels (T-MAC's idea, arXiv 2407.00088: table lookups of
  // precomputed activation sums in place of multiply-adds over low-bit weights; here in
  // fp32, each entry rounded once): a 16-entry table per head and pair (i, i + 1) holds
  // q_i * level(a) + q_(i+1) * level(b) for the pair's 4 bits (a low, b high), so 2 codes
  // cost one shift, and per head one permute of the table and one add, instead of two
  // shifts, two permutes and two multiply-adds per head. Building the tables costs 2
  // vector operations per pair and head per call and saves about 3 per pair and 16 tokens.
  // Rows without parameters are KIVI's per-channel blocks, whose queries change every 32
  // tokens: here the tables would be rebuilt per block and stored, which costs more than
  // they save (one head on Zen 5, in L2: 22.3 against 18.0-18.2 us for 5,440 keys; KIVI-2 at
  // GQA 4 on Sapphire Rapids 40-50 ns per token with them, 32-37 without). For one head the
  // pair-row kernel below keeps them in registers, and pays. The choice depends on the
  // format alone, never on the run's length, so splitting a run does not change its
  // arithmetic.
  static constexpr std::size_t max_pair_channels = 256;
  static bool pair_tables_pay(const record_format& f) noexcept {
    return f.bits == 2 && f.head_dim <= max_pair_channels && f.params_per_group > 0;
  }

  // Dwords (of codes per record) and GroupDwords (per group) are fixed at compile time for
  // the common shapes, 0 when known only at run time. Pairs: 2-bit codes through pair tables.
  template <unsigned Bits, std::size_t H, std::size_t Dwords, std::size_t GroupDwords, bool Pairs>
  static void dot_token_lanes(const record_format& f, const float* queries, const std::uint8_t* records,
                              std::size_t count, float* scores, std::size_t stride) noexcept {
    token_lane_runs<Bits, H, Dwords, GroupDwords, Pairs>(
        f, stride, [&](const auto& run) __attribute__((always_inline)) { run(queries, records, count, scores); });
  }
  // The kernel above for any number of runs of records: runs(run) calls run(queries, records,
  // count, scores) once per run, each with queries of its own (KIVI's blocks fold their
  // parameters into them), while the setup that depends on the format alone is done once.
  template <unsigned Bits, std::size_t H, std::size_t Dwords, std::size_t GroupDwords, bool Pairs, class Runs>
  static void token_lane_runs(const record_format& f, std::size_t stride, Runs&& runs) noexcept {
    static_assert(!Pairs || Bits == 2);
    if constexpr (is_avx512) {
      constexpr std::size_t per_dword = 32 / Bits;
      constexpr std::size_t chains = H <= 2 ? 4 : 2; // independent multiply-add chains per head
      // Dwords per chunk when every chunk has the same, known at compile time (0 if not).
      constexpr std::size_t fixed_chunk = Dwords == 0                 ? 0
                                          : Dwords <= token_lanes     ? Dwords
                                          : Dwords % token_lanes == 0 ? token_lanes
                                                                      : 0;
      const std::size_t n = f.head_dim, record_bytes = f.record_bytes;
      const std::size_t params = f.params_per_group;
      const std::size_t dwords = Dwords ? Dwords : f.code_bytes() / 4;
      const std::size_t group_dwords = GroupDwords ? GroupDwords : params ? f.group_channels / per_dword : dwords;
      // 2-bit codes index the table through their low bits and the next code's: the table
      // repeats every 4 entries.
      alignas(64) float levels[token_lanes];
      for (std::size_t i = 0; i < token_lanes; ++i) levels[i] = static_cast<float>(i % (1u << Bits)) - f.offset;
      const __m512 table = _mm512_load_ps(levels);
      const __m512i byte_mask = _mm512_set1_epi32(0xff), two_to_23 = _mm512_set1_epi32(0x4b000000);
      const __m512 byte_offset = _mm512_set1_ps(0x1p23f + f.offset);
      constexpr std::size_t pair_stride = max_pair_channels / 2 * token_lanes; // floats per head
      alignas(64) float pair_tables[Pairs ? H * pair_stride : 1];
      alignas(64) float low[token_lanes], high[token_lanes];
      for (std::size_t i = 0; i < token_lanes; ++i) {
        low[i] = static_cast<float>(i % 4) - f.offset;
        high[i] = static_cast<float>(i / 4) - f.offset;
      }
      const __m512 lows = _mm512_load_ps(low), highs = _mm512_load_ps(high);
      const std::size_t param_count = params * (params ? dwords / group_dwords : 0);
      __m512 batch_params[2 * max_groups];
      float query_sums[max_heads][max_groups];
      const auto run = [&](const float* queries, const std::uint8_t* records, std::size_t count,
                           float* scores) __attribute__((always_inline)) {
        if constexpr (Pairs)
          for (std::size_t h = 0; h < H; ++h)
            for (std::size_t i = 0; i < n; i += 2)
              _mm512_store_ps(pair_tables + h * pair_stride + i / 2 * token_lanes,
                              pair_table(queries[h * n + i], queries[h * n + i + 1], lows, highs));
        if (params == 2) group_query_sums(f, queries, H, query_sums);
        for (std::size_t first = 0; first < count; first += token_lanes) {
          const auto [batch, valid, batch_records, ahead] =
              start_batch(f, records, first, count, param_count, batch_params);
          __m512 sums[H], parts[H][chains];
          for (std::size_t h = 0; h < H; ++h) sums[h] = _mm512_setzero_ps();
          for (std::size_t chunk = 0; chunk < dwords; chunk += token_lanes) {
            const std::size_t chunk_dwords = std::min(token_lanes, dwords - chunk);
            __m512i columns[token_lanes];
            load_columns(batch_records, record_bytes, batch, chunk, chunk_dwords, columns);
            const auto column = [&](std::size_t d) __attribute__((always_inline)) {
              const std::size_t j = chunk + d;
              prefetch_part(ahead, j, dwords);
              if (j % group_dwords == 0)
                for (std::size_t h = 0; h < H; ++h) std::fill_n(parts[h], chains, _mm512_setzero_ps());
              if constexpr (Pairs) {
#pragma clang loop unroll(full)
                for (std::size_t k = 0; k < per_dword / 2; ++k) {
                  const __m512i pair =
                      k == 0 ? columns[d] : _mm512_srli_epi32(columns[d], static_cast<unsigned>(4 * k));
                  const float* tables = pair_tables + (j * per_dword / 2 + k) * token_lanes;
                  for (std::size_t h = 0; h < H; ++h)
                    parts[h][k % chains] = _mm512_add_ps(
                        parts[h][k % chains], _mm512_permutexvar_ps(pair, _mm512_load_ps(tables + h * pair_stride)));
                }
              }
#pragma clang loop unroll(full) // compile-time trip count: every partial sum stays in a register
              for (std::size_t k = 0; k < (Pairs ? 0 : per_dword); ++k) {
                const __m512i shifted =
                    k == 0 ? columns[d] : _mm512_srli_epi32(columns[d], static_cast<unsigned>(k * Bits));
                __m512 level;
                if constexpr (Bits == 8) // the byte as the low mantissa bits of 2^23, minus 2^23 + offset (exact)
                  level = _mm512_sub_ps(
                      _mm512_castsi512_ps(_mm512_ternarylogic_epi32(shifted, byte_mask, two_to_23, 0xea)), byte_offset);
                else
                  level = _mm512_permutexvar_ps(shifted, table);
                const float* q = queries + j * per_dword + k;
                for (std::size_t h = 0; h < H; ++h)
                  parts[h][k % chains] = _mm512_fmadd_ps(_mm512_set1_ps(q[h * n]), level, parts[h][k % chains]);
              }
              if ((j + 1) % group_dwords != 0) return;
              const std::size_t g = j / group_dwords;
              for (std::size_t h = 0; h < H; ++h) {
                __m512 part = parts[h][0];
                for (std::size_t c = 1; c < chains; ++c) part = _mm512_add_ps(part, parts[h][c]);
                sums[h] = params > 0 ? _mm512_fmadd_ps(part, batch_params[g * params], sums[h])
                                     : _mm512_add_ps(part, sums[h]);
                if (params > 1)
                  sums[h] = _mm512_fmadd_ps(batch_params[g * params + 1], _mm512_set1_ps(query_sums[h][g]), sums[h]);
              }
            };
            if constexpr (fixed_chunk > 0) {
#pragma clang loop unroll(full) // whole columns unrolled: group ends and prefetch parts are compile-time
              for (std::size_t d = 0; d < fixed_chunk; ++d) column(d);
            } else {
              for (std::size_t d = 0; d < chunk_dwords; ++d) column(d);
            }
          }
          for (std::size_t h = 0; h < H; ++h) _mm512_mask_storeu_ps(scores + h * stride + first, valid, sums[h]);
        }
      };
      runs(run);
    }
  }

  // --- Keys in token lanes by integer dot products (AVX-512 VNNI) ---------------------
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
      const float m = absmax(q, unit);
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

  // The token-lane kernel above with integer dots, for records with per-token parameters:
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

  // --- 2-bit rows without parameters by pair tables (AVX-512) --------------------------
  // KIVI's keys (arXiv 2402.02750 section 3.2) come in per-channel blocks of bare 2-bit
  // rows, each block's scales folded into the query, so anything built from the query is
  // rebuilt every 32 rows. For one head, pair tables as T-MAC builds them (arXiv
  // 2407.00088; see the token-lane kernel above) pay even so when they stay in registers:
  // - rows are transposed 32 at a time into token lanes (dword d of 16 rows per vector);
  // - per dword of codes (16 channels), the 8 tables of its channel pairs are built (2
  //   operations each) and serve both batches of 16 rows: per pair and batch a shift, a
  //   permute (vpermps reads the low 4 bits of each lane) and an add;
  // - each dword's 8 lookups are added in a fixed tree, the dwords in order.
  // fp32 throughout, each table entry rounded at most twice: the query is used as it is,
  // not sliced. KIVI-2's keys, one head, 2048 in L2 on AMD Zen 5 (kvlab_bench_kernels
  // kivi2/keys): 1.64-1.65 ns per token with these tables, against 1.93-1.95 with row lanes
  // (whole rows per vector, the query folded and sliced into bytes for vpdpbusd every
  // block: a third of their time).
  static bool pair_rows_fit(const record_format& f) noexcept {
    return is_avx512 && f.kind == element_kind::affine_codes && f.bits == 2 && f.params_per_group == 0 &&
           (f.head_dim == 64 || f.head_dim == 128 || f.head_dim == 256);
  }
  // The 16-entry table of a pair of channels: entry a + 4 b is q_low level(a) + q_high
  // level(b), for lows[i] = level(i % 4) and highs[i] = level(i / 4).
  static __m512 pair_table(float q_low, float q_high, __m512 lows, __m512 highs) noexcept {
    return _mm512_fmadd_ps(_mm512_set1_ps(q_high), highs, _mm512_mul_ps(_mm512_set1_ps(q_low), lows));
  }
  // Vectors of 2 rows of 8 dwords (vector i: rows 2 i and 2 i + 1) transposed: lane t of
  // columns[d] is dword d of row t. Three rounds of 8 two-source permutes: 4 rows of 4
  // dwords, 8 rows of 2, 16 rows of 1.
  static void transpose_16x8(const __m512i (&rows)[8], __m512i (&columns)[8]) noexcept {
    const __m512i quads[2] = {_mm512_setr_epi32(0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27),
                              _mm512_setr_epi32(4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22, 23, 28, 29, 30, 31)};
    const __m512i pairs[2] = {_mm512_setr_epi32(0, 1, 4, 5, 8, 9, 12, 13, 16, 17, 20, 21, 24, 25, 28, 29),
                              _mm512_setr_epi32(2, 3, 6, 7, 10, 11, 14, 15, 18, 19, 22, 23, 26, 27, 30, 31)};
    const __m512i singles[2] = {_mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30),
                                _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31)};
    __m512i four[8], eight[8]; // four[4 h + i]: dwords 4 h to 4 h + 3 of rows 4 i to 4 i + 3
    for (std::size_t h = 0; h < 2; ++h)
      for (std::size_t i = 0; i < 4; ++i)
        four[4 * h + i] = _mm512_permutex2var_epi32(rows[2 * i], quads[h], rows[2 * i + 1]);
    // eight[4 h + 2 i + p]: dwords 4 h + 2 p and 4 h + 2 p + 1 of rows 8 i to 8 i + 7
    for (std::size_t h = 0; h < 2; ++h)
      for (std::size_t i = 0; i < 2; ++i)
        for (std::size_t p = 0; p < 2; ++p)
          eight[4 * h + 2 * i + p] = _mm512_permutex2var_epi32(four[4 * h + 2 * i], pairs[p], four[4 * h + 2 * i + 1]);
    for (std::size_t h = 0; h < 2; ++h)
      for (std::size_t p = 0; p < 2; ++p)
        for (std::size_t s = 0; s < 2; ++s)
          columns[4 * h + 2 * p + s] = _mm512_permutex2var_epi32(eight[4 * h + p], singles[s], eight[4 * h + 2 + p]);
  }
  // Calls run.template operator()<Dwords>() for f's shape (pair_rows_fit).
  template <class Run>
  static void with_pair_rows_shape(const record_format& f, Run&& run) {
    if (f.head_dim == 64) return run.template operator()<4>();
    if (f.head_dim == 128) return run.template operator()<8>();
    run.template operator()<16>();
  }
  // The kernel for any number of runs of rows, each with a query of its own (KIVI's blocks
  // fold their parameters into it): runs(run) calls run(query, records, count, scores,
  // zero_term) once per run, and the setup that depends on the format alone is done once.
  // scores[t] = query . (row t's codes - offset) for t < count, plus zero_term after it
  // when AddZeroTerm (a per-channel block's, as add_zero_terms would add it); Dwords =
  // head_dim / 16.
  template <std::size_t Dwords, bool AddZeroTerm, class Runs>
  static void pair_row_runs(const record_format& f, Runs&& runs) noexcept {
    if constexpr (is_avx512) {
      constexpr std::size_t row_bytes = 4 * Dwords, per_vector = 64 / row_bytes; // rows
      constexpr std::size_t vectors = token_lanes / per_vector;                  // per batch
      constexpr std::size_t chunk_rows = 2 * token_lanes;
      const std::size_t record_bytes = f.record_bytes;
      alignas(64) float low[token_lanes], high[token_lanes];
      for (std::size_t i = 0; i < token_lanes; ++i) {
        low[i] = static_cast<float>(i % 4) - f.offset;
        high[i] = static_cast<float>(i / 4) - f.offset;
      }
      const __m512 lows = _mm512_load_ps(low), highs = _mm512_load_ps(high);
      // Vector v of a batch of `size` rows from `batch`: its rows' code bytes, 0 past the batch.
      const auto load_rows = [&](const std::uint8_t* batch, std::size_t size, std::size_t v) {
        const std::size_t first = v * per_vector;
        __m512i x = _mm512_setzero_si512();
        for (std::size_t r = 0; r < per_vector && first + r < size; ++r) {
          const __mmask64 lanes = (row_bytes == 64 ? ~__mmask64{0} : (__mmask64{1} << row_bytes) - 1) << r * row_bytes;
          // masked-off bytes are neither read nor faulted on
          x = _mm512_mask_loadu_epi8(x, lanes, batch + (first + r) * record_bytes - r * row_bytes);
        }
        return x;
      };
      const auto run = [&](const float* query, const std::uint8_t* records, std::size_t count, float* scores,
                           float zero_term) __attribute__((always_inline)) {
        // A chunk of up to 32 rows from `first`; Full: 32 packed rows (no checks).
        const auto run_chunk = [&]<bool Full>(std::size_t first) __attribute__((always_inline)) {
          const std::size_t size = Full ? chunk_rows : std::min(chunk_rows, count - first);
          const std::size_t batches = Full ? 2 : (size + token_lanes - 1) / token_lanes;
          const std::uint8_t* chunk = records + first * record_bytes;
          const prefetch_span ahead = Full ? prefetch_span{} : lines_ahead(chunk, size * record_bytes);
          __m512i columns[2][Dwords]; // per batch: lane t of columns[b][d] is dword d of row t
          for (std::size_t b = 0; b < batches; ++b) {
            const std::uint8_t* batch = chunk + b * token_lanes * record_bytes;
            const std::size_t batch_size = Full ? token_lanes : std::min(token_lanes, size - b * token_lanes);
            __m512i rows[vectors];
            for (std::size_t v = 0; v < vectors; ++v)
              rows[v] = Full ? _mm512_loadu_si512(batch + 64 * v) : load_rows(batch, batch_size, v);
            if constexpr (Dwords == 4) {
              transpose_16x4(rows, 4, columns[b]);
            } else if constexpr (Dwords == 8) {
              transpose_16x8(rows, columns[b]);
            } else {
              transpose_dwords(rows);
              std::copy_n(rows, Dwords, columns[b]);
            }
          }
          __m512 sums[2];
#pragma clang loop unroll(full)
          for (std::size_t d = 0; d < Dwords; ++d) {
            // A full chunk is 2 Dwords lines: two per dword, without prefetch_part's loop. The
            // next chunk's lines go into L1 as well: a chunk's work cannot start before its
            // rows are loaded, and from L2 each waits (with the parameters' prefetch below,
            // KIVI-2's keys from DRAM 1.81-1.94 ns per token against 2.02-2.09).
            if constexpr (Full)
              for (std::size_t line = 2 * d; line < 2 * d + 2; ++line) {
                _mm_prefetch(reinterpret_cast<const char*>(chunk + prefetch_distance + 64 * line), _MM_HINT_T1);
                _mm_prefetch(reinterpret_cast<const char*>(chunk + chunk_rows * row_bytes + 64 * line), _MM_HINT_T0);
              }
            else
              prefetch_part(ahead, d, Dwords);
            __m512 tables[8];
            for (std::size_t k = 0; k < 8; ++k)
              tables[k] = pair_table(query[16 * d + 2 * k], query[16 * d + 2 * k + 1], lows, highs);
            for (std::size_t b = 0; b < batches; ++b) {
              __m512 parts[8]; // pair k of the dword's 16 codes: its low 4 bits shifted down
              for (std::size_t k = 0; k < 8; ++k)
                parts[k] = _mm512_permutexvar_ps(
                    k == 0 ? columns[b][d] : _mm512_srli_epi32(columns[b][d], static_cast<unsigned>(4 * k)), tables[k]);
              const __m512 dword_sum =
                  _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(parts[0], parts[1]), _mm512_add_ps(parts[2], parts[3])),
                                _mm512_add_ps(_mm512_add_ps(parts[4], parts[5]), _mm512_add_ps(parts[6], parts[7])));
              sums[b] = d == 0 ? dword_sum : _mm512_add_ps(sums[b], dword_sum);
            }
          }
          for (std::size_t b = 0; b < batches; ++b) {
            const std::size_t batch_size = Full ? token_lanes : std::min(token_lanes, size - b * token_lanes);
            __m512 batch_scores = sums[b];
            if constexpr (AddZeroTerm) batch_scores = _mm512_add_ps(batch_scores, _mm512_set1_ps(zero_term));
            _mm512_mask_storeu_ps(scores + first + b * token_lanes, static_cast<__mmask16>((1u << batch_size) - 1),
                                  batch_scores);
          }
        };
        const bool packed = record_bytes == row_bytes;
        for (std::size_t first = 0; first < count; first += chunk_rows) {
          if (packed && count - first >= chunk_rows)
            run_chunk.template operator()<true>(first);
          else
            run_chunk.template operator()<false>(first);
        }
      };
      runs(run);
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
  // dot_records with integer dots in token lanes where they pay (the isa::avx512_vnni
  // table); other formats, and queries that are not finite, take dot_records.
  static void dot_records_vnni(const record_format& f, const float* queries, std::size_t heads,
                               const std::uint8_t* records, std::size_t count, float* scores,
                               std::size_t stride) noexcept {
    if constexpr (is_avx512) {
      if (integer_dots_pay(f)) {
        const std::size_t n = f.head_dim;
        return for_each_head_pass(heads, [&]<std::size_t H>(std::size_t h) {
          sliced_query sliced[H];
          for (std::size_t k = 0; k < H; ++k)
            if (!slice_query(f, queries + (h + k) * n, sliced[k]))
              return dot_records(f, queries + h * n, H, records, count, scores + h * stride, stride);
          const auto run = [&]<unsigned Bits>() {
            with_token_lane_shape<Bits>(f, [&]<std::size_t Dwords, std::size_t GroupDwords>() {
              // the fixed group shapes are whole units of 32 channels, Bits dwords
              constexpr std::size_t unit_dwords = GroupDwords ? Bits : 0;
              dot_token_lanes_vnni<Bits, H, Dwords, GroupDwords, unit_dwords>(f, sliced, queries + h * n, records,
                                                                              count, scores + h * stride, stride);
            });
          };
          if (f.bits == 8) return run.template operator()<8>();
          run.template operator()<4>();
        });
      }
    }
    dot_records(f, queries, heads, records, count, scores, stride);
  }

  // --- Values of 2- and 4-bit codes in fixed point (the avx512_vnni table) -------------
  // Per group, the sum over tokens of w (s (code - offset) + z) is (sum of w s code) -
  // offset (sum of w s) + (sum of w z). Each token's w s is rounded once to a 32-bit
  // integer F on the caller's grid (w z to a signed Z on another), and every sum becomes
  // an exact integer sum. vpdpbusd multiplies 4 unsigned bytes by 4 signed bytes and adds
  // the 4 products to a dword: with byte j of 4 tokens' F in every dword of one vector,
  // and the same 4 tokens' code bytes of one channel position in each dword of another,
  // one instruction adds 4 tokens' byte-j products for 16 lanes. Integer sums are the same
  // in any order, so no split of a run changes them. One head per pass over the records:
  // for a GQA group the float kernel, which decodes each record once for every head, is
  // faster.
  // - F for 64 tokens at a time, 16 per vector: the parameters loaded a chunk ahead
  //   (their latency hidden), and one vpshufb per group and 16 tokens turns F into one
  //   dword of 4 bytes per byte j and 4 tokens, which the loop broadcasts from memory.
  // - A pass covers 64 channels (32 code bytes of 4-bit codes, 16 of 2-bit) of a chunk's
  //   quads of 4 records: one vpermt2b gathers 16 code bytes of each record into dwords (the
  //   4 records' bytes in each) per vector, and each vector gives 4 code vectors (see
  //   pass), each multiplied by the 4 bytes of F: 16 vpdpbusd per quad and pass.
  // - 4-bit codes: a vector is one unit of 32 channels, one group, whose F dword is
  //   broadcast. 2-bit codes: a vector holds two units, the first's bytes in even lanes and
  //   the second's in odd ones, so one broadcast qword carries both units' F.
  // - The sums stay in registers over the 64 tokens; the int32 sums go into int64 ones every
  //   2^15 tokens, before they can overflow (at most 4 * 255 * 128 per dword and 4 tokens).
  static constexpr std::size_t fixed_chunk = 64, fixed_flush = std::size_t{1} << 15;
  static constexpr std::size_t fixed_max_passes = 4, fixed_max_groups = 8; // head_dim <= 256

  // Bits, HeadDim, Groups and PerGroup (parameters per group): the shape at compile time
  // (0 when known only at run time; with the parameter count fixed, fix_batch has no
  // branches).
  template <unsigned Bits, std::size_t HeadDim, std::size_t Groups, std::size_t PerGroup>
  __attribute__((target("avx512vnni,avx512vbmi"))) static void
  axpy_fixed_one_head(const record_format& f, const float* weights, const float* grid, const std::uint8_t* records,
                      std::size_t count, std::int64_t* sums, std::uint64_t* weight_sums,
                      std::int64_t* zero_sums) noexcept {
    static_assert(Bits == 4 || Bits == 2);
    const std::size_t n = HeadDim ? HeadDim : f.head_dim, groups = Groups ? Groups : f.groups();
    const std::size_t per_group = PerGroup ? PerGroup : f.params_per_group;
    const std::size_t record_bytes = f.record_bytes, code_bytes = n * Bits / 8;
    // records of the compile-time shape, fp16 parameters and nothing else (0: no such shape)
    constexpr std::size_t shape_record_bytes =
        HeadDim && Groups && PerGroup ? HeadDim * Bits / 8 + 2 * Groups * PerGroup : 0;
    const std::size_t passes = (n + 63) / 64, units = n / 32, units_per_group = units / groups;
    // slices[g]: dword 4 q + j holds byte j of F of group g for the 4 tokens of the chunk's
    // quad q (batch b's 16 tokens fill bytes [64 b, 64 b + 64)). 2-bit codes: pairs[p] holds,
    // at 32 q + 8 j, quad q's dword j of pass p's two units side by side.
    alignas(64) std::uint8_t slices[fixed_max_groups][fixed_chunk * 4];
    alignas(64) std::uint8_t pairs[Bits == 2 ? fixed_max_passes : 1][fixed_chunk * 8];
    alignas(64) std::int32_t partial[fixed_max_passes][4][4][16]; // pass, code vector, byte j of F
    // Per group, since the last flush: the sum of F and of Z + 2^31 (Z with its sign bit
    // flipped, as unsigned) by byte, dword 4 l + j adding byte j of 4 tokens (vpdpbusd
    // with ones: one instruction per group and 16 tokens), at most 2^11 * 4 * 255 < 2^31
    // per flush.
    alignas(64) std::int32_t weight_bytes[fixed_max_groups][16], zero_bytes[fixed_max_groups][16];
    std::uint64_t call_weight_sums[fixed_max_groups] = {};
    std::int64_t call_zero_sums[fixed_max_groups] = {};
    const auto sum_of_bytes = [](const std::int32_t* lanes) {
      std::int64_t sum = 0;
      for (std::size_t d = 0; d < 16; ++d) sum += std::int64_t{lanes[d]} << (8 * (d % 4));
      return sum;
    };
    const __m512i ones = _mm512_set1_epi8(1), sign_bits = _mm512_set1_epi32(std::numeric_limits<std::int32_t>::min());
    alignas(64) std::uint8_t control[64], interleave[2][64];
    for (std::size_t k = 0; k < 64; ++k) control[k] = static_cast<std::uint8_t>(k / 16 * 16 + k % 4 * 4 + k % 16 / 4);
    // Dword m, byte k of vector v: record k's byte b of the pass's 32, from A = (r0 | r1),
    // B = (r2 | r3); b = 16 v + m (4-bit), or m / 2 and 8 + m / 2 in even and odd lanes
    // (2-bit, whose pass is the first 16 bytes).
    for (std::size_t v = 0; v < 2; ++v)
      for (std::size_t m = 0; m < 16; ++m)
        for (std::size_t k = 0; k < 4; ++k) {
          const std::size_t b = Bits == 4 ? 16 * v + m : m / 2 + 8 * (m % 2);
          interleave[v][4 * m + k] = static_cast<std::uint8_t>(k / 2 * 64 + k % 2 * 32 + b);
        }
    const __m512i by_byte = _mm512_load_si512(control);
    const __m512i first_vector = _mm512_load_si512(interleave[0]), second_vector = _mm512_load_si512(interleave[1]);

    // The fp16 parameters of a chunk's batches of 16 records, two per dword (the first in
    // its low half), 0 past the end. Parameter k is group k / per_group's number k % per_group.
    const std::size_t params = groups * per_group;
    __m512i chunk_params[fixed_chunk / 16][fixed_max_groups];
    const auto load_chunk_params = [&](std::size_t first) __attribute__((always_inline)) {
      const std::size_t size = std::min(fixed_chunk, count - first);
      for (std::size_t b = 0; 16 * b < size; ++b)
        load_dword_columns(records + (first + 16 * b) * record_bytes + code_bytes, record_bytes,
                           std::min<std::size_t>(16, size - 16 * b), 2 * params, chunk_params[b]);
    };
    // F (and Z) of batch b's 16 tokens into slices (and pairs).
    const auto fix_batch = [&](std::size_t first, std::size_t size,
                               std::size_t b) __attribute__((always_inline, target("avx512vnni,avx512vbmi"))) {
      const __mmask16 valid = static_cast<__mmask16>((1u << std::min<std::size_t>(16, size - 16 * b)) - 1);
      const __m512 w = _mm512_maskz_loadu_ps(valid, weights + first + 16 * b);
      const auto add_bytes = [&](std::int32_t* lanes, __m512i x) __attribute__((always_inline, target("avx512vnni"))) {
        _mm512_store_si512(lanes, _mm512_dpbusd_epi32(_mm512_load_si512(lanes), x, ones));
      };
      for (std::size_t g = 0; g < groups; ++g) {
        const float* grids = grid + g * per_group;
        const __m512 x =
            _mm512_mul_ps(_mm512_mul_ps(w, _mm512_set1_ps(grids[0])), fp16_parameter(chunk_params[b], g * per_group));
        const __m512i fixed = _mm512_cvt_roundps_epu32(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        const __m512i fixed_bytes = _mm512_shuffle_epi8(fixed, by_byte);
        _mm512_store_si512(slices[g] + 64 * b, fixed_bytes);
        add_bytes(weight_bytes[g], fixed_bytes);
        if (per_group == 2) {
          const __m512 z = _mm512_mul_ps(_mm512_mul_ps(w, _mm512_set1_ps(grids[1])),
                                         fp16_parameter(chunk_params[b], g * per_group + 1));
          const __m512i zero = _mm512_cvt_roundps_epi32(z, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
          add_bytes(zero_bytes[g], _mm512_shuffle_epi8(_mm512_maskz_xor_epi32(valid, zero, sign_bits), by_byte));
        }
      }
      if constexpr (Bits == 2)
        for (std::size_t p = 0; p < passes; ++p) {
          const std::size_t unit = 2 * p, second = std::min(unit + 1, units - 1);
          const __m512i a = _mm512_load_si512(slices[unit / units_per_group] + 64 * b);
          const __m512i c = _mm512_load_si512(slices[second / units_per_group] + 64 * b);
          const __m512i low = _mm512_unpacklo_epi32(a, c), high = _mm512_unpackhi_epi32(a, c);
          _mm512_store_si512(pairs[p] + 128 * b,
                             _mm512_permutex2var_epi64(low, _mm512_setr_epi64(0, 1, 8, 9, 2, 3, 10, 11), high));
          _mm512_store_si512(pairs[p] + 128 * b + 64,
                             _mm512_permutex2var_epi64(low, _mm512_setr_epi64(4, 5, 12, 13, 6, 7, 14, 15), high));
        }
    };
    // Pass p over a chunk's quads (all 16 when Full, with no check for records past the
    // end). The code vectors of a vector of code bytes x:
    // - 4-bit: x & 0x0F, and x ^ 0x80 read as signed (x - 128), which give the high
    //   nibbles' sum as (sum(F (x - 128)) - sum(F low) + 128 sum(F)) / 16;
    // - 2-bit: x & 0x03, x & 0x0C, x & 0x30 (the codes times 1, 4, 16) and x ^ 0x80, which
    //   give the top codes' sum the same way, over 64.
    // One instruction per code vector instead of a shift and a mask. A pass of a last odd
    // unit has the second unit's bytes masked to zero, its sums never read. Not inlined:
    // its 16 sums, 4 code vectors and F fit the 32 vector registers only without the rest
    // of the kernel's live values (inlined, 4 sums go to the stack and back every quad).
    struct chunk_run {
      const std::uint8_t* records;
      std::size_t size;
      prefetch_span ahead, next; // lines 8 KiB past the next chunk into L2; the next chunk's into L1
    };
    // QuadLines (not 0): a whole chunk followed by a whole one, of records of the shape's
    // size, whose lines are asked for in straight lines, QuadLines per quad (prefetch_part's
    // loop took a third of a pass's instructions).
    const auto pass = [&]<bool Full, std::size_t QuadLines>(const chunk_run& chunk, std::size_t p) __attribute__((
                          noinline, target("avx512vnni,avx512vbmi"))) {
      const std::size_t chunk_quads = Full ? fixed_chunk / 4 : (chunk.size + 3) / 4;
      constexpr std::size_t pass_bytes = 8 * Bits; // 64 channels
      const std::size_t bytes = std::min<std::size_t>(pass_bytes, code_bytes - pass_bytes * p);
      // 2-bit codes load 32 bytes of which the pass uses 16: the rest masked off too
      const __mmask32 byte_mask = bytes == 32 ? ~__mmask32{0} : (__mmask32{1} << bytes) - 1;
      const std::size_t unit = 2 * p, second = std::min(unit + 1, units - 1);
      const std::size_t first_group = unit / units_per_group, second_group = second / units_per_group;
      const __m512i high_bits = _mm512_set1_epi8(static_cast<char>(0x80));
      __m512i acc[4][4]; // [code vector][byte j of F]
      for (std::size_t v = 0; v < 4; ++v)
        for (std::size_t j = 0; j < 4; ++j) acc[v][j] = _mm512_load_si512(partial[p][v][j]);
      for (std::size_t q = 0; q < chunk_quads; ++q) {
        if constexpr (QuadLines != 0) {
          const std::uint8_t* next_quad = chunk.records + (fixed_chunk + 4 * q) * record_bytes;
          for (std::size_t k = 0; k < QuadLines; ++k) {
            if (p == 0)
              _mm_prefetch(reinterpret_cast<const char*>(next_quad + prefetch_distance + 64 * k), _MM_HINT_T1);
            if (p == passes - 1) _mm_prefetch(reinterpret_cast<const char*>(next_quad + 64 * k), _MM_HINT_T0);
          }
        } else {
          if (p == 0) prefetch_part(chunk.ahead, q, chunk_quads);
          if (p == passes - 1) prefetch_part<_MM_HINT_T0>(chunk.next, q, chunk_quads);
        }
        const std::uint8_t* quad = chunk.records + 4 * q * record_bytes + pass_bytes * p;
        // head_dim 128 (HeadDim) takes every pass's bytes whole: plain loads, which from DRAM
        // measured faster than masked ones (KIVI-2's values 1.76-1.82 ns per token against
        // 1.88-1.96)
        const auto half = [&](std::size_t k) __attribute__((always_inline)) {
          if (Full || 4 * q + k < chunk.size) {
            if (HeadDim != 0 && Bits == 2)
              return _mm256_zextsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(quad + k * record_bytes)));
            if (HeadDim != 0 && Bits == 4)
              return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(quad + k * record_bytes));
            return _mm256_maskz_loadu_epi8(byte_mask, quad + k * record_bytes);
          }
          return _mm256_setzero_si256();
        };
        const __m512i a = _mm512_inserti64x4(_mm512_castsi256_si512(half(0)), half(1), 1);
        const __m512i b = _mm512_inserti64x4(_mm512_castsi256_si512(half(2)), half(3), 1);
        __m512i codes[4];
        if constexpr (Bits == 4) {
          const __m512i first = _mm512_permutex2var_epi8(a, first_vector, b);
          const __m512i second = _mm512_permutex2var_epi8(a, second_vector, b);
          const __m512i low_nibbles = _mm512_set1_epi8(0x0F);
          codes[0] = _mm512_and_si512(first, low_nibbles);
          codes[1] = _mm512_xor_si512(first, high_bits);
          codes[2] = _mm512_and_si512(second, low_nibbles);
          codes[3] = _mm512_xor_si512(second, high_bits);
          for (std::size_t j = 0; j < 4; ++j) {
            std::int32_t first_bytes, second_bytes; // quad q's dword j
            std::memcpy(&first_bytes, slices[first_group] + 16 * q + 4 * j, 4);
            std::memcpy(&second_bytes, slices[second_group] + 16 * q + 4 * j, 4);
            const __m512i first_j = _mm512_set1_epi32(first_bytes), second_j = _mm512_set1_epi32(second_bytes);
            acc[0][j] = _mm512_dpbusd_epi32(acc[0][j], first_j, codes[0]);
            acc[1][j] = _mm512_dpbusd_epi32(acc[1][j], first_j, codes[1]);
            acc[2][j] = _mm512_dpbusd_epi32(acc[2][j], second_j, codes[2]);
            acc[3][j] = _mm512_dpbusd_epi32(acc[3][j], second_j, codes[3]);
          }
        } else {
          const __m512i x = _mm512_permutex2var_epi8(a, first_vector, b);
          codes[0] = _mm512_and_si512(x, _mm512_set1_epi8(0x03));
          codes[1] = _mm512_and_si512(x, _mm512_set1_epi8(0x0C));
          codes[2] = _mm512_and_si512(x, _mm512_set1_epi8(0x30));
          codes[3] = _mm512_xor_si512(x, high_bits);
          for (std::size_t j = 0; j < 4; ++j) {
            std::int64_t both; // quad q's dword j of the two units
            std::memcpy(&both, pairs[p] + 32 * q + 8 * j, 8);
            const __m512i f_j = _mm512_set1_epi64(both);
            for (std::size_t v = 0; v < 4; ++v) acc[v][j] = _mm512_dpbusd_epi32(acc[v][j], f_j, codes[v]);
          }
        }
      }
      for (std::size_t v = 0; v < 4; ++v)
        for (std::size_t j = 0; j < 4; ++j) _mm512_store_si512(partial[p][v][j], acc[v][j]);
    };

    // totals[p][v][lane]: the call's sum of F times code vector v of pass p, per lane.
    alignas(64) std::int64_t totals[fixed_max_passes][4][16] = {};
    if (count > 0) load_chunk_params(0);
    for (std::size_t begin = 0; begin < count; begin += fixed_flush) {
      const std::size_t end = std::min(count, begin + fixed_flush);
      std::memset(partial, 0, sizeof partial);
      std::memset(weight_bytes, 0, sizeof weight_bytes);
      std::memset(zero_bytes, 0, sizeof zero_bytes);
      for (std::size_t first = begin; first < end; first += fixed_chunk) {
        const std::size_t size = std::min(fixed_chunk, end - first);
        const std::uint8_t* chunk_records = records + first * record_bytes;
        // The next chunk's parameters are the first loads of its lines, so the lines asked
        // for lead by a chunk more than in the other loops: 8 KiB past the next chunk. With
        // 8 KiB past this one, int4 records (a chunk is 4.6 KB) left those loads waiting on
        // lines still in flight: on AMD Zen 5 int4 attention took 8.8-9.1 ns per token
        // against 6.0-6.2 with the float loop; with the lead, 6.3-6.4. They are loaded after
        // this chunk's passes, not before: from DRAM the values alone took 2.05-2.25 ns per
        // token against 2.35-2.5 (int4@group(32)) and 1.93-2.05 against 2.0-2.3 (KIVI-2's),
        // with the same times in L2 and L3. The last pass asks for the next chunk's lines
        // into L1 (in the first pass that cost 5-9 % in L2 and L3): otherwise whether those
        // loads found their lines in L1 depended on where the linker put the code (the
        // hardware's L1 prefetchers go by the loads' addresses). KIVI-2 attention, one
        // benchmark binary linked at four code offsets 16 bytes apart: 4.57-5.66 ns per
        // token without, 4.57-4.91 with.
        const std::uint8_t* next_records = chunk_records + fixed_chunk * record_bytes;
        const std::size_t next_size =
            first + fixed_chunk < count ? std::min(fixed_chunk, count - first - fixed_chunk) : 0;
        const chunk_run chunk{chunk_records, size, lines_ahead(next_records, size * record_bytes),
                              lines_covering(next_records, next_size * record_bytes)};
        for (std::size_t b = 0; 16 * b < size; ++b) fix_batch(first, size, b);
        for (std::size_t p = 0; p < passes; ++p) {
          if (size == fixed_chunk && next_size == fixed_chunk && record_bytes == shape_record_bytes)
            pass.template operator()<true, (4 * shape_record_bytes + 63) / 64>(chunk, p);
          else if (size == fixed_chunk)
            pass.template operator()<true, 0>(chunk, p);
          else
            pass.template operator()<false, 0>(chunk, p);
        }
        if (first + fixed_chunk < count) load_chunk_params(first + fixed_chunk);
      }
      // totals += sum over j of partial << 8 j, 8 lanes at a time
      for (std::size_t p = 0; p < passes; ++p)
        for (std::size_t v = 0; v < 4; ++v)
          for (std::size_t half = 0; half < 2; ++half) {
            std::int64_t* out = totals[p][v] + 8 * half;
            __m512i total = _mm512_load_si512(out);
            for (std::size_t j = 0; j < 4; ++j) {
              const __m256i lanes = _mm256_load_si256(reinterpret_cast<const __m256i*>(partial[p][v][j] + 8 * half));
              total = _mm512_add_epi64(total, _mm512_slli_epi64(_mm512_cvtepi32_epi64(lanes), 8 * j));
            }
            _mm512_store_si512(out, total);
          }
      for (std::size_t g = 0; g < groups; ++g) {
        call_weight_sums[g] += static_cast<std::uint64_t>(sum_of_bytes(weight_bytes[g]));
        call_zero_sums[g] +=
            sum_of_bytes(zero_bytes[g]) - static_cast<std::int64_t>(end - begin) * (std::int64_t{1} << 31);
      }
    }
    for (std::size_t g = 0; g < groups; ++g) {
      weight_sums[g] += call_weight_sums[g];
      if (per_group == 2) zero_sums[g] += call_zero_sums[g];
    }
    const std::size_t group_bytes = f.group_channels * Bits / 8;
    for (std::size_t p = 0; p < passes; ++p)
      for (std::size_t lane = 0; lane < 16; ++lane) {
        if constexpr (Bits == 4) {
          for (std::size_t vector = 0; vector < 2; ++vector) {
            const std::size_t byte = 32 * p + 16 * vector + lane;
            if (byte >= code_bytes) continue;
            const auto weight_sum = static_cast<std::int64_t>(call_weight_sums[byte / group_bytes]);
            const std::int64_t low = totals[p][2 * vector][lane], bytes = totals[p][2 * vector + 1][lane];
            sums[2 * byte] += low;
            sums[2 * byte + 1] += (bytes - low + 128 * weight_sum) / 16;
          }
        } else {
          const std::size_t byte = 16 * p + lane / 2 + 8 * (lane % 2);
          if (byte >= code_bytes) continue;
          const auto weight_sum = static_cast<std::int64_t>(call_weight_sums[byte / group_bytes]);
          const std::int64_t c0 = totals[p][0][lane], c1 = totals[p][1][lane], c2 = totals[p][2][lane];
          const std::int64_t bytes = totals[p][3][lane];
          sums[4 * byte] += c0;
          sums[4 * byte + 1] += c1 / 4;
          sums[4 * byte + 2] += c2 / 16;
          sums[4 * byte + 3] += (bytes + 128 * weight_sum - c0 - c1 - c2) / 64;
        }
      }
  }

  static void axpy_records_fixed(const record_format& f, const float* weights, std::size_t stride, std::size_t heads,
                                 const float* grid, const std::uint8_t* records, std::size_t count, std::int64_t* sums,
                                 std::uint64_t* weight_sums, std::int64_t* zero_sums) noexcept {
    if constexpr (is_avx512) {
      if (fixed_point_values(f)) {
        const std::size_t n = f.head_dim, groups = f.groups(), per_group = f.params_per_group;
        for (std::size_t h = 0; h < heads; ++h) {
          const auto run = [&]<unsigned Bits, std::size_t HeadDim, std::size_t Groups>() {
            const auto with = [&]<std::size_t PerGroup>() {
              axpy_fixed_one_head<Bits, HeadDim, Groups, PerGroup>(
                  f, weights + h * stride, grid + h * groups * per_group, records, count, sums + h * n,
                  weight_sums + h * groups, zero_sums ? zero_sums + h * groups : nullptr);
            };
            if constexpr (HeadDim == 0)
              with.template operator()<0>();
            else if (per_group == 2) // scale and zero (KIVI's values); else a scale alone (int4)
              with.template operator()<2>();
            else
              with.template operator()<1>();
          };
          const auto shapes = [&]<unsigned Bits>() {
            if (n == 128 && groups == 4)
              run.template operator()<Bits, 128, 4>();
            else if (n == 128 && groups == 1)
              run.template operator()<Bits, 128, 1>();
            else
              run.template operator()<Bits, 0, 0>();
          };
          if (f.bits == 4)
            shapes.template operator()<4>();
          else
            shapes.template operator()<2>();
        }
        return;
      }
    }
    scalar::axpy_records_fixed(f, weights, stride, heads, grid, records, count, sums, weight_sums, zero_sums);
  }

  // Calls use.template operator()<Dwords, GroupDwords>() for a token-lane record format, with
  // head_dim 128's shapes fixed at compile time (4 * Bits dwords of codes; groups of 32
  // channels, Bits dwords, or of the whole record), 0 for what is known only at run time.
  template <unsigned Bits, class Use>
  static void with_token_lane_shape(const record_format& f, Use&& use) noexcept {
    constexpr std::size_t dwords_of_128 = 4 * Bits;
    if (f.head_dim != 128) return use.template operator()<0, 0>();
    if (f.params_per_group == 0 || f.group_channels == 128)
      return use.template operator()<dwords_of_128, dwords_of_128>();
    if (f.group_channels == 32) return use.template operator()<dwords_of_128, Bits>();
    use.template operator()<dwords_of_128, 0>();
  }

  // Calls use.template operator()<H>() for the heads [h, h + H) of every pass.
  template <class Use>
  static void for_each_head_pass(std::size_t heads, Use&& use) noexcept {
    for (std::size_t h = 0; h < heads; h += max_heads) {
      switch (std::min(max_heads, heads - h)) {
      case 1: use.template operator()<1>(h); break;
      case 2: use.template operator()<2>(h); break;
      case 3: use.template operator()<3>(h); break;
      default: use.template operator()<4>(h); break;
      }
    }
  }

  // Calls use.template operator()<Affine, Bits>() for a format vector_records accepts.
  template <class Use>
  static void with_codes(const record_format& f, Use&& use) noexcept {
    const auto with_bits = [&]<bool Affine>() {
      if (f.bits == 8) return use.template operator()<Affine, 8>();
      if (f.bits == 4) return use.template operator()<Affine, 4>();
      return use.template operator()<Affine, 2>();
    };
    if (f.kind == element_kind::affine_codes) return with_bits.template operator()<true>();
    return with_bits.template operator()<false>();
  }

  static void dot_records(const record_format& f, const float* queries, std::size_t heads, const std::uint8_t* records,
                          std::size_t count, float* scores, std::size_t stride) noexcept {
    const std::size_t n = f.head_dim;
    const auto rows = [&]<floats (*load)(const std::uint8_t*), std::size_t bytes,
                          float (*scalar_load)(const std::uint8_t*, std::size_t)>() {
      for_each_head_pass(heads, [&]<std::size_t H>(std::size_t h) {
        dot_rows<load, bytes, scalar_load, H>(f, queries + h * n, records, count, scores + h * stride, stride);
      });
    };
    switch (f.kind) {
    case element_kind::f32: return rows.template operator()<&load_f32, 4, &scalar::load_f32>();
    case element_kind::f16: return rows.template operator()<&load_f16, 2, &scalar::load_f16>();
    case element_kind::bf16: return rows.template operator()<&load_bf16, 2, &scalar::load_bf16>();
    case element_kind::affine_codes:
    case element_kind::table_codes: break;
    }
    // 8-bit codes for one head stay in channel lanes: the one-head kernel there is faster.
    if (token_lanes_fit(f) && (f.bits < 8 || heads > 1)) {
      const auto with_bits = [&]<unsigned Bits>() {
        for_each_head_pass(heads, [&]<std::size_t H>(std::size_t h) {
          if constexpr (Bits == 2 && H == 1)
            if (pair_rows_fit(f))
              return with_pair_rows_shape(f, [&]<std::size_t Dwords>() {
                pair_row_runs<Dwords, false>(f, [&](const auto& run) __attribute__((always_inline)) {
                  run(queries + h * n, records, count, scores + h * stride, 0.0f);
                });
              });
          with_token_lane_shape<Bits>(f, [&]<std::size_t Dwords, std::size_t GroupDwords>() {
            if constexpr (Bits == 2)
              if (pair_tables_pay(f))
                return dot_token_lanes<Bits, H, Dwords, GroupDwords, true>(f, queries + h * n, records, count,
                                                                           scores + h * stride, stride);
            dot_token_lanes<Bits, H, Dwords, GroupDwords, false>(f, queries + h * n, records, count,
                                                                 scores + h * stride, stride);
          });
        });
      };
      if (f.bits == 8) return with_bits.template operator()<8>();
      if (f.bits == 4) return with_bits.template operator()<4>();
      return with_bits.template operator()<2>();
    }
    if (!vector_records(f)) return scalar::dot_records(f, queries, heads, records, count, scores, stride);
    with_codes(f, [&]<bool Affine, unsigned Bits>() {
      constexpr std::size_t per_byte = 8 / Bits;
      alignas(64) float split[per_byte > 1 ? max_heads * max_head_dim : 1]; // 8-bit codes are in order
      for_each_head_pass(heads, [&]<std::size_t H>(std::size_t h) {
        if constexpr (per_byte == 1)
          return dot_coded<Affine, Bits, H>(f, queries + h * n, records, count, scores + h * stride, stride);
        for (std::size_t k = 0; k < H; ++k) split_order<per_byte>(queries + (h + k) * n, n, split + k * n);
        dot_coded<Affine, Bits, H>(f, split, records, count, scores + h * stride, stride);
      });
    });
  }

  static void axpy_records(const record_format& f, const float* weights, std::size_t stride, std::size_t heads,
                           const std::uint8_t* records, std::size_t count, float* acc) noexcept {
    const std::size_t n = f.head_dim;
    const auto rows = [&]<floats (*load)(const std::uint8_t*), std::size_t bytes,
                          float (*scalar_load)(const std::uint8_t*, std::size_t)>() {
      for_each_head_pass(heads, [&]<std::size_t H>(std::size_t h) {
        axpy_rows<load, bytes, scalar_load, H>(f, weights + h * stride, stride, records, count, acc + h * n);
      });
    };
    switch (f.kind) {
    case element_kind::f32: return rows.template operator()<&load_f32, 4, &scalar::load_f32>();
    case element_kind::f16: return rows.template operator()<&load_f16, 2, &scalar::load_f16>();
    case element_kind::bf16: return rows.template operator()<&load_bf16, 2, &scalar::load_bf16>();
    case element_kind::affine_codes:
    case element_kind::table_codes: break;
    }
    if (!vector_records(f)) return scalar::axpy_records(f, weights, stride, heads, records, count, acc);
    with_codes(f, [&]<bool Affine, unsigned Bits>() {
      constexpr std::size_t per_byte = 8 / Bits;
      alignas(64) float split[per_byte > 1 ? max_heads * max_head_dim : 1];
      for_each_head_pass(heads, [&]<std::size_t H>(std::size_t h) {
        if constexpr (per_byte == 1)
          return axpy_coded<Affine, Bits, H>(f, weights + h * stride, stride, records, count, acc + h * n);
        for (std::size_t k = 0; k < H; ++k) split_order<per_byte>(acc + (h + k) * n, n, split + k * n);
        axpy_coded<Affine, Bits, H>(f, weights + h * stride, stride, records, count, split);
        for (std::size_t k = 0; k < H; ++k) merge_order<per_byte>(split + k * n, n, acc + (h + k) * n);
      });
    });
  }

  // KIVI's layout of per-channel parameters: a channel's fp16 scale and zero are the low and
  // high half of a dword. The scales and zeros of channels [c, c + 16).
  static std::pair<floats, floats> kivi_params(const std::uint8_t* params, std::size_t c) noexcept {
    const __m512i pairs = _mm512_loadu_si512(params + 4 * c);
    return {floats(_mm512_cvtph_ps(_mm512_cvtepi32_epi16(pairs))),
            floats(_mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(pairs, 16))))};
  }
  // fold_channel_params for one head and KIVI's layout (n a multiple of 16), the scales and
  // zeros used as they are converted: the same operations in the same order, bit for bit.
  static void fold_kivi_params(const std::uint8_t* params, std::size_t n, const float* query, float* scaled,
                               float& zero_term) noexcept {
    floats zero_sum(0.0f);
    for (std::size_t c = 0; c < n; c += width) {
      const auto [scales, zeros] = kivi_params(params, c);
      const floats q = floats::load_unaligned(query + c);
      (q * scales).store_unaligned(scaled + c);
      zero_sum = fmadd(q, zeros, zero_sum);
    }
    zero_term = xsimd::hadd(zero_sum);
  }
  static void fold_channel_params(const std::uint8_t* params, std::size_t n, unsigned per_channel, bool params_f32,
                                  const float* queries, std::size_t heads, float* scaled, float* zero_terms) noexcept {
    if (n > max_head_dim || per_channel > 2)
      return scalar::fold_channel_params(params, n, per_channel, params_f32, queries, heads, scaled, zero_terms);
    alignas(64) float values[2 * max_head_dim], scales[max_head_dim], zeros[max_head_dim];
    const std::size_t count = n * per_channel, full = count / width * width;
    if (is_avx512 && !params_f32 && per_channel == 2 && n % width == 0) {
      if constexpr (is_avx512)
        for (std::size_t c = 0; c < n; c += width) {
          const auto [channel_scales, channel_zeros] = kivi_params(params, c);
          channel_scales.store_aligned(scales + c);
          channel_zeros.store_aligned(zeros + c);
        }
    } else {
      if (params_f32) {
        std::memcpy(values, params, 4 * count);
      } else {
        for (std::size_t i = 0; i < full; i += width) load_f16(params + 2 * i).store_aligned(values + i);
        for (std::size_t i = full; i < count; ++i) values[i] = scalar::load_f16(params, i);
      }
      for (std::size_t c = 0; c < n; ++c) {
        scales[c] = values[c * per_channel];
        zeros[c] = per_channel > 1 ? values[c * per_channel + 1] : 0.0f;
      }
    }
    const std::size_t channels = n / width * width;
    for (std::size_t h = 0; h < heads; ++h) {
      const float* query = queries + h * n;
      floats zero_sum(0.0f);
      for (std::size_t c = 0; c < channels; c += width) {
        const floats q = floats::load_unaligned(query + c);
        (q * floats::load_aligned(scales + c)).store_unaligned(scaled + h * n + c);
        zero_sum = fmadd(q, floats::load_aligned(zeros + c), zero_sum);
      }
      float zero_term = xsimd::hadd(zero_sum);
      for (std::size_t c = channels; c < n; ++c) {
        scaled[h * n + c] = query[c] * scales[c];
        zero_term += query[c] * zeros[c];
      }
      zero_terms[h] = zero_term;
    }
  }

  // Per-channel blocks (KIVI's keys, arXiv 2402.02750 section 3.2) of a whole stream in one
  // call. Rows of 2- and 4-bit codes on AVX-512 take the token-lane kernel that dot_records
  // would (without pair tables: rows without parameters never pay for them), with its setup
  // (constants, shape dispatch) done once per call instead of once per block: each block
  // folds its parameters into the queries and runs its rows. Other rows go block by block
  // through fold_channel_params and dot_records. Either way the same arithmetic as those
  // calls.
  static void dot_channel_blocks(const record_format& f, const channel_block* blocks, std::size_t count,
                                 unsigned per_channel, bool params_f32, const float* queries, std::size_t heads,
                                 float* scores, std::size_t stride) noexcept {
    const std::size_t n = f.head_dim;
    if constexpr (is_avx512)
      if (token_lanes_fit(f) && f.bits < 8 && f.params_per_group == 0) {
        alignas(64) float scaled[max_heads * max_head_dim];
        float zero_terms[max_heads];
        const auto with_bits = [&]<unsigned Bits>() {
          for_each_head_pass(heads, [&]<std::size_t H>(std::size_t h) {
            if constexpr (Bits == 2 && H == 1)
              if (pair_rows_fit(f))
                return with_pair_rows_shape(f, [&]<std::size_t Dwords>() {
                  pair_row_runs<Dwords, true>(f, [&](const auto& run) __attribute__((always_inline)) {
                    const bool kivi_layout = per_channel == 2 && !params_f32;
                    for (std::size_t b = 0; b < count; ++b) {
                      const channel_block& block = blocks[b];
                      // The parameters of the block 8 ahead into L2 (they are a stream of their
                      // own, apart from the rows), and the next block's into L1 while this
                      // block's rows are worked on: its fold loads them first thing. KIVI's are 4
                      // head_dim bytes, Dwords lines and one more when they start mid-line, asked
                      // for without prefetch_part's loop (in L2 that loop cost KIVI-2's keys 8 %).
                      const auto prefetch_params = [&]<int Hint>(std::size_t ahead) __attribute__((always_inline)) {
                        if (kivi_layout && b + ahead < count)
                          for (std::size_t line = 0; line <= Dwords; ++line)
                            _mm_prefetch(reinterpret_cast<const char*>(blocks[b + ahead].params + 64 * line), Hint);
                      };
                      prefetch_params.template operator()<_MM_HINT_T1>(8);
                      prefetch_params.template operator()<_MM_HINT_T0>(1);
                      if (kivi_layout)
                        fold_kivi_params(block.params, n, queries + h * n, scaled, zero_terms[0]);
                      else
                        fold_channel_params(block.params, n, per_channel, params_f32, queries + h * n, 1, scaled,
                                            zero_terms);
                      run(scaled, block.rows, block.count, scores + h * stride + block.first, zero_terms[0]);
                    }
                  });
                });
            with_token_lane_shape<Bits>(f, [&]<std::size_t Dwords, std::size_t GroupDwords>() {
              token_lane_runs<Bits, H, Dwords, GroupDwords, false>(f, stride, [&](const auto& run) {
                for (std::size_t b = 0; b < count; ++b) {
                  const channel_block& block = blocks[b];
                  float* block_scores = scores + h * stride + block.first;
                  fold_channel_params(block.params, n, per_channel, params_f32, queries + h * n, H, scaled, zero_terms);
                  run(scaled, block.rows, block.count, block_scores);
                  scalar::add_zero_terms(zero_terms, H, block.count, block_scores, stride);
                }
              });
            });
          });
        };
        if (f.bits == 4) return with_bits.template operator()<4>();
        return with_bits.template operator()<2>();
      }
    // dot_records' choice of kernel depends on the number of heads: all heads at once
    std::vector<float> scaled(heads * n), zero_terms(heads);
    for (std::size_t b = 0; b < count; ++b) {
      const channel_block& block = blocks[b];
      fold_channel_params(block.params, n, per_channel, params_f32, queries, heads, scaled.data(), zero_terms.data());
      dot_records(f, scaled.data(), heads, block.rows, block.count, scores + block.first, stride);
      scalar::add_zero_terms(zero_terms.data(), heads, block.count, scores + block.first, stride);
    }
  }

  // The vector conversion rounds to nearest even as float_to_half_bits does; only NaN
  // payloads differ (the reference makes every NaN sign | 0x7e00), so a vector holding a
  // NaN is converted element by element.
  static void floats_to_f16(const float* x, std::size_t n, std::uint16_t* out) noexcept {
    std::size_t i = 0;
    for (; i + width <= n; i += width) {
      const floats v = floats::load_unaligned(x + i);
      if (xsimd::any(xsimd::isnan(v))) {
        scalar::floats_to_f16(x + i, width, out + i);
      } else if constexpr (is_avx512) {
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i),
                            _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
      } else {
        _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i),
                         _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
      }
    }
    scalar::floats_to_f16(x + i, n - i, out + i);
  }
  static void f16_to_floats(const std::uint16_t* h, std::size_t n, float* out) noexcept {
    std::size_t i = 0;
    for (; i + width <= n; i += width) load_f16(reinterpret_cast<const std::uint8_t*>(h + i)).store_unaligned(out + i);
    scalar::f16_to_floats(h + i, n - i, out + i);
  }

  // e^x for the shifted scores (x <= 0, -inf or NaN) on AVX-512, within 1 ulp (0.94 at
  // most over every float in [-87.3, 0], against double exp):
  // x = k ln 2 + r with |r| <= ln 2 / 2 (Cody and Waite, "Software Manual for the
  // Elementary Functions", 1980: ln 2 in two parts, the first exact in k ln 2), e^r by its
  // Taylor polynomial to r^7 (truncation below 2^-27), then times 2^k by vscalefps, which
  // rounds once into the subnormals and gives 0 below them. 13 operations against xsimd's
  // exp, which guards the whole float range (AMD Zen 5: softmax 0.23 ns per score against
  // 0.295). x is clamped below at -104 (e^-104 is below the smallest subnormal), so -inf
  // gives 0; NaN passes through the clamp and stays NaN.
  static __m512 exp_of_shifted(__m512 x) noexcept {
    x = _mm512_max_ps(_mm512_set1_ps(-104.0f), x); // NaN: the second operand
    const __m512 k = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(0x1.715476p+0f)),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(k, _mm512_set1_ps(0x1.62e4p-1f), x); // ln 2 to 16 bits: k times it is exact
    r = _mm512_fnmadd_ps(k, _mm512_set1_ps(0x1.7f7d1cp-20f), r);     // the rest of ln 2
    __m512 p = _mm512_set1_ps(1.0f / 5040.0f);
    for (const float c : {1.0f / 720.0f, 1.0f / 120.0f, 1.0f / 24.0f, 1.0f / 6.0f, 0.5f, 1.0f, 1.0f})
      p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(c));
    return _mm512_scalef_ps(p, k);
  }
  // The exponentials (exp_of_shifted on AVX-512, xsimd's vector exp otherwise, each within
  // 2 ulp of std::exp) summed in double, as the scalar reference sums them, four at a time:
  // two vectors are added in float, then the two halves of that, and the result converted
  // once. Each term rounds twice, so for these positive values the sum stays within 2^-23
  // of their exact sum; a conversion per vector, and one for each half, cost more (AMD Zen
  // 5 runs one vcvtps2pd and one vextractf32x8 per cycle: kvlab_bench_kernels kivi2/softmax
  // 590-596 ns for 2048 scores with two conversions per vector, 490-493 with this). The
  // elements the vectors do not cover are padded with -inf (exp = 0) so every element takes
  // the same path.
  static float softmax(float* scores, std::size_t n) noexcept {
    const std::size_t full = n / width * width;
    alignas(64) float tail[width];
    std::fill_n(tail, width, -INFINITY);
    std::copy(scores + full, scores + n, tail);
    // four running maxima: one chain of vmaxps waited on its latency (the largest is the
    // same in any order)
    floats tops[4] = {floats::load_aligned(tail), floats(-INFINITY), floats(-INFINITY), floats(-INFINITY)};
    std::size_t i = 0;
    for (; i + 4 * width <= full; i += 4 * width)
      for (std::size_t k = 0; k < 4; ++k) tops[k] = xsimd::max(tops[k], floats::load_unaligned(scores + i + k * width));
    for (; i < full; i += width) tops[0] = xsimd::max(tops[0], floats::load_unaligned(scores + i));
    const float max = reduce(xsimd::max(xsimd::max(tops[0], tops[1]), xsimd::max(tops[2], tops[3])), max_op);
    const floats shift(max);
    using doubles = xsimd::batch<double, Arch>;
    // e^(x - max) for the vector at `at`, stored there
    const auto exps = [&](float* at) {
      floats e;
      if constexpr (is_avx512)
        e = exp_of_shifted(floats::load_unaligned(at) - shift);
      else
        e = xsimd::exp(floats::load_unaligned(at) - shift);
      e.store_unaligned(at);
      return e;
    };
    const auto halves_in_double = [](floats x) {
      if constexpr (is_avx512)
        return doubles(_mm512_cvtps_pd(_mm256_add_ps(_mm512_castps512_ps256(x), _mm512_extractf32x8_ps(x, 1))));
      else
        return doubles(_mm256_cvtps_pd(_mm_add_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1))));
    };
    doubles sums(0.0);
    std::size_t pairs_end = 0; // the vectors before it went in two at a time
    for (; pairs_end + 2 * width <= full; pairs_end += 2 * width) {
      const floats first = exps(scores + pairs_end);
      sums += halves_in_double(first + exps(scores + pairs_end + width));
    }
    if (pairs_end < full) sums += halves_in_double(exps(scores + pairs_end));
    if (full < n) {
      sums += halves_in_double(exps(tail));
      std::copy(tail, tail + (n - full), scores + full);
    }
    alignas(64) double lanes[doubles::size];
    sums.store_aligned(lanes);
    double sum = 0.0;
    for (const double lane : lanes) sum += lane;
    const float inverse = static_cast<float>(1.0 / sum);
    for (std::size_t i = 0; i < full; i += width)
      (floats::load_unaligned(scores + i) * floats(inverse)).store_unaligned(scores + i);
    for (std::size_t i = full; i < n; ++i) scores[i] *= inverse;
    return max + static_cast<float>(std::log(sum));
  }

  static constexpr kernel_table table(isa instruction_set) noexcept {
    return {.instruction_set = instruction_set,
            .dot_codes = &dot_codes,
            .axpy_codes = &axpy_codes,
            .dot_raw_codes = &dot_raw_codes,
            .axpy_raw_codes = &axpy_raw_codes,
            .absmax = &absmax,
            .min_max = &min_max,
            .decode_codes = &decode_codes,
            .encode_uniform = &encode_uniform,
            .encode_nearest = &encode_nearest,
            .encode_uniform_record = &encode_uniform_record,
            .dot_records = instruction_set == isa::avx512_vnni ? &dot_records_vnni : &dot_records,
            .axpy_records = &axpy_records,
            .axpy_records_fixed = instruction_set == isa::avx512_vnni ? &axpy_records_fixed : nullptr,
            .fold_channel_params = &fold_channel_params,
            .dot_channel_blocks = &dot_channel_blocks,
            .dot_f32 = &dot_row<&load_f32, 4, &scalar::load_f32>,
            .axpy_f32 = &axpy_row<&load_f32, 4, &scalar::load_f32>,
            .dot_f16 = &dot_row<&load_f16, 2, &scalar::load_f16>,
            .axpy_f16 = &axpy_row<&load_f16, 2, &scalar::load_f16>,
            .dot_bf16 = &dot_row<&load_bf16, 2, &scalar::load_bf16>,
            .axpy_bf16 = &axpy_row<&load_bf16, 2, &scalar::load_bf16>,
            .floats_to_f16 = &floats_to_f16,
            .f16_to_floats = &f16_to_floats,
            .softmax = &softmax};
  }
};

} // namespace kvlab::kernels::simd
