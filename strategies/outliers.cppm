// outliers(Q,P): KVQuant's dense-and-sparse quantization of one token's groups. In each group
// of G channels the ceil(P% of G) values of largest magnitude are kept exactly (fp16) in a
// sparse part, as (channel index, value) pairs; the rest, the dense part, is coded by Q with
// the outliers clamped into the range of the other values, so they widen neither Q's scale
// nor its zero point. A group decodes as Q's decoding with the outliers written back.
// Every group keeps the same number of outliers (the paper's per-vector outliers), so a
// group's code has a fixed size and no row pointers are needed. A group's code is Q's
// parameters (16 bits each, fp16; 8 bits where Q stores scale bytes), then Q's codes (or
// Q's own code of the whole group, for quantizers of whole groups such as polar), then the
// outliers in ascending channel order, each a ceil(log2 G)-bit index and a 16-bit value.
// Ties in magnitude go to the lower channel. Q's parameters are fp16 whatever the recipe's
// scale= says, and Q's codes come from its own group encoder where it has one (ggml's
// formats), under rht(...) and residual(...) too. Q may not rotate (write rht(outliers(Q,P))
// to pick outliers after the rotation), sketch or hold a residual.
// Paper: KVQuant, arXiv 2401.18079, sec. 3.4 (per-vector dense-and-sparse quantization).
module;
#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <numeric>
#include <span>
#include <string>
#include <utility>
#include <vector>
export module kvlab.strategies.outliers;
import kvlab.core;

export namespace kvlab::strategies::outliers {

class dense_sparse_codec final : public kvlab::group_codec {
public:
  static constexpr unsigned value_bits = 16;

  dense_sparse_codec(any_quantizer dense, std::size_t channels, std::size_t kept, std::string name)
      : dense_(std::move(dense)), channels_(channels), kept_(kept),
        index_bits_(static_cast<unsigned>(std::bit_width(channels - 1))), name_(std::move(name)) {
    if (dense_.format() == element_format::group_code) {
      dense_codec_ = dense_.group_codec(channels);
      dense_bits_ = dense_codec_->code_bits();
    } else {
      param_bits_ = dense_.scale_levels().empty() ? 16 : 8;
      dense_bits_ = dense_.params_per_group() * param_bits_ + channels * dense_.bits();
    }
  }
  std::size_t channels() const override { return channels_; }
  std::size_t code_bits() const override { return dense_bits_ + kept_ * (index_bits_ + value_bits); }
  std::size_t outliers_per_group() const noexcept { return kept_; }

  void encode(std::span<const float> group, std::span<std::uint8_t> record, std::size_t bit_offset) const override {
    for (const float x : group)
      if (!std::isfinite(x)) throw error(name_ + ": value " + format_number(x) + " is not finite");
    const std::vector<std::size_t> sparse = largest_magnitudes(group);
    std::vector<float> dense(group.begin(), group.end());
    clamp_into_the_rest(dense, sparse);
    encode_dense(dense, record, bit_offset);
    std::size_t at = bit_offset + dense_bits_;
    for (const std::size_t channel : sparse) {
      const float value = round_to_half(group[channel]);
      if (!std::isfinite(value))
        throw error(name_ + ": outlier " + format_number(group[channel]) +
                    " is beyond the fp16 range (65504) of its stored value; scale the data down");
      write_bits(record, at, index_bits_, static_cast<std::uint32_t>(channel));
      write_bits(record, at + index_bits_, value_bits, float_to_half_bits(value));
      at += index_bits_ + value_bits;
    }
  }

  void decode(std::span<const std::uint8_t> record, std::size_t bit_offset,
              std::span<float> group) const noexcept override {
    if (dense_codec_) {
      dense_codec_->decode(record, bit_offset, group);
    } else { // Q's codes a chunk at a time, one decode call per chunk
      std::size_t at = bit_offset;
      const group_params p = read_params(record, at);
      const unsigned bits = dense_.bits();
      std::array<std::uint32_t, 256> codes;
      for (std::size_t first = 0; first < channels_; first += codes.size()) {
        const std::size_t count = std::min(codes.size(), channels_ - first);
        for (std::size_t c = 0; c < count; ++c, at += bits) codes[c] = read_bits(record, at, bits);
        dense_.decode(std::span(codes).first(count), p, group.subspan(first, count));
      }
    }
    for (std::size_t i = 0, at = bit_offset + dense_bits_; i < kept_; ++i, at += index_bits_ + value_bits) {
      const std::size_t channel = read_bits(record, at, index_bits_);
      group[std::min(channel, channels_ - 1)] =
          half_bits_to_float(static_cast<std::uint16_t>(read_bits(record, at + index_bits_, value_bits)));
    }
  }

private:
  // Channels of the kept_ largest magnitudes, ascending.
  std::vector<std::size_t> largest_magnitudes(std::span<const float> group) const {
    std::vector<std::size_t> order(group.size());
    std::iota(order.begin(), order.end(), std::size_t{0});
    std::nth_element(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(kept_), order.end(),
                     [&](std::size_t a, std::size_t b) {
                       const float ma = std::fabs(group[a]), mb = std::fabs(group[b]);
                       return ma > mb || (ma == mb && a < b);
                     });
    order.resize(kept_);
    std::sort(order.begin(), order.end());
    return order;
  }

  // The outliers' places take the nearest value of the range of the other channels.
  static void clamp_into_the_rest(std::span<float> dense, std::span<const std::size_t> sparse) {
    float lowest = INFINITY, highest = -INFINITY;
    for (std::size_t c = 0, s = 0; c < dense.size(); ++c) {
      if (s < sparse.size() && sparse[s] == c) {
        ++s;
        continue;
      }
      lowest = std::min(lowest, dense[c]), highest = std::max(highest, dense[c]);
    }
    for (const std::size_t c : sparse) dense[c] = std::clamp(dense[c], lowest, highest);
  }

