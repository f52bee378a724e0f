// kvlab.cache: the compressed KV cache. Each (layer, KV head) has a key stream and a value
// stream; a stream encodes tokens with its quantizer into bit-packed records (codes, then
// scales and zeros) held by the recipe's storage.
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
import kvlab.core;
import kvlab.simd;

export namespace kvlab {

// Codes are packed little-endian at exactly `bits` bits: element i occupies bits
// [i*bits, (i+1)*bits) of `out`, least significant first (the kernels' layout).
inline void pack_codes(std::span<const std::uint32_t> codes, unsigned bits, std::span<std::uint8_t> out) {
  std::memset(out.data(), 0, out.size());
  if (bits == 32 || bits == 16) {
    for (std::size_t i = 0; i < codes.size(); ++i) std::memcpy(out.data() + i * bits / 8, &codes[i], bits / 8);
    return;
  }
  for (std::size_t i = 0; i < codes.size(); ++i) {
    const std::size_t bit = i * bits;
    const unsigned window = codes[i] << (bit % 8);
    out[bit / 8] |= static_cast<std::uint8_t>(window);
    if (bit % 8 + bits > 8) out[bit / 8 + 1] |= static_cast<std::uint8_t>(window >> 8);
  }
}

inline std::uint32_t unpack_code(std::span<const std::uint8_t> packed, std::size_t index, unsigned bits) {
  if (bits == 32 || bits == 16) {
    std::uint32_t code = 0;
    std::memcpy(&code, packed.data() + index * bits / 8, bits / 8);
    return code;
  }
  const std::size_t bit = index * bits;
  unsigned window = packed[bit / 8];
  if (bit % 8 + bits > 8) window |= unsigned{packed[bit / 8 + 1]} << 8;
  return (window >> (bit % 8)) & ((1u << bits) - 1u);
}

// Byte layout of one record: a block of `block_tokens` tokens of one stream, codes
// token-major, then each group's parameters (scale, then zero) in the stored precision.
struct record_layout {
  std::size_t head_dim = 0;
  std::size_t block_tokens = 1;
  std::size_t group_channels = 0;
  unsigned bits = 0;
  unsigned params_per_group = 0;
  std::size_t param_bytes = 2;

  std::size_t groups() const noexcept { return head_dim / group_channels; }
  std::size_t code_bytes() const noexcept { return (block_tokens * head_dim * bits + 7) / 8; }
  std::size_t bytes() const noexcept { return code_bytes() + groups() * params_per_group * param_bytes; }
};

class compressed_stream {
public:
  compressed_stream(any_quantizer quantizer, group_shape shape, std::size_t head_dim, param_precision precision,
                    const any_storage& storage)
      : quantizer_(std::move(quantizer)),
        layout_{.head_dim = head_dim,
                .block_tokens = shape.tokens,
                .group_channels = shape.channels,
                .bits = quantizer_.bits(),
                .params_per_group = quantizer_.params_per_group(),
                .param_bytes = precision == param_precision::f32 ? std::size_t{4} : std::size_t{2}},
        precision_(precision), store_(storage.make_store(layout_.bytes())), codes_(head_dim), record_(layout_.bytes()),
        rotated_(head_dim), name_(quantizer_.name()), rule_(quantizer_.encoding()) {
    format_ = {.kind = element_kind_of(quantizer_),
               .record_bytes = layout_.bytes(),
               .head_dim = head_dim,
               .group_channels = shape.channels,
               .bits = layout_.bits,
               .params_per_group = layout_.params_per_group,
               .params_f32 = precision == param_precision::f32,
               .offset = static_cast<float>(quantizer_.encoding().offset),
               .levels = quantizer_.levels().data()};
    if (shape.tokens != 1)
      throw error((shape.tokens == 0 ? std::string("per-tensor groups")
                                     : "groups spanning " + std::to_string(shape.tokens) + " tokens") +
                  " need the fp16 residual window, which this cache does not have yet (kvlab codec supports them)");
  }

  const record_layout& layout() const noexcept { return layout_; }
  const any_quantizer& quantizer() const noexcept { return quantizer_; }
  std::size_t tokens() const noexcept { return store_->size(); }
  std::size_t bytes() const noexcept { return store_->bytes_reserved(); }

  // Encodes one token into a record: with the kernels when the quantizer has an encoding
  // rule they understand, else with the quantizer's own per-element encode.
  void append(std::span<const float> token, const kernel_table& kernels) {
    encode(token, kernels, record_);
    store_->append(record_);
  }

