// The quantized body of one stream: blocks of tokens encoded into bit-packed records
// (codes token-major, then each group's scale and zero) held by the recipe's storage.
// A block is one token for per-token groups (token, group(G)) and G tokens for per-channel
// groups (channel(G)), whose parameters are shared down each channel of the block.
// Per-channel blocks are stored as one record per token row of codes plus one record of
// parameters per block, so eviction can free single tokens: a row's codes stay valid
// under its block's parameters, and the parameters go when the block's last token does.
// A quantizer of whole groups (group_code: PolarQuant) writes each group's code, one after
// another, per token.
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
export module kvlab.cache:body;
import kvlab.core;
import kvlab.simd;
import :packing;

export namespace kvlab {

// Byte layout of one record: a block of `block_tokens` tokens, codes token-major, then
// each group's parameters (scale, then zero) in the stored precision (fp16, f32, or the
// quantizer's scale bytes).
struct record_layout {
  std::size_t head_dim = 0;
  std::size_t block_tokens = 1;
  std::size_t group_channels = 0; // per-token groups: channels per group; per-channel: 1
  unsigned bits = 0;
  unsigned params_per_group = 0;
  std::size_t param_bytes = 2;
  std::size_t group_code_bits = 0; // group_code formats (bits is 0): one group's code

  std::size_t groups() const noexcept { return head_dim / group_channels; }
  std::size_t row_code_bits() const noexcept { return group_code_bits ? groups() * group_code_bits : head_dim * bits; }
  std::size_t row_code_bytes() const noexcept { return (row_code_bits() + 7) / 8; }
  std::size_t code_bytes() const noexcept { return (block_tokens * row_code_bits() + 7) / 8; }
  std::size_t bytes() const noexcept { return code_bytes() + groups() * params_per_group * param_bytes; }
};

// A token of a batched append that could not be encoded: its index among the call's
// tokens, and why.
class row_error : public error {
public:
  row_error(std::size_t row, const std::string& why) : error(why), row_(row) {}
  std::size_t row() const noexcept { return row_; }

private:
  std::size_t row_;
};

class quantized_body {
public:
  quantized_body(any_quantizer quantizer, group_shape shape, std::size_t head_dim, param_precision precision,
                 const any_storage& storage)
      : quantizer_(std::move(quantizer)), codec_(group_codec_of(quantizer_, shape, head_dim)),
        layout_{.head_dim = head_dim,
                .block_tokens = shape.tokens,
                .group_channels = shape.channels,
                .bits = quantizer_.bits(),
                .params_per_group = quantizer_.params_per_group(),
                .param_bytes = param_bytes(quantizer_, precision),
                .group_code_bits = codec_ ? codec_->code_bits() : 0},
        precision_(precision), rule_(quantizer_.encoding()),
        thresholds_(rule_.thresholds.data(), static_cast<unsigned>(rule_.thresholds.size())) {
    if (shape.tokens == 0)
      throw error("per-tensor groups have no streaming form in the cache (their parameters would depend on tokens "
                  "that have not arrived); use them with kvlab codec");
    if (shape.tokens > 1 && (shape.channels != 1 || (head_dim * layout_.bits) % 8 != 0))
      throw error("groups spanning tokens must be one channel wide with byte-aligned token rows");
    if (shape.tokens > 1 && layout_.param_bytes == 1)
      throw error(quantizer_.name() + " keeps a scale byte per block of a token's values; per-channel groups are not "
                                      "supported (use group(G))");
    const bool rows = layout_.block_tokens > 1;
    store_ = storage.make_store(rows ? layout_.row_code_bytes() : layout_.bytes());
    if (rows && layout_.params_per_group > 0)
      params_store_ = storage.make_store(layout_.bytes() - layout_.code_bytes());
    codes_.resize(layout_.block_tokens * head_dim);
    record_.resize(layout_.bytes());
    scale_bounds_.assign(layout_.groups(), 0.0f);
    zero_bounds_.assign(layout_.groups(), 0.0f);
    scratch_.resize(std::max(layout_.block_tokens, head_dim));
    // Per-channel blocks are read one token row at a time with the parameters folded into
    // the query, so their kernel format is a parameterless row of codes.
    format_ = {.kind = element_kind_of(quantizer_),
               .record_bytes = rows ? layout_.row_code_bytes() : layout_.bytes(),
               .head_dim = head_dim,
               .group_channels = rows ? head_dim : shape.channels,
               .bits = layout_.bits,
               .params_per_group = rows ? 0u : layout_.params_per_group,
               .params_f32 = layout_.param_bytes == 4,
               .offset = static_cast<float>(rule_.offset),
               .levels = quantizer_.levels().data(),
               .scale_levels = layout_.param_bytes == 1 ? quantizer_.scale_levels().data() : nullptr,
               .decode_record = codec_ ? &decode_group_record : nullptr,
               .codec = codec_.get()};
  }

