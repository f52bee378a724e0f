// kvlab.attention: single-query decode attention, exact (double precision, over float
// inputs) and over the compressed cache (fused kernels, GQA).
// out = softmax(q . K^T / sqrt(head_dim)) V, Vaswani et al., arXiv 1706.03762, sec. 3.2.1.
module;
#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <exception>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>
export module kvlab.attention;
import kvlab.core;
import kvlab.simd;
import kvlab.cache;

export namespace kvlab {

// Exact reference for the query heads that share one KV head (queries and out: heads x
// head_dim; one head is a group of one): keys and values are tokens x head_dim rows, read
// once for the whole group. When `probabilities` is given it receives the softmax weight of
// every key, and `dots` q.k of every key (unscaled), heads x tokens, head-major.
inline void exact_decode_attention(std::span<const float> queries, std::span<const float> keys,
                                   std::span<const float> values, std::size_t head_dim, std::span<double> out,
                                   std::vector<double>* probabilities = nullptr, std::vector<double>* dots = nullptr) {
  const std::size_t tokens = keys.size() / head_dim, heads = queries.size() / head_dim;
  const double scale = 1.0 / std::sqrt(static_cast<double>(head_dim));
  std::vector<double> scores(heads * tokens);
  if (dots) dots->resize(heads * tokens);
  // Each dot is summed channel by channel in order; eight tokens at a time keep eight
  // independent sums in flight instead of waiting on one addition chain per token, and the
  // eight key rows stay in L1 for every head of the group. The product of two floats is
  // exact in double, so the sums are the same whether or not the compiler fuses the
  // multiply-adds.
  constexpr std::size_t lanes = 8;
  const auto dot_tokens = [&](std::size_t first, std::size_t count) {
    for (std::size_t h = 0; h < heads; ++h) {
      const float* query = queries.data() + h * head_dim;
      std::array<double, lanes> dot{};
      for (std::size_t c = 0; c < head_dim; ++c)
        for (std::size_t j = 0; j < count; ++j) dot[j] += double{query[c]} * double{keys[(first + j) * head_dim + c]};
      for (std::size_t j = 0; j < count; ++j) {
        const std::size_t i = h * tokens + first + j;
        if (dots) (*dots)[i] = dot[j];
        scores[i] = dot[j] * scale;
      }
    }
  };
  std::size_t t = 0;
  for (; t + lanes <= tokens; t += lanes) dot_tokens(t, lanes);
  if (t < tokens) dot_tokens(t, tokens - t);
  for (std::size_t h = 0; h < heads; ++h) {
    const auto head = std::span(scores).subspan(h * tokens, tokens);
    double max_score = -INFINITY;
    for (const double s : head) max_score = std::max(max_score, s);
    double total = 0.0;
    for (auto& s : head) total += (s = std::exp(s - max_score));
    for (auto& s : head) s /= total;
  }
  std::ranges::fill(out, 0.0);
  for (t = 0; t < tokens; ++t)
    for (std::size_t h = 0; h < heads; ++h) {
      const double p = scores[h * tokens + t];
      double* head_out = out.data() + h * head_dim;
      for (std::size_t c = 0; c < head_dim; ++c) head_out[c] += p * double{values[t * head_dim + c]};
    }
  if (probabilities) *probabilities = std::move(scores);
}

// What eviction scorers need from one decode step of one layer: for every query head, the
// softmax weight of every key its KV head holds (held order) and the log-sum-exp of the
// scaled scores. Heads may hold different numbers of keys (eviction).
struct attention_trace {
  std::vector<std::size_t> offsets; // q_heads + 1: head h's weights are [offsets[h], offsets[h + 1])
  std::vector<float> probabilities;
  std::vector<double> log_sum_exp; // q_heads

  std::span<const float> head(std::size_t h) const {
    return std::span(probabilities).subspan(offsets[h], offsets[h + 1] - offsets[h]);
  }
  // The weights of the `group` query heads of KV head `kv_head`, group x tokens.
  std::span<const float> group(std::size_t kv_head, std::size_t group) const {
    return std::span(probabilities)
        .subspan(offsets[kv_head * group], offsets[(kv_head + 1) * group] - offsets[kv_head * group]);
  }
};

// Decode attention's preconditions: the queries are whole heads, a multiple of the KV
// heads; `outputs` values for them; every KV head of `layer` holds a token.
inline void check_attention_shapes(const kv_cache& cache, std::size_t layer, std::span<const float> queries,
                                   std::size_t outputs) {
  const std::size_t head_dim = cache.head_dim(), q_heads = queries.size() / head_dim;
  if (q_heads == 0 || q_heads % cache.kv_heads() != 0 || queries.size() % head_dim != 0)
    throw error("decode_attention: " + std::to_string(queries.size()) + " query values do not form a multiple of " +
                std::to_string(cache.kv_heads()) + " heads of " + std::to_string(head_dim));
  if (outputs != queries.size())
    throw error("decode_attention: " + std::to_string(outputs) + " output values for " +
                std::to_string(queries.size()) + " query values");
  for (std::size_t kv_head = 0; kv_head < cache.kv_heads(); ++kv_head)
    if (cache.keys(layer, kv_head).tokens() == 0)
      throw error("decode_attention: layer " + std::to_string(layer) + " holds no tokens");
}

// Sizes `trace` for one layer of `cache` read by `q_heads` query heads: head h's weights
// follow head h - 1's, one per key its KV head holds. The weights are left to the caller.
inline void size_trace(const kv_cache& cache, std::size_t layer, std::size_t q_heads, attention_trace& trace) {
  const std::size_t group = q_heads / cache.kv_heads();
  trace.offsets.assign(q_heads + 1, 0);
  for (std::size_t h = 0; h < q_heads; ++h)
    trace.offsets[h + 1] = trace.offsets[h] + cache.keys(layer, h / group).tokens();
  trace.probabilities.resize(trace.offsets.back());
  trace.log_sum_exp.assign(q_heads, 0.0);
}

} // namespace kvlab

