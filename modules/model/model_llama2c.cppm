// llama2.c checkpoints (karpathy/llama2.c, `export.py --version 0` and the original
// `model.bin` files): a header of 7 int32 (dim, hidden_dim, n_layers, n_heads, n_kv_heads,
// vocab_size, seq_len; a negative vocab_size means the classifier is stored after the
// weights instead of shared with the embedding), then float32 tensors in run.c's order.
// RoPE is llama2.c's: interleaved pairs, theta 10000; RMSNorm epsilon 1e-5.
module;
#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <limits>
#include <span>
#include <string>
#include <vector>
export module kvlab.model:llama2c;
import kvlab.core;
import :config;

export namespace kvlab {

namespace detail {

inline constexpr std::size_t llama2c_header_fields = 7;
inline constexpr std::uint32_t llama2c_versioned_magic = 0x616b3432; // "ak42", export.py --version 1 and 2

inline std::int32_t load_int32_le(const std::byte* p) {
  std::uint32_t bits = 0;
  for (std::size_t i = 0; i < 4; ++i) bits |= std::uint32_t{std::to_integer<unsigned char>(p[i])} << (8 * i);
  return std::bit_cast<std::int32_t>(bits);
}

// Reads float32 little-endian tensors one after another from a checked span.
class float_reader {
public:
  explicit float_reader(std::span<const std::byte> data) : data_(data) {}
  std::vector<float> take(std::size_t count) {
    std::vector<float> out(count);
    for (std::size_t i = 0; i < count; ++i)
      out[i] = std::bit_cast<float>(static_cast<std::uint32_t>(load_int32_le(data_.data() + 4 * (at_ + i))));
    at_ += count;
    return out;
  }
  void skip(std::size_t count) { at_ += count; }

private:
  std::span<const std::byte> data_;
  std::size_t at_ = 0; // floats read
};

} // namespace detail

inline model_parts load_llama2c_checkpoint(const std::filesystem::path& file) {
  const mapped_file mapped(file);
  const std::string where = "llama2.c checkpoint '" + file.string() + "'";
  const auto bytes = mapped.bytes();
  constexpr std::size_t header_bytes = 4 * detail::llama2c_header_fields;
  if (bytes.size() < header_bytes)
    throw error(where + ": " + std::to_string(bytes.size()) + " bytes, shorter than the 28-byte header");
  if (static_cast<std::uint32_t>(detail::load_int32_le(bytes.data())) == detail::llama2c_versioned_magic)
    throw error(where + ": a versioned llama2.c export (magic \"ak42\", export.py --version 1 or 2); kvlab reads the "
                        "legacy format (export.py --version 0, as the released model.bin files)");
  std::array<std::int32_t, detail::llama2c_header_fields> h{};
  for (std::size_t i = 0; i < h.size(); ++i) h[i] = detail::load_int32_le(bytes.data() + 4 * i);
  const char* names[] = {"dim", "hidden_dim", "n_layers", "n_heads", "n_kv_heads", "vocab_size", "seq_len"};
  for (std::size_t i = 0; i < h.size(); ++i)
    if (h[i] == 0 || (h[i] < 0 && i != 5))
      throw error(where + ": header field " + names[i] + " is " + std::to_string(h[i]) +
                  "; expected a positive number");
  if (h[5] == std::numeric_limits<std::int32_t>::min()) throw error(where + ": header field vocab_size is absurd");
  model_config c{.architecture = "llama",
                 .layers = static_cast<std::size_t>(h[2]),
                 .hidden = static_cast<std::size_t>(h[0]),
                 .heads = static_cast<std::size_t>(h[3]),
                 .kv_heads = static_cast<std::size_t>(h[4]),
                 .head_dim = 0,
                 .ffn = static_cast<std::size_t>(h[1]),
                 .vocab = static_cast<std::size_t>(h[5] < 0 ? -h[5] : h[5]),
                 .context = static_cast<std::size_t>(h[6]),
                 .rope_theta = 10000.0,
                 .norm_eps = 1e-5,
                 .rope = rope_pairing::interleaved,
                 .qkv_bias = false,
                 .tied_output = h[5] > 0};
  if (c.hidden % c.heads != 0)
    throw error(where + ": dim " + std::to_string(c.hidden) + " is not a multiple of n_heads " +
                std::to_string(c.heads));
  c.head_dim = c.hidden / c.heads;
  check_model_config(c, where);
  // The weights, then (skipped) the RoPE tables run.c once stored: seq_len x head_dim/2
  // cosines and as many sines, then the classifier when it is not shared.
  const std::size_t rope_tables = c.context * c.head_dim;
  const std::size_t floats = parameter_count(c) + rope_tables;
  if (c.context > (std::size_t{1} << 24) || (bytes.size() - header_bytes) / 4 != floats ||
      (bytes.size() - header_bytes) % 4 != 0)
    throw error(where + ": the header (dim " + std::to_string(c.hidden) + ", hidden_dim " + std::to_string(c.ffn) +
                ", " + std::to_string(c.layers) + " layers, " + std::to_string(c.heads) + " heads, " +
                std::to_string(c.kv_heads) + " KV heads, vocab " + std::to_string(c.vocab) + ", seq_len " +
                std::to_string(c.context) + ") needs " + std::to_string(header_bytes + 4 * floats) +
                " bytes; the file has " + std::to_string(bytes.size()) +
                (bytes.size() < header_bytes + 4 * floats ? " (is it truncated?)" : ""));

  detail::float_reader read(bytes.subspan(header_bytes));
  const std::size_t q = c.heads * c.head_dim, kv = c.kv_heads * c.head_dim, d = c.hidden;
  model_parts parts{.config = c, .weights = {}};
  model_weights& w = parts.weights;
  w.layers.resize(c.layers);
  w.embedding = read.take(c.vocab * d);
  // run.c stores each kind of tensor for all layers together.
  for (auto& l : w.layers) l.attention_norm = read.take(d);
  for (auto& l : w.layers) l.wq = read.take(q * d);
  for (auto& l : w.layers) l.wk = read.take(kv * d);
  for (auto& l : w.layers) l.wv = read.take(kv * d);
  for (auto& l : w.layers) l.wo = read.take(d * q);
  for (auto& l : w.layers) l.ffn_norm = read.take(d);
  for (auto& l : w.layers) l.w_gate = read.take(c.ffn * d);
  for (auto& l : w.layers) l.w_down = read.take(d * c.ffn);
  for (auto& l : w.layers) l.w_up = read.take(c.ffn * d);
  w.final_norm = read.take(d);
  read.skip(rope_tables);
  if (!c.tied_output) w.output = read.take(c.vocab * d);
  check_model_weights(c, w, where);
  return parts;
}

} // namespace kvlab