  const record_layout& layout() const noexcept { return layout_; }
  const any_quantizer& quantizer() const noexcept { return quantizer_; }
  std::size_t block_tokens() const noexcept { return layout_.block_tokens; }
  std::size_t tokens() const noexcept { return store_->size(); }
  // Room for `tokens` more tokens: appending them allocates nothing.
  void reserve(std::size_t tokens) {
    store_->reserve(tokens);
    if (params_store_) params_store_->reserve(tokens / layout_.block_tokens + 1);
  }
  // Codes, parameters, page padding and tables, and the live-token count of each
  // per-channel block once eviction has thinned one.
  std::size_t bytes() const noexcept {
    return store_->bytes_reserved() + (params_store_ ? params_store_->bytes_reserved() : 0) +
           block_sizes_.size() * sizeof(std::uint16_t);
  }
  // One record per token: its codes (and, for per-token groups, its parameters).
  const record_store& store() const noexcept { return *store_; }
  // How the kernels read a record (per-token bodies) or a row of codes (per-channel blocks).
  const kernels::record_format& kernel_format() const noexcept { return format_; }

  // Encodes and stores one block: block_tokens() rows of head_dim values (already rotated
  // for rotating quantizers; see rotate()).
  void append(std::span<const float> rows, const kernel_table& kernels) {
    if (rows.size() != layout_.block_tokens * layout_.head_dim)
      throw error("append: a block is " + std::to_string(layout_.block_tokens) + " x " +
                  std::to_string(layout_.head_dim) + " values, got " + std::to_string(rows.size()));
    if (layout_.block_tokens == 1) return append_tokens(rows, 1, kernels);
    encode(rows, kernels, record_);
    const std::size_t row_bytes = layout_.row_code_bytes();
    for (std::size_t j = 0; j < layout_.block_tokens; ++j)
      store_->append(std::span(record_).subspan(j * row_bytes, row_bytes));
    if (params_store_) params_store_->append(std::span(record_).subspan(layout_.code_bytes()));
    channel_blocks_.clear(); // the stores may have moved their records
    if (!block_sizes_.empty()) block_sizes_.push_back(static_cast<std::uint16_t>(layout_.block_tokens));
  }

  // Encodes and stores `count` tokens of per-token groups (count x head_dim rows, rotated as
  // for append), records encoded where storage keeps them, a run of them per kernel call. As
  // `count` appends: a token that cannot be encoded throws a row_error naming it, and the
  // tokens before it stay stored.
  void append_tokens(std::span<const float> rows, std::size_t count, const kernel_table& kernels) {
    const std::size_t head_dim = layout_.head_dim, record_bytes = format_.record_bytes;
    if (layout_.block_tokens != 1)
      throw error("append_tokens: blocks of " + std::to_string(layout_.block_tokens) +
                  " tokens are appended one block at a time");
    if (rows.size() != count * head_dim)
      throw error("append_tokens: " + std::to_string(count) + " tokens are " + std::to_string(count * head_dim) +
                  " values, got " + std::to_string(rows.size()));
    batch_start_ = store_->size();
    batch_scale_bounds_ = scale_bounds_, batch_zero_bounds_ = zero_bounds_;
    std::size_t stored = 0; // tokens encoded in place
    try {
      while (stored < count) {
        const std::span<std::uint8_t> run = store_->append_slots(count - stored);
        const std::size_t n = run.size() / record_bytes;
        const float* first = rows.data() + stored * head_dim;
        // One kernel call for the run; a row it refused goes through the generic path, which
        // encodes it or says why not, and so does the rest of the run.
        for (std::size_t done = encode_records(first, n, kernels, run.data()); done < n; ++done) {
          const auto drop_unfilled = [&] {
            for (std::size_t unfilled = done; unfilled < n; ++unfilled) store_->pop_back();
          };
          try {
            encode(std::span(first + done * head_dim, head_dim), kernels,
                   run.subspan(done * record_bytes, record_bytes));
          } catch (const error& e) {
            drop_unfilled();
            throw row_error(stored + done, e.what());
          } catch (...) {
            drop_unfilled();
            throw;
          }
        }
        stored += n;
      }
    } catch (...) { // a refused token, or storage out of memory: the tokens before it stay
      widen_bounds(batch_start_);
      throw;
    }
    widen_bounds(batch_start_);
  }

  // Removes the block appended last (its token was refused after all), as if it had never
  // been appended: storage, block sizes and the value grid's bounds.
  void pop_back_block() {
    if (layout_.block_tokens == 1) return pop_back_tokens(1);
    for (std::size_t j = 0; j < layout_.block_tokens; ++j) store_->pop_back();
    if (params_store_) params_store_->pop_back();
    channel_blocks_.clear();
    if (!block_sizes_.empty()) block_sizes_.pop_back();
  }

  // Removes the last `count` tokens of the last append_tokens() call (its key or value was
  // refused after all), as if they had never been appended: storage and the value grid's
  // bounds.
  void pop_back_tokens(std::size_t count) {
    if (layout_.block_tokens != 1 || count > tokens() - std::min(tokens(), batch_start_))
      throw error("pop_back_tokens: " + std::to_string(count) + " tokens were not appended by the last call");
    for (std::size_t t = 0; t < count; ++t) store_->pop_back();
    scale_bounds_ = batch_scale_bounds_, zero_bounds_ = batch_zero_bounds_;
    widen_bounds(batch_start_);
  }

