// kvlab.cache: the compressed KV cache. Each (layer, KV head) has a key stream and a value
// stream (stream.cppm: fp16 sinks, quantized body, fp16 residual window), built from a recipe.
// With an eviction policy the cache also collects what the policy scores with (attention
// per held key, aggregated over each KV head's query group) and, when the schedule says,
// keeps the highest-scored tokens of each (layer, KV head) within its allocated budget,
// erasing (or demoting) the same tokens from its key and value streams.
module;
#include "kernels.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>
export module kvlab.cache;
export import :packing;
export import :body;
export import :stream;
export import :budget;
import kvlab.core;
import kvlab.simd;

export namespace kvlab {

// An upper bound on what a cache of `r` holds for `tokens` tokens in each of `streams`
// (layer, KV head) pairs, without eviction: codes and group parameters of the key, value
// and demoted tiers, and the fp16 sink and residual tiers.
inline double estimated_cache_bytes(const any_recipe& r, std::size_t streams, std::size_t tokens,
                                    std::size_t head_dim) {
  const auto tier_bytes = [&](const any_stream& s) {
    const any_quantizer& quantizer = s.quantizer;
    const double param_bytes = static_cast<double>(kvlab::param_bytes(quantizer, r.scale));
    // The body stores rows of stored_dim values (a sketch's m); fp16 tiers hold head_dim.
    const std::size_t stored_dim = quantizer.stored_dim(head_dim);
    const group_shape group = s.granularity.group_shape(stored_dim);
    const double group_elements = static_cast<double>(std::max<std::size_t>(group.tokens, 1) * group.channels);
    // A record's codes are whole bytes: a block of group.tokens tokens (per-token: one).
    const std::size_t block = std::max<std::size_t>(group.tokens, 1);
    double body_token = static_cast<double>((block * quantizer.row_code_bits(stored_dim, group.channels) + 7) / 8) /
                            static_cast<double>(block) +
                        static_cast<double>(stored_dim) * quantizer.params_per_group() * param_bytes / group_elements;
    // residual(P,R): R's record per token, one group per stored row.
    for (auto rest = quantizer.residual(); rest; rest = rest->residual())
      body_token +=
          static_cast<double>((rest->row_code_bits(rest->stored_dim(head_dim), rest->stored_dim(head_dim)) + 7) / 8) +
          rest->params_per_group() * static_cast<double>(kvlab::param_bytes(*rest, r.scale));
    // The fp16 tiers hold sinks + residual tokens, plus up to a block that is not complete yet.
    const auto row_bytes = [&](std::size_t fp16_tokens) {
      fp16_tokens = std::min(tokens, fp16_tokens);
      return body_token * static_cast<double>(tokens - fp16_tokens) + 2.0 * static_cast<double>(head_dim * fp16_tokens);
    };
    const std::size_t fp16_least = r.sinks + r.residual;
    return static_cast<double>(streams) *
           std::max(row_bytes(fp16_least), row_bytes(fp16_least + std::max<std::size_t>(group.tokens, 1) - 1));
  };
  return tier_bytes(r.keys) + tier_bytes(r.values) + (r.demote ? 2.0 * tier_bytes(*r.demote) : 0.0);
}

// All streams of a model's cache, built from a recipe: one key and one value stream per
// (layer, KV head).
class kv_cache {
public:
  kv_cache(const any_recipe& r, std::size_t layers, std::size_t kv_heads, std::size_t head_dim)
      : layers_(layers), kv_heads_(kv_heads), head_dim_(head_dim), keys_before_rope_(r.keys_before_rope),
        allocation_(r.allocation), gqa_(r.gqa) {
    check_recipe(r);
    const stream_tiers tiers{.sinks = r.sinks, .residual = r.residual};
    std::optional<demotion> demote;
    if (r.demote) demote = demotion{r.demote->quantizer, group_shape_of(*r.demote, "demote")};
    keys_ = make_streams(r.keys, "keys", r.scale, r.storage, tiers, demote);
    values_ = make_streams(r.values, "values", r.scale, r.storage, tiers, demote);
    if (r.budget && !keys_.empty()) {
      budget_.emplace(*r.budget, layers * kv_heads, keys_.front(), values_.front(), canonical_name(r));
      policy_ = r.budget->at_ratio(budget_->ratio());
    } else if (r.eviction.evicts()) {
      policy_ = r.eviction;
    }
    if (policy_) {
      needs_ = policy_->needs();
      if (r.compress) needs_.schedule = r.compress;
      demote_ = r.demote.has_value();
      accumulated_.resize(layers * kv_heads);
      latest_.resize(layers * kv_heads);
      key_norms_.resize(layers * kv_heads);
    }
  }

