// One (layer, KV head) stream of keys or values in three tiers, oldest first:
//   sinks   the first S tokens, kept in fp16 (StreamingLLM's attention sinks, arXiv 2309.17453);
//   body    quantized blocks (see coded_tier.cppm and body.cppm);
//   window  the most recent tokens in fp16 (KIVI's residual, arXiv 2402.02750, sec. 3.3).
// KIVI rules: a block of G tokens is quantized exactly once, as soon as all G have left the
// last R positions; the window then holds between R and R + G - 1 tokens, never a
// complete block it could have flushed. Window tokens are held as fp16 (what an fp16
// model's cache holds) and are encoded from those fp16 values when their block flushes; a
// token that flushes the moment it arrives (R = 0, per-token groups) is encoded from its
// input values.
// Eviction removes held tokens from any tier (the stream records each token's position);
// with demotion (MiKV, arXiv 2402.18096, sec. 3) they move instead to a fourth tier, a
// lower-precision per-token body encoded from what the cache held, which eviction never
// touches again.
module;
#include "kernels.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>
export module kvlab.cache:stream;
import kvlab.core;
import kvlab.simd;
import :body;
import :coded_tier;

export namespace kvlab {

struct stream_tiers {
  std::size_t sinks = 0;    // first tokens kept in fp16
  std::size_t residual = 0; // most recent tokens kept in fp16
};

// The codec of the demoted tier: per-token groups only (tokens arrive there one by one).
struct demotion {
  any_quantizer quantizer;
  group_shape shape;
};

// fp16 token rows, oldest first (sinks, residual window). Dropping the oldest rows only
// advances a start offset, compacted once the dead prefix outgrows the live rows: a sliding
// window then costs O(1) per token instead of moving every row it holds.
struct half_rows {
  // [start, size) are live. The allocator leaves what resize() adds unzeroed: every row
  // pushed is written by its conversion.
  std::vector<std::uint16_t, line_aligned_allocator<std::uint16_t>> values;
  std::size_t start = 0;

  std::size_t size() const noexcept { return values.size() - start; } // live values
  const std::uint16_t* data() const noexcept { return values.data() + start; }
  std::uint16_t operator[](std::size_t i) const noexcept { return values[start + i]; }
  // The dropped rows stay in memory until the next push (push_half_rows compacts), so the
  // append that dropped them can still be taken back.
  void drop_front(std::size_t n) { start += n; }
  void restore_front(std::size_t n) { start -= n; }
  void compact() {
    values.erase(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(start));
    start = 0;
  }
};

class kv_stream {
public:
  kv_stream(const any_quantizer& quantizer, group_shape shape, std::size_t head_dim, param_precision precision,
            const any_storage& storage, stream_tiers tiers, const std::optional<demotion>& demote = std::nullopt)
      : body_(quantizer, shape, head_dim, precision, storage), head_dim_(head_dim), tiers_(tiers),
        block_(body_.block_tokens() * head_dim) {
    if (demote) {
      if (demote->shape.tokens != 1)
        throw error("demote: " + demote->quantizer.name() +
                    " needs per-token groups (token or group(G)): demoted tokens arrive one at a time");
      demoted_.emplace(demote->quantizer, demote->shape, head_dim, precision, storage);
    }
    half_format_ = {.kind = kernels::element_kind::f16,
                    .record_bytes = 2 * head_dim,
                    .head_dim = head_dim,
                    .group_channels = head_dim,
                    .bits = 16};
  }

