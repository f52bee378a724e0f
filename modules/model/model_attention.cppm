// A model's attention through kvlab's compressed cache: every layer appends each token's
// keys and values to a `kv_cache` built from the recipe, and the token's queries attend over
// the cache as it is after that append through the fused kernels of `decode_attention`. The
// cache's eviction policy runs as in `kvlab eval`: tokens before `prefill` are prefill (the
// policy observes the attention it scores with, and a prefill schedule compresses once when
// they are done), later tokens are decode steps; a token attends before its own step's
// compression. Optionally measures kvlab's attention metrics on the model's own queries:
// the cache's output against exact attention over the exact keys and values of this run.
// A cache whose recipe says rope=pre is given the keys before RoPE, and attends through
// rotary_attention, which rotates each decoded key by its position.
module;
#include <algorithm>
#include <chrono>
#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <vector>
export module kvlab.model:cache_attention;
import kvlab.core;
import kvlab.simd;
import kvlab.cache;
import kvlab.attention;
import kvlab.metrics;
import kvlab.eval;
import :config;
import :forward;
import :rotary_attention;

export namespace kvlab {

struct cache_attention_options {
  std::size_t prefill = 0;      // tokens of the sequence that are prefill (then decode)
  std::size_t measure_from = 0; // tokens at or after this one get attention metrics
  bool measure = false;         // attention metrics on the model's own queries
  std::size_t top_k = 32;       // for topk_recall
  unsigned threads = 1;         // KV heads in parallel (results identical for any count; one under rope=pre)
};

// Per layer, over query heads x measured tokens.
struct layer_attention_metrics {
  std::vector<double> attn_rel_l2, score_kl, topk_recall;
};

class cache_attention final : public attention_backend {
public:
  cache_attention(kv_cache& cache, const model_config& c, cache_attention_options options)
      : cache_(cache), heads_(c.heads), kv_heads_(c.kv_heads), head_dim_(c.head_dim), options_(options),
        metrics_(c.layers), exact_keys_(options.measure ? c.layers * c.kv_heads : 0),
        exact_values_(exact_keys_.size()) {
    if (cache.layers() != c.layers || cache.kv_heads() != c.kv_heads || cache.head_dim() != c.head_dim)
      throw error("cache_attention: the cache's shape (" + std::to_string(cache.layers()) + " layers, " +
                  std::to_string(cache.kv_heads()) + " KV heads, head_dim " + std::to_string(cache.head_dim()) +
                  ") is not the model's");
    if (cache.keys_before_rope()) rope_.emplace(c.head_dim, c.rope_theta, c.rope);
  }

  void keys_before_rope(std::size_t layer, std::span<const float> k, std::size_t first_position) override {
    if (!rope_) return;
    if (first_position != cache_.keys(layer, 0).tokens_seen())
      throw error("cache_attention: a chunk at position " + std::to_string(first_position) + " after " +
                  std::to_string(cache_.keys(layer, 0).tokens_seen()) +
                  " cached tokens; keys kept before RoPE are rotated by the position they were appended at");
    unrotated_keys_.assign(k.begin(), k.end());
    unrotated_layer_ = layer;
  }

  void attend(std::size_t layer, std::span<const float> q, std::span<const float> k, std::span<const float> v,
              std::size_t tokens, std::span<float> out) override {
    using clock = std::chrono::steady_clock;
    const std::size_t kv_width = kv_heads_ * head_dim_, q_width = heads_ * head_dim_, group = heads_ / kv_heads_;
    const kernel_table& kernels = active_kernels();
    cache_.reserve(layer, tokens);
    // rope=pre: the cache keeps the keys as they were before RoPE.
    const std::span<const float> stored_keys = rope_ ? std::span<const float>(unrotated_keys_) : k;
    if (rope_ && (unrotated_layer_ != layer || stored_keys.size() != k.size()))
      throw error("cache_attention: layer " + std::to_string(layer) + " got no keys before RoPE for its chunk");
    for (std::size_t t = 0; t < tokens; ++t) {
      const std::size_t position = cache_.keys(layer, 0).tokens_seen();
      const auto start = clock::now();
      for (std::size_t h = 0; h < kv_heads_; ++h)
        cache_.append(layer, h, stored_keys.subspan(t * kv_width + h * head_dim_, head_dim_),
                      v.subspan(t * kv_width + h * head_dim_, head_dim_));
      append_seconds_ += std::chrono::duration<double>(clock::now() - start).count();
      const bool prefill = position < options_.prefill;
      const bool observe =
          prefill ? cache_.observes_prefill_token(position, options_.prefill) : cache_.observes_decode_steps();
      const bool measure = options_.measure && position >= options_.measure_from;
      const auto queries = q.subspan(t * q_width, q_width);
      const auto output = out.subspan(t * q_width, q_width);
      attention_trace* const trace = observe || measure ? &trace_ : nullptr;
      if (rope_) {
        rope_->extend(position + 1);
        rotary_.attend(cache_, layer, queries, output, *rope_, trace);
      } else {
        decode_attention(cache_, layer, queries, output, kernels, trace, options_.threads);
      }
      if (observe)
        for (std::size_t h = 0; h < kv_heads_; ++h) cache_.observe(layer, h, trace_.group(h, group), group);
      if (options_.measure) record_exact(layer, k.subspan(t * kv_width, kv_width), v.subspan(t * kv_width, kv_width));
      if (measure) measure_token(layer, position, queries, output);
      cache_.token_done(layer);
      if (position + 1 == options_.prefill) cache_.prefill_done(layer);
    }
  }

