// What AVX2 (with FMA and F16C) does its own way: 8 lanes, no masks, no 16-entry permute,
// no fp16 vectors beyond F16C's conversions, and the fp8 decoder. Written in intrinsics:
// xsimd 8.1 has no fp16 or bf16 loads, byte-code widening, register table lookups or
// transposing sums.
#pragma once
#include "../fp8/decode_avx2.hpp"
#include "basics.hpp"

namespace kvlab::kernels::simd {

template <>
struct isa_ops<xsimd::fma3<xsimd::avx2>> : fp8_decoding_avx2 {
  // vpermps reads 3 bits of each lane: a table of 16 levels takes two permutes and a blend.
  static constexpr bool permute_reads_4_bits = false;
  // No conversion of KIVI's interleaved parameters (kivi_params): they take the generic fold.
  static constexpr bool kivi_parameter_pairs = false;

  // Fused multiply-add as one instruction.
  static floats fmadd(floats a, floats b, floats c) noexcept { return _mm256_fmadd_ps(a, b, c); }
  // c - a * b as one instruction.
  static floats fnmadd(floats a, floats b, floats c) noexcept { return _mm256_fnmadd_ps(a, b, c); }

  static floats load_f16(const std::uint8_t* p) noexcept {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static floats load_bf16(const std::uint8_t* p) noexcept {
    return _mm256_castsi256_ps(
        _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))), 16));
  }
  // `width` 8-bit codes starting at byte p.
  static ints load_u8_codes(const std::uint8_t* p) noexcept {
    return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
  }
  // `width` 4-bit codes starting at byte p (low nibble first).
  static ints load_u4_codes(const std::uint8_t* p) noexcept {
    const __m128i duplicate_bytes = _mm_setr_epi8(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
    std::int32_t four_bytes;
    std::memcpy(&four_bytes, p, 4);
    const __m128i bytes = _mm_cvtsi32_si128(four_bytes);
    const __m256i wide = _mm256_cvtepu8_epi32(_mm_shuffle_epi8(bytes, duplicate_bytes));
    const __m256i shifts = _mm256_setr_epi32(0, 4, 0, 4, 0, 4, 0, 4);
    return _mm256_and_si256(_mm256_srlv_epi32(wide, shifts), _mm256_set1_epi32(0xf));
  }
  // `width` fp16 conversions of v (to nearest even) stored at out.
  static void store_f16(floats v, std::uint16_t* out) noexcept {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out),
                     _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }

  // Lane k of the result is the sum of rows[k]'s lanes.
  static floats sum_each(const floats* rows) noexcept {
    const __m256 pairs0 = _mm256_hadd_ps(rows[0], rows[1]), pairs1 = _mm256_hadd_ps(rows[2], rows[3]);
    const __m256 pairs2 = _mm256_hadd_ps(rows[4], rows[5]), pairs3 = _mm256_hadd_ps(rows[6], rows[7]);
    const __m256 quads0 = _mm256_hadd_ps(pairs0, pairs1), quads1 = _mm256_hadd_ps(pairs2, pairs3);
    return _mm256_add_ps(_mm256_permute2f128_ps(quads0, quads1, 0x20), _mm256_permute2f128_ps(quads0, quads1, 0x31));
  }

  // Looks codes up in a table of up to 16 levels held in registers (permutes, no memory).
  struct small_table {
    floats low, high; // levels 0..7 and 8..15
    explicit small_table(const float* levels, unsigned bits) {
      alignas(64) float padded[16] = {};
      for (unsigned i = 0; bits > 0 && i < (1u << bits); ++i) padded[i] = levels[i];
      low = floats::load_aligned(padded);
      high = floats::load_aligned(padded + 8);
    }
    floats operator()(ints codes) const noexcept {
      const __m256 from_low = _mm256_permutevar8x32_ps(low, codes);
      const __m256 from_high = _mm256_permutevar8x32_ps(high, codes);
      // Codes 8..15 have bit 3 set: move it to the sign bit to select the high half.
      return _mm256_blendv_ps(from_low, from_high, _mm256_castsi256_ps(_mm256_slli_epi32(codes, 28)));
    }
  };

  // max(|a|, |b|) lane by lane.
  static floats abs_max(floats a, floats b) noexcept { return xsimd::max(xsimd::abs(a), xsimd::abs(b)); }

  // kernels::root_mean_square with its eight partial sums in two vectors of doubles (sums
  // 0-3 and 4-7; a square is exact in double, so a fused multiply-add adds it as the
  // reference's multiply then add does), the tail padded with zeros.
  static float root_mean_square(const float* x, std::size_t n) noexcept {
    if (n == 0) return 0.0f;
    __m256d low = _mm256_setzero_pd(), high = _mm256_setzero_pd();
    const auto add_squares = [&](const float* eight) {
      const __m256d a = _mm256_cvtps_pd(_mm_loadu_ps(eight)), b = _mm256_cvtps_pd(_mm_loadu_ps(eight + 4));
      low = _mm256_fmadd_pd(a, a, low);
      high = _mm256_fmadd_pd(b, b, high);
    };
    std::size_t i = 0;
    for (; i + 8 <= n; i += 8) add_squares(x + i);
    if (i < n) {
      float tail[8] = {};
      std::copy(x + i, x + n, tail);
      add_squares(tail);
    }
    return root_of_paired_sums(_mm256_add_pd(low, high), n);
  }

  // Horizontal max and min as shuffle trees: a serial scalar loop over the lanes would be
  // the longest dependency chain of a group's encoding. Lane k of the result is op over
  // every lane of v[k], for four vectors at once: a 4x4 transpose within each 128-bit
  // block (in-lane shuffles, the cheap ones), then the blocks combined.
  template <class Op>
  static __m128 reduce_four(const floats* v, Op op) noexcept {
    const auto pairs = [&](floats a, floats b) {
      return op(floats(_mm256_unpacklo_ps(a, b)), floats(_mm256_unpackhi_ps(a, b)));
    };
    const floats t = pairs(v[0], v[1]), u = pairs(v[2], v[3]);
    const floats w = op(floats(_mm256_shuffle_ps(t, u, 0x44)), floats(_mm256_shuffle_ps(t, u, 0xee)));
    return _mm256_castps256_ps128(op(w, floats(_mm256_permute2f128_ps(w, w, 0x01))));
  }

  // Stores `width` codes (each < 2^bits) of 8, 4 or 2 bits; 4-bit stores need `element`
  // even, 2-bit ones a multiple of 4.
  static void store_codes(ints codes, unsigned bits, std::uint8_t* packed, std::size_t element) noexcept {
    const __m128i words = _mm_packs_epi32(_mm256_castsi256_si128(codes), _mm256_extracti128_si256(codes, 1));
    const __m128i bytes = _mm_packus_epi16(words, words); // the codes as bytes, in order
    if (bits == 8) return _mm_storel_epi64(reinterpret_cast<__m128i*>(packed + element), bytes);
    if (bits == 2) {
      const auto two = static_cast<std::uint16_t>(pack_2_bit_codes(bytes));
      std::memcpy(packed + element / 4, &two, 2);
      return;
    }
    // Byte k of (b | b >> 4) holds code 2k in its low and code 2k+1 in its high nibble.
    const __m128i paired = _mm_or_si128(bytes, _mm_srli_epi64(bytes, 4));
    const __m128i even_bytes =
        _mm_shuffle_epi8(paired, _mm_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, -1, -1, -1, -1, -1, -1, -1, -1));
    const std::int32_t four = _mm_cvtsi128_si32(even_bytes);
    std::memcpy(packed + element / 2, &four, 4);
  }
  // Stores 4 x `width` codes of 8, 4 or 2 bits, each clamped to [0, max_code] (max_code <
  // 2^bits): saturating packs to bytes, one permute back into order, one byte min. 4-bit
  // stores need `element` even, 2-bit ones a multiple of 4.
  static void store_code_quad(const ints* codes, unsigned max_code, unsigned bits, std::uint8_t* packed,
                              std::size_t element) noexcept {
    const __m256i low = _mm256_packs_epi32(codes[0], codes[1]), high = _mm256_packs_epi32(codes[2], codes[3]);
    // 128-bit lane l of the packed bytes holds codes 4l..4l+3 of each vector, a dword each.
    const __m256i bytes = _mm256_min_epu8(
        _mm256_permutevar8x32_epi32(_mm256_packus_epi16(low, high), _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)),
        _mm256_set1_epi8(static_cast<char>(max_code)));
    if (bits == 8) return _mm256_storeu_si256(reinterpret_cast<__m256i*>(packed + element), bytes);
    const __m256i pairs = _mm256_maddubs_epi16(bytes, _mm256_set1_epi16(bits == 4 ? 0x1001 : 0x0401)); // c0 + 2^b c1
    if (bits == 4) { // the pairs' low bytes, lane by lane, then the two lanes' halves joined
      const __m256i halves = _mm256_permute4x64_epi64(_mm256_packus_epi16(pairs, pairs), 0x08);
      return _mm_storeu_si128(reinterpret_cast<__m128i*>(packed + element / 2), _mm256_castsi256_si128(halves));
    }
    const __m256i quads = _mm256_madd_epi16(pairs, _mm256_set1_epi32(0x00100001)); // p0 + 16 p1
    const __m256i words = _mm256_packs_epi32(quads, quads);
    // Dword 0 of each lane holds its four bytes.
    const __m256i bytes_of_quads =
        _mm256_permutevar8x32_epi32(_mm256_packus_epi16(words, words), _mm256_setr_epi32(0, 4, 0, 0, 0, 0, 0, 0));
    _mm_storel_epi64(reinterpret_cast<__m128i*>(packed + element / 4), _mm256_castsi256_si128(bytes_of_quads));
  }
  // q - rint(q) lane by lane, and q rounded to the nearest integer (ties to even).
  static floats minus_nearest(floats q) noexcept { return q - xsimd::nearbyint(q); }
  static ints round_to_int(floats q) noexcept { return _mm256_cvtps_epi32(q); }

  // Lane k of v in every lane.
  static floats lane(__m128 v, std::size_t k) noexcept {
    return _mm256_permutevar8x32_ps(_mm256_castps128_ps256(v), _mm256_set1_epi32(static_cast<int>(k)));
  }
  // x in lane 0, zeros elsewhere.
  static floats first_lane(float x) noexcept { return _mm256_zextps128_ps256(_mm_set_ss(x)); }
  static ints shift_right(ints x, unsigned n) noexcept { return _mm256_srli_epi32(x, n); }
  static floats permute(floats x, ints index) noexcept { return _mm256_permutevar8x32_ps(x, index); }

  // e^x for the shifted scores of a softmax (x <= 0, -inf or NaN): xsimd's vector exp,
  // within 2 ulp of std::exp.
  static floats exp_shifted(floats x) noexcept { return xsimd::exp(x); }
  // The two halves of x added, in double.
  static xsimd::batch<double, xsimd::fma3<xsimd::avx2>> halves_in_double(floats x) noexcept {
    return _mm256_cvtps_pd(_mm_add_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1)));
  }
};

} // namespace kvlab::kernels::simd
