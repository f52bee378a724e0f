// kvlab.codec: quantize and dequantize one array of token vectors ([tokens][head_dim]) at
// any granularity, including groups that span tokens (channel(G), tensor), and measure the
// reconstruction error. The reference path of `kvlab codec` and of the distortion experiment.
module;
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <span>
#include <string>
#include <utility>
#include <vector>
export module kvlab.codec;
import kvlab.core;

export namespace kvlab {

struct codec_stats {
  double mse = 0.0;    // mean squared error per element
  double snr_db = 0.0; // 10 log10(signal power / mse)
  double max_abs_error = 0.0;
  double relative_rmse = 0.0;    // sqrt(mse / signal power)
  double bits_per_element = 0.0; // codes plus stored parameters, exactly
  std::size_t groups = 0;
};

struct codec_output {
  std::vector<float> decoded;
  codec_stats stats;
};

// `values` holds `streams` independent streams (heads) of tokens x head_dim each. Each token
// is first mapped as a cache body stores it (the quantizer's rotation or sketch, of
// stored_dim values; see token_projection). In each stream, groups of `shape` tile the
// mapped rows: shape.tokens tokens (0: all of them; a last, shorter block keeps the tokens
// that remain) by shape.channels channels. Each group is fitted, its parameters rounded to
// `precision`, every value encoded and decoded with the quantizer's own reference
// functions, and the decoded rows mapped back. Statistics cover all streams; bits per
// element count codes and parameters over the input's values.
inline codec_output quantize_dequantize(const any_quantizer& quantizer, group_shape shape, param_precision precision,
                                        std::span<const float> values, std::size_t tokens, std::size_t head_dim,
                                        std::size_t streams = 1) {
  if (streams == 0 || tokens == 0 || head_dim == 0 || values.size() != streams * tokens * head_dim)
    throw error("codec: " + std::to_string(values.size()) + " values are not " + std::to_string(streams) +
                " streams x " + std::to_string(tokens) + " tokens x " + std::to_string(head_dim) + " channels");
  const auto map = quantizer.projection(head_dim);
  const std::size_t width = map ? map->stored_dim() : head_dim; // of a stored row
  if (shape.channels == 0 || width % shape.channels != 0)
    throw error("codec: groups of " + std::to_string(shape.channels) + " channels do not divide " +
                (width == head_dim ? "head_dim " : quantizer.name() + "'s stored row of ") + std::to_string(width));
  const bool codes_whole_groups = quantizer.format() == element_format::group_code;
  if ((!quantizer.invertible() || quantizer.residual() || codes_whole_groups) && shape.tokens != 1)
    throw error("codec: " + quantizer.name() + " encodes each token on its own (a sketch, a residual or a code of " +
                "whole groups); it needs per-token groups");
  const auto groups_codec = codes_whole_groups ? quantizer.group_codec(shape.channels) : nullptr;
  // NaN/Inf policy: rejected with its position; no codec represents them faithfully.
  for (std::size_t i = 0; i < values.size(); ++i)
    if (!std::isfinite(values[i]))
      throw error("codec input holds a non-finite value (" + std::to_string(values[i]) + ") at " +
                  (streams > 1 ? "head " + std::to_string(i / head_dim / tokens) + ", " : std::string()) + "token " +
                  std::to_string(i / head_dim % tokens) + ", channel " + std::to_string(i % head_dim));
  const std::size_t rows = streams * tokens;
  std::vector<float> work(values.begin(), values.end());
  if (map) {
    work.resize(rows * width);
    for (std::size_t r = 0; r < rows; ++r)
      map->key(values.subspan(r * head_dim, head_dim), std::span(work).subspan(r * width, width));
  }

  const std::size_t block = shape.tokens == 0 ? tokens : shape.tokens;
  std::vector<float> group;
  std::vector<std::uint32_t> codes;
  std::vector<float> stored(work.size()), decoded(values.size());
  std::size_t groups = 0;
  for (std::size_t s0 = 0; s0 < rows; s0 += tokens) { // one stream at a time
    for (std::size_t t0 = s0; t0 < s0 + tokens; t0 += block) {
      const std::size_t t1 = std::min(s0 + tokens, t0 + block);
      for (std::size_t c0 = 0; c0 < width; c0 += shape.channels) {
        group.clear();
        for (std::size_t t = t0; t < t1; ++t)
          for (std::size_t c = c0; c < c0 + shape.channels; ++c) group.push_back(work[t * width + c]);
        // Runs one step of coding the group; its error names the group.
        const auto in_group = [&](auto&& step) {
          try {
            return step();
          } catch (const kvlab::error& e) {
            throw kvlab::error("codec group " + std::to_string(groups) + " (" +
                               (streams > 1 ? "head " + std::to_string(s0 / tokens) + ", " : std::string()) +
                               "tokens " + std::to_string(t0 - s0) + ".." + std::to_string(t1 - s0 - 1) +
                               ", channels " + std::to_string(c0) + ".." + std::to_string(c0 + shape.channels - 1) +
                               "): " + e.what());
          }
        };
        if (groups_codec) { // the group's code, encoded and decoded
          std::vector<std::uint8_t> code((groups_codec->code_bits() + 7) / 8);
          in_group([&] { groups_codec->encode(group, code, 0); });
          groups_codec->decode(code, 0, std::span(stored).subspan(t0 * width + c0, shape.channels));
          ++groups;
          continue;
        }
        const group_params p = in_group([&] { return stored_params(quantizer, group, precision); });
        codes.resize(group.size());
        quantizer.encode(group, p, codes);
        std::size_t i = 0;
        for (std::size_t t = t0; t < t1; ++t)
          for (std::size_t c = c0; c < c0 + shape.channels; ++c)
            stored[t * width + c] = quantizer.decode(codes[i++], p);
        ++groups;
      }
    }
  }
  if (map)
    for (std::size_t r = 0; r < rows; ++r)
      map->adjoint(std::span(stored).subspan(r * width, width), std::span(decoded).subspan(r * head_dim, head_dim));
  else
    decoded = std::move(stored);
  for (std::size_t i = 0; i < decoded.size(); ++i)
    if (!std::isfinite(decoded[i]))
      throw error("codec: " + quantizer.name() + " decodes token " + std::to_string(i / head_dim % tokens) +
                  ", channel " + std::to_string(i % head_dim) + " to " + format_number(decoded[i]) +
                  "; the data is too large for it, scale it down");
  // residual(P,R): R encodes what P's decode leaves of each token, as a cache's residual
  // tier does (one group per stored row), and the two decodes add.
  double residual_bits = 0.0;
  if (const auto rest = quantizer.residual()) {
    std::vector<float> left(values.size());
    for (std::size_t i = 0; i < left.size(); ++i) left[i] = values[i] - decoded[i];
    const auto part = quantize_dequantize(*rest, {.tokens = 1, .channels = rest->stored_dim(head_dim)}, precision, left,
                                          tokens, head_dim, streams);
    for (std::size_t i = 0; i < decoded.size(); ++i) decoded[i] += part.decoded[i];
    residual_bits = part.stats.bits_per_element;
  }

  codec_output out{std::move(decoded), {}};
  double error = 0.0, signal = 0.0, worst = 0.0;
  for (std::size_t i = 0; i < values.size(); ++i) {
    const double d = double{out.decoded[i]} - double{values[i]};
    error += d * d;
    signal += double{values[i]} * double{values[i]};
    worst = std::max(worst, std::fabs(d));
  }
  const double n = static_cast<double>(values.size());
  const double param_bits = 8.0 * static_cast<double>(param_bytes(quantizer, precision));
  out.stats = {.mse = error / n,
               .snr_db = 10.0 * std::log10(signal / error),
               .max_abs_error = worst,
               .relative_rmse = signal == 0.0 ? 0.0 : std::sqrt(error / signal),
               .bits_per_element = (static_cast<double>(rows * quantizer.row_code_bits(width, shape.channels)) +
                                    static_cast<double>(groups * quantizer.params_per_group()) * param_bits) /
                                       n +
                                   residual_bits,
               .groups = groups};
  return out;
}

} // namespace kvlab
