// Runs of records for the query heads of one GQA group: the attention hot loop. Each
// record's values are decoded once per block of `width` code bytes (or `width` floats) and
// then used by every head, up to max_heads at a time with their sums in registers.
#pragma once
#include "../prefetch/policy.hpp"
#include "../vector/basics.hpp"
#include <array>

namespace kvlab::kernels::simd {

inline constexpr std::size_t max_heads = heads_per_pass;
inline constexpr std::size_t max_head_dim = 1024;
inline constexpr std::size_t max_groups = 64;

// Internal linkage: each ISA's translation units keep their own copies.
namespace {
// Calls use.template operator()<H>() for the heads [h, h + H) of every pass, at most
// MaxHeads (4 or 8) per pass.
template <std::size_t MaxHeads = max_heads, class Use>
inline void for_each_head_pass(std::size_t heads, Use&& use) noexcept {
  static_assert(MaxHeads == 4 || MaxHeads == 8);
  for (std::size_t h = 0; h < heads; h += MaxHeads) {
    switch (std::min(MaxHeads, heads - h)) {
    case 1: use.template operator()<1>(h); break;
    case 2: use.template operator()<2>(h); break;
    case 3: use.template operator()<3>(h); break;
    case 4: use.template operator()<4>(h); break;
    case 5:
      if constexpr (MaxHeads == 8) use.template operator()<5>(h);
      break;
    case 6:
      if constexpr (MaxHeads == 8) use.template operator()<6>(h);
      break;
    case 7:
      if constexpr (MaxHeads == 8) use.template operator()<7>(h);
      break;
    default:
      if constexpr (MaxHeads == 8) use.template operator()<8>(h);
      break;
    }
  }
}
} // namespace

template <class Arch>
struct record_runs : vector_basics<Arch> {
  using base = vector_basics<Arch>;
  using base::width, base::sum_each;
  using typename base::floats;

  // scores[h * stride + t] = sum of the lanes of token(t)[h] for t < count and h < H,
  // reducing `width` tokens at a time with one transposing horizontal add instead of one
  // per token. A short last batch is padded, so every token is reduced in the same order
  // wherever it falls: results do not depend on how a caller splits a run of records.
  // `token` is inlined and returns its sums by value (results written through references
  // would make the compiler reload every captured value after each store).
  template <std::size_t H, class Token>
  static void reduce_tokens(const std::uint8_t* records, std::size_t record_bytes, std::size_t count, float* scores,
                            std::size_t stride, Token&& token) noexcept {
    reduce_tokens<H>(records, record_bytes, count, scores, stride, token,
                     [&](std::size_t t) __attribute__((always_inline)) { return std::array{token(t), token(t + 1)}; });
  }
  // As above, full batches going by pairs of neighbouring tokens: `pair(t)` gives the sums
  // of tokens t and t + 1, each computed exactly as `token` computes it, so a kernel can
  // share work (loads of the queries) between the two; a short batch goes token by token.
  template <std::size_t H, class Token, class Pair>
  static void reduce_tokens(const std::uint8_t* records, std::size_t record_bytes, std::size_t count, float* scores,
                            std::size_t stride, Token&& token, Pair&& pair) noexcept {
    floats rows[H][width];
    alignas(64) float sums[width];
    for (std::size_t t = 0; t < count; t += width) {
      const std::size_t batch = std::min(width, count - t);
      const prefetch_span ahead = lines_ahead(records + t * record_bytes, batch * record_bytes);
      if (batch == width) { // no per-token branch: the compiler interleaves neighbouring tokens
        for (std::size_t k = 0; k < width; k += 2) {
          prefetch_part(ahead, k, batch);
          prefetch_part(ahead, k + 1, batch);
          const auto both = pair(t + k);
          for (std::size_t h = 0; h < H; ++h) {
            rows[h][k] = both[0][h];
            rows[h][k + 1] = both[1][h];
          }
        }
      } else {
        for (std::size_t k = 0; k < width; ++k)
          if (k < batch) {
            prefetch_part(ahead, k, batch);
            const auto lanes = token(t + k);
            for (std::size_t h = 0; h < H; ++h) rows[h][k] = lanes[h];
          } else {
            for (std::size_t h = 0; h < H; ++h) rows[h][k] = floats(0.0f);
          }
      }
      for (std::size_t h = 0; h < H; ++h) {
        const floats total = sum_each(rows[h]);
        if (batch == width) {
          total.store_unaligned(scores + h * stride + t);
        } else {
          total.store_aligned(sums);
          std::copy_n(sums, batch, scores + h * stride + t);
        }
      }
    }
  }
};

} // namespace kvlab::kernels::simd
