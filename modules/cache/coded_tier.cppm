// A quantized tier of a stream: a body of records (body.cppm) and the map from token vectors
// to what the body stores, the quantizer's token_projection (a rotation such as rht's, or a
// sketch such as QJL's; none: the body stores the tokens). Appends map each token once;
// attention maps each query once (q . k read as (A q) . stored(k)) and maps each head's
// weighted sum of stored rows back once (A^T); decoding maps each row back.
// A quantizer with a residual (residual(P,R)) adds a second tier of R's records, one per
// token, encoded from what P's decoded token leaves of it: scores, value sums and decoded
// tokens are the sums of both tiers, and every erase or take-back applies to both.
module;
#include "kernels.hpp"

#include <algorithm>
#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <vector>
export module kvlab.cache:coded_tier;
import kvlab.core;
import kvlab.simd;
import :body;

export namespace kvlab {

class coded_tier {
public:
  coded_tier(const any_quantizer& quantizer, group_shape shape, std::size_t head_dim, param_precision precision,
             const any_storage& storage)
      : map_(quantizer.projection(head_dim)), head_dim_(head_dim),
        body_(quantizer, shape, map_ ? map_->stored_dim() : head_dim, precision, storage) {
    // A group spanning tokens would share one scale between sketches of different norms.
    if (!quantizer.invertible() && shape.tokens != 1)
      throw error(quantizer.name() + " sketches each token on its own; it needs per-token groups (token or group(G))");
    if (const auto rest = quantizer.residual()) {
      if (shape.tokens != 1)
        throw error(quantizer.name() + " encodes each token's residual; it needs per-token groups (token or group(G))");
      residual_ = std::make_unique<coded_tier>(*rest, group_shape{.tokens = 1, .channels = rest->stored_dim(head_dim)},
                                               head_dim, precision, storage);
    }
  }

  const quantized_body& body() const noexcept { return body_; }
  const any_quantizer& quantizer() const noexcept { return body_.quantizer(); }
  std::size_t tokens() const noexcept { return body_.tokens(); }
  std::size_t block_tokens() const noexcept { return body_.block_tokens(); }
  std::size_t bytes() const noexcept { return body_.bytes() + (residual_ ? residual_->bytes() : 0); }
  // A record's bytes over the tokens it holds, with the residual tier's.
  double token_bytes() const noexcept {
    return static_cast<double>(body_.layout().bytes()) / static_cast<double>(body_.block_tokens()) +
           (residual_ ? residual_->token_bytes() : 0.0);
  }
  void reserve(std::size_t tokens) {
    body_.reserve(tokens);
    if (residual_) residual_->reserve(tokens);
  }
  void pop_back_tokens(std::size_t count) {
    body_.pop_back_tokens(count);
    if (residual_) residual_->pop_back_tokens(count);
  }
  void pop_back_block() { body_.pop_back_block(); } // per-channel blocks, which a residual refuses
  void erase(std::span<const std::size_t> sorted_tokens) {
    body_.erase(sorted_tokens);
    if (residual_) residual_->erase(sorted_tokens);
  }

  // One block of rows (block_tokens() x head_dim), as quantized_body::append.
  void append(std::span<const float> rows, const kernel_table& kernels) {
    if (residual_) return append_tokens(rows, 1, kernels); // its blocks are single tokens
    body_.append(stored_rows(rows), kernels);
  }
  // `count` tokens of per-token groups, as quantized_body::append_tokens: a token the body
  // refuses stops the call there (rethrown), and both tiers hold the tokens before it.
  void append_tokens(std::span<const float> rows, std::size_t count, const kernel_table& kernels) {
    if (!residual_) return body_.append_tokens(stored_rows(rows), count, kernels);
    const std::size_t before = tokens();
    try {
      body_.append_tokens(stored_rows(rows), count, kernels);
    } catch (...) {
      append_residuals(rows, before, kernels);
      throw;
    }
    append_residuals(rows, before, kernels);
  }