  std::size_t head_dim() const noexcept { return head_dim_; }
  std::size_t sink_tokens() const noexcept { return sinks_.size() / head_dim_; }
  std::size_t body_tokens() const noexcept { return body_.tokens(); }
  std::size_t window_tokens() const noexcept { return window_.size() / head_dim_; }
  std::size_t demoted_tokens() const noexcept { return demoted_ ? demoted_->tokens() : 0; }
  // Tokens eviction may still remove: sinks, body and window.
  std::size_t evictable_tokens() const noexcept { return sink_tokens() + body_tokens() + window_tokens(); }
  // Every held token: the evictable ones, then the demoted ones.
  std::size_t tokens() const noexcept { return evictable_tokens() + demoted_tokens(); }
  std::size_t tokens_seen() const noexcept { return seen_; }
  // Position (arrival index) of every held token, in held order.
  std::span<const std::size_t> positions() const noexcept { return positions_; }
  const quantized_body& body() const noexcept { return body_.body(); }
  // What one token costs in each tier: a record's bytes over the tokens it holds.
  double body_token_bytes() const noexcept { return body_.token_bytes(); }
  double demoted_token_bytes() const noexcept { return demoted_ ? demoted_->token_bytes() : 0.0; }
  std::size_t half_token_bytes() const noexcept { return 2 * head_dim_; }
  // Tokens held in fp16: sinks and the residual window.
  std::size_t half_tokens() const noexcept { return sink_tokens() + window_tokens(); }

  // Everything the stream holds: fp16 sinks and window, and the bodies' storage (records,
  // page padding and page tables). Positions are the harness's bookkeeping, not counted.
  std::size_t bytes() const noexcept {
    return 2 * (sinks_.size() + window_.size()) + body_.bytes() + (demoted_ ? demoted_->bytes() : 0);
  }

  // Room for `tokens` more tokens (a prefill chunk): appending them grows no storage.
  void reserve(std::size_t tokens) {
    body_.reserve(tokens);
    positions_.reserve(positions_.size() + tokens);
  }

  void append(std::span<const float> token, const kernel_table& kernels) {
    if (token.size() != head_dim_)
      throw error("append: token has " + std::to_string(token.size()) + " channels, stream has head_dim " +
                  std::to_string(head_dim_));
    // The token is the newest evictable one wherever it goes; it is counted only once a tier
    // holds it, so a token that fails (a value fp16 cannot hold, say) leaves no trace.
    const std::size_t newest = evictable_tokens();
    // Room for its position first: once a tier holds the token, nothing may fail.
    if (positions_.size() == positions_.capacity()) positions_.reserve(2 * positions_.size() + 16);
    last_append_ = {};
    std::optional<row_error> refusal;
    if (seen_ < tiers_.sinks) {
      if (push_half_rows(sinks_, token, 1, kernels, refusal) == 0) throw error(refusal->what());
      last_append_.tier = newest_tier::sinks;
    } else if (tiers_.residual == 0 && body_.block_tokens() == 1) {
      body_.append(token, kernels);
      last_append_.tier = newest_tier::body;
    } else {
      const std::size_t before = window_tokens();
      if (push_half_rows(window_, token, 1, kernels, refusal) == 0) throw error(refusal->what());
      last_append_ = {.tier = newest_tier::window, .tokens = 1, .window_before = before};
      try {
        flush_window(kernels);
      } catch (...) { // a refused block, or storage out of memory
        take_back_window_tokens(1);
        throw;
      }
    }
    positions_.insert(positions_.begin() + static_cast<std::ptrdiff_t>(newest), seen_++);
    last_append_.tokens = 1;
  }

  // Whether append_tokens() takes tokens: once no sink is still to come (sinks arrive one
  // at a time).
  bool appends_in_runs() const noexcept { return seen_ >= tiers_.sinks; }

  // `count` tokens (count x head_dim rows), as `count` appends would leave the stream, when
  // appends_in_runs(). Where tokens go straight to the body (per-token groups, no residual
  // window) they are encoded as one run; otherwise they enter the window in one fp16
  // conversion and the blocks that leave it are encoded as one run (per-token bodies) or a
  // kernel call per block. A token that cannot be appended throws a row_error naming it;
  // the tokens before it stay appended.
  void append_tokens(std::span<const float> rows, std::size_t count, const kernel_table& kernels) {
    if (!appends_in_runs())
      throw error("append_tokens: " + std::to_string(tiers_.sinks - seen_) +
                  " sink tokens are still to come; append them one by one");
    if (rows.size() != count * head_dim_)
      throw error("append_tokens: " + std::to_string(count) + " tokens are " + std::to_string(count * head_dim_) +
                  " values, got " + std::to_string(rows.size()));
    // Room for the positions first (growing geometrically): once a tier holds the tokens,
    // nothing may fail.
    if (positions_.capacity() < positions_.size() + count)
      positions_.reserve(std::max(2 * positions_.capacity(), positions_.size() + count));
    if (tiers_.residual == 0 && body_.block_tokens() == 1) return append_body_run(rows, count, kernels);
    append_window_run(rows, count, kernels);
  }