  // Removes body tokens (ascending, unique indices); storage compacts and releases what
  // it no longer needs. A per-channel block keeps its parameters while any of its tokens
  // remains; nothing is re-quantized.
  void erase(std::span<const std::size_t> sorted_tokens) {
    if (sorted_tokens.empty()) return;
    if (sorted_tokens.back() >= tokens())
      throw error("erase: token " + std::to_string(sorted_tokens.back()) + " is beyond the body's " +
                  std::to_string(tokens()) + " tokens");
    store_->erase(sorted_tokens);
    if (layout_.block_tokens == 1) return;
    channel_blocks_.clear();
    if (block_sizes_.empty())
      block_sizes_.assign(blocks_before_erase(sorted_tokens.size()), static_cast<std::uint16_t>(layout_.block_tokens));
    std::vector<std::size_t> emptied;
    std::size_t first = 0, next = 0;
    for (std::size_t b = 0; b < block_sizes_.size(); ++b) {
      const std::size_t end = first + block_sizes_[b];
      std::size_t removed = 0;
      for (; next < sorted_tokens.size() && sorted_tokens[next] < end; ++next) ++removed;
      first = end;
      block_sizes_[b] = static_cast<std::uint16_t>(block_sizes_[b] - removed);
      if (block_sizes_[b] == 0) emptied.push_back(b);
    }
    if (params_store_) params_store_->erase(emptied);
    std::erase(block_sizes_, std::uint16_t{0});
    block_sizes_.shrink_to_fit();
  }

  // The record of one block, without storing it (`record` has layout().bytes() bytes).
  void encode(std::span<const float> rows, const kernel_table& kernels, std::span<std::uint8_t> record) {
    if (layout_.block_tokens > 1) return encode_channels(rows, kernels, record);
    if (codec_) return encode_groups(rows, record);
    if (encode_records(rows.data(), 1, kernels, record.data()) == 1) return;
    // The generic path: a format without a fused encoder, or a token the fused one refused
    // (this loop reports why).
    const std::size_t group_channels = layout_.group_channels;
    const bool by_kernel = quantizer_.format() == element_format::codebook && rule_.kind != encoding_kind::per_element;
    for (std::size_t g = 0; g < layout_.groups(); ++g) {
      const auto values = rows.subspan(g * group_channels, group_channels);
      const group_params p = stored_params(quantizer_, values, precision_);
      write_params(record, g, p);
      const std::size_t first = g * group_channels;
      if (!by_kernel) {
        quantizer_.encode(values, p, std::span(codes_).subspan(first, group_channels));
      } else if (rule_.kind == encoding_kind::float8) {
        kernels.encode_fp8(values.data(), group_channels, p.scale, *rule_.fp8, record.data() + first);
      } else if (rule_.kind == encoding_kind::uniform) {
        kernels.encode_uniform(values.data(), group_channels, p.scale, p.zero, rule_.offset, rule_.max_code,
                               layout_.bits, record.data(), first);
      } else {
        kernels.encode_nearest(values.data(), group_channels, p.scale, p.zero, rule_.thresholds.data(),
                               static_cast<unsigned>(rule_.thresholds.size()), layout_.bits, record.data(), first);
      }
    }
    if (!by_kernel)
      pack_codes(std::span(codes_).first(layout_.head_dim), layout_.bits, record.first(layout_.code_bytes()));
  }

  // For `heads` queries (heads x head_dim, the query heads of one GQA group):
  // scores[h * stride + t] = query_h . decoded(t) for every body token t. Tokens are visited
  // in runs of at most 64 KiB, each record decoded once for all heads, so the codes stream
  // from memory once per group, not once per query head.
  void dot_all(const kernel_table& kernels, std::span<const float> queries, std::size_t heads, float* scores,
               std::size_t stride) const {
    if (layout_.block_tokens == 1) {
      for_each_block(heads, [&](std::size_t first, std::span<const std::uint8_t> block, std::size_t count) {
        kernels.dot_records(format_, queries.data(), heads, block.data(), count, scores + first, stride);
      });
      return;
    }
    // Per-channel blocks: q . (s * level(c) + z) = (q * s) . level(c) + q . z, so each query
    // is scaled once per block and every row of the block is a plain dot with codes; one
    // kernel call takes every block (a call per 32-token block cost KIVI-2's keys about a
    // fifth of their time in setup, in L2).
    if (!params_store_) {
      for_each_row_run(0, tokens(), [&](std::size_t first, std::span<const std::uint8_t> run, std::size_t n) {
        kernels.dot_records(format_, queries.data(), heads, run.data(), n, scores + first, stride);
      });
      return;
    }
    // The list of runs is built once per change of the body (append and erase clear it),
    // not once per call: building it per call is 1.5 % of a KIVI-2 decode step's profile (at
    // four code placements, median 4.62 ns per token against 4.77).
    if (channel_blocks_.empty())
      for_each_channel_block([&](std::size_t block, std::size_t first, std::size_t count) {
        const std::uint8_t* params = params_store_->record(block).data();
        for_each_row_run(first, count, [&](std::size_t offset, std::span<const std::uint8_t> run, std::size_t n) {
          channel_blocks_.push_back({params, run.data(), first + offset, n});
        });
      });
    kernels.dot_channel_blocks(format_, channel_blocks_.data(), channel_blocks_.size(), layout_.params_per_group,
                               layout_.param_bytes == 4, queries.data(), heads, scores, stride);
  }