  std::size_t layers() const noexcept { return layers_; }
  std::size_t kv_heads() const noexcept { return kv_heads_; }
  std::size_t head_dim() const noexcept { return head_dim_; }
  // Whether the keys are stored before RoPE (rope=pre): attention must rotate decoded keys.
  bool keys_before_rope() const noexcept { return keys_before_rope_; }

  kv_stream& keys(std::size_t layer, std::size_t kv_head) { return keys_.at(index(layer, kv_head)); }
  kv_stream& values(std::size_t layer, std::size_t kv_head) { return values_.at(index(layer, kv_head)); }
  const kv_stream& keys(std::size_t layer, std::size_t kv_head) const { return keys_.at(index(layer, kv_head)); }
  const kv_stream& values(std::size_t layer, std::size_t kv_head) const { return values_.at(index(layer, kv_head)); }

  // Room for `tokens` more tokens in every KV head of `layer`, before a chunk of appends.
  void reserve(std::size_t layer, std::size_t tokens) {
    for (std::size_t h = 0; h < kv_heads_; ++h) {
      keys(layer, h).reserve(tokens);
      values(layer, h).reserve(tokens);
    }
  }

  void append(std::size_t layer, std::size_t kv_head, std::span<const float> key, std::span<const float> value) {
    const auto append_to = [&](kv_stream& stream, std::span<const float> row, const char* tensor) {
      const std::size_t token = stream.tokens_seen();
      try {
        stream.append(row, active_kernels());
      } catch (const error& e) {
        throw error(std::string(tensor) + " of layer " + std::to_string(layer) + ", KV head " +
                    std::to_string(kv_head) + ", appending token " + std::to_string(token) + ": " + e.what());
      }
    };
    kv_stream& k = keys(layer, kv_head);
    const std::size_t unchanged = k.sink_tokens() + k.body_tokens(); // held tokens this append cannot re-encode
    append_to(k, key, "keys");
    try {
      append_to(values(layer, kv_head), value, "values");
    } catch (...) {         // a refused value, or storage out of memory
      k.take_back_newest(); // both streams keep the same tokens
      throw;
    }
    if (!policy_) return;
    const std::size_t i = index(layer, kv_head);
    if (needs_.attention) accumulated_[i].push_back(0.0), latest_[i].push_back(0.0);
    if (needs_.key_norms) update_key_norms(i, unchanged, 1);
  }

  // Appends `count` consecutive tokens to (layer, kv_head): keys and values are count x
  // head_dim rows. The cache ends as `count` append() calls would leave it, without
  // token_done() between them. Sink tokens still to come are appended one at a time; then
  // each stream takes the rest in one call (kv_stream::append_tokens): a run of records
  // straight into its body, or through its residual window in one fp16 conversion. A token
  // that cannot be appended throws an error naming it; the tokens before it stay.
  void append_tokens(std::size_t layer, std::size_t kv_head, std::span<const float> keys_rows,
                     std::span<const float> values_rows, std::size_t count) {
    if (keys_rows.size() != count * head_dim_ || values_rows.size() != keys_rows.size())
      throw error("append_tokens: " + std::to_string(count) + " tokens are " + std::to_string(count * head_dim_) +
                  " values of keys and of values, got " + std::to_string(keys_rows.size()) + " and " +
                  std::to_string(values_rows.size()));
    kv_stream& k = keys(layer, kv_head);
    kv_stream& v = values(layer, kv_head);
    // Sink tokens still to come arrive one at a time (both streams have the same tiers).
    std::size_t sunk = 0;
    for (; sunk < count && !(k.appends_in_runs() && v.appends_in_runs()); ++sunk)
      append(layer, kv_head, keys_rows.subspan(sunk * head_dim_, head_dim_),
             values_rows.subspan(sunk * head_dim_, head_dim_));
    if (sunk == count) return;
    keys_rows = keys_rows.subspan(sunk * head_dim_), values_rows = values_rows.subspan(sunk * head_dim_);
    count -= sunk;
    const std::size_t first = k.tokens_seen(), unchanged = k.sink_tokens() + k.body_tokens();
    const auto refused = [&](const char* tensor, const row_error& e) {
      return error(std::string(tensor) + " of layer " + std::to_string(layer) + ", KV head " + std::to_string(kv_head) +
                   ", appending token " + std::to_string(first + e.row()) + ": " + e.what());
    };
    const auto track = [&] { // the policy's per-token state for the tokens both streams took
      if (!policy_) return;
      const std::size_t i = index(layer, kv_head), n = k.evictable_tokens();
      if (needs_.attention) accumulated_[i].resize(n, 0.0), latest_[i].resize(n, 0.0);
      if (needs_.key_norms) update_key_norms(i, unchanged, k.tokens_seen() - first);
    };
    std::optional<error> failure;
    std::size_t taken = count; // tokens both streams keep
    try {
      k.append_tokens(keys_rows, count, active_kernels());
    } catch (const row_error& e) {
      failure = refused("keys", e), taken = e.row();
    } catch (...) { // storage out of memory: the call leaves no token behind
      k.take_back_newest(k.tokens_seen() - first);
      throw;
    }
    try {
      v.append_tokens(values_rows.first(taken * head_dim_), taken, active_kernels());
    } catch (const row_error& e) {
      failure = refused("values", e);
      k.take_back_newest(taken - e.row()); // both streams keep the same tokens
      taken = e.row();
    } catch (...) { // storage out of memory: the values taken so far are what both streams keep
      k.take_back_newest(k.tokens_seen() - v.tokens_seen());
      track();
      throw;
    }
    track();
    if (failure) throw *failure;
  }