  // Takes back the `count` newest tokens of the last append or append_tokens() call, which
  // must have come since the last erase or demotion: every tier is as it was before them.
  // The cache calls it when values are refused after their keys were taken, so both streams
  // keep the same tokens.
  void take_back_newest(std::size_t count = 1) {
    if (last_append_.tier == newest_tier::none || count > last_append_.tokens)
      throw error("take_back_newest: " + std::to_string(count) + " tokens were not appended by the last call");
    if (count == 0) return;
    const auto end = positions_.begin() + static_cast<std::ptrdiff_t>(evictable_tokens());
    positions_.erase(end - static_cast<std::ptrdiff_t>(count), end);
    seen_ -= count;
    if (last_append_.tier == newest_tier::sinks) sinks_.values.resize(sinks_.values.size() - head_dim_);
    if (last_append_.tier == newest_tier::body) body_.pop_back_tokens(count);
    if (last_append_.tier == newest_tier::window) take_back_window_tokens(count);
    last_append_ = {};
  }

  // Removes evictable tokens (held indices below evictable_tokens(), ascending and unique)
  // from whichever tier holds them; storage frees what they used.
  void erase(std::span<const std::size_t> sorted_tokens) {
    check_evictable(sorted_tokens);
    last_append_ = {};
    const std::size_t body_start = sink_tokens(), window_start = body_start + body_tokens();
    std::vector<std::size_t> sinks, body, window;
    for (const std::size_t t : sorted_tokens) {
      if (t < body_start)
        sinks.push_back(t);
      else if (t < window_start)
        body.push_back(t - body_start);
      else
        window.push_back(t - window_start);
    }
    erase_rows(sinks_, sinks);
    body_.erase(body);
    erase_rows(window_, window);
    if (sorted_tokens.empty()) return;
    std::size_t next = 0, kept = sorted_tokens.front();
    for (std::size_t t = kept; t < positions_.size(); ++t)
      if (next < sorted_tokens.size() && sorted_tokens[next] == t)
        ++next;
      else
        positions_[kept++] = positions_[t];
    positions_.resize(kept);
  }

  // Moves evictable tokens (as for erase) to the demoted tier, encoding them from what the
  // stream holds for them.
  void demote(std::span<const std::size_t> sorted_tokens, const kernel_table& kernels) {
    if (!demoted_) throw error("demote: this stream has no demoted tier (recipe without demote=)");
    check_evictable(sorted_tokens);
    std::vector<float> row(head_dim_);
    std::vector<std::size_t> moved;
    for (const std::size_t t : sorted_tokens) {
      decode(t, row);
      demoted_->append(row, kernels);
      moved.push_back(positions_[t]);
    }
    erase(sorted_tokens);
    positions_.insert(positions_.end(), moved.begin(), moved.end());
  }

  // For `heads` queries (heads x head_dim, one GQA group): scores[h * tokens() + t] =
  // query_h . decoded(t) for every held token t, oldest first (sinks, body, window). The
  // body's codes are read once for all heads.
  void dot_all(const kernel_table& kernels, std::span<const float> queries, std::size_t heads,
               std::span<float> scores) const {
    const std::size_t n = tokens(), body_start = sink_tokens(), window_start = body_start + body_tokens();
    half_dot(kernels, sinks_, queries, heads, scores.data(), n);
    half_dot(kernels, window_, queries, heads, scores.data() + window_start, n);
    body_.dot_all(kernels, queries.first(heads * head_dim_), heads, scores.data() + body_start, n);
    if (demoted_)
      demoted_->dot_all(kernels, queries.first(heads * head_dim_), heads, scores.data() + evictable_tokens(), n);
  }

