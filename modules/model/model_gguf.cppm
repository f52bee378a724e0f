// GGUF model files as llama.cpp writes them (GGUF v3, ggml's tensor naming): architectures
// `llama` (RoPE on interleaved pairs: llama.cpp's converter permutes q and k rows for it) and
// `qwen2` (half-split pairs, q/k/v biases). Hyperparameters come from `<arch>.*` metadata;
// weights of any type kvlab.gguf dequantizes (F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q6_K) are
// converted to float32 once, tensor by tensor, from the memory-mapped file. The writer is the
// inverse, for models kvlab makes itself (benchmarks, conversions, tests).
module;
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <utility>
#include <vector>
export module kvlab.model:gguf_weights;
import kvlab.core;
import kvlab.gguf;
import kvlab.data.files;
import :config;

export namespace kvlab {

inline model_parts load_gguf_weights(const gguf_file& file) {
  const std::string where = "GGUF model '" + file.path().string() + "'";
  const std::string architecture(file.get_string("general.architecture"));
  if (architecture != "llama" && architecture != "qwen2")
    throw error(where + ": general.architecture is '" + architecture + "'; kvlab runs 'llama' and 'qwen2'");
  const std::string a = architecture + ".";
  model_config c;
  c.architecture = architecture;
  c.layers = file.get_uint(a + "block_count");
  c.hidden = file.get_uint(a + "embedding_length");
  c.ffn = file.get_uint(a + "feed_forward_length");
  c.heads = file.get_uint(a + "attention.head_count");
  c.kv_heads = file.find_uint(a + "attention.head_count_kv").value_or(c.heads);
  if (c.heads == 0) throw error(where + ": " + a + "attention.head_count is 0");
  c.head_dim = file.find_uint(a + "attention.key_length").value_or(c.hidden / c.heads);
  c.context = file.find_uint(a + "context_length").value_or(0);
  c.rope_theta = file.find_float(a + "rope.freq_base").value_or(10000.0);
  c.norm_eps = file.get_float(a + "attention.layer_norm_rms_epsilon");
  c.rope = architecture == "qwen2" ? rope_pairing::half_split : rope_pairing::interleaved;
  c.qkv_bias = architecture == "qwen2";
  const gguf_tensor& embedding = file.tensor("token_embd.weight");
  c.vocab = embedding.dims.size() == 2 ? embedding.dims[1] : 0;
  c.tied_output = file.find_tensor("output.weight") == nullptr;
  if (const auto rope_dims = file.find_uint(a + "rope.dimension_count"); rope_dims && *rope_dims != c.head_dim)
    throw error(where + ": " + a + "rope.dimension_count is " + std::to_string(*rope_dims) +
                "; kvlab rotates whole heads (expected head_dim " + std::to_string(c.head_dim) + ")");
  check_model_config(c, where);

  // A tensor of ggml shape [in, out] (ne[0] = in varies fastest) is row-major [out][in].
  const auto read = [&](const std::string& name, std::vector<std::uint64_t> dims) {
    const gguf_tensor& t = file.tensor(name);
    if (t.dims != dims)
      throw error(where + ": tensor '" + name + "' has ggml shape " + detail::dump_shape_text(t.dims) +
                  "; the metadata gives " + detail::dump_shape_text(dims));
    std::vector<float> values(static_cast<std::size_t>(t.element_count()));
    dequantize(t, values);
    return values;
  };
  const std::size_t q = c.heads * c.head_dim, kv = c.kv_heads * c.head_dim, d = c.hidden;
  model_parts parts{.config = c, .weights = {}};
  model_weights& w = parts.weights;
  w.embedding = read("token_embd.weight", {d, c.vocab});
  for (std::size_t i = 0; i < c.layers; ++i) {
    const std::string p = "blk." + std::to_string(i) + ".";
    layer_weights l;
    l.attention_norm = read(p + "attn_norm.weight", {d});
    l.wq = read(p + "attn_q.weight", {d, q});
    l.wk = read(p + "attn_k.weight", {d, kv});
    l.wv = read(p + "attn_v.weight", {d, kv});
    if (c.qkv_bias) {
      l.bq = read(p + "attn_q.bias", {q});
      l.bk = read(p + "attn_k.bias", {kv});
      l.bv = read(p + "attn_v.bias", {kv});
    }
    l.wo = read(p + "attn_output.weight", {q, d});
    l.ffn_norm = read(p + "ffn_norm.weight", {d});
    l.w_gate = read(p + "ffn_gate.weight", {d, c.ffn});
    l.w_up = read(p + "ffn_up.weight", {d, c.ffn});
    l.w_down = read(p + "ffn_down.weight", {c.ffn, d});
    w.layers.push_back(std::move(l));
  }
  w.final_norm = read("output_norm.weight", {d});
  if (!c.tied_output) w.output = read("output.weight", {d, c.vocab});
  check_model_weights(c, w, where);
  return parts;
}

// Writes a model as llama.cpp would: `<arch>.*` hyperparameters and ggml-named tensors
// stored as `type` (F32, F16, BF16, Q8_0 or Q4_0; norms and biases always F32, as llama.cpp's
// converter keeps them). A model with half-split RoPE must be written as `qwen2`, whose
// pairing is half-split; `llama` GGUF files pair channels interleaved. No tokenizer is written.
inline void write_gguf_model(const std::filesystem::path& file, const model_config& c, const model_weights& w,
                             ggml_type type) {
  check_model_config(c, "GGUF model '" + file.string() + "'");
  check_model_weights(c, w, "GGUF model '" + file.string() + "'");
  if ((c.architecture == "qwen2") != (c.rope == rope_pairing::half_split) || (c.architecture == "qwen2") != c.qkv_bias)
    throw error("GGUF model '" + file.string() + "': architecture '" + c.architecture +
                "' does not match the model's RoPE pairing and biases (llama: interleaved, no biases; qwen2: "
                "half-split, q/k/v biases)");
  const std::string a = c.architecture + ".";
  const auto u32 = [](std::size_t v) { return static_cast<std::uint32_t>(v); };
  const std::vector<gguf_metadata_item> metadata = {
      {"general.architecture", c.architecture},
      {a + "block_count", u32(c.layers)},
      {a + "embedding_length", u32(c.hidden)},
      {a + "feed_forward_length", u32(c.ffn)},
      {a + "attention.head_count", u32(c.heads)},
      {a + "attention.head_count_kv", u32(c.kv_heads)},
      {a + "attention.key_length", u32(c.head_dim)},
      {a + "attention.value_length", u32(c.head_dim)},
      {a + "rope.dimension_count", u32(c.head_dim)},
      {a + "context_length", u32(c.context)},
      {a + "rope.freq_base", static_cast<float>(c.rope_theta)},
      {a + "attention.layer_norm_rms_epsilon", static_cast<float>(c.norm_eps)}};
  std::vector<gguf_tensor_input> tensors;
  const auto add = [&](std::string name, const std::vector<float>& values, std::vector<std::uint64_t> dims) {
    tensors.push_back({std::move(name), std::move(dims), dims.size() == 1 ? ggml_type::f32 : type, values});
  };
  const std::size_t q = c.heads * c.head_dim, kv = c.kv_heads * c.head_dim, d = c.hidden;
  add("token_embd.weight", w.embedding, {d, c.vocab});
  for (std::size_t i = 0; i < c.layers; ++i) {
    const std::string p = "blk." + std::to_string(i) + ".";
    const layer_weights& l = w.layers[i];
    add(p + "attn_norm.weight", l.attention_norm, {d});
    add(p + "attn_q.weight", l.wq, {d, q});
    add(p + "attn_k.weight", l.wk, {d, kv});
    add(p + "attn_v.weight", l.wv, {d, kv});
    if (c.qkv_bias) {
      add(p + "attn_q.bias", l.bq, {q});
      add(p + "attn_k.bias", l.bk, {kv});
      add(p + "attn_v.bias", l.bv, {kv});
    }
    add(p + "attn_output.weight", l.wo, {q, d});
    add(p + "ffn_norm.weight", l.ffn_norm, {d});
    add(p + "ffn_gate.weight", l.w_gate, {d, c.ffn});
    add(p + "ffn_up.weight", l.w_up, {d, c.ffn});
    add(p + "ffn_down.weight", l.w_down, {c.ffn, d});
  }
  add("output_norm.weight", w.final_norm, {d});
  if (!c.tied_output) add("output.weight", w.output, {d, c.vocab});
  write_gguf(file, metadata, tensors);
}

} // namespace kvlab
