// fp8 table codes in pairs of 32 (AVX-512): records whose levels are an fp8 layout
// (fp8/decode_avx512.hpp), fp16 scales, one per group of whole pairs. The coded-record
// kernels call these first and take over what they decline.
#pragma once
#include "../records/runs.hpp"
#include "../vector/avx512.hpp"

namespace kvlab::kernels::simd {

template <>
struct fp8_pair_kernels<xsimd::avx512bw> : record_runs<xsimd::avx512bw> {
  // fp8 records the pair kernels take: fp16 scales, one per group of whole 32-code pairs.
  static bool fp8_pairs_fit(const record_format& f) noexcept {
    return f.group_channels % 32 == 0 && f.params_per_group == 1 && !f.params_f32;
  }
  // Calls use.template operator()<Pairs, PairsPerGroup>() with both fixed at compile time
  // for head_dim 64 and 128 in groups of 32 to 128 channels (0: known at run time), so the
  // common shapes get fully unrolled loops.
  template <class Use>
  static void with_fp8_pairs(const record_format& f, Use&& use) noexcept {
    if (f.head_dim == 128) switch (f.group_channels) {
      case 32: return use.template operator()<4, 1>();
      case 64: return use.template operator()<4, 2>();
      case 128: return use.template operator()<4, 4>();
      }
    if (f.head_dim == 64) switch (f.group_channels) {
      case 32: return use.template operator()<2, 1>();
      case 64: return use.template operator()<2, 2>();
      }
    use.template operator()<0, 0>();
  }
  // Token t's fp16 scales, one per group, times the layout's unit (exact: a power of two,
  // and an fp16 scale times it stays finite), `stride` floats apart.
  template <fp8_layout Layout>
  static void fp8_scales(const std::uint8_t* params, std::size_t groups, float* out, std::size_t stride) noexcept {
    for (std::size_t g = 0; g < groups; ++g) {
      std::uint16_t bits;
      std::memcpy(&bits, params + 2 * g, 2);
      out[g * stride] = from_half(bits) * fp8_unit<Layout>;
    }
  }

  // fp8 codes (fp8_pairs_fit), H heads: each query is put in decode_fp8_pair's order and
  // multiplied by the layout's unit once per call, so each 16 codes cost a conversion and
  // a multiply-add per head. Products are exactly decode_fp8's (the unit is a power of
  // two); the sums run in another order, within the float kernels' rounding. False
  // (nothing written) for other records and for a query the unit would overflow.
  template <fp8_layout Layout, std::size_t H>
  static bool dot_heads(const record_format& f, const float* queries, const std::uint8_t* records, std::size_t count,
                        float* scores, std::size_t stride) noexcept {
    if (!fp8_pairs_fit(f)) return false;
    const std::size_t n = f.head_dim;
    alignas(64) float folded[H][max_head_dim];
    for (std::size_t h = 0; h < H; ++h)
      for (std::size_t c = 0; c < n; ++c) {
        const float scaled = queries[h * n + c] * fp8_unit<Layout>;
        if (!(std::fabs(scaled) <= std::numeric_limits<float>::max())) return false;
        folded[h][fp8_pair_position(c)] = scaled;
      }
    with_fp8_pairs(f, [&]<std::size_t Pairs, std::size_t PairsPerGroup>() {
      const std::size_t pairs_per_group = PairsPerGroup ? PairsPerGroup : f.group_channels / 32;
      const std::size_t groups = PairsPerGroup ? Pairs / PairsPerGroup : f.groups();
      const std::size_t record_bytes = f.record_bytes, params_at = f.code_bytes();
      reduce_tokens<H>(records, record_bytes, count, scores, stride, [&](std::size_t t) __attribute__((always_inline)) {
        const std::uint8_t* record = records + t * record_bytes;
        head_sums<H> totals;
        std::fill_n(totals.lanes, H, floats(0.0f));
        fp8_nan_marks<Layout> marks;
        for (std::size_t g = 0; g < groups; ++g) {
          floats even[H], odd[H];
          std::fill_n(even, H, floats(0.0f));
          std::fill_n(odd, H, floats(0.0f));
          for (std::size_t p = g * pairs_per_group; p < (g + 1) * pairs_per_group; ++p) {
            __m512 halves[2];
            decode_fp8_pair<Layout, false>(record + 32 * p, halves, marks);
            for (std::size_t h = 0; h < H; ++h) {
              even[h] = fmadd(floats::load_aligned(folded[h] + 32 * p), halves[0], even[h]);
              odd[h] = fmadd(floats::load_aligned(folded[h] + 32 * p + 16), halves[1], odd[h]);
            }
          }
          std::uint16_t scale;
          std::memcpy(&scale, record + params_at + 2 * g, 2);
          const floats group_scale(from_half(scale));
          for (std::size_t h = 0; h < H; ++h) totals.lanes[h] = fmadd(even[h] + odd[h], group_scale, totals.lanes[h]);
        }
        // a NaN code makes every score NaN, whatever the query elements
        if (marks.any()) std::fill_n(totals.lanes, H, floats(std::numeric_limits<float>::quiet_NaN()));
        return totals;
      });
    });
    return true;
  }