  // For `heads` weight rows (weights[h * stride + t]): acc_h += sum over body tokens t of
  // weights_h[t] * decoded(t), acc being heads x head_dim; blocked like dot_all.
  void axpy_all(const kernel_table& kernels, const float* weights, std::size_t stride, std::size_t heads,
                std::span<float> acc) const {
    if (layout_.block_tokens == 1) {
      if (heads == 1 && kernels.axpy_records_fixed && kernels::fixed_point_values(format_) &&
          axpy_fixed(kernels, weights, acc))
        return;
      for_each_block(heads, [&](std::size_t first, std::span<const std::uint8_t> block, std::size_t count) {
        kernels.axpy_records(format_, weights + first, stride, heads, block.data(), count, acc.data());
      });
      return;
    }
    // Per-channel blocks: sum_j w_j (s_c level(c_jc) + z_c) = s_c sum_j w_j level(c_jc) + z_c sum_j w_j.
    const std::size_t head_dim = layout_.head_dim;
    scratch_.resize(heads * head_dim);
    for_each_channel_block([&](std::size_t block, std::size_t first, std::size_t count) {
      read_block_terms(block, kernels);
      std::fill_n(scratch_.begin(), heads * head_dim, 0.0f);
      for_each_row_run(first, count, [&](std::size_t offset, std::span<const std::uint8_t> run, std::size_t n) {
        kernels.axpy_records(format_, weights + first + offset, stride, heads, run.data(), n, scratch_.data());
      });
      for (std::size_t h = 0; h < heads; ++h) {
        const float* w = weights + h * stride + first;
        float weight_sum = 0.0f;
        for (std::size_t j = 0; j < count; ++j) weight_sum += w[j];
        for (std::size_t c = 0; c < head_dim; ++c)
          acc[h * head_dim + c] += block_scales_[c] * scratch_[h * head_dim + c] + block_zeros_[c] * weight_sum;
      }
    });
  }

  // Reference decoder of body tokens [first, first + count) into out (count x head_dim): the
  // quantizer's own decode, no kernels, in the quantizer's (rotated) space. Each group's
  // parameters (a per-channel block's, once per block) are read once and the quantizer
  // decodes a group per call: eviction policies that read keys decode every held key per
  // step (knorm's eval 4.5 s with a call and a parameter read per element).
  void decode(std::size_t first, std::size_t count, std::span<float> out) const {
    const std::size_t n = layout_.head_dim;
    if (codec_) {
      for (std::size_t t = 0; t < count; ++t)
        decode_group_record(codec_.get(), store_->record(first + t).data(), n, out.data() + t * n);
      return;
    }
    if (quantizer_.format() != element_format::codebook) {
      for (std::size_t t = 0; t < count; ++t) decode_raw(store_->record(first + t), out.subspan(t * n, n));
      return;
    }
    if (layout_.block_tokens > 1) return decode_channel_blocks(first, count, out);
    const std::size_t group_channels = layout_.group_channels;
    decoded_codes_.resize(n);
    for (std::size_t t = 0; t < count; ++t) {
      const auto record = store_->record(first + t);
      for (std::size_t c = 0; c < n; ++c) decoded_codes_[c] = unpack_code(record, c, layout_.bits);
      for (std::size_t g = 0; g < layout_.groups(); ++g)
        quantizer_.decode(std::span(decoded_codes_).subspan(g * group_channels, group_channels), read_params(record, g),
                          out.subspan(t * n + g * group_channels, group_channels));
    }
  }
  void decode(std::size_t token, std::span<float> out) const { decode(token, 1, out); }