  // For `heads` weight rows (weights[h * tokens() + t]): acc_h += sum over held tokens t of
  // weights_h[t] * decoded(t), acc being heads x head_dim.
  void axpy_all(const kernel_table& kernels, std::span<const float> weights, std::size_t heads,
                std::span<float> acc) const {
    const std::size_t n = tokens(), body_start = sink_tokens(), window_start = body_start + body_tokens();
    half_axpy(kernels, sinks_, weights.data(), n, heads, acc);
    half_axpy(kernels, window_, weights.data() + window_start, n, heads, acc);
    body_.axpy_all(kernels, weights.data() + body_start, n, heads, acc);
    if (demoted_) demoted_->axpy_all(kernels, weights.data() + evictable_tokens(), n, heads, acc);
  }

  // Reference decoder of held tokens [first, first + count) (oldest first) into out (count x
  // head_dim): no kernels.
  void decode(std::size_t first, std::size_t count, std::span<float> out) const {
    const std::size_t end = first + count;
    std::size_t start = 0; // of the tier being visited, in held order
    const auto tier = [&](std::size_t size, auto&& decode_part) {
      const std::size_t from = std::max(first, start), to = std::min(end, start + size);
      if (from < to)
        decode_part(from - start, to - from, out.subspan((from - first) * head_dim_, (to - from) * head_dim_));
      start += size;
    };
    const auto halves = [&](const half_rows& rows, std::size_t from, std::size_t n, std::span<float> part) {
      for (std::size_t t = 0; t < n; ++t) read_half(rows, from + t, part.subspan(t * head_dim_, head_dim_));
    };
    const auto body = [&](const coded_tier& b, std::size_t from, std::size_t n, std::span<float> part) {
      b.decode(from, n, part);
    };
    tier(sink_tokens(), std::bind_front(halves, std::cref(sinks_)));
    tier(body_tokens(), std::bind_front(body, std::cref(body_)));
    tier(window_tokens(), std::bind_front(halves, std::cref(window_)));
    if (demoted_) tier(demoted_->tokens(), std::bind_front(body, std::cref(*demoted_)));
  }
  void decode(std::size_t token, std::span<float> out) const { decode(token, 1, out.first(head_dim_)); }

private:
  // Where the last append put its token, and how many blocks it moved from the window to
  // the body.
  enum class newest_tier { none, sinks, body, window };
  struct last_append {
    newest_tier tier = newest_tier::none;
    std::size_t blocks_flushed = 0;
    std::size_t tokens = 0;        // appended by the call
    std::size_t window_before = 0; // window tokens before the call (window tier)
  };

  // The call's token whose arrival, appended one by one, moves the call's block `block` from
  // the window to the body: the one that makes the window hold that block and R + G - 1
  // tokens after it.
  std::size_t flushed_by(std::size_t block) const noexcept {
    const std::size_t g = body_.block_tokens();
    return block * g + tiers_.residual + g - 1 - last_append_.window_before;
  }

  // The `count` newest tokens of the last call out of the window, and the blocks their
  // arrivals moved to the body back in; blocks moved by the tokens that stay, stay.
  void take_back_window_tokens(std::size_t count) {
    const std::size_t kept = last_append_.tokens - count, block = body_.block_tokens();
    std::size_t undone = 0;
    while (undone < last_append_.blocks_flushed && flushed_by(last_append_.blocks_flushed - undone - 1) >= kept)
      ++undone;
    if (block == 1 && undone > 0) body_.pop_back_tokens(undone); // the flush was one run
    for (std::size_t b = 0; block > 1 && b < undone; ++b) body_.pop_back_block();
    last_append_.blocks_flushed -= undone;
    window_.restore_front(undone * block * head_dim_);
    window_.values.resize(window_.values.size() - count * head_dim_);
    last_append_.tokens = kept;
  }

