// kvlab.attention: single-query decode attention, exact (double precision, over float
// inputs) and over the compressed cache (fused kernels, GQA).
// out = softmax(q . K^T / sqrt(head_dim)) V, Vaswani et al., arXiv 1706.03762, sec. 3.2.1.
module;
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <span>
#include <string>
#include <vector>
export module kvlab.attention;
import kvlab.core;
import kvlab.simd;
import kvlab.cache;

export namespace kvlab {

// Exact reference for one query head: keys and values are tokens x head_dim rows.
inline void exact_decode_attention(std::span<const float> query, std::span<const float> keys,
                                   std::span<const float> values, std::size_t head_dim, std::span<double> out) {
  const std::size_t tokens = keys.size() / head_dim;
  const double scale = 1.0 / std::sqrt(static_cast<double>(head_dim));
  std::vector<double> scores(tokens);
  double max_score = -INFINITY;
  for (std::size_t t = 0; t < tokens; ++t) {
    double dot = 0.0;
    for (std::size_t c = 0; c < head_dim; ++c) dot += double{query[c]} * double{keys[t * head_dim + c]};
    scores[t] = dot * scale;
    max_score = std::max(max_score, scores[t]);
  }
  double total = 0.0;
  for (auto& s : scores) total += (s = std::exp(s - max_score));
  std::ranges::fill(out, 0.0);
  for (std::size_t t = 0; t < tokens; ++t) {
    const double p = scores[t] / total;
    for (std::size_t c = 0; c < head_dim; ++c) out[c] += p * double{values[t * head_dim + c]};
  }
}

// What eviction scorers need from one decode step of one layer: for every query head, the
// softmax weight of every held key (oldest first) and the log-sum-exp of the scaled scores.
struct attention_trace {
  std::size_t tokens = 0;           // keys held per KV head (the same for every head here)
  std::vector<float> probabilities; // q_heads x tokens
  std::vector<double> log_sum_exp;  // q_heads
};

// Decode attention of every query head of `layer` over the compressed cache.
// queries and out are q_heads x head_dim; query head h reads KV head h / (q_heads / kv_heads).
// Per query head: scores over every tier (sinks, body, window) through the fused kernels,
// one softmax over all of them (max-subtracted, normalized in double), then one weighted
// pass over the values' tiers. Nothing is dequantized into a buffer.
inline void decode_attention(const kv_cache& cache, std::size_t layer, std::span<const float> queries,
                             std::span<float> out, const kernel_table& kernels, attention_trace* trace = nullptr) {
  const std::size_t head_dim = cache.head_dim();
  const std::size_t q_heads = queries.size() / head_dim;
  if (q_heads == 0 || q_heads % cache.kv_heads() != 0 || queries.size() % head_dim != 0 || out.size() != queries.size())
    throw error("decode_attention: " + std::to_string(queries.size()) + " query values do not form a multiple of " +
                std::to_string(cache.kv_heads()) + " heads of " + std::to_string(head_dim));
  const std::size_t group = q_heads / cache.kv_heads();
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  std::vector<float> scores;
  std::vector<float> scaled_query(head_dim);
  if (trace) {
    trace->tokens = cache.keys(layer, 0).tokens();
    trace->probabilities.assign(q_heads * trace->tokens, 0.0f);
    trace->log_sum_exp.assign(q_heads, 0.0);
  }
  for (std::size_t h = 0; h < q_heads; ++h) {
    const auto& keys = cache.keys(layer, h / group);
    const auto& values = cache.values(layer, h / group);
    if (keys.tokens() == 0) throw error("decode_attention: layer " + std::to_string(layer) + " holds no tokens");
    scores.resize(keys.tokens());
    // Fold the softmax temperature into the query once instead of into every score.
    for (std::size_t c = 0; c < head_dim; ++c) scaled_query[c] = queries[h * head_dim + c] * scale;
    keys.dot_all(kernels, scaled_query, scores);
    const float max_score = *std::ranges::max_element(scores);
    double total = 0.0;
    for (auto& s : scores) total += (s = std::exp(s - max_score));
    for (auto& s : scores) s = static_cast<float>(s / total);
    auto head_out = out.subspan(h * head_dim, head_dim);
    std::ranges::fill(head_out, 0.0f);
    values.axpy_all(kernels, scores, head_out);
    if (trace && scores.size() == trace->tokens) {
      std::ranges::copy(scores, trace->probabilities.begin() + static_cast<std::ptrdiff_t>(h * trace->tokens));
      trace->log_sum_exp[h] = max_score + std::log(total);
    }
  }
}

} // namespace kvlab
