// A quantized tier of a stream: a body of records (body.cppm) and the map from token vectors
// to what the body stores, the quantizer's token_projection (a rotation such as rht's, or a
// sketch such as QJL's; none: the body stores the tokens). Appends map each token once;
// attention maps each query once (q . k read as (A q) . stored(k)) and maps each head's
// weighted sum of stored rows back once (A^T); decoding maps each row back.
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
  }

  const quantized_body& body() const noexcept { return body_; }
  const any_quantizer& quantizer() const noexcept { return body_.quantizer(); }
  std::size_t tokens() const noexcept { return body_.tokens(); }
  std::size_t block_tokens() const noexcept { return body_.block_tokens(); }
  std::size_t bytes() const noexcept { return body_.bytes(); }
  // A record's bytes over the tokens it holds.
  double token_bytes() const noexcept {
    return static_cast<double>(body_.layout().bytes()) / static_cast<double>(body_.block_tokens());
  }
  void reserve(std::size_t tokens) { body_.reserve(tokens); }
  void pop_back_tokens(std::size_t count) { body_.pop_back_tokens(count); }
  void pop_back_block() { body_.pop_back_block(); }
  void erase(std::span<const std::size_t> sorted_tokens) { body_.erase(sorted_tokens); }

  // One block of rows (block_tokens() x head_dim), as quantized_body::append.
  void append(std::span<const float> rows, const kernel_table& kernels) { body_.append(stored_rows(rows), kernels); }
  // `count` tokens of per-token groups, as quantized_body::append_tokens.
  void append_tokens(std::span<const float> rows, std::size_t count, const kernel_table& kernels) {
    body_.append_tokens(stored_rows(rows), count, kernels);
  }

  // scores[h * stride + t] = query_h . decoded(t) for `heads` queries (heads x head_dim).
  void dot_all(const kernel_table& kernels, std::span<const float> queries, std::size_t heads, float* scores,
               std::size_t stride) const {
    if (!map_) return body_.dot_all(kernels, queries, heads, scores, stride);
    const std::size_t m = map_->stored_dim();
    scratch_.resize(heads * m);
    for (std::size_t h = 0; h < heads; ++h)
      map_->query(queries.subspan(h * head_dim_, head_dim_), std::span(scratch_).subspan(h * m, m));
    body_.dot_all(kernels, scratch_, heads, scores, stride);
  }

  // acc_h += sum over tokens t of weights[h * stride + t] * decoded(t), acc being heads x head_dim.
  void axpy_all(const kernel_table& kernels, const float* weights, std::size_t stride, std::size_t heads,
                std::span<float> acc) const {
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
    if (!map_) return body_.decode(first, count, out);
    const std::size_t m = map_->stored_dim();
    scratch_.resize(count * m);
    body_.decode(first, count, scratch_);
    for (std::size_t t = 0; t < count; ++t)
      map_->adjoint(std::span(scratch_).subspan(t * m, m), out.subspan(t * head_dim_, head_dim_));
  }

private:
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
  mutable std::vector<float> scratch_; // mapped rows, queries or value sums
};

} // namespace kvlab
