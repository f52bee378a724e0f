// fp8 codes decoded through fp16 (AVX2 with F16C; fp8/half_bits.hpp): 8 codes take a widen,
// two shifts, a bit select, a NaN compare and blend, one fp16 conversion and an exact
// multiply, instead of an 8-element gather from the levels table (on AMD Zen 3 the gather
// made fp8 attention the slowest recipe, below f16). NaN codes become the canonical quiet
// NaN. A record format's levels table takes this path only when it is, bit for bit, what
// this decoder gives for all 256 codes (fp8_levels, checked once per call), so results equal
// the table's. AVX2 has no fp8 pair kernels: the codes go through the coded-record loops.
#pragma once
#include "../vector/basics.hpp"
#include "half_bits.hpp"

namespace kvlab::kernels::simd {

struct fp8_decoding_avx2 : vector_types<xsimd::fma3<xsimd::avx2>> {
  using bits = fp8_as_half<xsimd::fma3<xsimd::avx2>>;
  static constexpr bool fp8_codes = true, fp8_pairs = false;

  // The `width` codes at `codes` (the 8 words fill the low half of the 256-bit helpers').
  template <fp8_layout Layout>
  static floats decode_fp8(const std::uint8_t* codes) noexcept {
    const __m128i words = _mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(codes)));
    const __m256i high_bytes = _mm256_castsi128_si256(_mm_slli_epi16(words, 8));
    const __m256i half =
        _mm256_blendv_epi8(bits::half_bits<Layout>(high_bytes), bits::quiet_nan(), bits::nan_words<Layout>(high_bytes));
    return _mm256_mul_ps(_mm256_cvtph_ps(_mm256_castsi256_si128(half)), _mm256_set1_ps(bits::unit<Layout>));
  }
  static fp8_layout fp8_levels(const float* levels) noexcept { return bits::layout_of<fp8_decoding_avx2>(levels); }
};

} // namespace kvlab::kernels::simd
