// kvlab.eval: the attention-fidelity protocol. Prefill the compressed cache with the first
// tokens, then decode: append k_t and v_t, attend with q_t over the compressed cache, and
// compare with exact attention over the full history (double precision).
module;
#include <algorithm>
#include <cstddef>
#include <span>
#include <string>
#include <vector>
export module kvlab.eval;
import kvlab.core;
import kvlab.simd;
import kvlab.cache;
import kvlab.attention;
import kvlab.metrics;
import kvlab.report;

export namespace kvlab {

struct eval_options {
  std::size_t decode_steps = 32; // the last tokens of the data are decoded one by one
};

struct eval_result {
  std::string recipe;
  std::string data;
  std::string isa;
  std::size_t tokens = 0; // held by the cache at the end
  std::size_t decode_steps = 0;
  summary attn_rel_l2; // over layers x query heads x decode steps
  summary attn_cosine;
  std::size_t cache_bytes = 0;                   // everything storage holds at the end
  std::vector<std::size_t> cache_bytes_per_head; // layers x KV heads, keys and values
  double bytes_per_token = 0.0;                  // cache_bytes / tokens: all layers and KV heads, K and V
};

inline eval_result evaluate(const recipe& r, const kv_data& data, const registry& components,
                            const eval_options& options = {}) {
  check_consistent(data);
  require_finite(data.keys, "keys");
  require_finite(data.values, "values");
  require_finite(data.queries, "queries");
  if (options.decode_steps == 0) throw error("decode steps must be at least 1");
  const std::size_t tokens = data.tokens(), head_dim = data.head_dim();
  if (options.decode_steps >= tokens)
    throw error(std::to_string(options.decode_steps) + " decode steps need more than " + std::to_string(tokens) +
                " tokens of data (at least one token is prefilled)");
  const std::size_t prefill = tokens - options.decode_steps;
  const kernel_table& kernels = active_kernels();

  kv_cache cache(r, components, data.layers(), data.kv_heads(), head_dim);
  const auto append = [&](std::size_t t) {
    for (std::size_t layer = 0; layer < data.layers(); ++layer)
      for (std::size_t head = 0; head < data.kv_heads(); ++head)
        cache.append(layer, head, data.keys.row(layer, head, t), data.values.row(layer, head, t));
  };
  for (std::size_t t = 0; t < prefill; ++t) append(t);

  const std::size_t q_heads = data.q_heads(), group = q_heads / data.kv_heads();
  std::vector<double> rel_l2, cosine;
  std::vector<float> queries(q_heads * head_dim), out(q_heads * head_dim);
  std::vector<double> exact(head_dim);
  for (std::size_t t = prefill; t < tokens; ++t) {
    append(t);
    for (std::size_t layer = 0; layer < data.layers(); ++layer) {
      for (std::size_t h = 0; h < q_heads; ++h)
        std::ranges::copy(data.queries.row(layer, h, t), queries.begin() + static_cast<std::ptrdiff_t>(h * head_dim));
      decode_attention(cache, layer, queries, out, kernels);
      for (std::size_t h = 0; h < q_heads; ++h) {
        const auto keys = data.keys.stream(layer, h / group).first((t + 1) * head_dim);
        const auto values = data.values.stream(layer, h / group).first((t + 1) * head_dim);
        exact_decode_attention(data.queries.row(layer, h, t), keys, values, head_dim, exact);
        const auto approx = std::span<const float>(out).subspan(h * head_dim, head_dim);
        rel_l2.push_back(relative_l2(approx, exact));
        cosine.push_back(cosine_similarity(approx, exact));
      }
    }
  }

  eval_result result{.recipe = canonical_name(r),
                     .data = data.source,
                     .isa = std::string(isa_name(kernels.instruction_set)),
                     .tokens = tokens,
                     .decode_steps = options.decode_steps,
                     .attn_rel_l2 = summarize(rel_l2),
                     .attn_cosine = summarize(cosine),
                     .cache_bytes = cache.bytes()};
  for (std::size_t layer = 0; layer < data.layers(); ++layer)
    for (std::size_t head = 0; head < data.kv_heads(); ++head)
      result.cache_bytes_per_head.push_back(cache.bytes(layer, head));
  result.bytes_per_token = static_cast<double>(result.cache_bytes) / static_cast<double>(tokens);
  return result;
}

inline std::string to_json(const eval_result& r) {
  return json_object()
      .add("recipe", r.recipe)
      .add("data", r.data)
      .add("isa", r.isa)
      .add("tokens", r.tokens)
      .add("decode_steps", r.decode_steps)
      .add("attn_rel_l2", r.attn_rel_l2.mean)
      .add("attn_rel_l2_p99", r.attn_rel_l2.p99)
      .add("attn_rel_l2_max", r.attn_rel_l2.max)
      .add("attn_cosine", r.attn_cosine.mean)
      .add("attn_cosine_min", r.attn_cosine.min)
      .add("bytes_per_token", r.bytes_per_token)
      .add("cache_bytes", r.cache_bytes)
      .raw("cache_bytes_per_head",
           [&] {
             std::string list = "[";
             for (std::size_t i = 0; i < r.cache_bytes_per_head.size(); ++i)
               list += (i ? ", " : "") + std::to_string(r.cache_bytes_per_head[i]);
             return list + "]";
           }())
      .str();
}

} // namespace kvlab