  // The record of one token, without storing it (`record` has layout().bytes() bytes).
  void encode(std::span<const float> token, const kernel_table& kernels, std::span<std::uint8_t> record) {
    if (token.size() != layout_.head_dim)
      throw error("append: token has " + std::to_string(token.size()) + " channels, stream has head_dim " +
                  std::to_string(layout_.head_dim));
    if (quantizer_.rotates()) {
      std::ranges::copy(token, rotated_.begin());
      quantizer_.rotate(rotated_);
      token = rotated_;
    }
    const std::size_t group_channels = layout_.group_channels;
    const encoding_rule& rule = rule_;
    const bool by_kernel = quantizer_.format() == element_format::codebook && rule.kind != encoding_kind::per_element;
    for (std::size_t g = 0; g < layout_.groups(); ++g) {
      const auto values = token.subspan(g * group_channels, group_channels);
      const group_params p = stored_params(quantizer_.fit(values), precision_, name_);
      write_params(record, g, p);
      const std::size_t first = g * group_channels;
      if (!by_kernel) {
        quantizer_.encode(values, p, std::span(codes_).subspan(first, group_channels));
      } else if (rule.kind == encoding_kind::uniform) {
        kernels.encode_uniform(values.data(), group_channels, p.scale, p.zero, rule.offset, rule.max_code, layout_.bits,
                               record.data(), first);
      } else {
        kernels.encode_nearest(values.data(), group_channels, p.scale, p.zero, rule.thresholds.data(),
                               static_cast<unsigned>(rule.thresholds.size()), layout_.bits, record.data(), first);
      }
    }
    if (!by_kernel) pack_codes(codes_, layout_.bits, record.first(layout_.code_bytes()));
  }

  // scores[t] = query . (decoded token t), through the fused kernels. A rotating quantizer
  // stores rotated keys, and q . k = (R q) . (R k): the query is rotated once instead.
  void dot_all(const kernel_table& kernels, std::span<const float> query, std::span<float> scores) const {
    if (quantizer_.rotates()) {
      std::ranges::copy(query, rotated_.begin());
      quantizer_.rotate(rotated_);
      query = rotated_;
    }
    query_sums_.assign(layout_.groups(), 0.0f);
    for (std::size_t c = 0; c < layout_.head_dim; ++c) query_sums_[c / layout_.group_channels] += query[c];
    for (std::size_t t = 0; t < tokens();) {
      const auto run = store_->run(t);
      const std::size_t count = run.size() / format_.record_bytes;
      kernels.dot_records(format_, query.data(), query_sums_.data(), run.data(), count, scores.data() + t);
      t += count;
    }
  }

  // acc += sum over t of weights[t] * (decoded token t), through the fused kernels. A
  // rotating quantizer accumulates in the rotated space and un-rotates the sum once.
  void axpy_all(const kernel_table& kernels, std::span<const float> weights, std::span<float> acc) const {
    std::span<float> target = acc;
    if (quantizer_.rotates()) {
      std::ranges::fill(rotated_, 0.0f);
      target = rotated_;
    }
    group_constants_.assign(layout_.groups(), 0.0f);
    for (std::size_t t = 0; t < tokens();) {
      const auto run = store_->run(t);
      const std::size_t count = run.size() / format_.record_bytes;
      kernels.axpy_records(format_, weights.data() + t, run.data(), count, target.data(), group_constants_.data());
      t += count;
    }
    for (std::size_t c = 0; c < layout_.head_dim; ++c) target[c] += group_constants_[c / layout_.group_channels];
    if (quantizer_.rotates()) {
      quantizer_.unrotate(rotated_);
      for (std::size_t c = 0; c < layout_.head_dim; ++c) acc[c] += rotated_[c];
    }
  }

  // Reference decoder of one held token (the quantizer's own decode, no kernels).
  void decode(std::size_t token, std::span<float> out) const {
    const auto record = store_->record(token);
    for (std::size_t c = 0; c < layout_.head_dim; ++c)
      out[c] = quantizer_.decode(unpack_code(record, c, layout_.bits), read_params(record, c / layout_.group_channels));
    quantizer_.unrotate(out);
  }

  // Decodes one held token through the decode kernel (codebook formats) or the reference.
  void decode(std::size_t token, std::span<float> out, const kernel_table& kernels) const {
    if (quantizer_.format() != element_format::codebook) return decode(token, out);
    const auto record = store_->record(token);
    const std::size_t group_channels = layout_.group_channels;
    for (std::size_t g = 0; g < layout_.groups(); ++g) {
      const group_params p = read_params(record, g);
      kernels.decode_codes(record.data(), g * group_channels, group_channels, layout_.bits, quantizer_.levels().data(),
                           p.scale, p.zero, out.data() + g * group_channels);
    }
    quantizer_.unrotate(out);
  }

private:
  std::size_t param_offset(std::size_t group, unsigned which) const noexcept {
    return layout_.code_bytes() + (group * layout_.params_per_group + which) * layout_.param_bytes;
  }
  void write_params(std::span<std::uint8_t> record, std::size_t group, group_params p) const {
    const float values[2] = {p.scale, p.zero};
    for (unsigned i = 0; i < layout_.params_per_group; ++i) {
      std::uint8_t* at = record.data() + param_offset(group, i);
      if (layout_.param_bytes == 4) {
        std::memcpy(at, &values[i], 4);
      } else {
        const std::uint16_t half = float_to_half_bits(values[i]);
        std::memcpy(at, &half, 2);
      }
    }
  }
  group_params read_params(std::span<const std::uint8_t> record, std::size_t group) const {
    float values[2] = {1.0f, 0.0f};
    for (unsigned i = 0; i < layout_.params_per_group; ++i) {
      const std::uint8_t* at = record.data() + param_offset(group, i);
      if (layout_.param_bytes == 4) {
        std::memcpy(&values[i], at, 4);
      } else {
        std::uint16_t half;
        std::memcpy(&half, at, 2);
        values[i] = half_bits_to_float(half);
      }
    }
    return {values[0], values[1]};
  }

