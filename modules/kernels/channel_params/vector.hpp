// Per-channel parameters (KIVI's keys, arXiv 2402.02750 section 3.2: a scale and a zero per
// channel for a block of tokens) folded into the queries, q . (s * level + z) = (q * s) .
// level + q . z, and whole streams of such blocks. The scalar reference is
// reference.hpp here; AVX-512 runs bare 2- and 4-bit rows through token lanes
// (token_lanes/avx512.hpp).
#pragma once
#include "../records/runs.hpp"
#include "reference.hpp"

namespace kvlab::kernels::simd {

template <class Arch>
struct channel_param_kernels : vector_basics<Arch> {
  using base = vector_basics<Arch>;
  using base::width, base::fmadd, base::load_f16, base::kivi_parameter_pairs;
  using typename base::floats;

  static void fold_channel_params(const std::uint8_t* params, std::size_t n, unsigned per_channel, bool params_f32,
                                  const float* queries, std::size_t heads, float* scaled, float* zero_terms) noexcept {
    if (n > max_head_dim || per_channel > 2)
      return scalar::fold_channel_params(params, n, per_channel, params_f32, queries, heads, scaled, zero_terms);
    alignas(64) float values[2 * max_head_dim], scales[max_head_dim], zeros[max_head_dim];
    const std::size_t count = n * per_channel, full = count / width * width;
    if (kivi_parameter_pairs && !params_f32 && per_channel == 2 && n % width == 0) {
      if constexpr (kivi_parameter_pairs)
        for (std::size_t c = 0; c < n; c += width) {
          const auto [channel_scales, channel_zeros] = base::kivi_params(params, c);
          channel_scales.store_aligned(scales + c);
          channel_zeros.store_aligned(zeros + c);
        }
    } else {
      if (params_f32) {
        std::memcpy(values, params, 4 * count);
      } else {
        for (std::size_t i = 0; i < full; i += width) load_f16(params + 2 * i).store_aligned(values + i);
        for (std::size_t i = full; i < count; ++i) values[i] = scalar::load_f16(params, i);
      }
      for (std::size_t c = 0; c < n; ++c) {
        scales[c] = values[c * per_channel];
        zeros[c] = per_channel > 1 ? values[c * per_channel + 1] : 0.0f;
      }
    }
    const std::size_t channels = n / width * width;
    for (std::size_t h = 0; h < heads; ++h) {
      const float* query = queries + h * n;
      floats zero_sum(0.0f);
      for (std::size_t c = 0; c < channels; c += width) {
        const floats q = floats::load_unaligned(query + c);
        (q * floats::load_aligned(scales + c)).store_unaligned(scaled + h * n + c);
        zero_sum = fmadd(q, floats::load_aligned(zeros + c), zero_sum);
      }
      float zero_term = xsimd::hadd(zero_sum);
      for (std::size_t c = channels; c < n; ++c) {
        scaled[h * n + c] = query[c] * scales[c];
        zero_term += query[c] * zeros[c];
      }
      zero_terms[h] = zero_term;
    }
  }

  // Block by block through fold_channel_params and the ISA's dot_records (whose choice of
  // kernel depends on the number of heads: all heads at once).
  static void dot_channel_blocks(const record_format& f, const channel_block* blocks, std::size_t count,
                                 unsigned per_channel, bool params_f32, const float* queries, std::size_t heads,
                                 float* scores, std::size_t stride,
                                 decltype(kernel_table::dot_records) dot_records) noexcept {
    const std::size_t n = f.head_dim;
    std::vector<float> scaled(heads * n), zero_terms(heads);
    for (std::size_t b = 0; b < count; ++b) {
      const channel_block& block = blocks[b];
      fold_channel_params(block.params, n, per_channel, params_f32, queries, heads, scaled.data(), zero_terms.data());
      dot_records(f, scaled.data(), heads, block.rows, block.count, scores + block.first, stride);
      scalar::add_zero_terms(zero_terms.data(), heads, block.count, scores + block.first, stride);
    }
  }
};

} // namespace kvlab::kernels::simd