  // scores[h * stride + t] = query_h . decoded(t) for `heads` queries (heads x head_dim).
  void dot_all(const kernel_table& kernels, std::span<const float> queries, std::size_t heads, float* scores,
               std::size_t stride) const {
    if (!map_) {
      body_.dot_all(kernels, queries, heads, scores, stride);
    } else {
      const std::size_t m = map_->stored_dim();
      scratch_.resize(heads * m);
      for (std::size_t h = 0; h < heads; ++h)
        map_->query(queries.subspan(h * head_dim_, head_dim_), std::span(scratch_).subspan(h * m, m));
      body_.dot_all(kernels, scratch_, heads, scores, stride);
    }
    if (!residual_) return;
    const std::size_t n = tokens();
    residual_part_.resize(heads * n);
    residual_->dot_all(kernels, queries, heads, residual_part_.data(), n);
    for (std::size_t h = 0; h < heads; ++h)
      for (std::size_t t = 0; t < n; ++t) scores[h * stride + t] += residual_part_[h * n + t];
  }

  // acc_h += sum over tokens t of weights[h * stride + t] * decoded(t), acc being heads x head_dim.
  void axpy_all(const kernel_table& kernels, const float* weights, std::size_t stride, std::size_t heads,
                std::span<float> acc) const {
    if (residual_) residual_->axpy_all(kernels, weights, stride, heads, acc);
    if (!map_) return body_.axpy_all(kernels, weights, stride, heads, acc);
    const std::size_t m = map_->stored_dim();
    scratch_.assign(heads * m + head_dim_, 0.0f);
    const auto sums = std::span(scratch_).first(heads * m), head_sum = std::span(scratch_).last(head_dim_);
    body_.axpy_all(kernels, weights, stride, heads, sums);
    for (std::size_t h = 0; h < heads; ++h) {
      map_->adjoint(sums.subspan(h * m, m), head_sum);
      for (std::size_t c = 0; c < head_dim_; ++c) acc[h * head_dim_ + c] += head_sum[c];
    }
  }

  // Reference decoder of tokens [first, first + count) into out (count x head_dim): no kernels.
  void decode(std::size_t first, std::size_t count, std::span<float> out) const {
    decode_own(first, count, out);
    if (!residual_) return;
    residual_part_.resize(count * head_dim_);
    residual_->decode(first, count, residual_part_);
    for (std::size_t i = 0; i < count * head_dim_; ++i) out[i] += residual_part_[i];
  }

private:
  // This tier's own records decoded, without the residual tier's.
  void decode_own(std::size_t first, std::size_t count, std::span<float> out) const {
    if (!map_) return body_.decode(first, count, out);
    const std::size_t m = map_->stored_dim();
    scratch_.resize(count * m);
    body_.decode(first, count, scratch_);
    for (std::size_t t = 0; t < count; ++t)
      map_->adjoint(std::span(scratch_).subspan(t * m, m), out.subspan(t * head_dim_, head_dim_));
  }
  // What the body's decode leaves of each token it took since `before` (rows from the
  // call's first), appended to the residual tier. If that refuses a token, the body gives
  // back the tokens from there on, so both tiers hold the same tokens.
  void append_residuals(std::span<const float> rows, std::size_t before, const kernel_table& kernels) {
    const std::size_t taken = tokens() - before, held = residual_->tokens();
    if (taken == 0) return;
    try {
      residual_part_.resize(taken * head_dim_);
      decode_own(before, taken, residual_part_);
      for (std::size_t i = 0; i < taken * head_dim_; ++i) residual_part_[i] = rows[i] - residual_part_[i];
      residual_->append_tokens(residual_part_, taken, kernels);
    } catch (...) {
      body_.pop_back_tokens(taken - (residual_->tokens() - held));
      throw;
    }
  }

  // The rows as the body stores them, in scratch that keeps its capacity.
  std::span<const float> stored_rows(std::span<const float> rows) const {
    if (!map_) return rows;
    const std::size_t count = rows.size() / head_dim_, m = map_->stored_dim();
    scratch_.resize(count * m);
    for (std::size_t r = 0; r < count; ++r)
      map_->key(rows.subspan(r * head_dim_, head_dim_), std::span(scratch_).subspan(r * m, m));
    return scratch_;
  }

  std::shared_ptr<const token_projection> map_; // null: the body stores the tokens
  std::size_t head_dim_;
  quantized_body body_;
  std::unique_ptr<coded_tier> residual_;     // residual(P,R): R's tier
  mutable std::vector<float> scratch_;       // mapped rows, queries or value sums
  mutable std::vector<float> residual_part_; // the residual tier's scores or tokens
};

} // namespace kvlab