namespace kvlab {

// One layer of decode attention (see decode_attention); `with_output` false skips the pass
// over the values and fills only the trace.
inline void attend_layer(const kv_cache& cache, std::size_t layer, std::span<const float> queries, std::span<float> out,
                         bool with_output, const kernel_table& kernels, attention_trace* trace, unsigned threads) {
  const std::size_t head_dim = cache.head_dim();
  const std::size_t q_heads = queries.size() / head_dim;
  check_attention_shapes(cache, layer, queries, with_output ? out.size() : queries.size());
  if (cache.keys_before_rope())
    throw error("decode_attention: the cache holds keys before RoPE (rope=pre), which attention must rotate by "
                "each key's position with the model's RoPE; run the recipe under a model (kvlab ppl)");
  const std::size_t group = q_heads / cache.kv_heads();
  // Every weight is written below (a group's weights are its scores, in place): no fill.
  if (trace) size_trace(cache, layer, q_heads, *trace);
  // One KV head: its whole GQA group, start to finish. KV heads share nothing (each stream
  // has its own scratch), so they run on `threads` threads with identical results.
  const auto attend = [&](std::size_t kv_head, std::vector<float>& scores, std::vector<float>& scaled_queries) {
    const auto& keys = cache.keys(layer, kv_head);
    const auto& values = cache.values(layer, kv_head);
    const std::size_t tokens = keys.tokens();
    const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
    // Fold the softmax temperature into the queries once instead of into every score.
    for (std::size_t i = 0; i < group * head_dim; ++i)
      scaled_queries[i] = queries[kv_head * group * head_dim + i] * scale;
    // The group's weights are group x tokens, head-major, as the trace lays them out: with a
    // trace the scores are computed, and turned into weights, in the trace itself.
    std::span<float> weights;
    if (trace) {
      weights = std::span(trace->probabilities).subspan(trace->offsets[kv_head * group], group * tokens);
    } else {
      scores.resize(group * tokens);
      weights = scores;
    }
    keys.dot_all(kernels, scaled_queries, group, weights);
    for (std::size_t g = 0; g < group; ++g) {
      const float log_sum_exp = kernels.softmax(weights.data() + g * tokens, tokens);
      if (trace) trace->log_sum_exp[kv_head * group + g] = log_sum_exp;
    }
    if (!with_output) return;
    const auto head_out = out.subspan(kv_head * group * head_dim, group * head_dim);
    std::ranges::fill(head_out, 0.0f);
    values.axpy_all(kernels, weights, group, head_out);
  };
  const std::size_t workers = std::min<std::size_t>(std::max(1u, threads), cache.kv_heads());
  if (workers == 1) {
    std::vector<float> scores, scaled_queries(group * head_dim);
    for (std::size_t kv_head = 0; kv_head < cache.kv_heads(); ++kv_head) attend(kv_head, scores, scaled_queries);
    return;
  }
  std::vector<std::exception_ptr> failures(workers);
  {
    std::vector<std::jthread> pool;
    for (std::size_t w = 0; w < workers; ++w)
      pool.emplace_back([&, w] {
        try {
          std::vector<float> scores, scaled_queries(group * head_dim);
          for (std::size_t kv_head = w; kv_head < cache.kv_heads(); kv_head += workers)
            attend(kv_head, scores, scaled_queries);
        } catch (...) {
          failures[w] = std::current_exception(); // rethrown on the caller's thread
        }
      });
  }
  for (const auto& failure : failures)
    if (failure) std::rethrow_exception(failure);
}

} // namespace kvlab

export namespace kvlab {

// Decode attention of every query head of `layer` over the compressed cache.
// queries and out are q_heads x head_dim; query head h reads KV head h / (q_heads / kv_heads).
// Per KV head, the query heads of its group share one pass over the keys' tiers (sinks,
// body, window) through the fused kernels; each head takes one softmax over all its scores
// (max-subtracted, the vector softmax kernel); then one shared pass over the values' tiers
// accumulates every head's output. Nothing is dequantized into a buffer.
inline void decode_attention(const kv_cache& cache, std::size_t layer, std::span<const float> queries,
                             std::span<float> out, const kernel_table& kernels, attention_trace* trace = nullptr,
                             unsigned threads = 1) {
  attend_layer(cache, layer, queries, out, true, kernels, trace, threads);
}

// The softmax weights of decode attention alone (the trace), without reading the values:
// what an eviction policy observes at a prefill token, whose attention output no one reads.
// The weights are those decode_attention traces, bit for bit.
inline void attention_weights(const kv_cache& cache, std::size_t layer, std::span<const float> queries,
                              const kernel_table& kernels, attention_trace& trace, unsigned threads = 1) {
  attend_layer(cache, layer, queries, {}, false, kernels, &trace, threads);
}

} // namespace kvlab
