// Decode attention over a cache that holds keys before RoPE (recipe rope=pre). KVQuant
// quantizes keys before the rotary embedding, whose position-dependent rotation mixes each
// channel pair and so blurs the per-channel structure that quantization relies on, and
// applies RoPE after decoding (arXiv 2401.18079, sec. 3.2). Here every held key is decoded,
// rotated by RoPE at the position it was appended at, and attended over exactly (double
// precision, exact_decode_attention) with the decoded values. This is the scalar
// reference: the fused kernels score stored keys as they are and cannot rotate each key by
// its own position.
module;
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <span>
#include <vector>
export module kvlab.model:rotary_attention;
import kvlab.core;
import kvlab.cache;
import kvlab.attention;
import :forward;

export namespace kvlab {

// One layer of decode attention over `cache`, which holds keys before RoPE: the counterpart
// of decode_attention. queries (after RoPE) and out are q_heads x head_dim; the trace, when
// given, is filled as decode_attention fills it.
class rotary_attention {
public:
  void attend(const kv_cache& cache, std::size_t layer, std::span<const float> queries, std::span<float> out,
              const rotary_table& rope, attention_trace* trace) {
    check_attention_shapes(cache, layer, queries, out.size());
    const std::size_t head_dim = cache.head_dim(), q_heads = queries.size() / head_dim;
    const std::size_t group = q_heads / cache.kv_heads();
    if (trace) size_trace(cache, layer, q_heads, *trace);
    for (std::size_t kv_head = 0; kv_head < cache.kv_heads(); ++kv_head) {
      const kv_stream& key_stream = cache.keys(layer, kv_head);
      const std::size_t tokens = key_stream.tokens();
      keys_.resize(tokens * head_dim), values_.resize(tokens * head_dim), out_.resize(group * head_dim);
      key_stream.decode(0, tokens, keys_);
      cache.values(layer, kv_head).decode(0, tokens, values_);
      const auto positions = key_stream.positions();
      for (std::size_t i = 0; i < tokens; ++i)
        rope.rotate(std::span(keys_).subspan(i * head_dim, head_dim), positions[i]);
      exact_decode_attention(queries.subspan(kv_head * group * head_dim, group * head_dim), keys_, values_, head_dim,
                             out_, &probabilities_, &dots_);
      std::ranges::transform(out_, out.begin() + static_cast<std::ptrdiff_t>(kv_head * group * head_dim),
                             [](double x) { return static_cast<float>(x); });
      if (!trace) continue;
      const auto first = static_cast<std::ptrdiff_t>(trace->offsets[kv_head * group]);
      std::ranges::transform(probabilities_, trace->probabilities.begin() + first,
                             [](double p) { return static_cast<float>(p); });
      const double scale = 1.0 / std::sqrt(static_cast<double>(head_dim));
      for (std::size_t g = 0; g < group; ++g) {
        const auto head = std::span(dots_).subspan(g * tokens, tokens);
        const double highest = *std::ranges::max_element(head) * scale;
        double total = 0.0;
        for (const double dot : head) total += std::exp(dot * scale - highest);
        trace->log_sum_exp[kv_head * group + g] = highest + std::log(total);
      }
    }
  }

private:
  std::vector<float> keys_, values_;
  std::vector<double> out_, probabilities_, dots_;
};

} // namespace kvlab