  // --- eviction ---
  bool evicts() const noexcept { return policy_.has_value(); }

  // Whether the policy scores with the attention of the query of prefill token `token`
  // (of `prefill` prefill tokens); decode steps are always observed when it scores with attention.
  bool observes_prefill_token(std::size_t token, std::size_t prefill) const noexcept {
    if (!policy_ || !needs_.attention) return false;
    if (!compresses_after_prefill() || needs_.observation_window == 0) return true;
    return token + needs_.observation_window >= prefill;
  }
  bool observes_decode_steps() const noexcept { return policy_ && needs_.attention; }

  // Records one step's attention of the query heads of (layer, kv_head): `probabilities` is
  // group x tokens() (held order); each evictable key gets the mean or max over the group.
  // A policy that does not score with attention ignores it.
  void observe(std::size_t layer, std::size_t kv_head, std::span<const float> probabilities, std::size_t group) {
    if (!policy_ || !needs_.attention) return;
    const std::size_t i = index(layer, kv_head), held = keys_[i].tokens(), n = keys_[i].evictable_tokens();
    if (group == 0 || probabilities.size() != group * held)
      throw error("observe: expected " + std::to_string(group) + " x " + std::to_string(held) + " probabilities, got " +
                  std::to_string(probabilities.size()));
    gqa_.combine(probabilities, group, std::span(latest_[i]).first(n));
    for (std::size_t t = 0; t < n; ++t) accumulated_[i][t] += latest_[i][t];
  }

  // Call once after every appended token (all layers and heads): compresses when the
  // schedule says so (step, every(N)).
  void token_done() {
    for (std::size_t layer = 0; layer < layers_; ++layer) token_done(layer);
  }
  // The same for one layer, for callers that run a token through one layer at a time (a
  // model's forward pass): layers are compressed independently, so calling this for every
  // layer after each of its tokens gives the same cache as token_done() after each token.
  void token_done(std::size_t layer) {
    if (!policy_ || keys_.empty()) return;
    const std::size_t seen = keys_[index(layer, 0)].tokens_seen();
    if (!needs_.schedule || needs_.schedule->after_token(seen)) compress(layer);
  }
  // Call once when prefill ends: compresses for the prefill schedule.
  void prefill_done() {
    for (std::size_t layer = 0; layer < layers_; ++layer) prefill_done(layer);
  }
  void prefill_done(std::size_t layer) {
    if (policy_ && compresses_after_prefill()) compress(layer);
  }

  // Keeps, in every (layer, KV head), the highest-scored evictable tokens within the
  // allocated budget; the others are erased (or demoted) from its key and value streams.
  void compress() {
    for (std::size_t layer = 0; layer < layers_; ++layer) compress(layer);
  }
  void compress(std::size_t layer) {
    if (!policy_) return;
    std::vector<std::vector<double>> scores(kv_heads_);
    for (std::size_t head = 0; head < kv_heads_; ++head) scores[head] = score(layer, head);
    const auto kept = allocation_.keep(layer, layers_, head_budget(layer, scores), scores);
    if (kept.size() != kv_heads_)
      throw error("allocation " + allocation_.name() + " returned " + std::to_string(kept.size()) +
                  " lists of kept tokens for " + std::to_string(kv_heads_) + " KV heads");
    for (std::size_t head = 0; head < kv_heads_; ++head) drop_all_but(layer, head, kept[head]);
  }