  // Decodes one body token through the decode kernel (per-token codebook groups) or the reference.
  void decode(std::size_t token, std::span<float> out, const kernel_table& kernels) const {
    if (quantizer_.format() != element_format::codebook || layout_.block_tokens > 1) return decode(token, out);
    const auto record = store_->record(token);
    const std::size_t group_channels = layout_.group_channels;
    for (std::size_t g = 0; g < layout_.groups(); ++g) {
      const group_params p = read_params(record, g);
      kernels.decode_codes(record.data(), g * group_channels, group_channels, layout_.bits, quantizer_.levels().data(),
                           p.scale, p.zero, out.data() + g * group_channels);
    }
  }

private:
  // Per-token records of `n` rows in one kernel call where the quantizer has a fused
  // encoder: how many leading records it wrote (0 without one). A standard uniform fit,
  // fp8, nf4 and lloyd<b> fit each group and encode it; raw floats (f32, f16, bf16) have no
  // parameters, so one conversion takes every row (0 when a value is not finite: the
  // caller finds which).
  std::size_t encode_records(const float* rows, std::size_t n, const kernel_table& kernels, std::uint8_t* records) {
    if (codec_) return 0;
    if (rule_.fit) return kernels.encode_uniform_records(format_, *rule_.fit, rule_.max_code, rows, n, records);
    if (rule_.kind == encoding_kind::float8) return kernels.encode_fp8_records(format_, *rule_.fp8, rows, n, records);
    if (rule_.kind == encoding_kind::nearest && rule_.scale_fit)
      return kernels.encode_nearest_records(format_, *rule_.scale_fit, thresholds_, rows, n, records);
    if (quantizer_.format() != element_format::codebook)
      return kernels.encode_raw(format_.kind, rows, n * layout_.head_dim, records) ? n : 0;
    return 0;
  }

  // The value grid's bounds (see axpy_fixed) widened by the records from `first` on. Their
  // parameters are fp16; a scale is never negative and |zero| is the zero without its sign
  // bit, so the largest of each is its largest bit pattern: compared as integers record by
  // record, converted to float once (a conversion per parameter was a third of an int4
  // append).
  void widen_bounds(std::size_t first) {
    if (!kernels::fixed_point_values(format_) || first >= store_->size()) return;
    const std::size_t params = layout_.groups() * layout_.params_per_group;
    widest_halves_.assign(params, 0);
    for (std::size_t r = first; r < store_->size();) {
      const auto run = store_->run(r);
      const std::size_t n = run.size() / format_.record_bytes;
      // Parameter by parameter down the run, the widest so far in a register. Record by
      // record, each parameter's maximum would be stored and reloaded per record, a chain
      // through memory: 8 % of an int4 append's samples against 4 % this way.
      const std::uint8_t* params_of_run = run.data() + layout_.code_bytes();
      for (std::size_t p = 0; p < params; ++p) {
        std::uint16_t widest = widest_halves_[p];
        for (std::size_t i = 0; i < n; ++i) {
          std::uint16_t half;
          std::memcpy(&half, params_of_run + i * format_.record_bytes + 2 * p, 2);
          widest = std::max(widest, static_cast<std::uint16_t>(half & 0x7fffu));
        }
        widest_halves_[p] = widest;
      }
      r += n;
    }
    const std::size_t per_group = layout_.params_per_group;
    for (std::size_t g = 0; g < layout_.groups(); ++g) {
      scale_bounds_[g] = std::max(scale_bounds_[g], half_bits_to_float(widest_halves_[g * per_group]));
      if (per_group == 2) zero_bounds_[g] = std::max(zero_bounds_[g], half_bits_to_float(widest_halves_[2 * g + 1]));
    }
  }

  // One head's values of 2- and 4-bit affine codes in 32-bit fixed point (where the kernel
  // table has axpy_records_fixed): each token's weight times its group's scale is rounded
  // once to an integer F on a grid, per group, that keeps the largest weight times the
  // largest scale the body has held below 2^32 (and weight times zero to a signed Z on a
  // grid that keeps it below 2^30); sum of F * code, sum of F and sum of Z are exact
  // integer sums, taken to float once. So results do not depend on how the tokens are
  // split into runs (pages, eviction), and each F keeps 24 or more bits when w s is within
  // 2^8 of that bound. False, with nothing done, for weights the grid cannot hold
  // (negative, infinite, NaN: the float loop gives what IEEE arithmetic gives).
  bool axpy_fixed(const kernel_table& kernels, const float* weights, std::span<float> acc) const {
    const std::size_t tokens = this->tokens(), groups = layout_.groups(), head_dim = layout_.head_dim;
    const std::size_t per_group = format_.params_per_group;
    float lowest, highest;
    kernels.min_max(weights, tokens, &lowest, &highest);
    // min_max passes over NaN; a NaN or an overflow makes the sum of squares not finite
    if (!(lowest >= 0.0f) ||
        !std::isfinite(kernels.dot_f32(weights, reinterpret_cast<const std::uint8_t*>(weights), tokens)))
      return false;
    // a power of two that puts `top` in [2^(bits - 1), 2^bits)
    const auto grid_below = [](double top, int bits) {
      return top > 0.0 ? std::ldexp(1.0f, bits - 1 - std::ilogb(top)) : 1.0f;
    };
    fixed_grid_.resize(groups * per_group);
    for (std::size_t g = 0; g < groups; ++g) {
      fixed_grid_[g * per_group] = grid_below(static_cast<double>(highest) * scale_bounds_[g], 32);
      if (per_group == 2)
        fixed_grid_[g * per_group + 1] = grid_below(static_cast<double>(highest) * zero_bounds_[g], 30);
    }
    if (!std::ranges::all_of(fixed_grid_, [](float grid) { return std::isfinite(grid); })) return false;
    fixed_sums_.assign(head_dim, 0);
    fixed_weight_sums_.assign(groups, 0);
    fixed_zero_sums_.assign(groups, 0);
    for_each_block(1, [&](std::size_t first, std::span<const std::uint8_t> block, std::size_t count) {
      kernels.axpy_records_fixed(format_, weights + first, tokens, 1, fixed_grid_.data(), block.data(), count,
                                 fixed_sums_.data(), fixed_weight_sums_.data(), fixed_zero_sums_.data());
    });
    for (std::size_t c = 0; c < head_dim; ++c) {
      const std::size_t g = c / layout_.group_channels;
      const std::int64_t level_sum =
          fixed_sums_[c] - std::int64_t{rule_.offset} * static_cast<std::int64_t>(fixed_weight_sums_[g]);
      double sum = static_cast<double>(level_sum) / fixed_grid_[g * per_group];
      if (per_group == 2) sum += static_cast<double>(fixed_zero_sums_[g]) / fixed_grid_[g * per_group + 1];
      acc[c] += static_cast<float>(sum);
    }
    return true;
  }

