// SIMD kernel bodies, templated on the xsimd architecture. Included only by the per-ISA
// translation units (kernels_avx2.cpp, kernels_avx512.cpp), which are compiled with the
// matching -m flags. Elements the vector loops do not cover go to the scalar reference.
#pragma once
#include "kernels.hpp"
#include "kernels_scalar.hpp"

#include <immintrin.h>
#include <type_traits>
#include <xsimd/xsimd.hpp>

namespace kvlab::kernels::simd {

template <class Arch>
struct kernels {
  using floats = xsimd::batch<float, Arch>;
  using ints = xsimd::batch<std::int32_t, Arch>;
  static constexpr std::size_t width = floats::size;
  static constexpr bool is_avx512 = std::is_same_v<Arch, xsimd::avx512bw>;

  static floats load_f32(const std::uint8_t *p) noexcept {
    return floats::load_unaligned(reinterpret_cast<const float *>(p));
  }
  static floats load_f16(const std::uint8_t *p) noexcept {
    if constexpr (is_avx512)
      return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(p)));
    else
      return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i *>(p)));
  }
  static floats load_bf16(const std::uint8_t *p) noexcept {
    if constexpr (is_avx512)
      return _mm512_castsi512_ps(
          _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(p))), 16));
    else
      return _mm256_castsi256_ps(
          _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i *>(p))), 16));
  }
  // `width` 8-bit codes starting at byte p.
  static ints load_u8_codes(const std::uint8_t *p) noexcept {
    if constexpr (is_avx512)
      return _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i *>(p)));
    else
      return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i *>(p)));
  }
  // `width` 4-bit codes starting at byte p (low nibble first).
  static ints load_u4_codes(const std::uint8_t *p) noexcept {
    const __m128i duplicate_bytes = _mm_setr_epi8(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
    if constexpr (is_avx512) {
      const __m128i bytes = _mm_loadl_epi64(reinterpret_cast<const __m128i *>(p));
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

  template <floats (*load)(const std::uint8_t *), std::size_t element_bytes,
            float (*scalar_load)(const std::uint8_t *, std::size_t)>
  static float dot_row(const float *query, const std::uint8_t *row, std::size_t n) noexcept {
    floats sum(0.0f);
    std::size_t i = 0;
    for (; i + width <= n; i += width)
      sum = xsimd::fma(floats::load_unaligned(query + i), load(row + i * element_bytes), sum);
    float total = xsimd::hadd(sum);
    for (; i < n; ++i) total += query[i] * scalar_load(row, i);
    return total;
  }

  template <floats (*load)(const std::uint8_t *), std::size_t element_bytes,
            float (*scalar_load)(const std::uint8_t *, std::size_t)>
  static void axpy_row(float alpha, const std::uint8_t *row, std::size_t n, float *acc) noexcept {
    const floats weight(alpha);
    std::size_t i = 0;
    for (; i + width <= n; i += width) {
      const floats updated = xsimd::fma(weight, load(row + i * element_bytes), floats::load_unaligned(acc + i));
      updated.store_unaligned(acc + i);
    }
    for (; i < n; ++i) acc[i] += alpha * scalar_load(row, i);
  }

  // Vector path for 8-bit codes and byte-aligned 4-bit codes; other widths go scalar
  // until their unpackers are written.
  static float dot_codes(const float *query, const std::uint8_t *packed, std::size_t first, std::size_t n,
                         unsigned bits, const float *levels) noexcept {
    floats sum(0.0f);
    std::size_t i = 0;
    if (bits == 8) {
      for (; i + width <= n; i += width)
        sum = xsimd::fma(floats::load_unaligned(query + i), floats::gather(levels, load_u8_codes(packed + first + i)),
                         sum);
    } else if (bits == 4 && first % 2 == 0) {
      for (; i + width <= n; i += width)
        sum = xsimd::fma(floats::load_unaligned(query + i),
                         floats::gather(levels, load_u4_codes(packed + (first + i) / 2)), sum);
    }
    return xsimd::hadd(sum) + scalar::dot_codes(query + i, packed, first + i, n - i, bits, levels);
  }

  static void axpy_codes(float alpha, const std::uint8_t *packed, std::size_t first, std::size_t n, unsigned bits,
                         const float *levels, float *acc) noexcept {
    const floats weight(alpha);
    std::size_t i = 0;
    const auto step = [&](ints codes) {
      xsimd::fma(weight, floats::gather(levels, codes), floats::load_unaligned(acc + i)).store_unaligned(acc + i);
    };
    if (bits == 8) {
      for (; i + width <= n; i += width) step(load_u8_codes(packed + first + i));
    } else if (bits == 4 && first % 2 == 0) {
      for (; i + width <= n; i += width) step(load_u4_codes(packed + (first + i) / 2));
    }
    scalar::axpy_codes(alpha, packed, first + i, n - i, bits, levels, acc + i);
  }

  static constexpr kernel_table table(isa instruction_set) noexcept {
    return {instruction_set,
            &dot_codes,
            &axpy_codes,
            &dot_row<&load_f32, 4, &scalar::load_f32>,
            &axpy_row<&load_f32, 4, &scalar::load_f32>,
            &dot_row<&load_f16, 2, &scalar::load_f16>,
            &axpy_row<&load_f16, 2, &scalar::load_f16>,
            &dot_row<&load_bf16, 2, &scalar::load_bf16>,
            &axpy_row<&load_bf16, 2, &scalar::load_bf16>};
  }
};

} // namespace kvlab::kernels::simd
