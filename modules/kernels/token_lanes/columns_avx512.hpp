// Records transposed into token lanes (AVX-512): lane t of a vector is token t of a batch
// of 16, so one multiply-add serves 16 tokens. Shared by the token-lane, pair-table and
// fixed-point kernels.
#pragma once
#include "../records/runs.hpp"
#include "../vector/avx512.hpp"

namespace kvlab::kernels::simd {

struct token_lane_columns : record_runs<xsimd::avx512bw> {
  static constexpr std::size_t token_lanes = 16;

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
};

} // namespace kvlab::kernels::simd
