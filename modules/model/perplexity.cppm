// kvlab.perplexity: model-level fidelity of a cache recipe, with the statistics of
// llama.cpp's `perplexity --kl-divergence` (tools/perplexity): the tokens are cut into chunks
// of `context` tokens, each run from an empty cache, and the second half of every chunk is
// scored (position i predicts token i + 1 for i in [context/2, context - 1)). Every recipe is
// compared with a base run (an fp16 cache unless told otherwise) on the same positions: PPL
// and its change, KL(base || recipe) of the next-token distribution, the RMS change of the
// correct token's probability, and how often the top-1 token agrees. The base run's
// log-probabilities are stored once (npy + key) and reused by later runs.
module;
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <vector>
export module kvlab.perplexity;
import kvlab.core;
import kvlab.simd;
import kvlab.cache;
import kvlab.metrics;
import kvlab.npy;
import kvlab.report;
import kvlab.model;

export namespace kvlab {

struct perplexity_options {
  std::size_t context = 512;
  std::size_t chunks = 0;                // 0: every whole chunk of the tokens
  std::optional<std::int32_t> chunk_bos; // replaces each chunk's first token, as llama.cpp does
  unsigned threads = 1;                  // results are identical for any count
  bool attention_metrics = true;         // attn_rel_l2, score_kl, topk_recall per layer
};

// One run over every chunk: the scored positions' log-probabilities and what the run cost.
struct scored_run {
  std::size_t vocab = 0;
  std::vector<float> log_probs;                   // positions x vocab
  std::vector<std::int32_t> targets;              // the token each position predicts
  std::vector<layer_attention_metrics> attention; // per layer, when measured
  double cache_bytes_per_token = 0.0;             // what the cache holds at the end of a chunk / context
  std::size_t tokens_processed = 0;
  double seconds = 0.0;
  forward_timing timing;
  double append_seconds = 0.0; // inside timing.attention
};

namespace detail {

inline std::size_t chunk_count(std::size_t tokens, const perplexity_options& o) {
  if (o.context < 4) throw error("perplexity: --ctx " + std::to_string(o.context) + " is too small (at least 4)");
  const std::size_t whole = tokens / o.context;
  if (whole == 0)
    throw error("perplexity: " + std::to_string(tokens) + " tokens do not fill one chunk of --ctx " +
                std::to_string(o.context) + " tokens");
  if (o.chunks > whole)
    throw error("perplexity: --chunks " + std::to_string(o.chunks) + " needs " + std::to_string(o.chunks * o.context) +
                " tokens; the text has " + std::to_string(tokens) + " (" + std::to_string(whole) + " chunks)");
  return o.chunks == 0 ? whole : o.chunks;
}

// log softmax of one row of logits, in double, stored as float.
inline void log_softmax(std::span<const float> logits, std::span<float> out) {
  double largest = -INFINITY;
  for (const float x : logits) largest = std::max(largest, double{x});
  double total = 0.0;
  for (const float x : logits) total += std::exp(double{x} - largest);
  const double log_total = largest + std::log(total);
  for (std::size_t i = 0; i < logits.size(); ++i) out[i] = static_cast<float>(double{logits[i]} - log_total);
}

} // namespace detail

// Runs the model with a cache built from `r` over every chunk (see the module comment).
inline scored_run run_scored(const model_config& c, const model_weights& w, std::span<const std::int32_t> tokens,
                             const any_recipe& r, const perplexity_options& o) {
  const std::size_t chunks = detail::chunk_count(tokens.size(), o), first = o.context / 2;
  if (c.context != 0 && o.context > c.context)
    throw error("perplexity: --ctx " + std::to_string(o.context) + " is longer than the model's " +
                std::to_string(c.context) + " positions");
  scored_run run{.vocab = c.vocab};
  const std::size_t scored = o.context - 1 - first;
  run.log_probs.resize(chunks * scored * c.vocab);
  if (o.attention_metrics) run.attention.resize(c.layers);
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::int32_t> chunk(o.context);
  for (std::size_t k = 0; k < chunks; ++k) {
    std::copy_n(tokens.begin() + static_cast<std::ptrdiff_t>(k * o.context), o.context, chunk.begin());
    if (o.chunk_bos) chunk[0] = *o.chunk_bos;
    kv_cache cache(r, c.layers, c.kv_heads, c.head_dim);
    // Attention runs on one thread: one token's attention is too short to split over threads
    // started per call (kvlab_bench_model: SmolLM2-135M's attention took 1.2 s a chunk on two
    // threads, 0.2 s on one). The matrix products use every thread.
    cache_attention attention(cache, c,
                              {.prefill = first, .measure_from = first, .measure = o.attention_metrics, .threads = 1});
    const std::vector<float> logits = forward(c, w, chunk, 0, attention, first, o.threads, &run.timing);
    for (std::size_t i = 0; i < scored; ++i) {
      detail::log_softmax(std::span(logits).subspan(i * c.vocab, c.vocab),
                          std::span(run.log_probs).subspan((k * scored + i) * c.vocab, c.vocab));
      run.targets.push_back(chunk[first + i + 1]);
    }
    run.append_seconds += attention.append_seconds();
    run.cache_bytes_per_token += static_cast<double>(cache.bytes()) / static_cast<double>(o.context * chunks);
    for (std::size_t l = 0; l < run.attention.size(); ++l)
      for (auto [to, from] : {std::pair{&run.attention[l].attn_rel_l2, &attention.metrics()[l].attn_rel_l2},
                              std::pair{&run.attention[l].score_kl, &attention.metrics()[l].score_kl},
                              std::pair{&run.attention[l].topk_recall, &attention.metrics()[l].topk_recall}})
        to->insert(to->end(), from->begin(), from->end());
    run.tokens_processed += o.context;
  }
  run.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return run;
}

// A mean with its standard error (sample standard deviation / sqrt(n), as llama.cpp reports).
struct estimate {
  double value = 0.0;
  double error = 0.0;
};

struct perplexity_result {
  std::string recipe;
  std::size_t positions = 0;
  estimate ppl, base_ppl, delta_ppl, log_ppl_ratio;
  estimate kld; // mean KL(base || recipe), nats
  double kld_p50 = 0.0, kld_p90 = 0.0, kld_p99 = 0.0, kld_max = 0.0;
  estimate rms_delta_p; // RMS of p_recipe(correct) - p_base(correct)
  estimate same_top;    // share of positions whose top-1 token agrees with the base
  std::vector<double> layer_attn_rel_l2, layer_score_kl, layer_topk_recall; // per layer means
  double attn_rel_l2 = NAN, score_kl = NAN, topk_recall = NAN;              // over every layer
  double bytes_per_token = 0.0; // the cache at the end of a chunk, all layers, K and V
  double compression_vs_fp16 = 0.0;
  double tokens_per_second = 0.0;
  forward_timing timing;
  double append_seconds = 0.0;
};

namespace detail {

// Mean and its standard error of `x`.
inline estimate mean_estimate(std::span<const double> x) {
  const auto n = static_cast<double>(x.size());
  double sum = 0.0, squares = 0.0;
  for (const double v : x) sum += v, squares += v * v;
  const double mean = sum / n;
  const double variance = x.size() > 1 ? std::max(0.0, (squares / n - mean * mean) / (n - 1.0)) : 0.0;
  return {mean, std::sqrt(variance)};
}

// Nearest-rank percentile of sorted values.
inline double percentile(std::span<const double> sorted, double p) {
  const auto rank = static_cast<std::size_t>(std::ceil(p * static_cast<double>(sorted.size())));
  return sorted[std::clamp<std::size_t>(rank, 1, sorted.size()) - 1];
}

inline double mean_of(const std::vector<double>& x) {
  double sum = 0.0;
  for (const double v : x) sum += v;
  return x.empty() ? NAN : sum / static_cast<double>(x.size());
}

} // namespace detail

inline perplexity_result compare_with_base(const scored_run& base, const scored_run& run, const model_config& c,
                                           const std::string& recipe_name) {
  if (base.targets != run.targets || base.vocab != run.vocab)
    throw error("perplexity: the base run scored other positions than the recipe's");
  const std::size_t n = run.targets.size(), vocab = run.vocab;
  std::vector<double> nll(n), base_nll(n), kld(n), delta_p(n), squared_delta_p(n), same(n), ratio(n);
  for (std::size_t i = 0; i < n; ++i) {
    const auto p = std::span(base.log_probs).subspan(i * vocab, vocab);
    const auto q = std::span(run.log_probs).subspan(i * vocab, vocab);
    const auto target = static_cast<std::size_t>(run.targets[i]);
    nll[i] = -double{q[target]};
    base_nll[i] = -double{p[target]};
    ratio[i] = nll[i] - base_nll[i];
    double kl = 0.0;
    for (std::size_t v = 0; v < vocab; ++v) kl += std::exp(double{p[v]}) * (double{p[v]} - double{q[v]});
    kld[i] = std::max(0.0, kl); // rounding can leave a tiny negative sum for identical distributions
    delta_p[i] = std::exp(double{q[target]}) - std::exp(double{p[target]});
    squared_delta_p[i] = delta_p[i] * delta_p[i];
    same[i] = std::ranges::max_element(p) - p.begin() == std::ranges::max_element(q) - q.begin() ? 1.0 : 0.0;
  }
  perplexity_result r{.recipe = recipe_name, .positions = n};
  const estimate mean_nll = detail::mean_estimate(nll), mean_base = detail::mean_estimate(base_nll);
  r.ppl = {std::exp(mean_nll.value), std::exp(mean_nll.value) * mean_nll.error};
  r.base_ppl = {std::exp(mean_base.value), std::exp(mean_base.value) * mean_base.error};
  r.log_ppl_ratio = detail::mean_estimate(ratio);
  // PPL - PPL(base) with the paired positions' covariance (delta method).
  double covariance = 0.0;
  for (std::size_t i = 0; i < n; ++i) covariance += (nll[i] - mean_nll.value) * (base_nll[i] - mean_base.value);
  covariance /= static_cast<double>(n) * std::max<double>(1.0, static_cast<double>(n) - 1.0);
  const double variance = r.ppl.error * r.ppl.error + r.base_ppl.error * r.base_ppl.error -
                          2.0 * r.ppl.value * r.base_ppl.value * covariance;
  r.delta_ppl = {r.ppl.value - r.base_ppl.value, std::sqrt(std::max(0.0, variance))};
  r.kld = detail::mean_estimate(kld);
  std::ranges::sort(kld);
  r.kld_p50 = detail::percentile(kld, 0.50);
  r.kld_p90 = detail::percentile(kld, 0.90);
  r.kld_p99 = detail::percentile(kld, 0.99);
  r.kld_max = kld.back();
  const estimate mean_square = detail::mean_estimate(squared_delta_p);
  const double rms = std::sqrt(mean_square.value);
  r.rms_delta_p = {rms, rms > 0.0 ? mean_square.error / (2.0 * rms) : 0.0};
  r.same_top = detail::mean_estimate(same);
  std::vector<double> all_l2, all_kl, all_recall;
  for (const auto& layer : run.attention) {
    r.layer_attn_rel_l2.push_back(detail::mean_of(layer.attn_rel_l2));
    r.layer_score_kl.push_back(detail::mean_of(layer.score_kl));
    r.layer_topk_recall.push_back(detail::mean_of(layer.topk_recall));
    all_l2.insert(all_l2.end(), layer.attn_rel_l2.begin(), layer.attn_rel_l2.end());
    all_kl.insert(all_kl.end(), layer.score_kl.begin(), layer.score_kl.end());
    all_recall.insert(all_recall.end(), layer.topk_recall.begin(), layer.topk_recall.end());
  }
  r.attn_rel_l2 = detail::mean_of(all_l2);
  r.score_kl = detail::mean_of(all_kl);
  r.topk_recall = detail::mean_of(all_recall);
  r.bytes_per_token = run.cache_bytes_per_token;
  r.compression_vs_fp16 = static_cast<double>(4 * c.head_dim * c.layers * c.kv_heads) / run.cache_bytes_per_token;
  r.tokens_per_second = static_cast<double>(run.tokens_processed) / run.seconds;
  r.timing = run.timing;
  r.append_seconds = run.append_seconds;
  return r;
}

// The base run's log-probabilities, read from `folder` when an earlier run stored them for
// the same key (model digest, tokens, context, chunks, base recipe), else computed and stored
// there: `base-<digest>.npy` (positions x vocab, float32) and `base-<digest>.json` (the key).
inline scored_run base_run(const model_config& c, const model_weights& w, std::span<const std::int32_t> tokens,
                           const any_recipe& base, perplexity_options o, const std::string& model_sha256,
                           const std::filesystem::path& folder) {
  o.attention_metrics = false;
  const std::size_t chunks = detail::chunk_count(tokens.size(), o);
  const auto used = tokens.first(chunks * o.context);
  const std::string token_digest = sha256_hex(std::as_bytes(used));
  const std::string key = json_object()
                              .add("model_sha256", model_sha256)
                              .add("tokens_sha256", token_digest)
                              .add("context", o.context)
                              .add("chunks", chunks)
                              .add("chunk_bos", o.chunk_bos ? std::to_string(*o.chunk_bos) : std::string("none"))
                              .add("base_recipe", canonical_name(base))
                              .str();
  const std::string digest = sha256_hex(std::as_bytes(std::span(key))).substr(0, 16);
  const auto values_file = folder / ("base-" + digest + ".npy"), key_file = folder / ("base-" + digest + ".json");
  const std::size_t first = o.context / 2, scored = o.context - 1 - first;
  if (std::filesystem::exists(key_file) && std::filesystem::exists(values_file)) {
    const mapped_file stored_key(key_file);
    if (std::string(reinterpret_cast<const char*>(stored_key.bytes().data()), stored_key.size()) == key) {
      npy_array stored = read_npy(values_file);
      if (stored.shape != std::vector<std::size_t>{chunks * scored, c.vocab})
        throw error("'" + values_file.string() + "': shape does not match its key; delete it to recompute the base");
      scored_run run{.vocab = c.vocab, .log_probs = std::move(stored.values)};
      for (std::size_t k = 0; k < chunks; ++k)
        for (std::size_t i = 0; i < scored; ++i) run.targets.push_back(used[k * o.context + first + i + 1]);
      return run;
    }
  }
  scored_run run = run_scored(c, w, tokens, base, o);
  std::filesystem::create_directories(folder);
  const std::size_t shape[] = {chunks * scored, c.vocab};
  write_npy(values_file, shape, run.log_probs);
  write_text_atomically(key_file, key);
  return run;
}

inline std::string to_json(const perplexity_result& r) {
  const auto pair = [](const estimate& e) { return json_object().add("value", e.value).add("error", e.error).str(0); };
  const auto list = [](const std::vector<double>& values) {
    std::string out = "[";
    for (std::size_t i = 0; i < values.size(); ++i) out += (i ? ", " : "") + json_number(values[i]);
    return out + "]";
  };
  return json_object()
      .add("recipe", r.recipe)
      .add("positions", r.positions)
      .raw("ppl", pair(r.ppl))
      .raw("base_ppl", pair(r.base_ppl))
      .raw("delta_ppl", pair(r.delta_ppl))
      .raw("mean_log_ppl_ratio", pair(r.log_ppl_ratio))
      .raw("kld", pair(r.kld))
      .add("kld_p50", r.kld_p50)
      .add("kld_p90", r.kld_p90)
      .add("kld_p99", r.kld_p99)
      .add("kld_max", r.kld_max)
      .raw("rms_delta_p", pair(r.rms_delta_p))
      .raw("same_top", pair(r.same_top))
      .add("attn_rel_l2", r.attn_rel_l2)
      .add("score_kl", r.score_kl)
      .add("topk_recall", r.topk_recall)
      .raw("layer_attn_rel_l2", list(r.layer_attn_rel_l2))
      .raw("layer_score_kl", list(r.layer_score_kl))
      .raw("layer_topk_recall", list(r.layer_topk_recall))
      .add("bytes_per_token", r.bytes_per_token)
      .add("compression_vs_fp16", r.compression_vs_fp16)
      .add("tokens_per_second", r.tokens_per_second)
      .add("seconds_matrix_products", r.timing.matrix_products)
      .add("seconds_attention", r.timing.attention)
      .add("seconds_cache_appends", r.append_seconds)
      .add("seconds_other", r.timing.other)
      .str();
}

} // namespace kvlab
