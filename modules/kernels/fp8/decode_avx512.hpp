// fp8 codes decoded through fp16 (AVX-512; fp8/half_bits.hpp): 16 codes take a widen, two
// shifts, a bit select, one fp16 conversion and an exact multiply, instead of a 16-element
// gather from the levels table. NaN codes become the canonical quiet NaN. A record format's
// levels table takes this path only when it is, bit for bit, what this decoder gives for
// all 256 codes (fp8_levels, checked once per call), so results equal the table's.
#pragma once
#include "../vector/basics.hpp"
#include "half_bits.hpp"

namespace kvlab::kernels::simd {

struct fp8_decoding : vector_types<xsimd::avx512bw> {
  using bits = fp8_as_half<xsimd::avx512bw>;
  static constexpr bool fp8_codes = true, fp8_pairs = true;
  template <fp8_layout Layout>
  static constexpr float fp8_unit = bits::unit<Layout>;

  // half_bits with every NaN code fp16's quiet NaN: one bit select.
  template <fp8_layout Layout>
  static __m256i fp8_exact_half_bits(__m256i high_bytes) noexcept {
    return _mm256_ternarylogic_epi32(bits::nan_words<Layout>(high_bytes), bits::quiet_nan(),
                                     bits::half_bits<Layout>(high_bytes), 0xca); // nan ? quiet NaN : half
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
          _mm512_cvtph_ps(Exact ? fp8_exact_half_bits<Layout>(high_bytes[k]) : bits::half_bits<Layout>(high_bytes[k]));
  }
  // Where channel c lands in a row laid out as decode_fp8_pair's vector pairs, 32 channels
  // per pair.
  static constexpr std::size_t fp8_pair_position(std::size_t c) noexcept {
    const std::size_t i = c % 32;
    return c - i + (i % 16 >= 8 ? 16 : 0) + (i >= 16 ? 8 : 0) + i % 8;
  }

  // The `width` codes at `codes`.
  template <fp8_layout Layout>
  static floats decode_fp8(const std::uint8_t* codes) noexcept {
    const __m256i words = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(codes)));
    const __m256i half = fp8_exact_half_bits<Layout>(_mm256_slli_epi16(words, 8));
    return _mm512_mul_ps(_mm512_cvtph_ps(half), _mm512_set1_ps(fp8_unit<Layout>));
  }

  static fp8_layout fp8_levels(const float* levels) noexcept { return bits::layout_of<fp8_decoding>(levels); }
};

} // namespace kvlab::kernels::simd