  // The scores the policy gives the evictable tokens of (layer, kv_head) now.
  std::vector<double> score(std::size_t layer, std::size_t kv_head) const {
    const std::size_t i = index(layer, kv_head);
    const kv_stream& k = keys_[i];
    const std::size_t n = k.evictable_tokens();
    const eviction_view view{.layer = layer,
                             .layers = layers_,
                             .kv_head = kv_head,
                             .tokens_seen = k.tokens_seen(),
                             .head_dim = head_dim_,
                             .positions = k.positions().first(n),
                             .accumulated = accumulated_[i],
                             .latest = latest_[i],
                             .key_norms = key_norms_[i]};
    auto scores = policy_->scores(view);
    if (scores.size() != n)
      throw error("eviction " + policy_->name() + " returned " + std::to_string(scores.size()) + " scores for " +
                  std::to_string(n) + " tokens");
    return scores;
  }

  // Appends tokens [0, tokens) of `keys` and `values` ([kv_heads][tokens][head_dim] of one
  // layer, row-major) to every KV head of `layer`.
  void prefill(std::size_t layer, std::span<const float> keys_rows, std::span<const float> values_rows,
               std::size_t tokens) {
    if (keys_rows.size() != kv_heads_ * tokens * head_dim_ || values_rows.size() != keys_rows.size())
      throw error("prefill: expected " + std::to_string(kv_heads_) + " heads x " + std::to_string(tokens) +
                  " tokens x " + std::to_string(head_dim_) + " values for keys and values");
    reserve(layer, tokens);
    const std::size_t head_values = tokens * head_dim_;
    for (std::size_t h = 0; h < kv_heads_; ++h)
      append_tokens(layer, h, keys_rows.subspan(h * head_values, head_values),
                    values_rows.subspan(h * head_values, head_values), tokens);
  }

  // What the cache holds for the keys and values of one (layer, KV head).
  std::size_t bytes(std::size_t layer, std::size_t kv_head) const {
    return keys(layer, kv_head).bytes() + values(layer, kv_head).bytes();
  }

  // Everything the storage holds for keys and values of all layers and heads.
  std::size_t bytes() const noexcept {
    std::size_t total = 0;
    for (const auto& s : keys_) total += s.bytes();
    for (const auto& s : values_) total += s.bytes();
    return total;
  }

private:
  // Erases (or demotes) every evictable token of (layer, kv_head) not in `kept` (ascending).
  void drop_all_but(std::size_t layer, std::size_t kv_head, const std::vector<std::size_t>& kept) {
    const std::size_t i = index(layer, kv_head), n = keys_[i].evictable_tokens();
    if (kept.size() == n) return;
    // Held tokens before the first victim keep their places: the work starts there.
    std::size_t unmoved = 0;
    while (unmoved < kept.size() && kept[unmoved] == unmoved) ++unmoved;
    std::vector<std::size_t> victims;
    for (std::size_t t = unmoved, next = unmoved; t < n; ++t)
      if (next < kept.size() && kept[next] == t)
        ++next;
      else
        victims.push_back(t);
    if (demote_) {
      keys_[i].demote(victims, active_kernels());
      values_[i].demote(victims, active_kernels());
    } else {
      keys_[i].erase(victims);
      values_[i].erase(victims);
    }
    for (auto* scores : {&accumulated_[i], &latest_[i], &key_norms_[i]})
      if (!scores->empty()) erase_sorted(*scores, victims); // empty: the policy does not score with them
  }

  // Erases the entries at `sorted` (ascending) from `scores`, moving each run between two
  // victims down at once: a step has a few victims and thousands of entries after them.
  static void erase_sorted(std::vector<double>& scores, std::span<const std::size_t> sorted) {
    if (sorted.empty()) return;
    auto kept_end = scores.begin() + static_cast<std::ptrdiff_t>(sorted.front());
    for (std::size_t v = 0; v < sorted.size(); ++v) {
      const auto run = scores.begin() + static_cast<std::ptrdiff_t>(sorted[v] + 1);
      const auto run_end =
          v + 1 < sorted.size() ? scores.begin() + static_cast<std::ptrdiff_t>(sorted[v + 1]) : scores.end();
      kept_end = std::copy(run, run_end, kept_end);
    }
    scores.erase(kept_end, scores.end());
  }

