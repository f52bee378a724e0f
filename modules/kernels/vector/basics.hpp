// The vocabulary every vector kernel family is written in: xsimd's batches of one
// architecture (vector_types), what each instruction set does its own way (isa_ops,
// specialised in vector/avx2.hpp and vector/avx512.hpp), and what is built on both
// (vector_basics). Included only by the per-ISA translation units, which are compiled with
// the matching -m flags.
#pragma once
#include "../fp8/layout.hpp"
#include "../kernels.hpp"
#include "../rows/reference.hpp"

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
struct vector_types {
  using floats = xsimd::batch<float, Arch>;
  using ints = xsimd::batch<std::int32_t, Arch>;
  static constexpr std::size_t width = floats::size;

  static floats load_f32(const std::uint8_t* p) noexcept {
    return floats::load_unaligned(reinterpret_cast<const float*>(p));
  }
  static ints lane_index() noexcept {
    alignas(64) std::int32_t lanes[width];
    for (std::size_t k = 0; k < width; ++k) lanes[k] = static_cast<std::int32_t>(k);
    return ints::load_aligned(lanes);
  }

  // Byte codes below 4 (in bytes 0..15 of v) packed four to a byte, least significant
  // first: byte k of the result holds codes 4k..4k+3 (a multiply-add joins pairs, another
  // pairs of pairs).
  static std::int32_t pack_2_bit_codes(__m128i v) noexcept {
    const __m128i pairs = _mm_maddubs_epi16(v, _mm_set1_epi16(0x0401));      // c0 + 4 c1
    const __m128i quads = _mm_madd_epi16(pairs, _mm_set1_epi32(0x00100001)); // p0 + 16 p1
    return _mm_cvtsi128_si32(
        _mm_shuffle_epi8(quads, _mm_setr_epi8(0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1)));
  }

  // fp16 rounding of fitted parameters (to nearest even, like float_to_half_bits) in one
  // instruction each way.
  static std::uint16_t to_half(float x) noexcept { return _cvtss_sh(x, _MM_FROUND_TO_NEAREST_INT); }
  static float from_half(std::uint16_t h) noexcept { return _cvtsh_ss(h); }

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

  // kernels::root_mean_square's end from its eight partial sums already added in pairs
  // (lane k holds s_k + s_(k+4)): the rest of the reference's fixed tree, then the root.
  static float root_of_paired_sums(__m256d pairs, std::size_t n) noexcept {
    const __m128d quarters = _mm_add_pd(_mm256_castpd256_pd128(pairs), _mm256_extractf128_pd(pairs, 1));
    const double total = _mm_cvtsd_f64(_mm_add_sd(quarters, _mm_unpackhi_pd(quarters, quarters)));
    return static_cast<float>(std::sqrt(total / static_cast<double>(n)));
  }

  // The sums of up to H heads, returned by value from a per-token lambda (see reduce_tokens).
  template <std::size_t H>
  struct head_sums {
    floats lanes[H];
    floats operator[](std::size_t h) const noexcept { return lanes[h]; }
  };
};

// The operations an instruction set does its own way; each specialisation derives from
// vector_types of its architecture and defines the same names.
template <class Arch>
struct isa_ops;

template <class Arch>
struct vector_basics : isa_ops<Arch> {
  using ops = isa_ops<Arch>;
  using ops::reduce_four;
  using typename ops::floats;

  static constexpr auto max_op = [](floats a, floats b) { return xsimd::max(a, b); };
  static constexpr auto min_op = [](floats a, floats b) { return xsimd::min(a, b); };
  // op over every lane of v.
  static float reduce(floats v, auto op) noexcept {
    const floats copies[4] = {v, v, v, v};
    return _mm_cvtss_f32(reduce_four(copies, op));
  }
};

} // namespace kvlab::kernels::simd