  // fp8 codes (fp8_pairs_fit), H heads: each head's sums are kept in decode_fp8_pair's
  // order for the call, each token's scales are multiplied by the layout's unit once
  // (fp8_scales) and each head's weight by them once per pair, so each 16 codes cost a
  // conversion and a multiply-add per head (values from DRAM 4.1-4.2 ns per token against
  // 4.8-4.9 multiplying each code by its scale first). One rounding before the sum,
  // as in axpy_coded_heads, but of w * s rather than of s * level: within the float
  // kernels' rounding, and exactly s * level for a weight of 1. False (nothing done) for
  // other records.
  template <fp8_layout Layout, std::size_t H>
  static bool axpy_heads(const record_format& f, const float* weights, std::size_t stride, const std::uint8_t* records,
                         std::size_t count, float* acc) noexcept {
    if (!fp8_pairs_fit(f)) return false;
    const std::size_t n = f.head_dim;
    alignas(64) float sums[H][max_head_dim];
    for (std::size_t h = 0; h < H; ++h)
      for (std::size_t c = 0; c < n; ++c) sums[h][fp8_pair_position(c)] = acc[h * n + c];
    with_fp8_pairs(f, [&]<std::size_t Pairs, std::size_t PairsPerGroup>() {
      const std::size_t pairs = Pairs ? Pairs : n / 32;
      const std::size_t pairs_per_group = PairsPerGroup ? PairsPerGroup : f.group_channels / 32;
      const std::size_t groups = PairsPerGroup ? Pairs / PairsPerGroup : f.groups();
      const std::size_t record_bytes = f.record_bytes, params_at = f.code_bytes();
      constexpr std::size_t chunk = 16;
      // Pairs per pass: at least 8 independent multiply-add chains (fewer wait on latency).
      constexpr std::size_t per_pass = std::max<std::size_t>(1, 4 / H);
      // weighted[h][g][t] (more than one head): head h's weight of token t times the token's
      // scale of group g, for the chunk. One vector multiply per head and group, where a
      // scalar multiply and a broadcast per head, pair and token take as many vector slots
      // as the multiply-adds (the same products, bit for bit); the pass's multiply-adds read
      // them as broadcasts from memory. Four heads' values, 2048 tokens in L2 (AMD Zen 5):
      // 14.5-14.7 us against 17.4-17.7 (fp8_e4m3@token), 15.2-15.8 against 16.4-16.6
      // (group(32)).
      // One head keeps the multiply in the pass and its scales token by token (scales[t][g]):
      // with the table its group(32) values took 9.0-9.4 us against 8.2-8.5.
      float scales[H == 1 ? chunk : 1][max_groups], group_scales[H > 1 ? max_groups : 1][chunk] = {};
      float weighted[H > 1 ? H : 1][max_groups][chunk], head_weights[chunk] = {};
      for (std::size_t first = 0; first < count; first += chunk) {
        const std::size_t tokens = std::min(chunk, count - first);
        const std::uint8_t* chunk_records = records + first * record_bytes;
        const prefetch_span ahead = lines_ahead(chunk_records, tokens * record_bytes);
        if constexpr (H == 1) {
          for (std::size_t t = 0; t < tokens; ++t)
            fp8_scales<Layout>(chunk_records + t * record_bytes + params_at, groups, scales[t], 1);
        } else {
          for (std::size_t t = 0; t < tokens; ++t)
            fp8_scales<Layout>(chunk_records + t * record_bytes + params_at, groups, &group_scales[0][t], chunk);
          for (std::size_t h = 0; h < H; ++h) {
            // a short last chunk: its weights copied, the rest of head_weights 0 (lanes past
            // its tokens, never read, multiply finite scales by 0)
            const float* chunk_weights = weights + h * stride + first;
            if (tokens < chunk) {
              std::copy_n(chunk_weights, tokens, head_weights);
              chunk_weights = head_weights;
            }
            for (std::size_t g = 0; g < groups; ++g)
              for (std::size_t i = 0; i < chunk; i += width)
                (floats::load_unaligned(chunk_weights + i) * floats::load_unaligned(group_scales[g] + i))
                    .store_unaligned(weighted[h][g] + i);
          }
        }
        const auto pass = [&]<std::size_t P>(std::size_t first_pair) __attribute__((always_inline)) {
          floats vectors[H][P][2];
          for (std::size_t h = 0; h < H; ++h)
            for (std::size_t p = 0; p < P; ++p)
              for (std::size_t k = 0; k < 2; ++k)
                vectors[h][p][k] = floats::load_aligned(sums[h] + 32 * (first_pair + p) + 16 * k);
          for (std::size_t t = 0; t < tokens; ++t) {
            if (first_pair == 0) prefetch_part(ahead, t, tokens);
            const std::uint8_t* pair_codes = chunk_records + t * record_bytes + 32 * first_pair;
            __m512 halves[P][2];
            fp8_nan_marks<Layout> marks;
            for (std::size_t p = 0; p < P; ++p) decode_fp8_pair<Layout, false>(pair_codes + 32 * p, halves[p], marks);
            if (marks.any()) [[unlikely]]
              for (std::size_t p = 0; p < P; ++p) decode_fp8_pair<Layout, true>(pair_codes + 32 * p, halves[p], marks);
            for (std::size_t h = 0; h < H; ++h) {
              for (std::size_t p = 0; p < P; ++p) {
                const std::size_t g = (first_pair + p) / pairs_per_group;
                floats weight;
                if constexpr (H > 1)
                  weight = floats(weighted[h][g][t]);
                else
                  weight = floats(weights[first + t] * scales[t][g]);
                for (std::size_t k = 0; k < 2; ++k)
                  vectors[h][p][k] = fmadd(weight, floats(halves[p][k]), vectors[h][p][k]);
              }
            }
          }
          for (std::size_t h = 0; h < H; ++h)
            for (std::size_t p = 0; p < P; ++p)
              for (std::size_t k = 0; k < 2; ++k)
                vectors[h][p][k].store_aligned(sums[h] + 32 * (first_pair + p) + 16 * k);
        };
        std::size_t p = 0;
        for (; p + per_pass <= pairs; p += per_pass) pass.template operator()<per_pass>(p);
        for (; p < pairs; ++p) pass.template operator()<1>(p);
      }
    });
    for (std::size_t h = 0; h < H; ++h)
      for (std::size_t c = 0; c < n; ++c) acc[h * n + c] = sums[h][fp8_pair_position(c)];
    return true;
  }
};

} // namespace kvlab::kernels::simd
