// kvlab.eval: the attention-fidelity protocol. Prefill the compressed cache with the first
// tokens, then decode: append k_t and v_t, attend with q_t over the compressed cache, and
// compare with exact attention over the full history (double precision).
// With eviction the cache runs its policy as a model would: every prefill token whose
// attention the policy scores with is attended (q_t over the cache as it is then) and
// observed; the cache compresses when its schedule says (after each token, every N, or
// once at the end of prefill); a decode step attends before the step's compression, so
// it sees the budget plus the new token. Evicted keys count as weight 0 in score_kl
// (floored, see kl_divergence) and topk_recall.
module;
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>
export module kvlab.eval;
import kvlab.core;
import kvlab.simd;
import kvlab.cache;
import kvlab.attention;
import kvlab.metrics;
import kvlab.report;
import kvlab.registry_builtin;

export namespace kvlab {

struct eval_options {
  std::size_t decode_steps = 32;   // the last tokens of the data are decoded one by one
  std::vector<any_metric> metrics; // measured at every step; empty: every registered metric
};

// One metric over layers x query heads x decode steps.
struct measured_metric {
  std::string name;
  metric_direction direction = metric_direction::lower;
  summary stats;
};

struct eval_result {
  std::string recipe;
  std::string data;
  std::string isa;
  std::size_t tokens = 0; // in the data (all of them pass through the cache)
  std::size_t decode_steps = 0;
  std::vector<measured_metric> per_step; // every metric (metrics/), in the registry's order
  summary key_mse, key_snr_db;           // over layers x KV heads, at the end, all held keys
  summary value_mse, value_snr_db;
  double bits_k = 0.0; // bits per key element: codes, parameters and fp16 tiers
  double bits_v = 0.0;
  double compression_vs_fp16 = 0.0;
  double tokens_kept = 0.0;                      // mean over streams, at the end
  std::size_t cache_bytes = 0;                   // everything storage holds at the end
  std::vector<std::size_t> cache_bytes_per_head; // layers x KV heads, keys and values
  double bytes_per_token = 0.0;                  // cache_bytes / tokens: all layers and KV heads, K and V

