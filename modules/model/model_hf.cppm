// Hugging Face model folders: `config.json` (LlamaForCausalLM / Qwen2ForCausalLM fields) and
// `model.safetensors`, or shards listed by `model.safetensors.index.json`, with F32, F16 or
// BF16 weights named as transformers' Llama and Qwen2 modules name them. RoPE pairs are
// half-split (transformers' `rotate_half`). The safetensors headers are checked as
// `kvlab.data.files` checks KV dumps; tensor data is read from the memory-mapped shard.
module;
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <variant>
#include <vector>
export module kvlab.model:hf;
import kvlab.core;
import kvlab.npy;
import kvlab.data.files;
import :config;

export namespace kvlab {

namespace detail {

// A config.json field: a non-negative integer, or `fallback` when absent (nullopt: required).
inline std::size_t config_count(const json_value& config, const std::string& key, const std::string& where,
                                std::optional<std::size_t> fallback = std::nullopt) {
  const json_value* v = config.find(key);
  if (!v || std::holds_alternative<std::nullptr_t>(v->value)) {
    if (fallback) return *fallback;
    throw error(where + ": field \"" + key + "\" is missing");
  }
  if (!v->is_number() || v->number() < 0 || v->number() != std::floor(v->number()) || v->number() > 0x1p52)
    throw error(where + ": field \"" + key + "\" must be a non-negative integer");
  return static_cast<std::size_t>(v->number());
}

inline double config_real(const json_value& config, const std::string& key, const std::string& where, double fallback) {
  const json_value* v = config.find(key);
  if (!v || std::holds_alternative<std::nullptr_t>(v->value)) return fallback;
  if (!v->is_number()) throw error(where + ": field \"" + key + "\" must be a number");
  return v->number();
}

inline bool config_flag(const json_value& config, const std::string& key, const std::string& where, bool fallback) {
  const json_value* v = config.find(key);
  if (!v || std::holds_alternative<std::nullptr_t>(v->value)) return fallback;
  if (!std::holds_alternative<bool>(v->value)) throw error(where + ": field \"" + key + "\" must be true or false");
  return std::get<bool>(v->value);
}

inline model_config hf_model_config(const std::filesystem::path& file) {
  const std::string where = "Hugging Face config '" + file.string() + "'";
  const json_value config = parse_json(read_whole_file(file), file.string());
  if (!config.is_object()) throw error(where + ": expected a JSON object");
  const json_value* type = config.find("model_type");
  if (!type || !type->is_string())
    throw error(where + ": field \"model_type\" is missing (expected \"llama\" or \"qwen2\")");
  const std::string& model_type = type->string();
  if (model_type != "llama" && model_type != "qwen2")
    throw error(where + ": model_type \"" + model_type + "\" is not supported; kvlab runs \"llama\" and \"qwen2\"");
  if (const json_value* scaling = config.find("rope_scaling");
      scaling && !std::holds_alternative<std::nullptr_t>(scaling->value))
    throw error(where + ": \"rope_scaling\" is set; kvlab applies plain RoPE only (rope_scaling must be null)");
  const std::string act = config.find("hidden_act") && config.find("hidden_act")->is_string()
                              ? config.find("hidden_act")->string()
                              : "silu";
  if (act != "silu") throw error(where + ": hidden_act \"" + act + "\" is not supported; expected \"silu\"");
  model_config c;
  c.architecture = model_type;
  c.layers = config_count(config, "num_hidden_layers", where);
  c.hidden = config_count(config, "hidden_size", where);
  c.heads = config_count(config, "num_attention_heads", where);
  c.kv_heads = config_count(config, "num_key_value_heads", where, c.heads);
  if (c.heads == 0) throw error(where + ": num_attention_heads is 0");
  c.head_dim = config_count(config, "head_dim", where, c.hidden / c.heads);
  c.ffn = config_count(config, "intermediate_size", where);
  c.vocab = config_count(config, "vocab_size", where);
  c.context = config_count(config, "max_position_embeddings", where, 0);
  c.rope_theta = config_real(config, "rope_theta", where, 10000.0);
  c.norm_eps = config_real(config, "rms_norm_eps", where, 1e-6);
  c.rope = rope_pairing::half_split;
  // Qwen2's attention always has q/k/v biases; Llama's when attention_bias is set.
  c.qkv_bias = model_type == "qwen2" || config_flag(config, "attention_bias", where, false);
  c.tied_output = config_flag(config, "tie_word_embeddings", where, model_type == "qwen2");
  check_model_config(c, where);
  return c;
}

// Every shard of the folder with its checked index, and which shard holds each tensor.
class safetensors_shards {
public:
  explicit safetensors_shards(const std::filesystem::path& folder) {
    const auto single = folder / "model.safetensors", sharded = folder / "model.safetensors.index.json";
    if (std::filesystem::exists(single)) {
      add_shard(single);
    } else if (std::filesystem::exists(sharded)) {
      const std::string where = "'" + sharded.string() + "'";
      const json_value index = parse_json(read_whole_file(sharded), sharded.string());
      const json_value* map = index.find("weight_map");
      if (!map || !map->is_object()) throw error(where + ": field \"weight_map\" (an object) is missing");
      std::map<std::string, std::size_t> shard_of_file;
      for (const auto& [tensor, shard] : map->object()) {
        if (!shard.is_string() || shard.string().find('/') != std::string::npos)
          throw error(where + ": weight_map[\"" + tensor + "\"] must be a file name in the folder");
        if (!shard_of_file.contains(shard.string())) {
          shard_of_file[shard.string()] = shards_.size();
          add_shard(folder / shard.string());
        }
      }
    } else {
      throw error("Hugging Face folder '" + folder.string() +
                  "': neither model.safetensors nor model.safetensors.index.json is there");
    }
  }

