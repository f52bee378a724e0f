// Affine codes in token lanes (AVX-512): the multi-head dot over 2-, 4- and 8-bit keys,
// and the per-channel blocks of KIVI's keys run through the same kernel.
#pragma once
#include "../channel_params/vector.hpp"
#include "../pair_tables/avx512.hpp"

namespace kvlab::kernels::simd {

struct token_lane_kernels : pair_table_kernels {
  // The channel-lane kernels (records/coded.hpp) put channels in lanes, so each token ends
  // with a horizontal sum and each vector of codes costs an unpack, a convert and a scale.
  // Here lane t is token t of a batch of 16:
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
  static bool token_lanes_fit(const record_format& f) noexcept {
    if (f.kind != element_kind::affine_codes) return false;
    if (f.bits != 8 && f.bits != 4 && f.bits != 2) return false;
    const std::size_t per_dword = 32 / f.bits;
    return f.head_dim % per_dword == 0 && f.head_dim <= max_head_dim &&
           (f.params_per_group == 0 || (f.group_channels % per_dword == 0 && f.groups() <= max_groups));
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
                const __m512i pair = k == 0 ? columns[d] : _mm512_srli_epi32(columns[d], static_cast<unsigned>(4 * k));
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
              sums[h] =
                  params > 0 ? _mm512_fmadd_ps(part, batch_params[g * params], sums[h]) : _mm512_add_ps(part, sums[h]);
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

  // The formats and GQA groups this family serves in dot_records: 8-bit codes for one head
  // stay in channel lanes, where the one-head kernel is faster.
  static bool serves(const record_format& f, std::size_t heads) noexcept {
    return token_lanes_fit(f) && (f.bits < 8 || heads > 1);
  }
  static void dot_records(const record_format& f, const float* queries, std::size_t heads, const std::uint8_t* records,
                          std::size_t count, float* scores, std::size_t stride) noexcept {
    const std::size_t n = f.head_dim;
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
          dot_token_lanes<Bits, H, Dwords, GroupDwords, false>(f, queries + h * n, records, count, scores + h * stride,
                                                               stride);
        });
      });
    };
    if (f.bits == 8) return with_bits.template operator()<8>();
    if (f.bits == 4) return with_bits.template operator()<4>();
    return with_bits.template operator()<2>();
  }

  // Per-channel blocks (KIVI's keys, arXiv 2402.02750 section 3.2) of 2- and 4-bit rows
  // without parameters of a whole stream in one call: the token-lane kernel that
  // dot_records would take (without pair tables: rows without parameters never pay for
  // them), with its setup (constants, shape dispatch) done once per call instead of once
  // per block: each block folds its parameters into the queries and runs its rows. The
  // same arithmetic as fold_channel_params and dot_records block by block.
  static bool serves_channel_blocks(const record_format& f) noexcept {
    return token_lanes_fit(f) && f.bits < 8 && f.params_per_group == 0;
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
  static void dot_channel_blocks(const record_format& f, const channel_block* blocks, std::size_t count,
                                 unsigned per_channel, bool params_f32, const float* queries, std::size_t heads,
                                 float* scores, std::size_t stride) noexcept {
    const std::size_t n = f.head_dim;
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
                    channel_param_kernels<xsimd::avx512bw>::fold_channel_params(
                        block.params, n, per_channel, params_f32, queries + h * n, 1, scaled, zero_terms);
                  run(scaled, block.rows, block.count, scores + h * stride + block.first, zero_terms[0]);
                }
              });
            });
        with_token_lane_shape<Bits>(f, [&]<std::size_t Dwords, std::size_t GroupDwords>() {
          token_lane_runs<Bits, H, Dwords, GroupDwords, false>(f, stride, [&](const auto& run) {
            for (std::size_t b = 0; b < count; ++b) {
              const channel_block& block = blocks[b];
              float* block_scores = scores + h * stride + block.first;
              channel_param_kernels<xsimd::avx512bw>::fold_channel_params(block.params, n, per_channel, params_f32,
                                                                          queries + h * n, H, scaled, zero_terms);
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
};

} // namespace kvlab::kernels::simd