  const std::vector<layer_attention_metrics>& metrics() const noexcept { return metrics_; }
  double append_seconds() const noexcept { return append_seconds_; }

private:
  void record_exact(std::size_t layer, std::span<const float> k, std::span<const float> v) {
    for (std::size_t h = 0; h < kv_heads_; ++h) {
      const auto key = k.subspan(h * head_dim_, head_dim_), value = v.subspan(h * head_dim_, head_dim_);
      exact_keys_[layer * kv_heads_ + h].insert(exact_keys_[layer * kv_heads_ + h].end(), key.begin(), key.end());
      exact_values_[layer * kv_heads_ + h].insert(exact_values_[layer * kv_heads_ + h].end(), value.begin(),
                                                  value.end());
    }
  }

  // The cache's output and weights for token `position` against exact attention over every
  // key so far, per query head (evicted keys weigh 0, as in kvlab eval).
  void measure_token(std::size_t layer, std::size_t position, std::span<const float> queries,
                     std::span<const float> output) {
    const std::size_t group = heads_ / kv_heads_;
    layer_attention_metrics& m = metrics_[layer];
    const std::size_t keys_so_far = position + 1;
    for (std::size_t h = 0; h < heads_; ++h) {
      const std::size_t stream = layer * kv_heads_ + h / group, in_group = h % group;
      if (in_group == 0) { // the whole group at once: its keys and values are read once
        exact_out_.resize(group * head_dim_);
        exact_decode_attention(queries.subspan(h * head_dim_, group * head_dim_), exact_keys_[stream],
                               exact_values_[stream], head_dim_, exact_out_, &exact_p_);
      }
      const auto exact_p = std::span<const double>(exact_p_).subspan(in_group * keys_so_far, keys_so_far);
      m.attn_rel_l2.push_back(
          relative_l2(output.subspan(h * head_dim_, head_dim_),
                      std::span<const double>(exact_out_).subspan(in_group * head_dim_, head_dim_)));
      approx_p_.assign(position + 1, 0.0);
      const auto weights = trace_.head(h);
      const auto held = cache_.keys(layer, h / group).positions();
      for (std::size_t i = 0; i < weights.size(); ++i) approx_p_[held[i]] = weights[i];
      m.score_kl.push_back(kl_divergence(exact_p, approx_p_));
      m.topk_recall.push_back(topk_recall(exact_p, std::span<const double>(approx_p_), options_.top_k));
    }
  }

  kv_cache& cache_;
  std::size_t heads_, kv_heads_, head_dim_;
  cache_attention_options options_;
  std::vector<layer_attention_metrics> metrics_;
  std::vector<std::vector<float>> exact_keys_, exact_values_; // per (layer, KV head), when measuring
  attention_trace trace_;
  std::optional<rotary_table> rope_;  // rope=pre
  std::vector<float> unrotated_keys_; // the chunk's keys before RoPE (rope=pre), of layer unrotated_layer_
  std::size_t unrotated_layer_ = 0;
  rotary_attention rotary_;
  std::vector<double> exact_out_, exact_p_, approx_p_;
  double append_seconds_ = 0.0;
};

} // namespace kvlab