  static kernels::element_kind element_kind_of(const any_quantizer& q) {
    switch (q.format()) {
    case element_format::f32: return kernels::element_kind::f32;
    case element_format::f16: return kernels::element_kind::f16;
    case element_format::bf16: return kernels::element_kind::bf16;
    case element_format::group_code: return kernels::element_kind::group_codes;
    case element_format::codebook: break;
    }
    return q.encoding().kind == encoding_kind::uniform ? kernels::element_kind::affine_codes
                                                       : kernels::element_kind::table_codes;
  }

  // Visits the per-token records of a kernel call for `heads` query heads: one call per run
  // contiguous in storage, so a call's setup is spread over the run and its prefetching
  // never restarts (32k context from DRAM: KIVI-2's values 2.02-2.07 ns per token against
  // 2.13-2.22 with calls of at most 64 KiB; fp8_e4m3@token attention at GQA 4 19.1-19.3
  // against 20.4-21.5). Groups of more than kernels::heads_per_pass heads take one pass over a
  // call's records per heads_per_pass heads, so their calls stay within 64 KiB, which the
  // next pass re-reads from L2.
  template <class Visit>
  void for_each_block(std::size_t heads, Visit&& visit) const {
    constexpr std::size_t block_bytes = 64 << 10;
    const std::size_t block_records =
        heads > kernels::heads_per_pass ? std::max<std::size_t>(1, block_bytes / format_.record_bytes) : store_->size();
    for (std::size_t b = 0; b < store_->size();) {
      const auto run = store_->run(b);
      const std::size_t count = std::min(block_records, run.size() / format_.record_bytes);
      visit(b, run.first(count * format_.record_bytes), count);
      b += count;
    }
  }

  std::size_t block_size(std::size_t block) const noexcept {
    return block_sizes_.empty() ? layout_.block_tokens : block_sizes_[block];
  }
  // Per-channel blocks before an erase of `erased` tokens: all still full.
  std::size_t blocks_before_erase(std::size_t erased) const noexcept {
    return (tokens() + erased) / layout_.block_tokens;
  }

  // Visits each per-channel block as (block, first token row, live rows).
  template <class Visit>
  void for_each_channel_block(Visit&& visit) const {
    const std::size_t blocks = block_sizes_.empty() ? tokens() / layout_.block_tokens : block_sizes_.size();
    for (std::size_t b = 0, first = 0; b < blocks; first += block_size(b), ++b) visit(b, first, block_size(b));
  }
  // Visits token rows [first, first + count) as runs contiguous in storage: (offset from
  // first, run bytes, rows in the run).
  template <class Visit>
  void for_each_row_run(std::size_t first, std::size_t count, Visit&& visit) const {
    for (std::size_t done = 0; done < count;) {
      const auto run = store_->run(first + done);
      const std::size_t n = std::min(count - done, run.size() / format_.record_bytes);
      visit(done, run.first(n * format_.record_bytes), n);
      done += n;
    }
  }

  // Scales and zeros of per-channel block `block` for the values loop (1 and 0 for
  // parameterless formats); fp16 ones converted by the kernels, 0 + 1 * x being exact.
  void read_block_terms(std::size_t block, const kernel_table& kernels) const {
    const std::size_t head_dim = layout_.head_dim, params = layout_.params_per_group, n = head_dim * params;
    block_scales_.assign(head_dim, 1.0f);
    block_zeros_.assign(head_dim, 0.0f);
    if (!params_store_) return;
    const auto record = params_store_->record(block);
    param_values_.assign(n, 0.0f);
    if (layout_.param_bytes == 4)
      std::memcpy(param_values_.data(), record.data(), n * sizeof(float));
    else
      kernels.axpy_f16(1.0f, record.data(), n, param_values_.data());
    for (std::size_t c = 0; c < head_dim; ++c) {
      block_scales_[c] = param_values_[c * params];
      if (params > 1) block_zeros_[c] = param_values_[c * params + 1];
    }
  }

