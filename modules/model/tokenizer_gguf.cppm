// kvlab.tokenizer.gguf: the tokenizer a GGUF file describes in its tokenizer.ggml.* metadata
// (ggml's docs/gguf.md, "Tokenizer"), read as llama.cpp's llama_vocab::load reads it:
//   tokenizer.ggml.model  "llama" -> SentencePiece BPE by score, "gpt2" -> GPT-2 byte-level BPE by merge rank
//   tokenizer.ggml.pre    the byte-level split: "default", "gpt-2" -> gpt2, "llama-bpe" -> llama3, "qwen2" -> qwen2
//   tokens, scores, token_type, merges, bos/eos/unknown_token_id, add_bos_token, add_space_prefix
module;
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>
export module kvlab.tokenizer.gguf;
import kvlab.core;
import kvlab.gguf;
import kvlab.npy;
export import kvlab.tokenizer;

export namespace kvlab {

namespace detail {

struct gguf_pre_tokenizer {
  std::string_view name;
  pre_tokenizer split;
};

inline constexpr gguf_pre_tokenizer gguf_pre_tokenizers[] = {
    {"default", pre_tokenizer::gpt2},
    {"gpt-2", pre_tokenizer::gpt2},
    {"llama-bpe", pre_tokenizer::llama3},
    {"qwen2", pre_tokenizer::qwen2},
};

} // namespace detail

// Defaults where a key is absent, as llama.cpp: "llama" vocabularies have <unk> 0, BOS 1, EOS 2,
// add BOS and the dummy prefix; "gpt2" ones have neither; a missing token_type makes <0xNN>
// pieces the byte pieces (llama.cpp's byte_to_token finds them by text). The "llama-bpe" split
// takes a pre-token that is a piece whole (llama.cpp sets ignore_merges for it).
inline tokenizer tokenizer_from_gguf(const gguf_file& file) {
  const auto fail = [&](std::string_view key, const std::string& problem) {
    return error("GGUF '" + file.path().string() + "': metadata key '" + std::string(key) + "': " + problem);
  };
  vocabulary vocab;
  const std::string_view model = file.get_string("tokenizer.ggml.model");
  if (model == "llama")
    vocab.model = tokenizer_model::sentencepiece;
  else if (model == "gpt2")
    vocab.model = tokenizer_model::byte_level;
  else
    throw fail("tokenizer.ggml.model", "'" + detail::printable(model) +
                                           "' is not supported; kvlab reads \"llama\" (SentencePiece BPE) and \"gpt2\" "
                                           "(byte-level BPE)");
  const bool sentencepiece = vocab.model == tokenizer_model::sentencepiece;

  for (const std::string_view piece : file.get_string_array("tokenizer.ggml.tokens")) vocab.pieces.emplace_back(piece);
  const std::size_t n = vocab.pieces.size();
  if (file.has("tokenizer.ggml.scores")) {
    vocab.scores = file.get_float_array("tokenizer.ggml.scores");
    if (vocab.scores.size() != n)
      throw fail("tokenizer.ggml.scores", std::to_string(vocab.scores.size()) + " scores for " + std::to_string(n) +
                                              " tokens; expected one per token");
  }
  if (file.has("tokenizer.ggml.token_type")) {
    const std::vector<std::int64_t> types = file.get_int_array("tokenizer.ggml.token_type");
    if (types.size() != n)
      throw fail("tokenizer.ggml.token_type", std::to_string(types.size()) + " token types for " + std::to_string(n) +
                                                  " tokens; expected one per token");
    vocab.kinds.reserve(n);
    for (std::size_t id = 0; id < n; ++id) {
      if (types[id] < 1 || types[id] > 6)
        throw fail("tokenizer.ggml.token_type",
                   "token " + std::to_string(id) + " has type " + std::to_string(types[id]) +
                       "; expected 1 (normal), 2 (unknown), 3 (control), 4 (user-defined), 5 (unused) or 6 (byte)");
      vocab.kinds.push_back(static_cast<token_kind>(types[id]));
    }
  } else if (sentencepiece) {
    for (const std::string& piece : vocab.pieces)
      vocab.kinds.push_back(detail::byte_piece_value(piece) ? token_kind::byte : token_kind::normal);
  }
  // llama.cpp's SPM tokenizer merges by score; merges a converter stored beside them are not used.
  if (!sentencepiece && file.has("tokenizer.ggml.merges"))
    for (const std::string_view merge : file.get_string_array("tokenizer.ggml.merges"))
      vocab.merges.emplace_back(merge);

  if (!sentencepiece) {
    const std::string_view pre = file.find_string("tokenizer.ggml.pre").value_or("default");
    const detail::gguf_pre_tokenizer* known = nullptr;
    for (const auto& candidate : detail::gguf_pre_tokenizers)
      if (candidate.name == pre) known = &candidate;
    if (known == nullptr) {
      std::string names;
      for (const auto& candidate : detail::gguf_pre_tokenizers)
        names += (names.empty() ? "\"" : ", \"") + std::string(candidate.name) + "\"";
      throw fail("tokenizer.ggml.pre",
                 "unknown pre-tokenizer '" + detail::printable(pre) + "'; kvlab supports " + names);
    }
    vocab.split = known->split;
    vocab.ignore_merges = known->split == pre_tokenizer::llama3;
  }

  const auto token_id = [&](std::string_view key, std::optional<std::int32_t> absent) -> std::optional<std::int32_t> {
    const auto id = file.find_uint(key);
    if (!id) return absent;
    if (*id >= n)
      throw fail(key, "token id " + std::to_string(*id) + " is outside the " + std::to_string(n) + " tokens");
    return static_cast<std::int32_t>(*id);
  };
  vocab.unk =
      token_id("tokenizer.ggml.unknown_token_id", sentencepiece ? std::optional<std::int32_t>(0) : std::nullopt);
  vocab.bos = token_id("tokenizer.ggml.bos_token_id", sentencepiece ? std::optional<std::int32_t>(1) : std::nullopt);
  vocab.eos = token_id("tokenizer.ggml.eos_token_id", sentencepiece ? std::optional<std::int32_t>(2) : std::nullopt);
  vocab.add_bos = file.find_bool("tokenizer.ggml.add_bos_token").value_or(sentencepiece);
  if (vocab.add_bos && !vocab.bos)
    throw fail("tokenizer.ggml.add_bos_token", "true, but tokenizer.ggml.bos_token_id is missing");
  if (sentencepiece && file.find_bool("tokenizer.ggml.add_space_prefix").value_or(true))
    vocab.dummy_prefix = space_prefix::every_segment;
  vocab.description = "GGUF '" + file.path().string() + "': " + std::string(tokenizer_model_name(vocab.model)) +
                      (sentencepiece ? "" : " (" + std::string(pre_tokenizer_name(vocab.split)) + " split)") + ", " +
                      std::to_string(n) + " pieces" +
                      (sentencepiece ? "" : ", " + std::to_string(vocab.merges.size()) + " merges");
  return tokenizer(std::move(vocab));
}

} // namespace kvlab