  // The summary of the per-step metric `name`; throws kvlab::error naming the measured ones.
  const summary& metric(std::string_view name) const {
    std::string measured;
    for (const auto& m : per_step) {
      if (m.name == name) return m.stats;
      measured += (measured.empty() ? "" : ", ") + m.name;
    }
    throw error("metric '" + std::string(name) + "' was not measured (measured: " + measured + ")");
  }
};

// The part of an evaluation that depends on the data alone: for every decode step, layer
// and KV head, exact attention of its query heads over the full history (double
// precision), their weights, and q.k for every key. A sweep computes it once per dataset
// and shares it between its recipes; evaluate computes each entry on the fly when given none.
struct exact_attention {
  struct entry {
    std::vector<double> out;           // group x head_dim
    std::vector<double> probabilities; // group x keys so far, head-major
    std::vector<double> dots;          // q.k, group x keys so far, unscaled
  };
  std::size_t decode_steps = 0;
  std::vector<entry> entries; // [(step * layers + layer) * kv_heads + kv_head]
};

// Exact attention of the query heads of `kv_head` in `layer` at token t over tokens [0, t].
inline void exact_entry(const kv_data& data, std::size_t layer, std::size_t kv_head, std::size_t t,
                        exact_attention::entry& e) {
  const std::size_t head_dim = data.head_dim(), group = data.q_heads() / data.kv_heads();
  std::vector<float> queries(group * head_dim);
  for (std::size_t g = 0; g < group; ++g)
    std::ranges::copy(data.queries.row(layer, kv_head * group + g, t),
                      queries.begin() + static_cast<std::ptrdiff_t>(g * head_dim));
  const auto keys = data.keys.stream(layer, kv_head).first((t + 1) * head_dim);
  const auto values = data.values.stream(layer, kv_head).first((t + 1) * head_dim);
  e.out.resize(group * head_dim);
  exact_decode_attention(queries, keys, values, head_dim, e.out, &e.probabilities, &e.dots);
}

// Bytes compute_exact_attention would hold (to decide whether sharing it is worth it).
inline std::size_t exact_attention_bytes(const kv_data& data, std::size_t decode_steps) {
  const std::size_t tokens = data.tokens(), prefill = tokens - std::min(decode_steps, tokens);
  std::size_t keys = 0;
  for (std::size_t t = prefill; t < tokens; ++t) keys += t + 1;
  return sizeof(double) * data.layers() * data.q_heads() * (2 * keys + decode_steps * data.head_dim());
}

inline exact_attention compute_exact_attention(const kv_data& data, std::size_t decode_steps) {
  const std::size_t tokens = data.tokens(), layers = data.layers(), kv_heads = data.kv_heads();
  if (decode_steps == 0 || decode_steps >= tokens)
    throw error("exact attention: " + std::to_string(decode_steps) + " decode steps do not fit " +
                std::to_string(tokens) + " tokens");
  exact_attention exact{.decode_steps = decode_steps, .entries = {}};
  exact.entries.resize(decode_steps * layers * kv_heads);
  for (std::size_t step = 0; step < decode_steps; ++step)
    for (std::size_t layer = 0; layer < layers; ++layer)
      for (std::size_t head = 0; head < kv_heads; ++head)
        exact_entry(data, layer, head, tokens - decode_steps + step,
                    exact.entries[(step * layers + layer) * kv_heads + head]);
  return exact;
}

// MSE and SNR (dB) of a stream's held tokens against the data they came from (held token t
// is data token positions()[t]).
inline std::pair<double, double> reconstruction_error(const kv_stream& stream, std::span<const float> source) {
  const std::size_t head_dim = stream.head_dim(), chunk = 256; // tokens decoded per call
  std::vector<float> decoded(chunk * head_dim);
  double error = 0.0, signal = 0.0;
  for (std::size_t first = 0; first < stream.tokens(); first += chunk) {
    const std::size_t count = std::min(chunk, stream.tokens() - first);
    stream.decode(first, count, std::span(decoded).first(count * head_dim));
    for (std::size_t t = 0; t < count; ++t) {
      const std::size_t row = stream.positions()[first + t];
      for (std::size_t c = 0; c < head_dim; ++c) {
        const double x = source[row * head_dim + c], d = double{decoded[t * head_dim + c]} - x;
        error += d * d, signal += x * x;
      }
    }
  }
  const double n = static_cast<double>(stream.tokens() * head_dim);
  return {error / n, error == 0.0 ? INFINITY : 10.0 * std::log10(signal / error)};
}

// Appends token t of `data` to every (layer, KV head) of the cache.
inline void append_token(kv_cache& cache, const kv_data& data, std::size_t t) {
  for (std::size_t layer = 0; layer < data.layers(); ++layer)
    for (std::size_t head = 0; head < data.kv_heads(); ++head)
      cache.append(layer, head, data.keys.row(layer, head, t), data.values.row(layer, head, t));
}

// What one attention step fills, kept by the caller across steps so that prefill and
// decode allocate once per run, not once per token: the token's query rows, the output
// (q_heads x head_dim) and the trace of softmax weights.
struct step_scratch {
  std::vector<float> queries, out;
  attention_trace trace;
};

// Token t's query rows of `layer` into scratch.queries (q_heads x head_dim).
inline void load_queries(const kv_data& data, std::size_t layer, std::size_t t, step_scratch& scratch) {
  const std::size_t head_dim = data.head_dim();
  scratch.queries.resize(data.q_heads() * head_dim);
  for (std::size_t h = 0; h < data.q_heads(); ++h)
    std::ranges::copy(data.queries.row(layer, h, t),
                      scratch.queries.begin() + static_cast<std::ptrdiff_t>(h * head_dim));
}

// The cache observes the weights in scratch.trace, every KV head of `layer`.
inline void observe_trace(kv_cache& cache, const kv_data& data, std::size_t layer, const step_scratch& scratch) {
  const std::size_t group = data.q_heads() / data.kv_heads();
  for (std::size_t head = 0; head < data.kv_heads(); ++head)
    cache.observe(layer, head, scratch.trace.group(head, group), group);
}

// Decode attention with the queries of token t in `layer` over the cache (scratch.out and
// scratch.trace filled); the cache observes the step when `observe`.
inline void attend_token(kv_cache& cache, const kv_data& data, std::size_t layer, std::size_t t, bool observe,
                         step_scratch& scratch, const kernel_table& kernels) {
  load_queries(data, layer, t, scratch);
  scratch.out.resize(scratch.queries.size());
  decode_attention(cache, layer, scratch.queries, scratch.out, kernels, &scratch.trace);
  if (observe) observe_trace(cache, data, layer, scratch);
}

// The cache observes token t's attention weights in `layer`. No metric reads a prefill
// token's attention output, so it is not computed and the values are not read.
inline void observe_token(kv_cache& cache, const kv_data& data, std::size_t layer, std::size_t t, step_scratch& scratch,
                          const kernel_table& kernels) {
  load_queries(data, layer, t, scratch);
  attention_weights(cache, layer, scratch.queries, kernels, scratch.trace);
  observe_trace(cache, data, layer, scratch);
}

// One prefill token as a model's prefill would treat it under the cache's policy: append,
// observe its attention when the policy scores with it, compress when the schedule says.
inline void prefill_token(kv_cache& cache, const kv_data& data, std::size_t t, std::size_t prefill,
                          step_scratch& scratch, const kernel_table& kernels) {
  append_token(cache, data, t);
  if (cache.observes_prefill_token(t, prefill))
    for (std::size_t layer = 0; layer < data.layers(); ++layer) observe_token(cache, data, layer, t, scratch, kernels);
  cache.token_done();
}

// Every summarized metric of a result with its name: the per-step metrics, then the
// reconstruction of what the cache holds at the end.
inline std::vector<std::pair<std::string, const summary*>> named_summaries(const eval_result& r) {
  std::vector<std::pair<std::string, const summary*>> all;
  for (const auto& m : r.per_step) all.emplace_back(m.name, &m.stats);
  for (const auto& [name, s] : {std::pair{"key_mse", &r.key_mse}, std::pair{"key_snr_db", &r.key_snr_db},
                                std::pair{"value_mse", &r.value_mse}, std::pair{"value_snr_db", &r.value_snr_db}})
    all.emplace_back(name, s);
  return all;
}

// Attention logits are computed in float: |q . k| <= max|q| max|k| head_dim must stay
// below the float range, or scores overflow and every metric would be NaN.
inline void require_attention_in_float_range(const kv_data& data) {
  const auto largest = [](const kv_tensor& t) {
    double m = 0.0;
    for (const float x : t.values()) m = std::max(m, double{std::fabs(x)});
    return m;
  };
  const double q = largest(data.queries), k = largest(data.keys);
  const double bound = q * k * static_cast<double>(data.head_dim());
  if (bound > static_cast<double>(std::numeric_limits<float>::max()) / 2)
    throw error("queries reach |q| = " + format_number(q) + " and keys |k| = " + format_number(k) +
                ": attention logits up to |q| |k| head_dim = " + format_number(bound) +
                " overflow float (3.4e38); scale the data down");
}

// Every metric of a result is a finite number; the SNRs may also be +inf (exact
// reconstruction) or -inf (an all-zero signal). A NaN or infinity anywhere else means the
// cache overflowed, and is an error rather than a `null` in a table.
inline void require_finite_metrics(const eval_result& r) {
  for (const auto& [name, s] : named_summaries(r)) {
    const bool snr = std::string_view(name).ends_with("_snr_db");
    for (const double v : {s->mean, s->min, s->max, s->p50, s->p99})
      if (snr ? std::isnan(v) : !std::isfinite(v))
        throw error("recipe " + r.recipe + " on " + r.data + ": metric " + name + " is " + format_number(v) +
                    "; the compressed cache overflowed float for this data");
  }
}

// `exact`, when given, must come from compute_exact_attention(data, options.decode_steps):
// results are the same bit for bit, only faster.
inline eval_result evaluate(const any_recipe& r, const kv_data& data, const eval_options& options = {},
                            const exact_attention* exact = nullptr) {
  check_consistent(data);
  require_finite(data.keys, "keys");
  require_finite(data.values, "values");
  require_finite(data.queries, "queries");
  require_attention_in_float_range(data);
  if (options.decode_steps == 0) throw error("decode steps must be at least 1");
  const std::size_t tokens = data.tokens(), head_dim = data.head_dim();
  if (options.decode_steps >= tokens)
    throw error(std::to_string(options.decode_steps) + " decode steps need more than " + std::to_string(tokens) +
                " tokens of data (at least one token is prefilled)");
  const std::size_t prefill = tokens - options.decode_steps;
  if (exact && (exact->decode_steps != options.decode_steps ||
                exact->entries.size() != options.decode_steps * data.layers() * data.kv_heads()))
    throw error("evaluate: the shared exact attention was computed for other data or decode steps");
  const kernel_table& kernels = active_kernels();
  const std::vector<any_metric> metrics = options.metrics.empty() ? builtin_registry().every_metric() : options.metrics;

  kv_cache cache(r, data.layers(), data.kv_heads(), head_dim); // checks the recipe fits; holds nothing yet
  if (cache.keys_before_rope())
    throw error("evaluate: " + canonical_name(r) +
                " keeps keys before RoPE (rope=pre), and data carries no RoPE to rotate them by; run it under a "
                "model (kvlab ppl)");
  require_memory(estimated_cache_bytes(r, data.layers() * data.kv_heads(), tokens, head_dim),
                 "the cache of " + canonical_name(r) + " over " + data.source, "use fewer tokens, layers or heads");
  step_scratch scratch;
  if (cache.evicts()) {
    for (std::size_t t = 0; t < prefill; ++t) prefill_token(cache, data, t, prefill, scratch, kernels);
  } else { // nothing to observe or compress: one run of appends per stream
    for (std::size_t layer = 0; layer < data.layers(); ++layer)
      for (std::size_t head = 0; head < data.kv_heads(); ++head)
        cache.append_tokens(layer, head, data.keys.stream(layer, head).first(prefill * head_dim),
                            data.values.stream(layer, head).first(prefill * head_dim), prefill);
  }
  cache.prefill_done();

  const std::size_t q_heads = data.q_heads(), group = q_heads / data.kv_heads();
  const std::vector<float>& out = scratch.out;
  const attention_trace& trace = scratch.trace;
  std::vector<float> approx_ip;
  std::vector<std::vector<double>> samples(metrics.size());
  std::vector<double> approx_p;
  exact_attention::entry computed;
  for (std::size_t t = prefill; t < tokens; ++t) {
    append_token(cache, data, t);
    for (std::size_t layer = 0; layer < data.layers(); ++layer) {
      attend_token(cache, data, layer, t, cache.observes_decode_steps(), scratch, kernels);
      for (std::size_t h = 0; h < q_heads; ++h) {
        const auto query = data.queries.row(layer, h, t);
        if (!exact && h % group == 0) exact_entry(data, layer, h / group, t, computed);
        const exact_attention::entry& reference =
            exact ? exact->entries[((t - prefill) * data.layers() + layer) * data.kv_heads() + h / group] : computed;
        const std::size_t in_group = h % group, keys_so_far = t + 1;
        // The cache's weights by position; evicted keys weigh 0.
        const kv_stream& held = cache.keys(layer, h / group);
        approx_p.assign(t + 1, 0.0);
        const auto weights = trace.head(h);
        for (std::size_t i = 0; i < weights.size(); ++i) approx_p[held.positions()[i]] = weights[i];
        approx_ip.resize(held.tokens());
        held.dot_all(kernels, query, 1, approx_ip);
        const step_view view{.layer = layer,
                             .head = h,
                             .position = t,
                             .output = std::span<const float>(out).subspan(h * head_dim, head_dim),
                             .exact_output = std::span(reference.out).subspan(in_group * head_dim, head_dim),
                             .probabilities = approx_p,
                             .exact_probabilities =
                                 std::span(reference.probabilities).subspan(in_group * keys_so_far, keys_so_far),
                             .dots = approx_ip,
                             .exact_dots = std::span(reference.dots).subspan(in_group * keys_so_far, keys_so_far),
                             .positions = held.positions()};
        for (std::size_t m = 0; m < metrics.size(); ++m) samples[m].push_back(metrics[m].measure(view));
      }
    }
    cache.token_done();
  }

  // Reconstruction of what the cache holds at the end, per (layer, KV head).
  std::vector<double> key_mse, key_snr, value_mse, value_snr;
  std::size_t key_bytes = 0, value_bytes = 0, held = 0;
  for (std::size_t layer = 0; layer < data.layers(); ++layer)
    for (std::size_t head = 0; head < data.kv_heads(); ++head) {
      const auto& k = cache.keys(layer, head);
      const auto& v = cache.values(layer, head);
      const auto [km, ks] = reconstruction_error(k, data.keys.stream(layer, head));
      const auto [vm, vs] = reconstruction_error(v, data.values.stream(layer, head));
      key_mse.push_back(km), key_snr.push_back(ks), value_mse.push_back(vm), value_snr.push_back(vs);
      key_bytes += k.bytes(), value_bytes += v.bytes(), held += k.tokens() + v.tokens();
    }
  const double elements = static_cast<double>(tokens * data.layers() * data.kv_heads() * head_dim);
  eval_result result{.recipe = canonical_name(r),
                     .data = data.source,
                     .isa = std::string(isa_name(kernels.instruction_set)),
                     .tokens = tokens,
                     .decode_steps = options.decode_steps,
                     .key_mse = summarize(key_mse),
                     .key_snr_db = summarize(key_snr),
                     .value_mse = summarize(value_mse),
                     .value_snr_db = summarize(value_snr),
                     .bits_k = 8.0 * static_cast<double>(key_bytes) / elements,
                     .bits_v = 8.0 * static_cast<double>(value_bytes) / elements,
                     .tokens_kept =
                         static_cast<double>(held) / static_cast<double>(2 * data.layers() * data.kv_heads()),
                     .cache_bytes = cache.bytes()};
  for (std::size_t m = 0; m < metrics.size(); ++m)
    result.per_step.push_back({metrics[m].name(), metrics[m].direction(), summarize(std::move(samples[m]))});
  for (std::size_t layer = 0; layer < data.layers(); ++layer)
    for (std::size_t head = 0; head < data.kv_heads(); ++head)
      result.cache_bytes_per_head.push_back(cache.bytes(layer, head));
  result.bytes_per_token = static_cast<double>(result.cache_bytes) / static_cast<double>(tokens);
  // fp16 keys and values: 2 bytes x 2 tensors x head_dim per (layer, KV head).
  result.compression_vs_fp16 =
      static_cast<double>(4 * head_dim * data.layers() * data.kv_heads()) / result.bytes_per_token;
  require_finite_metrics(result);
  return result;
}

// Every per-(layer, head, step) metric with its mean, p50, p99, min and max.
inline std::string summaries_json(const eval_result& r) {
  json_object all;
  for (const auto& [name, s] : named_summaries(r))
    all.raw(name, json_object()
                      .add("mean", s->mean)
                      .add("p50", s->p50)
                      .add("p99", s->p99)
                      .add("min", s->min)
                      .add("max", s->max)
                      .add("count", s->count)
                      .str(0));
  return all.str(0);
}

// Each per-step metric's mean under its name, and its worst cases for the direction it has:
// `_p99` and `_max` of an error, `_min` of a similarity (a bias has neither).
inline std::string to_json(const eval_result& r) {
  json_object json;
  json.add("recipe", r.recipe).add("data", r.data).add("isa", r.isa).add("tokens", r.tokens);
  json.add("decode_steps", r.decode_steps);
  for (const auto& m : r.per_step) {
    json.add(m.name, m.stats.mean);
    if (m.direction == metric_direction::lower)
      json.add(m.name + "_p99", m.stats.p99).add(m.name + "_max", m.stats.max);
    if (m.direction == metric_direction::higher) json.add(m.name + "_min", m.stats.min);
  }
  return json.add("key_mse", r.key_mse.mean)
      .add("key_snr_db", r.key_snr_db.mean)
      .add("value_mse", r.value_mse.mean)
      .add("value_snr_db", r.value_snr_db.mean)
      .add("bits_k", r.bits_k)
      .add("bits_v", r.bits_v)
      .add("compression_vs_fp16", r.compression_vs_fp16)
      .add("tokens_kept", r.tokens_kept)
      .add("bytes_per_token", r.bytes_per_token)
      .add("cache_bytes", r.cache_bytes)
      .raw("cache_bytes_per_head",
           [&] {
             std::string list = "[";
             for (std::size_t i = 0; i < r.cache_bytes_per_head.size(); ++i)
               list += (i ? ", " : "") + std::to_string(r.cache_bytes_per_head[i]);
             return list + "]";
           }())
      .raw("summaries", summaries_json(r))
      .str();
}

} // namespace kvlab