  void encode_dense(std::span<const float> dense, std::span<std::uint8_t> record, std::size_t at) const {
    if (dense_codec_) return dense_codec_->encode(dense, record, at);
    const group_params p = fp16_params(dense);
    if (dense_.params_per_group() > 0) {
      const std::uint32_t scale = param_bits_ == 8 ? dense_.scale_code(p.scale) : float_to_half_bits(p.scale);
      write_bits(record, at, param_bits_, scale);
      at += param_bits_;
    }
    if (dense_.params_per_group() > 1) {
      write_bits(record, at, param_bits_, float_to_half_bits(p.zero));
      at += param_bits_;
    }
    std::vector<std::uint32_t> codes(dense.size());
    dense_.encode(dense, p, codes);
    for (const std::uint32_t code : codes) {
      write_bits(record, at, dense_.bits(), code);
      at += dense_.bits();
    }
  }

  // Q's stored parameters, in fp16 whatever scale= says: past fp16's range is an error
  // under this quantizer's name, without stored_params' advice to use scale=f32.
  group_params fp16_params(std::span<const float> dense) const {
    try {
      return stored_params(dense_, dense, param_precision::f16);
    } catch (const error& e) {
      std::string message = e.what();
      if (const auto advice = message.find("; use scale=f32"); advice != std::string::npos)
        message = message.substr(0, advice) + " (outliers(Q,P) stores Q's parameters in fp16); scale the data down";
      throw error(name_ + ": " + message);
    }
  }

  group_params read_params(std::span<const std::uint8_t> record, std::size_t& at) const noexcept {
    group_params p;
    if (dense_.params_per_group() > 0) {
      const std::uint32_t scale = read_bits(record, at, param_bits_);
      p.scale = param_bits_ == 8 ? dense_.scale_levels()[scale] : half_bits_to_float(static_cast<std::uint16_t>(scale));
      at += param_bits_;
    }
    if (dense_.params_per_group() > 1) {
      p.zero = half_bits_to_float(static_cast<std::uint16_t>(read_bits(record, at, param_bits_)));
      at += param_bits_;
    }
    return p;
  }

  any_quantizer dense_;
  std::shared_ptr<const kvlab::group_codec> dense_codec_; // Q's code of whole groups, if it has one
  std::size_t channels_, kept_;
  unsigned index_bits_, param_bits_ = 0;
  std::size_t dense_bits_ = 0;
  std::string name_;
};

class dense_and_sparse {
public:
  using component_concept = quantizer_tag;

  // Typed recipes: `outliers{int_sym{4}, 1.0}`.
  dense_and_sparse(any_quantizer dense, double percent) : dense_(std::move(dense)), percent_(percent) {
    if (!(percent_ > 0.0 && percent_ < 50.0))
      throw error(name() + ": the percentage of outliers must be in (0, 50), got " + format_number(percent_));
    if (dense_.rotates())
      throw error(name() + ": " + dense_.name() +
                  " rotates tokens; write rht(outliers(Q,P)) to choose outliers after the rotation");
    if (!dense_.invertible() || dense_.residual())
      throw error(name() + ": " + dense_.name() + " is a sketch or a residual sum; the dense part must decode alone");
  }
  template <Quantizer Q>
    requires(!std::same_as<Q, any_quantizer>)
  dense_and_sparse(Q dense, double percent) : dense_and_sparse(any_quantizer(std::move(dense)), percent) {}

  std::string name() const { return "outliers(" + dense_.name() + "," + format_number(percent_) + ")"; }
  // Outliers in a group of `channels`: ceil(P% of it), at least one.
  std::size_t outliers_in(std::size_t channels) const {
    // (less a rounding allowance, so 3% of 100 channels is 3, not 4)
    const double share = percent_ / 100.0 * static_cast<double>(channels) - 1e-9;
    return std::max<std::size_t>(1, static_cast<std::size_t>(std::ceil(share)));
  }
  std::shared_ptr<const kvlab::group_codec> group_codec(std::size_t channels) const {
    const std::size_t kept = outliers_in(channels);
    if (channels < 2 || kept >= channels)
      throw error(name() + ": groups of " + std::to_string(channels) + " channels would keep " + std::to_string(kept) +
                  " outliers, leaving no dense part");
    return std::make_shared<const dense_sparse_codec>(dense_, channels, kept, name());
  }

private:
  any_quantizer dense_;
  double percent_;
};
static_assert(Quantizer<dense_and_sparse>);
static_assert(codes_groups<dense_and_sparse>);

inline strategy_info info() {
  return {.name = "outliers",
          .usage = "outliers(Q,P): each group's P% largest magnitudes kept in fp16 with their channel "
                   "indices, the rest coded by Q",
          .summary = "dense-and-sparse quantization: per-vector outliers in a sparse fp16 part",
          .paper = "arXiv 2401.18079 sec. 3.4",
          .examples = {"outliers(int4,1)", "outliers(lloyd3,1)", "rht(outliers(int3,1))"}};
}

inline dense_and_sparse make(const strategy_args& args) {
  args.expect_arguments(2, "outliers(Q,P)");
  return dense_and_sparse{args.components->make_quantizer(args.args[0]),
                          args.number_in<double>(1, "percentage of outliers", 0.0, 50.0)};
}

} // namespace kvlab::strategies::outliers

// The typed name recipes use (kvlab.compose).
export namespace kvlab::parts {
using outliers = strategies::outliers::dense_and_sparse;
} // namespace kvlab::parts