  bool has(const std::string& name) const { return where_.contains(name); }

  // The tensor `name` as floats, its shape checked against `shape` first.
  std::vector<float> read(const std::string& name, std::vector<std::size_t> shape) const {
    const auto found = where_.find(name);
    if (found == where_.end()) throw error(label() + ": tensor '" + name + "' is missing");
    const shard& s = *shards_[found->second.first];
    const safetensors_entry& entry = s.index.entries[found->second.second];
    const std::string what = "'" + s.file.path().string() + "': tensor '" + name + "'";
    if (entry.shape != shape) {
      throw error(what + " has shape " + dump_shape_text(entry.shape) + "; config.json gives " +
                  dump_shape_text(shape));
    }
    const auto dtype = std::ranges::find(safetensors_supported_dtypes, entry.dtype, &safetensors_dtype::name);
    if (dtype == safetensors_supported_dtypes.end())
      throw error(what + " has dtype '" + entry.dtype + "'; supported: F32, F16, BF16");
    std::size_t count = 1;
    for (const std::size_t d : shape) count *= d;
    if (entry.end - entry.begin != count * dtype->bytes)
      throw error(what + ": data_offsets span " + std::to_string(entry.end - entry.begin) +
                  " bytes; shape and dtype need " + std::to_string(count * dtype->bytes));
    std::vector<float> out(count);
    decode_safetensors_elements(
        dtype->element,
        reinterpret_cast<const unsigned char*>(s.file.bytes().data() + s.index.data_start + entry.begin), out);
    return out;
  }

private:
  struct shard {
    mapped_file file;
    safetensors_index index;
  };

  void add_shard(const std::filesystem::path& file) {
    std::ifstream in;
    auto index = read_safetensors_index(in, file);
    shards_.push_back(std::make_unique<shard>(shard{mapped_file(file), std::move(index)}));
    const shard& s = *shards_.back();
    // The mapping must be the file the index was read from (same size).
    if (s.file.size() < s.index.data_start) throw error("'" + file.string() + "' changed while it was read");
    for (std::size_t i = 0; i < s.index.entries.size(); ++i)
      if (!where_.emplace(s.index.entries[i].name, std::pair(shards_.size() - 1, i)).second)
        throw error("'" + file.string() + "': tensor '" + s.index.entries[i].name + "' is also in another shard");
  }
  std::string label() const {
    return "Hugging Face weights '" + shards_.front()->file.path().parent_path().string() + "'";
  }

  std::vector<std::unique_ptr<shard>> shards_;
  std::map<std::string, std::pair<std::size_t, std::size_t>> where_; // tensor -> (shard, entry)
};

} // namespace detail

// Reads a Hugging Face folder's config.json and weights (not its tokenizer).
inline model_parts load_hf_weights(const std::filesystem::path& folder) {
  model_parts parts{.config = detail::hf_model_config(folder / "config.json"), .weights = {}};
  const model_config& c = parts.config;
  const detail::safetensors_shards shards(folder);
  const std::size_t q = c.heads * c.head_dim, kv = c.kv_heads * c.head_dim, d = c.hidden;
  model_weights& w = parts.weights;
  // A tied checkpoint may store the shared matrix under either name (transformers drops one).
  const std::string embedding =
      shards.has("model.embed_tokens.weight") || !c.tied_output ? "model.embed_tokens.weight" : "lm_head.weight";
  w.embedding = shards.read(embedding, {c.vocab, d});
  for (std::size_t i = 0; i < c.layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    layer_weights l;
    l.attention_norm = shards.read(p + "input_layernorm.weight", {d});
    l.wq = shards.read(p + "self_attn.q_proj.weight", {q, d});
    l.wk = shards.read(p + "self_attn.k_proj.weight", {kv, d});
    l.wv = shards.read(p + "self_attn.v_proj.weight", {kv, d});
    if (c.qkv_bias) {
      l.bq = shards.read(p + "self_attn.q_proj.bias", {q});
      l.bk = shards.read(p + "self_attn.k_proj.bias", {kv});
      l.bv = shards.read(p + "self_attn.v_proj.bias", {kv});
    }
    l.wo = shards.read(p + "self_attn.o_proj.weight", {d, q});
    l.ffn_norm = shards.read(p + "post_attention_layernorm.weight", {d});
    l.w_gate = shards.read(p + "mlp.gate_proj.weight", {c.ffn, d});
    l.w_up = shards.read(p + "mlp.up_proj.weight", {c.ffn, d});
    l.w_down = shards.read(p + "mlp.down_proj.weight", {d, c.ffn});
    w.layers.push_back(std::move(l));
  }
  w.final_norm = shards.read("model.norm.weight", {d});
  if (!c.tied_output) w.output = shards.read("lm_head.weight", {c.vocab, d});
  check_model_weights(c, w, "Hugging Face folder '" + folder.string() + "'");
  return parts;
}

} // namespace kvlab