  // Raw float rows are their values: converted directly, not through the quantizer's decode.
  void decode_raw(std::span<const std::uint8_t> record, std::span<float> out) const {
    const element_format format = quantizer_.format();
    if (format == element_format::f32) {
      std::memcpy(out.data(), record.data(), 4 * layout_.head_dim);
      return;
    }
    for (std::size_t c = 0; c < layout_.head_dim; ++c) {
      std::uint16_t bits;
      std::memcpy(&bits, record.data() + 2 * c, 2);
      out[c] = format == element_format::f16 ? half_bits_to_float(bits) : bf16_bits_to_float(bits);
    }
  }

  // decode() for per-channel blocks: block by block, each channel's rows in one call.
  void decode_channel_blocks(std::size_t first, std::size_t count, std::span<float> out) const {
    const std::size_t n = layout_.head_dim, end = first + count;
    std::size_t block = 0, block_first = 0;
    while (count > 0 && block_first + block_size(block) <= first) block_first += block_size(block++);
    std::vector<std::uint32_t> rows, column;
    std::vector<float> decoded;
    for (std::size_t t = first; t < end; block_first += block_size(block++)) {
      read_block_params(block);
      const std::size_t stop = std::min(end, block_first + block_size(block)), count_here = stop - t;
      rows.resize(count_here * n);
      column.resize(count_here);
      decoded.resize(count_here);
      for (std::size_t j = 0; j < count_here; ++j) {
        const auto record = store_->record(t + j);
        for (std::size_t c = 0; c < n; ++c) rows[j * n + c] = unpack_code(record, c, layout_.bits);
      }
      for (std::size_t c = 0; c < n; ++c) {
        for (std::size_t j = 0; j < count_here; ++j) column[j] = rows[j * n + c];
        quantizer_.decode(column, block_params_[c], decoded);
        for (std::size_t j = 0; j < count_here; ++j) out[(t - first + j) * n + c] = decoded[j];
      }
      t = stop;
    }
  }

  // Parameters of per-channel block `block` (scale 1, zero 0 for parameterless formats).
  void read_block_params(std::size_t block) const {
    block_params_.assign(layout_.head_dim, group_params{});
    if (!params_store_) return;
    const auto params = params_store_->record(block);
    for (std::size_t c = 0; c < layout_.head_dim; ++c) block_params_[c] = read_params_at(params, c);
  }

  // The codec of a group_code quantizer's groups (null for element codecs): groups of one
  // token, in a record the reference kernels decode on the stack.
  static std::shared_ptr<const group_codec> group_codec_of(const any_quantizer& q, group_shape shape,
                                                           std::size_t head_dim) {
    // Tensor groups (tokens 0) are refused by the constructor, for every quantizer.
    if (q.format() != element_format::group_code || shape.tokens == 0) return nullptr;
    if (shape.tokens > 1)
      throw error(q.name() +
                  " codes groups of one token's channels; groups spanning tokens (channel(G)) cannot hold it");
    if (head_dim > kernels::max_group_coded_head_dim)
      throw error(q.name() + ": head_dim " + std::to_string(head_dim) + " is beyond the " +
                  std::to_string(kernels::max_group_coded_head_dim) + " channels its records may hold");
    auto codec = q.group_codec(shape.channels);
    if (!codec) throw error(q.name() + " says it codes whole groups but gives no group_codec");
    return codec;
  }
  // A token's groups coded one after another (the record's code bytes zeroed first, so
  // padding bits are 0 and equal tokens give equal records).
  void encode_groups(std::span<const float> row, std::span<std::uint8_t> record) const {
    const std::size_t channels = layout_.group_channels;
    const auto codes = record.first(layout_.code_bytes());
    std::memset(codes.data(), 0, codes.size());
    for (std::size_t g = 0; g < layout_.groups(); ++g)
      codec_->encode(row.subspan(g * channels, channels), codes, g * layout_.group_code_bits);
  }
  // record_format::decode_record for group_code records.
  static void decode_group_record(const void* codec, const std::uint8_t* record, std::size_t head_dim,
                                  float* out) noexcept {
    const auto& groups = *static_cast<const group_codec*>(codec);
    const std::size_t channels = groups.channels(), count = head_dim / channels;
    const std::span<const std::uint8_t> bytes(record, (count * groups.code_bits() + 7) / 8);
    for (std::size_t g = 0; g < count; ++g)
      groups.decode(bytes, g * groups.code_bits(), std::span(out + g * channels, channels));
  }

