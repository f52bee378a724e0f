// What AVX-512 (F, BW, DQ, VL) does its own way: 16 lanes, vpermps over 16 entries,
// masks, vrangeps and vreduceps, fp16 conversions of whole vectors, and the fp8 decoder.
// Written in intrinsics: xsimd 8.1 has none of these, and its AVX-512 fused multiply-add is
// a multiply then an add.
#pragma once
#include "../fp8/decode_avx512.hpp"
#include "basics.hpp"

namespace kvlab::kernels::simd {

template <>
struct isa_ops<xsimd::avx512bw> : fp8_decoding {
  // vpermps reads the low 4 bits of each lane: one permute looks up 16 entries.
  static constexpr bool permute_reads_4_bits = true;
  // KIVI's interleaved fp16 parameters convert in one step (kivi_params).
  static constexpr bool kivi_parameter_pairs = true;

  // Fused multiply-add as one instruction (xsimd 8.1 spells AVX-512's as multiply then add).
  static floats fmadd(floats a, floats b, floats c) noexcept { return _mm512_fmadd_ps(a, b, c); }
  // c - a * b as one instruction.
  static floats fnmadd(floats a, floats b, floats c) noexcept { return _mm512_fnmadd_ps(a, b, c); }

  static floats load_f16(const std::uint8_t* p) noexcept {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  static floats load_bf16(const std::uint8_t* p) noexcept {
    return _mm512_castsi512_ps(
        _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))), 16));
  }
  // `width` 8-bit codes starting at byte p.
  static ints load_u8_codes(const std::uint8_t* p) noexcept {
    return _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  // `width` 4-bit codes starting at byte p (low nibble first).
  static ints load_u4_codes(const std::uint8_t* p) noexcept {
    const __m128i duplicate_bytes = _mm_setr_epi8(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
    const __m128i bytes = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
    const __m512i wide = _mm512_cvtepu8_epi32(_mm_shuffle_epi8(bytes, duplicate_bytes));
    const __m512i shifts = _mm512_setr_epi32(0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4);
    return _mm512_and_si512(_mm512_srlv_epi32(wide, shifts), _mm512_set1_epi32(0xf));
  }
  // `width` fp16 conversions of v (to nearest even) stored at out.
  static void store_f16(floats v, std::uint16_t* out) noexcept {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out),
                        _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }

  // Lane k of the result is the sum of rows[k]'s lanes (xsimd 8.1's AVX-512 haddp returns
  // the sums in a permuted order, so this is written out): a transposing tree, pairs of
  // rows within 128-bit lanes, then quads, then across lanes; every row is summed in the
  // same order wherever it sits.
  static floats sum_each(const floats* rows) noexcept {
    __m512 pairs[8], quads[4];
    for (std::size_t k = 0; k < 8; ++k)
      pairs[k] = _mm512_add_ps(_mm512_unpacklo_ps(rows[2 * k], rows[2 * k + 1]),
                               _mm512_unpackhi_ps(rows[2 * k], rows[2 * k + 1]));
    for (std::size_t k = 0; k < 4; ++k) {
      const __m512d a = _mm512_castps_pd(pairs[2 * k]), b = _mm512_castps_pd(pairs[2 * k + 1]);
      quads[k] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(a, b)), _mm512_castpd_ps(_mm512_unpackhi_pd(a, b)));
    }
    const auto lanes = [](__m512 a, __m512 b) { // lanes 0+1 and 2+3 of a, then of b
      return _mm512_add_ps(_mm512_shuffle_f32x4(a, b, 0x88), _mm512_shuffle_f32x4(a, b, 0xdd));
    };
    return lanes(lanes(quads[0], quads[1]), lanes(quads[2], quads[3]));
  }

  // Looks codes up in a table of up to 16 levels held in a register (one permute).
  struct small_table {
    floats low;
    explicit small_table(const float* levels, unsigned bits) {
      alignas(64) float padded[16] = {};
      for (unsigned i = 0; bits > 0 && i < (1u << bits); ++i) padded[i] = levels[i];
      low = floats::load_aligned(padded);
    }
    floats operator()(ints codes) const noexcept { return _mm512_permutexvar_ps(codes, low); }
  };

  // max(|a|, |b|) lane by lane: the larger magnitude, sign cleared, in one instruction.
  static floats abs_max(floats a, floats b) noexcept { return _mm512_range_ps(a, b, 0x0b); }

  // kernels::root_mean_square with its eight partial sums as the lanes of one vector of
  // doubles (a square is exact in double, so a fused multiply-add adds it as the reference's
  // multiply then add does), the tail's missing lanes loaded as zeros.
  static float root_mean_square(const float* x, std::size_t n) noexcept {
    if (n == 0) return 0.0f;
    __m512d sums = _mm512_setzero_pd();
    std::size_t i = 0;
    for (; i + 8 <= n; i += 8) {
      const __m512d v = _mm512_cvtps_pd(_mm256_loadu_ps(x + i));
      sums = _mm512_fmadd_pd(v, v, sums);
    }
    if (i < n) {
      const __m512d v = _mm512_cvtps_pd(_mm256_maskz_loadu_ps(static_cast<__mmask8>((1u << (n - i)) - 1), x + i));
      sums = _mm512_fmadd_pd(v, v, sums);
    }
    return root_of_paired_sums(_mm256_add_pd(_mm512_castpd512_pd256(sums), _mm512_extractf64x4_pd(sums, 1)), n);
  }

  // Horizontal max and min as shuffle trees (see isa_ops<avx2>::reduce_four): lane k of the
  // result is op over every lane of v[k], for four vectors at once.
  template <class Op>
  static __m128 reduce_four(const floats* v, Op op) noexcept {
    const auto pairs = [&](floats a, floats b) {
      return op(floats(_mm512_unpacklo_ps(a, b)), floats(_mm512_unpackhi_ps(a, b)));
    };
    const floats t = pairs(v[0], v[1]), u = pairs(v[2], v[3]);
    floats w = op(floats(_mm512_shuffle_ps(t, u, 0x44)), floats(_mm512_shuffle_ps(t, u, 0xee)));
    w = op(w, floats(_mm512_shuffle_f32x4(w, w, 0x4e)));
    return _mm512_castps512_ps128(op(w, floats(_mm512_shuffle_f32x4(w, w, 0xb1))));
  }

  // Stores `width` codes (each < 2^bits) of 8, 4 or 2 bits; 4-bit stores need `element`
  // even, 2-bit ones a multiple of 4.
  static void store_codes(ints codes, unsigned bits, std::uint8_t* packed, std::size_t element) noexcept {
    if (bits == 8) return _mm_storeu_si128(reinterpret_cast<__m128i*>(packed + element), _mm512_cvtepi32_epi8(codes));
    if (bits == 2) {
      const std::int32_t four = pack_2_bit_codes(_mm512_cvtepi32_epi8(codes));
      std::memcpy(packed + element / 4, &four, 4);
      return;
    }
    // The low byte of 64-bit lane k of (c | c >> 28) holds code 2k in its low and code 2k+1
    // in its high nibble.
    const __m128i pairs = _mm512_cvtepi64_epi8(_mm512_or_si512(codes, _mm512_srli_epi64(codes, 28)));
    _mm_storel_epi64(reinterpret_cast<__m128i*>(packed + element / 2), pairs);
  }
  // Stores 4 x `width` codes of 8, 4 or 2 bits, each clamped to [0, max_code] (max_code <
  // 2^bits): saturating packs to bytes, one permute back into order, one byte min. Four
  // store_codes would take four vpmovdb, 1.5 cycles each on Zen 5. 4-bit stores need
  // `element` even, 2-bit ones a multiple of 4.
  static void store_code_quad(const ints* codes, unsigned max_code, unsigned bits, std::uint8_t* packed,
                              std::size_t element) noexcept {
    const __m512i low = _mm512_packs_epi32(codes[0], codes[1]), high = _mm512_packs_epi32(codes[2], codes[3]);
    // 128-bit lane l of the packed bytes holds codes 4l..4l+3 of each vector, a dword each.
    const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    const __m512i bytes = _mm512_min_epu8(_mm512_permutexvar_epi32(order, _mm512_packus_epi16(low, high)),
                                          _mm512_set1_epi8(static_cast<char>(max_code)));
    if (bits == 8) return _mm512_storeu_si512(packed + element, bytes);
    const __m512i pairs = _mm512_maddubs_epi16(bytes, _mm512_set1_epi16(bits == 4 ? 0x1001 : 0x0401)); // c0 + 2^b c1
    if (bits == 4)
      return _mm256_storeu_si256(reinterpret_cast<__m256i*>(packed + element / 2), _mm512_cvtepi16_epi8(pairs));
    const __m512i quads = _mm512_madd_epi16(pairs, _mm512_set1_epi32(0x00100001)); // p0 + 16 p1
    _mm_storeu_si128(reinterpret_cast<__m128i*>(packed + element / 4), _mm512_cvtepi32_epi8(quads));
  }
  // q - rint(q) lane by lane in one instruction, and q rounded to the nearest integer.
  static floats minus_nearest(floats q) noexcept {
    return _mm512_reduce_ps(q, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  }
  static ints round_to_int(floats q) noexcept { return _mm512_cvtps_epi32(q); }

  // Lane k of v in every lane.
  static floats lane(__m128 v, std::size_t k) noexcept {
    return _mm512_permutexvar_ps(_mm512_set1_epi32(static_cast<int>(k)), _mm512_castps128_ps512(v));
  }
  // x in lane 0, zeros elsewhere.
  static floats first_lane(float x) noexcept { return _mm512_zextps128_ps512(_mm_set_ss(x)); }
  static ints shift_right(ints x, unsigned n) noexcept { return _mm512_srli_epi32(x, n); }
  static floats permute(floats x, ints index) noexcept { return _mm512_permutexvar_ps(index, x); }

  // KIVI's layout of per-channel parameters: a channel's fp16 scale and zero are the low and
  // high half of a dword. The scales and zeros of channels [c, c + 16).
  static std::pair<floats, floats> kivi_params(const std::uint8_t* params, std::size_t c) noexcept {
    const __m512i pairs = _mm512_loadu_si512(params + 4 * c);
    return {floats(_mm512_cvtph_ps(_mm512_cvtepi32_epi16(pairs))),
            floats(_mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(pairs, 16))))};
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
  static floats exp_shifted(floats x) noexcept {
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
  // The two halves of x added, in double.
  static xsimd::batch<double, xsimd::avx512bw> halves_in_double(floats x) noexcept {
    return _mm512_cvtps_pd(_mm256_add_ps(_mm512_castps512_ps256(x), _mm512_extractf32x8_ps(x, 1)));
  }
};

} // namespace kvlab::kernels::simd