  // Tokens one KV head of `layer` keeps under uniform allocation: the policy's count, or
  // what fits the recipe's bytes per token (with the mean over the layer's heads of the
  // tokens held in fp16 tiers). A budget never evicts what the policy protects
  // (streaming's sinks, snapkv's observation window): until it covers them, as in a cache's
  // first tokens, the cache holds them above it.
  std::size_t head_budget(std::size_t layer, std::span<const std::vector<double>> scores) const {
    const std::size_t seen = keys_[index(layer, 0)].tokens_seen();
    if (!budget_) return policy_->budget(seen);
    double half_tokens = 0.0;
    std::size_t protected_tokens = 0;
    for (std::size_t head = 0; head < kv_heads_; ++head) {
      half_tokens += static_cast<double>(keys_[index(layer, head)].half_tokens());
      protected_tokens =
          std::max(protected_tokens, static_cast<std::size_t>(std::ranges::count(scores[head], protected_score)));
    }
    return std::max(budget_->tokens(seen, half_tokens / static_cast<double>(kv_heads_)), protected_tokens);
  }

  // Brings the key norms of stream `i` up to date after appending `appended` tokens: the new
  // tokens', and those of the tokens a flushed residual window re-encoded into the body
  // (held indices from `unchanged` to the body's end). Bounded by the appended tokens, the
  // window and a block, whatever the context: the norms are kept, not recomputed from every
  // held key at every step.
  void update_key_norms(std::size_t i, std::size_t unchanged, std::size_t appended) {
    const kv_stream& k = keys_[i];
    std::vector<double>& norms = key_norms_[i];
    const std::size_t n = k.evictable_tokens(), body_end = k.sink_tokens() + k.body_tokens();
    norms.resize(n);
    key_row_.resize(head_dim_);
    const auto refresh = [&](std::size_t t) {
      k.decode(t, key_row_);
      double squares = 0.0;
      for (const float x : key_row_) squares += double{x} * x;
      norms[t] = std::sqrt(squares);
    };
    for (std::size_t t = unchanged; t < body_end; ++t) refresh(t);
    for (std::size_t t = std::max(body_end, n - std::min(appended, n)); t < n; ++t) refresh(t);
  }

  group_shape group_shape_of(const any_stream& s, const std::string& which) const {
    try {
      return s.granularity.group_shape(s.quantizer.stored_dim(head_dim_)); // rows as the body stores them
    } catch (const error& e) {
      throw error(which + " granularity " + s.granularity.name() + ": " + e.what());
    }
  }
  bool compresses_after_prefill() const { return needs_.schedule && needs_.schedule->after_prefill(); }

  std::size_t index(std::size_t layer, std::size_t kv_head) const {
    if (layer >= layers_ || kv_head >= kv_heads_)
      throw error("cache has " + std::to_string(layers_) + " layers x " + std::to_string(kv_heads_) +
                  " KV heads; (layer " + std::to_string(layer) + ", head " + std::to_string(kv_head) +
                  ") is out of range");
    return layer * kv_heads_ + kv_head;
  }

  std::vector<kv_stream> make_streams(const any_stream& s, const std::string& which, param_precision scale,
                                      const any_storage& storage, stream_tiers tiers,
                                      const std::optional<demotion>& demote) const {
    const any_quantizer& quantizer = s.quantizer;
    const group_shape shape = group_shape_of(s, which);
    std::vector<kv_stream> streams;
    streams.reserve(layers_ * kv_heads_);
    try {
      for (std::size_t i = 0; i < layers_ * kv_heads_; ++i)
        streams.emplace_back(quantizer, shape, head_dim_, scale, storage, tiers, demote);
    } catch (const error& e) {
      throw error(which + " " + s.name() + ": " + e.what());
    }
    return streams;
  }

  std::size_t layers_, kv_heads_, head_dim_;
  bool keys_before_rope_;
  std::vector<kv_stream> keys_, values_;
  std::optional<any_eviction> policy_; // none: the cache keeps every token
  std::optional<bytes_budget> budget_; // budget=: the policy's count comes from bytes
  any_allocation allocation_;
  any_aggregation gqa_;
  eviction_needs needs_;
  bool demote_ = false;
  // Per (layer, KV head), per evictable token (held order): attention summed over observed
  // steps and at the latest one, aggregated over the query group.
  std::vector<std::vector<double>> accumulated_, latest_;
  // Per (layer, KV head), per evictable token: its decoded key's L2 norm, when the policy
  // scores with it.
  std::vector<std::vector<double>> key_norms_;
  std::vector<float> key_row_; // scratch: the key whose norm is being refreshed
};

} // namespace kvlab
