// The scalar reference of per-channel parameters and their blocks: the oracle the vector kernels are tested against,
// and the tail and odd-width fallback they call for what their vector loops do not cover.
#pragma once
#include "../records/reference.hpp"

#include <vector>

namespace kvlab::kernels::scalar {
// Internal linkage (see kernels_scalar.hpp).
namespace {

// One block of per-channel parameters (KIVI's keys, arXiv 2402.02750 section 3.2: a scale
// and a zero per channel for a block of tokens) folded into the queries: q . (s * level + z)
// = (q * s) . level + q . z.
inline void fold_channel_params(const std::uint8_t* params, std::size_t n, unsigned per_channel, bool params_f32,
                                const float* queries, std::size_t heads, float* scaled, float* zero_terms) noexcept {
  const auto param = [&](std::size_t i) { return params_f32 ? load_f32(params, i) : load_f16(params, i); };
  for (std::size_t h = 0; h < heads; ++h) {
    float zero_term = 0.0f;
    for (std::size_t c = 0; c < n; ++c) {
      scaled[h * n + c] = queries[h * n + c] * param(c * per_channel);
      if (per_channel > 1) zero_term += queries[h * n + c] * param(c * per_channel + 1);
    }
    zero_terms[h] = zero_term;
  }
}

// scores[h * stride + t] += zero_terms[h] for h < heads, t < count: a per-channel block's
// q . z, after its rows' dots.
inline void add_zero_terms(const float* zero_terms, std::size_t heads, std::size_t count, float* scores,
                           std::size_t stride) noexcept {
  for (std::size_t h = 0; h < heads; ++h)
    for (std::size_t t = 0; t < count; ++t) scores[h * stride + t] += zero_terms[h];
}

// Per-channel blocks one head at a time (each head's fold and dots are its own).
inline void dot_channel_blocks(const record_format& f, const channel_block* blocks, std::size_t count,
                               unsigned per_channel, bool params_f32, const float* queries, std::size_t heads,
                               float* scores, std::size_t stride) noexcept {
  std::vector<float> scaled(f.head_dim);
  float zero_term;
  for (std::size_t h = 0; h < heads; ++h)
    for (std::size_t b = 0; b < count; ++b) {
      const channel_block& block = blocks[b];
      fold_channel_params(block.params, f.head_dim, per_channel, params_f32, queries + h * f.head_dim, 1, scaled.data(),
                          &zero_term);
      float* block_scores = scores + h * stride + block.first;
      dot_records(f, scaled.data(), 1, block.rows, block.count, block_scores, stride);
      add_zero_terms(&zero_term, 1, block.count, block_scores, stride);
    }
}

} // namespace
} // namespace kvlab::kernels::scalar
