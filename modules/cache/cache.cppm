// kvlab.cache: the compressed KV cache. Each (layer, KV head) has a key stream and a value
// stream (stream.cppm: fp16 sinks, quantized body, fp16 residual window), built from a recipe.
module;
#include "kernels.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>
export module kvlab.cache;
export import :packing;
export import :body;
export import :stream;
import kvlab.core;
import kvlab.simd;

export namespace kvlab {

// All streams of a model's cache, built from a recipe: one key and one value stream per
// (layer, KV head).
class kv_cache {
public:
  kv_cache(const recipe& r, const registry& components, std::size_t layers, std::size_t kv_heads, std::size_t head_dim)
      : layers_(layers), kv_heads_(kv_heads), head_dim_(head_dim) {
    if (r.eviction != "none")
      throw error("recipe '" + canonical_name(r) + "': eviction is not implemented in the cache yet");
    const any_storage storage = components.make_storage(r.storage);
    const stream_tiers tiers{.sinks = r.sinks, .residual = r.residual};
    keys_ = make_streams(r.keys, "keys", r.scale, storage, tiers, components);
    values_ = make_streams(r.values, "values", r.scale, storage, tiers, components);
  }

  std::size_t layers() const noexcept { return layers_; }
  std::size_t kv_heads() const noexcept { return kv_heads_; }
  std::size_t head_dim() const noexcept { return head_dim_; }

  kv_stream& keys(std::size_t layer, std::size_t kv_head) { return keys_.at(index(layer, kv_head)); }
  kv_stream& values(std::size_t layer, std::size_t kv_head) { return values_.at(index(layer, kv_head)); }
  const kv_stream& keys(std::size_t layer, std::size_t kv_head) const { return keys_.at(index(layer, kv_head)); }
  const kv_stream& values(std::size_t layer, std::size_t kv_head) const { return values_.at(index(layer, kv_head)); }

  void append(std::size_t layer, std::size_t kv_head, std::span<const float> key, std::span<const float> value) {
    keys(layer, kv_head).append(key, active_kernels());
    values(layer, kv_head).append(value, active_kernels());
  }

  // Appends tokens [0, tokens) of `keys` and `values` ([kv_heads][tokens][head_dim] of one
  // layer, row-major) to every KV head of `layer`.
  void prefill(std::size_t layer, std::span<const float> keys_rows, std::span<const float> values_rows,
               std::size_t tokens) {
    if (keys_rows.size() != kv_heads_ * tokens * head_dim_ || values_rows.size() != keys_rows.size())
      throw error("prefill: expected " + std::to_string(kv_heads_) + " heads x " + std::to_string(tokens) +
                  " tokens x " + std::to_string(head_dim_) + " values for keys and values");
    for (std::size_t h = 0; h < kv_heads_; ++h)
      for (std::size_t t = 0; t < tokens; ++t) {
        const std::size_t at = (h * tokens + t) * head_dim_;
        append(layer, h, keys_rows.subspan(at, head_dim_), values_rows.subspan(at, head_dim_));
      }
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
  std::size_t index(std::size_t layer, std::size_t kv_head) const {
    if (layer >= layers_ || kv_head >= kv_heads_)
      throw error("cache has " + std::to_string(layers_) + " layers x " + std::to_string(kv_heads_) +
                  " KV heads; (layer " + std::to_string(layer) + ", head " + std::to_string(kv_head) +
                  ") is out of range");
    return layer * kv_heads_ + kv_head;
  }

  std::vector<kv_stream> make_streams(const stream_recipe& s, const std::string& which, param_precision scale,
                                      const any_storage& storage, stream_tiers tiers,
                                      const registry& components) const {
    const any_quantizer quantizer = components.make_quantizer(s.quantizer);
    group_shape shape;
    try {
      shape = components.make_granularity(s.granularity).group_shape(head_dim_);
    } catch (const error& e) {
      throw error(which + " granularity " + s.granularity + ": " + e.what());
    }
    std::vector<kv_stream> streams;
    streams.reserve(layers_ * kv_heads_);
    try {
      for (std::size_t i = 0; i < layers_ * kv_heads_; ++i)
        streams.emplace_back(quantizer, shape, head_dim_, scale, storage, tiers);
    } catch (const error& e) {
      throw error(which + " " + s.quantizer + "@" + s.granularity + ": " + e.what());
    }
    return streams;
  }

  std::size_t layers_, kv_heads_, head_dim_;
  std::vector<kv_stream> keys_, values_;
};

} // namespace kvlab
