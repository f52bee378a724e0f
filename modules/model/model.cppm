// kvlab.model: decoder-only Llama-family transformers on the CPU with kvlab's compressed
// cache as their KV cache: configurations and weights, the forward pass, attention through
// the cache, and the loaders (llama2.c checkpoints, Hugging Face folders, GGUF).
module;
#include <algorithm>
#include <cstddef>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>
export module kvlab.model;
export import :config;
export import :forward;
export import :rotary_attention;
export import :cache_attention;
export import :llama2c;
export import :hf;
export import :gguf_weights;
export import :capture;
import kvlab.core;
import kvlab.gguf;
import kvlab.tokenizer;
import kvlab.tokenizer.gguf;

export namespace kvlab {

// A loaded model: its shape, float32 weights, tokenizer and where it came from.
struct model {
  model_config config;
  model_weights weights;
  std::optional<kvlab::tokenizer> tokenizer;
  std::string format; // "gguf", "huggingface", "llama2.c"
  std::filesystem::path path;
};

namespace detail {

// llama2.c keeps the tokenizer in its own file: `tokenizer.bin` beside the checkpoint, else
// the only `tok*.bin` there.
inline std::filesystem::path llama2c_tokenizer_beside(const std::filesystem::path& checkpoint) {
  const auto folder = checkpoint.parent_path().empty() ? std::filesystem::path(".") : checkpoint.parent_path();
  if (std::filesystem::exists(folder / "tokenizer.bin")) return folder / "tokenizer.bin";
  std::vector<std::filesystem::path> found;
  for (const auto& entry : std::filesystem::directory_iterator(folder)) {
    const std::string name = entry.path().filename().string();
    if (entry.is_regular_file() && name.starts_with("tok") && name.ends_with(".bin")) found.push_back(entry.path());
  }
  if (found.size() != 1)
    throw error("llama2.c checkpoint '" + checkpoint.string() + "': " +
                (found.empty() ? std::string("no tokenizer.bin or tok*.bin beside it")
                               : std::to_string(found.size()) + " tok*.bin files beside it") +
                "; name one with --tokenizer");
  return found.front();
}

inline bool starts_with_gguf_magic(const std::filesystem::path& file) {
  const mapped_file mapped(file);
  const auto bytes = mapped.bytes();
  return bytes.size() >= 4 && bytes[0] == std::byte{'G'} && bytes[1] == std::byte{'G'} && bytes[2] == std::byte{'U'} &&
         bytes[3] == std::byte{'F'};
}

} // namespace detail

// The model's identity for provenance and for keying stored base runs: the sha256 of the
// file, or for a folder the sha256 of "<name> <sha256>" lines of config.json and every
// .safetensors file, sorted by name.
inline std::string model_sha256(const std::filesystem::path& path) {
  if (!std::filesystem::is_directory(path)) return sha256_file_hex(path);
  std::vector<std::filesystem::path> files;
  for (const auto& entry : std::filesystem::directory_iterator(path)) {
    const std::string name = entry.path().filename().string();
    if (entry.is_regular_file() && (name == "config.json" || name.ends_with(".safetensors")))
      files.push_back(entry.path());
  }
  std::ranges::sort(files);
  std::string lines;
  for (const auto& file : files) lines += file.filename().string() + " " + sha256_file_hex(file) + "\n";
  return sha256_hex(std::as_bytes(std::span(lines)));
}

// Loads a model from a GGUF file, a Hugging Face folder (config.json, safetensors,
// tokenizer.json) or a llama2.c checkpoint (with `tokenizer`, or the tokenizer file beside it).
inline model load_model(const std::filesystem::path& path,
                        const std::optional<std::filesystem::path>& tokenizer_file = {}) {
  model m;
  m.path = path;
  if (std::filesystem::is_directory(path)) {
    if (!std::filesystem::exists(path / "config.json"))
      throw error("model folder '" + path.string() +
                  "': no config.json (a Hugging Face model folder has config.json, "
                  "model.safetensors and tokenizer.json)");
    auto parts = load_hf_weights(path);
    m.config = parts.config, m.weights = std::move(parts.weights), m.format = "huggingface";
    m.tokenizer = load_hf_tokenizer(tokenizer_file.value_or(path / "tokenizer.json"));
  } else if (detail::starts_with_gguf_magic(path)) {
    const gguf_file file(path);
    auto parts = load_gguf_weights(file);
    m.config = parts.config, m.weights = std::move(parts.weights), m.format = "gguf";
    m.tokenizer = tokenizer_file ? load_llama2c_tokenizer(*tokenizer_file, m.config.vocab) : tokenizer_from_gguf(file);
  } else {
    auto parts = load_llama2c_checkpoint(path);
    m.config = parts.config, m.weights = std::move(parts.weights), m.format = "llama2.c";
    m.tokenizer =
        load_llama2c_tokenizer(tokenizer_file.value_or(detail::llama2c_tokenizer_beside(path)), m.config.vocab);
  }
  if (m.tokenizer && m.tokenizer->size() > m.config.vocab)
    throw error("model '" + path.string() + "': the tokenizer has " + std::to_string(m.tokenizer->size()) +
                " tokens, more than the model's vocabulary of " + std::to_string(m.config.vocab));
  return m;
}

// A `model:PATH,text=FILE[,tokens=N][,tokenizer=FILE]` data spec taken apart and checked,
// before any file is read.
struct model_data_request {
  std::filesystem::path model, text;
  std::optional<std::filesystem::path> tokenizer;
  std::optional<std::size_t> tokens;
};

// Throws kvlab::error naming the bad part.
inline model_data_request parse_model_data_spec(std::string_view spec) {
  const std::string where = "data spec '" + std::string(spec) + "'";
  if (!spec.starts_with("model:")) throw error(where + ": expected model:PATH,text=FILE");
  std::vector<std::string> parts;
  for (std::size_t at = 6; at <= spec.size();) {
    const std::size_t end = std::min(spec.find(',', at), spec.size());
    parts.emplace_back(spec.substr(at, end - at));
    at = end + 1;
  }
  if (parts.front().empty()) throw error(where + ": no model path after 'model:'");
  model_data_request request{.model = parts.front()};
  for (std::size_t i = 1; i < parts.size(); ++i) {
    const auto equals = parts[i].find('=');
    const std::string key = parts[i].substr(0, equals),
                      value = equals == std::string::npos ? "" : parts[i].substr(equals + 1);
    if (equals == std::string::npos || value.empty())
      throw error(where + ": part '" + parts[i] + "' is not key=value (keys: text, tokens, tokenizer)");
    if (key == "text")
      request.text = value;
    else if (key == "tokenizer")
      request.tokenizer = value;
    else if (key == "tokens")
      request.tokens = parse_number<std::size_t>(value, where + ", tokens");
    else
      throw error(where + ": unknown key '" + key + "'; allowed: text, tokens, tokenizer");
  }
  // A given text is never empty (empty values are refused above).
  if (request.text.empty()) throw error(where + ": text=FILE is missing (the text the model reads)");
  return request;
}

} // namespace kvlab