  static kernels::element_kind element_kind_of(const any_quantizer& q) {
    switch (q.format()) {
    case element_format::f32: return kernels::element_kind::f32;
    case element_format::f16: return kernels::element_kind::f16;
    case element_format::bf16: return kernels::element_kind::bf16;
    case element_format::codebook: break;
    }
    return q.encoding().kind == encoding_kind::uniform ? kernels::element_kind::affine_codes
                                                       : kernels::element_kind::table_codes;
  }

  any_quantizer quantizer_;
  record_layout layout_;
  kernels::record_format format_;
  param_precision precision_;
  std::unique_ptr<record_store> store_;
  std::vector<std::uint32_t> codes_; // scratch: one token's codes before packing
  std::vector<std::uint8_t> record_; // scratch: one record before it is stored
  // Scratch of the const attention calls: a stream is read by one thread at a time.
  mutable std::vector<float> rotated_;         // rotated token, query or value sum
  mutable std::vector<float> query_sums_;      // per group: sum of the query's channels
  mutable std::vector<float> group_constants_; // per group: summed zero/offset terms
  std::string name_;                           // the quantizer's, for error messages
  encoding_rule rule_;                         // the quantizer's, asked once
};

// All streams of a model's cache, built from a recipe: one key and one value stream per
// (layer, KV head).
class kv_cache {
public:
  kv_cache(const recipe& r, const registry& components, std::size_t layers, std::size_t kv_heads, std::size_t head_dim)
      : layers_(layers), kv_heads_(kv_heads), head_dim_(head_dim) {
    if (r.sinks != 0 || r.residual != 0)
      throw error("recipe '" + canonical_name(r) + "': sinks and residual windows are not implemented yet");
    if (r.eviction != "none")
      throw error("recipe '" + canonical_name(r) + "': eviction is not implemented in the cache yet");
    const any_storage storage = components.make_storage(r.storage);
    keys_ = make_streams(r.keys, "keys", r.scale, storage, components);
    values_ = make_streams(r.values, "values", r.scale, storage, components);
  }

  std::size_t layers() const noexcept { return layers_; }
  std::size_t kv_heads() const noexcept { return kv_heads_; }
  std::size_t head_dim() const noexcept { return head_dim_; }

  compressed_stream& keys(std::size_t layer, std::size_t kv_head) { return keys_.at(index(layer, kv_head)); }
  compressed_stream& values(std::size_t layer, std::size_t kv_head) { return values_.at(index(layer, kv_head)); }
  const compressed_stream& keys(std::size_t layer, std::size_t kv_head) const {
    return keys_.at(index(layer, kv_head));
  }
  const compressed_stream& values(std::size_t layer, std::size_t kv_head) const {
    return values_.at(index(layer, kv_head));
  }

  void append(std::size_t layer, std::size_t kv_head, std::span<const float> key, std::span<const float> value) {
    keys(layer, kv_head).append(key, active_kernels());
    values(layer, kv_head).append(value, active_kernels());
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

  std::vector<compressed_stream> make_streams(const stream_recipe& s, const std::string& which, param_precision scale,
                                              const any_storage& storage, const registry& components) const {
    const any_quantizer quantizer = components.make_quantizer(s.quantizer);
    group_shape shape;
    try {
      shape = components.make_granularity(s.granularity).group_shape(head_dim_);
    } catch (const error& e) {
      throw error(which + " granularity " + s.granularity + ": " + e.what());
    }
    std::vector<compressed_stream> streams;
    streams.reserve(layers_ * kv_heads_);
    for (std::size_t i = 0; i < layers_ * kv_heads_; ++i)
      streams.emplace_back(quantizer, shape, head_dim_, scale, storage);
    return streams;
  }

  std::size_t layers_, kv_heads_, head_dim_;
  std::vector<compressed_stream> keys_, values_;
};

} // namespace kvlab
