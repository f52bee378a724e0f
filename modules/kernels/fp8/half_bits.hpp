// fp8 codes as fp16 bits, shared by the vector decoders (decode_avx2.hpp, decode_avx512.hpp).
// Each of the three formats (arXiv 2209.05433, sec. 3) is fp16 with fewer bits: the code's
// sign, exponent and mantissa moved into fp16's fields give the value times a power of two
// (E5M2 is fp16's top byte; E4M3 is fp16 / 2^8 with the exponent field one bit shorter,
// E4M3FNUZ fp16 / 2^7). A decoder widens the codes, moves the bits, converts from fp16 and
// multiplies by that power of two: exact, against a gather from the levels table.
#pragma once
#include "layout.hpp"
#include <cstring>
#include <immintrin.h>
#include <numeric>

namespace kvlab::kernels::simd {

// A template on the architecture: each ISA's translation units keep their own copies,
// compiled with their own -m flags.
template <class Arch>
struct fp8_as_half {
  // fp16 bits of 16 codes, each in the high byte of a word (the code shifted left by 8):
  // the code's level over fp8_unit for every code but E4M3's and E4M3FNUZ's NaN codes (which
  // give some finite value; E5M2's give fp16 NaNs).
  template <fp8_layout Layout>
  static __m256i half_bits(__m256i high_bytes) noexcept {
    if constexpr (Layout == fp8_layout::e5m2) {
      return high_bytes;
    } else { // sign stays in bit 15, exponent and mantissa move to bits 13..7 (bit 14 cleared)
      return _mm256_and_si256(_mm256_srai_epi16(high_bytes, 1), _mm256_set1_epi16(static_cast<short>(0xbfff)));
    }
  }
  // All ones in the words that hold a NaN code, zeros elsewhere.
  template <fp8_layout Layout>
  static __m256i nan_words(__m256i high_bytes) noexcept {
    if constexpr (Layout == fp8_layout::e5m2) // all-ones exponent, mantissa != 0
      return _mm256_cmpgt_epi16(_mm256_and_si256(high_bytes, _mm256_set1_epi16(0x7fff)), _mm256_set1_epi16(0x7c00));
    else if constexpr (Layout == fp8_layout::e4m3fnuz)
      return _mm256_cmpeq_epi16(high_bytes, _mm256_set1_epi16(static_cast<short>(0x8000)));
    else
      return _mm256_cmpeq_epi16(_mm256_and_si256(high_bytes, _mm256_set1_epi16(0x7f00)), _mm256_set1_epi16(0x7f00));
  }
  // fp16's quiet NaN, which converts to the canonical float NaN: what NaN codes decode to.
  static __m256i quiet_nan() noexcept { return _mm256_set1_epi16(0x7e00); }
  // What the fp16 value of half_bits is multiplied by to give the level.
  template <fp8_layout Layout>
  static constexpr float unit = Layout == fp8_layout::e5m2       ? 1.0f
                                : Layout == fp8_layout::e4m3fnuz ? 0x1p7f
                                                                 : 0x1p8f;

  // The layout whose Decoder::decode_fp8 gives `levels` for all 256 codes, or none.
  template <class Decoder>
  static fp8_layout layout_of(const float* levels) noexcept {
    if (levels == nullptr) return fp8_layout::none;
    alignas(64) std::uint8_t codes[256];
    std::iota(codes, codes + 256, std::uint8_t{0});
    const auto decodes_as = [&]<fp8_layout Layout>() {
      alignas(64) float decoded[256];
      for (std::size_t c = 0; c < 256; c += Decoder::width)
        Decoder::template decode_fp8<Layout>(codes + c).store_aligned(decoded + c);
      return std::memcmp(decoded, levels, sizeof decoded) == 0;
    };
    if (decodes_as.template operator()<fp8_layout::e4m3>()) return fp8_layout::e4m3;
    if (decodes_as.template operator()<fp8_layout::e4m3fnuz>()) return fp8_layout::e4m3fnuz;
    if (decodes_as.template operator()<fp8_layout::e5m2>()) return fp8_layout::e5m2;
    return fp8_layout::none;
  }
};

} // namespace kvlab::kernels::simd
