// Real keys, values and queries from a model, in the layout every kvlab experiment reads
// ([layers][heads][tokens][head_dim]): the model runs over the text with exact dense
// attention (uncompressed) and every layer's post-RoPE queries and keys, values and pre-RoPE
// keys are recorded. `kvlab capture` writes them as .npy; the data spec
// `model:PATH,text=FILE[,tokens=N][,tokenizer=FILE]` hands them to `kvlab eval` and sweeps
// directly, with nothing written.
module;
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>
export module kvlab.model:capture;
import kvlab.core;
import :config;
import :forward;

export namespace kvlab {

// What a capture holds: the workload, and the keys before RoPE (same shape as the keys).
struct captured_kv {
  kv_data data;
  kv_tensor keys_before_rope;
};

namespace detail {

// Exact attention that also files every layer's tensors into the capture.
class capturing_attention final : public attention_backend {
public:
  capturing_attention(const model_config& c, std::size_t tokens, captured_kv& out) : dense_(c), c_(c), out_(out) {
    const kv_shape kv{c.layers, c.kv_heads, tokens, c.head_dim}, q{c.layers, c.heads, tokens, c.head_dim};
    out.data.keys = kv_tensor(kv);
    out.data.values = kv_tensor(kv);
    out.data.queries = kv_tensor(q);
    out.keys_before_rope = kv_tensor(kv);
  }

  void keys_before_rope(std::size_t layer, std::span<const float> k, std::size_t /*first_position*/) override {
    file(out_.keys_before_rope, layer, c_.kv_heads, k);
  }
  void attend(std::size_t layer, std::span<const float> q, std::span<const float> k, std::span<const float> v,
              std::size_t tokens, std::span<float> out) override {
    file(out_.data.queries, layer, c_.heads, q);
    file(out_.data.keys, layer, c_.kv_heads, k);
    file(out_.data.values, layer, c_.kv_heads, v);
    dense_.attend(layer, q, k, v, tokens, out);
  }

private:
  // rows is tokens x (heads * head_dim); the tensor wants [layer][head][token][channel].
  void file(kv_tensor& tensor, std::size_t layer, std::size_t heads, std::span<const float> rows) const {
    const std::size_t tokens = rows.size() / (heads * c_.head_dim);
    for (std::size_t t = 0; t < tokens; ++t)
      for (std::size_t h = 0; h < heads; ++h)
        std::ranges::copy(rows.subspan((t * heads + h) * c_.head_dim, c_.head_dim), tensor.row(layer, h, t).begin());
  }

  dense_attention dense_;
  const model_config& c_;
  captured_kv& out_;
};

} // namespace detail

// Runs `tokens` through the model (positions 0..n-1, exact attention) and records them.
inline captured_kv capture_kv(const model_config& c, const model_weights& w, std::span<const std::int32_t> tokens,
                              const std::string& source, unsigned threads = 1) {
  if (tokens.empty()) throw error("capture: no tokens to run the model on");
  if (c.context != 0 && tokens.size() > c.context)
    throw error("capture: " + std::to_string(tokens.size()) + " tokens are more than the model's " +
                std::to_string(c.context) + " positions");
  captured_kv out;
  detail::capturing_attention attention(c, tokens.size(), out);
  forward(c, w, tokens, 0, attention, tokens.size(), threads);
  out.data.source = source;
  return out;
}

} // namespace kvlab