  // Per-channel block: each channel's G values form a group. A standard uniform fit takes
  // one kernel call for the block (false only when a value is not finite or a parameter
  // overflows fp16); other quantizers, and those errors, the quantizer's reference functions.
  void encode_channels(std::span<const float> rows, const kernel_table& kernels, std::span<std::uint8_t> record) {
    const std::size_t tokens = layout_.block_tokens, head_dim = layout_.head_dim;
    if (rule_.fit) {
      kernels::record_format block_format = format_;
      block_format.group_channels = 1;
      block_format.params_per_group = layout_.params_per_group;
      if (kernels.encode_uniform_channels(block_format, *rule_.fit, rule_.max_code, tokens, rows.data(), record.data()))
        return;
    }
    std::vector<std::uint32_t> column_codes(tokens);
    for (std::size_t c = 0; c < head_dim; ++c) {
      for (std::size_t j = 0; j < tokens; ++j) scratch_[j] = rows[j * head_dim + c];
      const auto column = std::span<const float>(scratch_).first(tokens);
      const group_params p = stored_params(quantizer_, column, precision_);
      write_params(record, c, p);
      quantizer_.encode(column, p, column_codes);
      for (std::size_t j = 0; j < tokens; ++j) codes_[j * head_dim + c] = column_codes[j];
    }
    pack_codes(codes_, layout_.bits, record.first(layout_.code_bytes()));
  }

  // Parameters follow a record's codes; per-channel parameter records hold them alone.
  std::size_t param_offset(std::size_t group, unsigned which) const noexcept {
    return (group * layout_.params_per_group + which) * layout_.param_bytes;
  }
  void write_params(std::span<std::uint8_t> record, std::size_t group, group_params p) const {
    const float values[2] = {p.scale, p.zero};
    for (unsigned i = 0; i < layout_.params_per_group; ++i) {
      std::uint8_t* at = record.data() + layout_.code_bytes() + param_offset(group, i);
      if (layout_.param_bytes == 1) {
        *at = quantizer_.scale_code(values[i]);
      } else if (layout_.param_bytes == 4) {
        std::memcpy(at, &values[i], 4);
      } else {
        const std::uint16_t half = float_to_half_bits(values[i]);
        std::memcpy(at, &half, 2);
      }
    }
  }
  // Parameters of `group` in a per-token record.
  group_params read_params(std::span<const std::uint8_t> record, std::size_t group) const {
    return read_params_at(record.subspan(layout_.code_bytes()), group);
  }
  // Parameters of `group` in a run of parameters.
  group_params read_params_at(std::span<const std::uint8_t> params, std::size_t group) const {
    float values[2] = {1.0f, 0.0f};
    for (unsigned i = 0; i < layout_.params_per_group; ++i) {
      const std::uint8_t* at = params.data() + param_offset(group, i);
      if (layout_.param_bytes == 1) {
        values[i] = format_.scale_levels[*at];
      } else if (layout_.param_bytes == 4) {
        std::memcpy(&values[i], at, 4);
      } else {
        std::uint16_t half;
        std::memcpy(&half, at, 2);
        values[i] = half_bits_to_float(half);
      }
    }
    return {values[0], values[1]};
  }

  any_quantizer quantizer_;
  std::shared_ptr<const group_codec> codec_; // group_code quantizers' codec of one group
  record_layout layout_;
  param_precision precision_;
  encoding_rule rule_;                     // the quantizer's, asked once
  kernels::nearest_thresholds thresholds_; // rule_'s thresholds (sorted codebooks) with their bucket index
  kernels::record_format format_;
  std::unique_ptr<record_store> store_;        // one record per token
  std::unique_ptr<record_store> params_store_; // per-channel blocks: one parameter record per block
  std::vector<std::uint16_t> block_sizes_;     // live tokens per per-channel block; empty while all are full
  std::vector<std::uint32_t> codes_;           // scratch: one block's codes before packing
  std::vector<std::uint8_t> record_;           // scratch: one per-channel block before its rows are stored
  std::vector<float> scale_bounds_;            // per group: the largest scale appended (fixed-point values' grid)
  std::vector<float> zero_bounds_;             // per group: the largest |zero| appended (the same)
  std::size_t batch_start_ = 0;                // tokens before the last append_tokens() call
  std::vector<float> batch_scale_bounds_;      // scale_bounds_ before that call
  std::vector<float> batch_zero_bounds_;       // zero_bounds_ before that call
  std::vector<std::uint16_t> widest_halves_;   // scratch of widen_bounds: per parameter
  // Scratch of the const attention calls: a stream is read by one thread at a time.
  mutable std::vector<float> scratch_;               // per head: one block's level sums; or a column being encoded
  mutable std::vector<std::uint32_t> decoded_codes_; // scratch: one token's codes in the reference decoder
  mutable std::vector<kernels::channel_block> channel_blocks_; // per-channel keys: the runs of every block, or empty
  mutable std::vector<group_params> block_params_;             // one per-channel block's parameters (reference decode)
  mutable std::vector<float> block_scales_, block_zeros_, param_values_; // the same for attention
  mutable std::vector<float> fixed_grid_;                                // axpy_fixed: per group and parameter
  mutable std::vector<std::int64_t> fixed_sums_;                         // axpy_fixed: per channel
  mutable std::vector<std::uint64_t> fixed_weight_sums_;                 // axpy_fixed: per group
  mutable std::vector<std::int64_t> fixed_zero_sums_;                    // axpy_fixed: per group
};

} // namespace kvlab
