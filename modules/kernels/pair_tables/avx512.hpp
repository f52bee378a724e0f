// Pair tables (AVX-512): 2-bit codes looked up two channels at a time in tables of
// precomputed query sums, in place of multiply-adds. The token-lane kernels use them for
// 2-bit codes with parameters; bare 2-bit rows (KIVI's per-channel key blocks) for one
// head use the pair-row kernel here.
#pragma once
#include "../token_lanes/columns_avx512.hpp"

namespace kvlab::kernels::simd {

struct pair_table_kernels : token_lane_columns {
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

  // The 16-entry table of a pair of channels: entry a + 4 b is q_low level(a) + q_high
  // level(b), for lows[i] = level(i % 4) and highs[i] = level(i / 4).
  static __m512 pair_table(float q_low, float q_high, __m512 lows, __m512 highs) noexcept {
    return _mm512_fmadd_ps(_mm512_set1_ps(q_high), highs, _mm512_mul_ps(_mm512_set1_ps(q_low), lows));
  }

  // --- 2-bit rows without parameters by pair tables (AVX-512) --------------------------
  // KIVI's keys (arXiv 2402.02750 section 3.2) come in per-channel blocks of bare 2-bit
  // rows, each block's scales folded into the query, so anything built from the query is
  // rebuilt every 32 rows. For one head, pair tables as T-MAC builds them (arXiv
  // 2407.00088; see the token-lane kernel, token_lanes/avx512.hpp) pay even so when they stay in registers:
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
    return f.kind == element_kind::affine_codes && f.bits == 2 && f.params_per_group == 0 &&
           (f.head_dim == 64 || f.head_dim == 128 || f.head_dim == 256);
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
};

} // namespace kvlab::kernels::simd