  // Moves every block that has left the last R positions from the window to the body,
  // encoded from its fp16 rows: a per-token body's tokens as one run, a per-channel body's
  // blocks one kernel call each. Each block moved is counted in last_append_.blocks_flushed,
  // also when a later one fails.
  void flush_window(const kernel_table& kernels) {
    const std::size_t block = body_.block_tokens();
    if (window_tokens() < tiers_.residual + block) return;
    if (block > 1) {
      while (window_tokens() >= tiers_.residual + block) {
        kernels.f16_to_floats(window_.data(), block * head_dim_, block_.data());
        body_.append(block_, kernels);
        window_.drop_front(block * head_dim_);
        ++last_append_.blocks_flushed;
      }
      return;
    }
    const std::size_t leaving = window_tokens() - tiers_.residual;
    block_.resize(leaving * head_dim_);
    kernels.f16_to_floats(window_.data(), leaving * head_dim_, block_.data());
    append_body_tokens_reporting(block_, leaving, kernels, [&](std::size_t moved) {
      window_.drop_front(moved * head_dim_);
      last_append_.blocks_flushed += moved;
    });
  }

  // Positions for the `held` tokens a call appended, from held index `newest` on.
  void record_positions(std::size_t newest, std::size_t held) {
    positions_.insert(positions_.begin() + static_cast<std::ptrdiff_t>(newest), held, 0);
    for (std::size_t t = 0; t < held; ++t) positions_[newest + t] = seen_++;
  }

  // append_tokens() straight into the body: one run of records.
  void append_body_run(std::span<const float> rows, std::size_t count, const kernel_table& kernels) {
    const std::size_t newest = evictable_tokens();
    last_append_ = {};
    append_body_tokens_reporting(rows, count, kernels, [&](std::size_t held) {
      record_positions(newest, held);
      last_append_ = {.tier = newest_tier::body, .tokens = held};
    });
  }

  // append_tokens() through the window: the rows in one fp16 conversion, then the blocks
  // that leave it. A block the body refuses (or storage out of memory) stops the call at
  // the token whose arrival moved it, as appending one by one would.
  void append_window_run(std::span<const float> rows, std::size_t count, const kernel_table& kernels) {
    const std::size_t newest = evictable_tokens();
    last_append_ = {.tier = newest_tier::window, .window_before = window_tokens()};
    std::optional<row_error> refusal;
    last_append_.tokens = push_half_rows(window_, rows, count, kernels, refusal);
    const auto keep_before = [&](std::size_t token) { // the call's tokens from `token` on out
      window_.values.resize(window_.values.size() - (last_append_.tokens - token) * head_dim_);
      last_append_.tokens = token;
    };
    try {
      flush_window(kernels);
    } catch (const error& e) {
      const std::size_t by = flushed_by(last_append_.blocks_flushed);
      keep_before(by);
      refusal.emplace(by, e.what());
    } catch (...) {
      keep_before(flushed_by(last_append_.blocks_flushed));
      record_positions(newest, last_append_.tokens);
      throw;
    }
    record_positions(newest, last_append_.tokens);
    if (refusal) throw *refusal;
  }

  // body_.append_tokens(), then `taken` with the number of tokens the body took, also when
  // it stops partway by throwing (rethrown after): the caller's bookkeeping follows the body.
  template <class Taken>
  void append_body_tokens_reporting(std::span<const float> rows, std::size_t count, const kernel_table& kernels,
                                    Taken taken) {
    const std::size_t before = body_tokens();
    try {
      body_.append_tokens(rows, count, kernels);
    } catch (...) {
      taken(body_tokens() - before);
      throw;
    }
    taken(body_tokens() - before);
  }
  void check_evictable(std::span<const std::size_t> sorted_tokens) const {
    for (std::size_t i = 0; i < sorted_tokens.size(); ++i)
      if (sorted_tokens[i] >= evictable_tokens() || (i > 0 && sorted_tokens[i] <= sorted_tokens[i - 1]))
        throw error("eviction needs ascending, unique indices below the " + std::to_string(evictable_tokens()) +
                    " evictable tokens");
  }
  void erase_rows(half_rows& half, std::span<const std::size_t> sorted_rows) const {
    if (sorted_rows.empty()) return;
    half.compact();
    auto& rows = half.values;
    std::size_t next = 0, kept = 0;
    for (std::size_t t = 0; t < rows.size() / head_dim_; ++t) {
      if (next < sorted_rows.size() && sorted_rows[next] == t) {
        ++next;
        continue;
      }
      std::copy_n(rows.begin() + static_cast<std::ptrdiff_t>(t * head_dim_), head_dim_,
                  rows.begin() + static_cast<std::ptrdiff_t>(kept++ * head_dim_));
    }
    rows.resize(kept * head_dim_);
    rows.shrink_to_fit();
  }
  // `count` rows pushed in one conversion. fp16 holds magnitudes up to 65504; a larger value
  // would be stored as infinity. Returns how many rows it keeps: all, or those before the
  // first row holding a value fp16 cannot hold, which `refusal` names.
  static std::size_t push_half_rows(half_rows& rows, std::span<const float> values, std::size_t count,
                                    const kernel_table& kernels, std::optional<row_error>& refusal) {
    if (count == 0) return 0;
    if (rows.start >= rows.size()) rows.compact(); // the dead prefix outgrew the live rows
    const std::size_t end = rows.values.size();
    rows.values.resize(end + values.size());
    std::uint16_t* halves = rows.values.data() + end;
    kernels.floats_to_f16(values.data(), values.size(), halves);
    // An fp16 infinity or NaN by its exponent bits, in a loop the compiler vectorizes; the
    // value is looked for only then (a branch per value was a sixth of a KIVI-2 append).
    unsigned specials = 0;
    for (std::size_t i = 0; i < values.size(); ++i) specials |= (halves[i] & 0x7c00u) == 0x7c00u ? 1u : 0u;
    if (specials == 0) return count;
    const std::size_t head_dim = values.size() / count;
    std::size_t i = 0;
    while ((halves[i] & 0x7c00u) != 0x7c00u) ++i;
    const std::size_t row = i / head_dim;
    rows.values.resize(end + row * head_dim);
    refusal.emplace(row, "value " + format_number(values[i]) + " at channel " + std::to_string(i % head_dim) +
                             " is beyond the fp16 range (65504) of the sink and residual tiers; scale the data down");
    return row;
  }
  void read_half(const half_rows& rows, std::size_t token, std::span<float> out) const {
    for (std::size_t c = 0; c < head_dim_; ++c) out[c] = half_bits_to_float(rows[token * head_dim_ + c]);
  }
  // fp16 rows (sinks or window) for every head at once: scores[h * stride + t].
  void half_dot(const kernel_table& kernels, const half_rows& rows, std::span<const float> queries, std::size_t heads,
                float* scores, std::size_t stride) const {
    if (rows.size() == 0) return;
    kernels.dot_records(half_format_, queries.data(), heads, reinterpret_cast<const std::uint8_t*>(rows.data()),
                        rows.size() / head_dim_, scores, stride);
  }
  void half_axpy(const kernel_table& kernels, const half_rows& rows, const float* weights, std::size_t stride,
                 std::size_t heads, std::span<float> acc) const {
    if (rows.size() == 0) return;
    kernels.axpy_records(half_format_, weights, stride, heads, reinterpret_cast<const std::uint8_t*>(rows.data()),
                         rows.size() / head_dim_, acc.data());
  }

  coded_tier body_;
  std::optional<coded_tier> demoted_;
  std::size_t head_dim_;
  stream_tiers tiers_;
  kernels::record_format half_format_;
  half_rows sinks_;
  half_rows window_;
  std::size_t seen_ = 0;               // tokens ever appended
  last_append last_append_;            // what take_back_newest() undoes
  std::vector<std::size_t> positions_; // of every held token, in held order
  std::vector<float> block_;           // scratch: the rows leaving the window
};

} // namespace kvlab
