// kvlab.tokenizer:files: tokenizers from files.
//   load_llama2c_tokenizer(file, vocab_size) -> llama2.c's tokenizer.bin (karpathy/llama2.c tokenizer.py
//                                               export: int32 max_token_length, then per token float32
//                                               score, int32 length, bytes; all little-endian)
//   load_hf_tokenizer(tokenizer_json)        -> a Hugging Face tokenizers BPE model (tokenizer.json), with
//                                               BOS/EOS from tokenizer_config.json beside it when present
// Every size a file claims is checked before anything is allocated; bad input is a kvlab::error
// naming the file, the field, what was expected and what was found.
module;
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <initializer_list>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>
export module kvlab.tokenizer:files;
import kvlab.core;
import kvlab.npy;
import :core;

export namespace kvlab {

namespace detail {

inline std::uint32_t load_le32(std::span<const std::byte> bytes, std::size_t at) noexcept {
  std::uint32_t value = 0;
  for (std::size_t i = 0; i < 4; ++i) value |= static_cast<std::uint32_t>(bytes[at + i]) << (8 * i);
  return value;
}

// llama2.c's tokenizer.bin has no token types: run.c treats ids 0, 1, 2 as <unk>, BOS and EOS
// (tokenizer.py writes BOS and EOS as "\n<s>\n" and "\n</s>\n"), and pieces <0xNN> as bytes.
inline token_kind llama2c_token_kind(std::size_t id, std::string_view piece) noexcept {
  if (id == 0) return token_kind::unknown;
  if (id == 1 || id == 2) return token_kind::control;
  return byte_piece_value(piece) ? token_kind::byte : token_kind::normal;
}

inline std::string json_type_name(const json_value& value) {
  if (value.is_object()) return "an object";
  if (value.is_array()) return "an array";
  if (value.is_string()) return "the string \"" + printable(value.string()) + "\"";
  if (value.is_number()) return "the number " + format_number(value.number());
  if (std::holds_alternative<bool>(value.value)) return std::get<bool>(value.value) ? "true" : "false";
  return "null";
}

// Typed access to the fields of a tokenizer.json or tokenizer_config.json; errors name the file
// and the field's path ("model.vocab").
class json_fields {
public:
  json_fields(std::string kind, const std::filesystem::path& file) : kind_(std::move(kind)), file_(file) {}

  [[noreturn]] void fail(std::string_view field, const std::string& problem) const {
    throw error(kind_ + " '" + file_.string() + "': field '" + std::string(field) + "': " + problem);
  }

  // The member `key` of `object`, or nullptr when it is absent or null.
  static const json_value* optional(const json_value& object, std::string_view key) {
    const json_value* value = object.find(key);
    return value == nullptr || std::holds_alternative<std::nullptr_t>(value->value) ? nullptr : value;
  }
  const json_value& required(const json_value& object, std::string_view key, std::string_view field) const {
    const json_value* value = optional(object, key);
    if (value == nullptr) fail(field, "missing");
    return *value;
  }
  const json_value& object(const json_value& value, std::string_view field) const {
    if (!value.is_object()) fail(field, "expected an object, found " + json_type_name(value));
    return value;
  }
  const json_array& array(const json_value& value, std::string_view field) const {
    if (!value.is_array()) fail(field, "expected an array, found " + json_type_name(value));
    return value.array();
  }
  const std::string& string(const json_value& value, std::string_view field) const {
    if (!value.is_string()) fail(field, "expected a string, found " + json_type_name(value));
    return value.string();
  }
  bool boolean(const json_value& object, std::string_view key, std::string_view field, bool absent) const {
    const json_value* value = optional(object, key);
    if (value == nullptr) return absent;
    if (!std::holds_alternative<bool>(value->value))
      fail(field, "expected true or false, found " + json_type_name(*value));
    return std::get<bool>(value->value);
  }
  // A token id: an integer in [0, 2^31).
  std::int32_t id(const json_value& value, std::string_view field) const {
    if (!value.is_number() || value.number() < 0 || value.number() >= 2147483648.0 ||
        std::floor(value.number()) != value.number())
      fail(field, "expected a token id (an integer from 0 to 2^31 - 1), found " + json_type_name(value));
    return static_cast<std::int32_t>(value.number());
  }
  // A string field that must be absent, null or one of `allowed`.
  void expect_string(const json_value& object, std::string_view key, std::string_view field,
                     std::initializer_list<std::string_view> allowed, std::string_view why) const {
    const json_value* value = optional(object, key);
    if (value == nullptr) return;
    if (value->is_string())
      for (const std::string_view a : allowed)
        if (value->string() == a) return;
    fail(field, "found " + json_type_name(*value) + "; " + std::string(why));
  }

private:
  std::string kind_;
  std::filesystem::path file_;
};

// The split regexes of Hugging Face's pre-tokenizers as their tokenizer.json files spell them.
inline std::optional<pre_tokenizer> hf_split_pattern(std::string_view pattern) {
  if (pattern == R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)")
    return pre_tokenizer::gpt2;
  if (pattern ==
      R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)")
    return pre_tokenizer::llama3;
  if (pattern ==
      R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)")
    return pre_tokenizer::qwen2;
  return std::nullopt;
}

// What the normalizer and pre-tokenizer of a tokenizer.json amount to.
struct hf_text_rules {
  tokenizer_model model = tokenizer_model::sentencepiece;
  pre_tokenizer split = pre_tokenizer::gpt2;
  space_prefix prefix = space_prefix::none;
  bool has_normalizer = false;
};

class hf_loader {
public:
  explicit hf_loader(const std::filesystem::path& file) : file_(file), fields_("tokenizer.json", file) {}

  tokenizer load() {
    const std::string text = read_whole_file(file_);
    const json_value root = parse_json(text, "tokenizer.json '" + file_.string() + "'");
    fields_.object(root, "(top level)");
    const json_value& model = fields_.object(fields_.required(root, "model", "model"), "model");
    if (const json_value* type = json_fields::optional(model, "type");
        type == nullptr || !type->is_string() || type->string() != "BPE")
      fields_.fail("model.type", std::string("expected \"BPE\" (kvlab reads BPE tokenizers: Llama 1/2, Mistral, "
                                             "GPT-2, Llama 3, Qwen2), found ") +
                                     (type == nullptr ? "nothing" : json_type_name(*type)));
    check_bpe_options(model);

    vocabulary vocab;
    read_pieces(root, model, vocab);
    read_merges(model, vocab);
    const hf_text_rules rules = text_rules(root);
    vocab.model = rules.model;
    vocab.split = rules.split;
    vocab.dummy_prefix = rules.prefix;
    vocab.byte_fallback = fields_.boolean(model, "byte_fallback", "model.byte_fallback", false);
    vocab.fuse_unk = fields_.boolean(model, "fuse_unk", "model.fuse_unk", false);
    vocab.ignore_merges = fields_.boolean(model, "ignore_merges", "model.ignore_merges", false);
    if (const json_value* unk = json_fields::optional(model, "unk_token")) {
      const std::string& piece = fields_.string(*unk, "model.unk_token");
      vocab.unk = lookup(vocab, piece, "model.unk_token");
      vocab.kinds[static_cast<std::size_t>(*vocab.unk)] = token_kind::unknown;
    }
    if (vocab.model == tokenizer_model::sentencepiece && vocab.byte_fallback)
      for (std::size_t id = 0; id < vocab.pieces.size(); ++id)
        if (vocab.kinds[id] == token_kind::normal && byte_piece_value(vocab.pieces[id]))
          vocab.kinds[id] = token_kind::byte;
    // Added tokens with "normalized": true are matched in the normalizer's output (HF's
    // AddedVocabulary); without a normalizer that is the raw text.
    if (!rules.has_normalizer) vocab.normalized_literals.clear();
    special_tokens(root, vocab);
    vocab.description = "Hugging Face tokenizer.json '" + file_.string() + "': BPE (" +
                        (vocab.model == tokenizer_model::byte_level
                             ? "byte-level, " + std::string(pre_tokenizer_name(vocab.split)) + " split"
                             : std::string("U+2581 for spaces, merge by rank")) +
                        "), " + std::to_string(vocab.pieces.size()) + " pieces, " +
                        std::to_string(vocab.merges.size()) + " merges";
    return tokenizer(std::move(vocab));
  }

private:
  void check_bpe_options(const json_value& model) const {
    if (const json_value* dropout = json_fields::optional(model, "dropout");
        dropout != nullptr && !(dropout->is_number() && dropout->number() == 0))
      fields_.fail("model.dropout", "found " + json_type_name(*dropout) +
                                        "; BPE dropout makes encoding random, kvlab supports null or 0");
    for (const std::string_view key : {"continuing_subword_prefix", "end_of_word_suffix"})
      fields_.expect_string(model, key, "model." + std::string(key), {""},
                            "kvlab supports BPE models without subword prefixes or suffixes (null)");
  }

  // model.vocab (piece -> id) and added_tokens (id, content, special, normalized): ids must be
  // 0 .. N - 1, each once.
  void read_pieces(const json_value& root, const json_value& model, vocabulary& vocab) {
    const json_value& pieces = fields_.object(fields_.required(model, "vocab", "model.vocab"), "model.vocab");
    const json_array empty;
    const json_value* added_value = json_fields::optional(root, "added_tokens");
    const json_array& added = added_value ? fields_.array(*added_value, "added_tokens") : empty;
    const std::size_t most = pieces.object().size() + added.size();
    std::vector<std::pair<std::int32_t, const std::string*>> entries;
    entries.reserve(pieces.object().size());
    std::int32_t largest = -1;
    for (const auto& [piece, id_value] : pieces.object()) {
      const std::int32_t id = fields_.id(id_value, "model.vocab[\"" + printable(piece) + "\"]");
      entries.emplace_back(id, &piece);
      largest = std::max(largest, id);
    }
    for (std::size_t i = 0; i < added.size(); ++i)
      largest = std::max(
          largest, fields_.id(fields_.required(fields_.object(added[i], added_field(i)), "id", added_field(i) + ".id"),
                              added_field(i) + ".id"));
    if (static_cast<std::size_t>(largest) >= most)
      fields_.fail("model.vocab", "token id " + std::to_string(largest) + " with only " + std::to_string(most) +
                                      " pieces and added tokens; ids must be 0 .. N - 1 without gaps");
    vocab.pieces.resize(static_cast<std::size_t>(largest) + 1);
    vocab.kinds.assign(vocab.pieces.size(), token_kind::normal);
    std::vector<bool> seen(vocab.pieces.size(), false);
    for (const auto& [id, piece] : entries) {
      if (seen[static_cast<std::size_t>(id)])
        fields_.fail("model.vocab", "id " + std::to_string(id) + " is given to both '" +
                                        printable(vocab.pieces[static_cast<std::size_t>(id)]) + "' and '" +
                                        printable(*piece) + "'");
      seen[static_cast<std::size_t>(id)] = true;
      vocab.pieces[static_cast<std::size_t>(id)] = *piece;
    }
    for (std::size_t i = 0; i < added.size(); ++i) {
      const json_value& token = added[i];
      const std::string field = added_field(i);
      const auto id = static_cast<std::size_t>(fields_.id(*token.find("id"), field + ".id"));
      const std::string& content =
          fields_.string(fields_.required(token, "content", field + ".content"), field + ".content");
      if (seen[id] && vocab.pieces[id] != content)
        fields_.fail(field, "added token " + std::to_string(id) + " '" + printable(content) +
                                "' but model.vocab has '" + printable(vocab.pieces[id]) + "' at that id");
      seen[id] = true;
      vocab.pieces[id] = content;
      for (const std::string_view flag : {"lstrip", "rstrip", "single_word"})
        if (fields_.boolean(token, flag, field + "." + std::string(flag), false))
          fields_.fail(field + "." + std::string(flag), "true; kvlab matches added tokens exactly and supports "
                                                        "lstrip, rstrip and single_word false");
      const bool special = fields_.boolean(token, "special", field + ".special", false);
      vocab.kinds[id] = special ? token_kind::control : token_kind::user_defined;
      if (fields_.boolean(token, "normalized", field + ".normalized", !special))
        vocab.normalized_literals.push_back(static_cast<std::int32_t>(id));
    }
    for (std::size_t id = 0; id < seen.size(); ++id)
      if (!seen[id]) fields_.fail("model.vocab", "no piece has id " + std::to_string(id) + "; ids must be 0 .. N - 1");
  }

  static std::string added_field(std::size_t i) { return "added_tokens[" + std::to_string(i) + "]"; }

  // model.merges: "left right" strings or [left, right] pairs, in rank order.
  void read_merges(const json_value& model, vocabulary& vocab) const {
    const json_value* merges_value = json_fields::optional(model, "merges");
    if (merges_value == nullptr) return;
    const json_array& merges = fields_.array(*merges_value, "model.merges");
    vocab.merges.reserve(merges.size());
    for (std::size_t rank = 0; rank < merges.size(); ++rank) {
      const std::string field = "model.merges[" + std::to_string(rank) + "]";
      if (merges[rank].is_string()) {
        vocab.merges.push_back(merges[rank].string());
        continue;
      }
      const json_array& pair = fields_.array(merges[rank], field);
      if (pair.size() != 2) fail_pair(field, merges[rank]);
      const std::string& left = fields_.string(pair[0], field + "[0]");
      const std::string& right = fields_.string(pair[1], field + "[1]");
      if (left.empty() || right.empty() || left.find(' ', 1) != std::string::npos)
        fields_.fail(field, "['" + printable(left) + "', '" + printable(right) +
                                "']: kvlab holds merges as \"left right\" and cannot hold an empty piece or a left "
                                "piece with a space after its first character");
      vocab.merges.push_back(left + " " + right);
    }
  }

  [[noreturn]] void fail_pair(const std::string& field, const json_value& value) const {
    fields_.fail(field, "expected \"left right\" or [left, right], found " + json_type_name(value));
  }

  // The normalizer and pre-tokenizer kvlab reproduces: Llama's Sequence[Prepend("▁"),
  // Replace(" ", "▁")] with no pre-tokenizer; Metaspace("▁", prepend_scheme, split false);
  // ByteLevel (with its GPT-2 regex); Sequence[Split(Regex, Isolated), ByteLevel(use_regex false)].
  hf_text_rules text_rules(const json_value& root) const {
    hf_text_rules rules;
    bool prepend = false, replace = false;
    if (const json_value* normalizer = json_fields::optional(root, "normalizer")) {
      rules.has_normalizer = true;
      const auto step = [&](const json_value& n, const std::string& field) {
        const std::string& type =
            fields_.string(fields_.required(fields_.object(n, field), "type", field + ".type"), field + ".type");
        if (type == "Prepend") {
          fields_.expect_string(n, "prepend", field + ".prepend", {escaped_space}, "kvlab supports Prepend(\"▁\")");
          prepend = true;
        } else if (type == "Replace") {
          const json_value& pattern =
              fields_.object(fields_.required(n, "pattern", field + ".pattern"), field + ".pattern");
          fields_.expect_string(pattern, "String", field + ".pattern.String", {" "},
                                "kvlab supports Replace(\" \", \"▁\")");
          if (json_fields::optional(pattern, "String") == nullptr)
            fields_.fail(field + ".pattern", "kvlab supports a String pattern \" \" (Replace(\" \", \"▁\"))");
          fields_.expect_string(n, "content", field + ".content", {escaped_space},
                                "kvlab supports Replace(\" \", \"▁\")");
          replace = true;
        } else {
          fields_.fail(field + ".type", "unsupported normalizer \"" + printable(type) +
                                            "\"; kvlab supports null, Prepend(\"▁\"), Replace(\" \", \"▁\") and a "
                                            "Sequence of them (Llama's)");
        }
      };
      const std::string& type = fields_.string(
          fields_.required(fields_.object(*normalizer, "normalizer"), "type", "normalizer.type"), "normalizer.type");
      if (type == "Sequence") {
        const json_array& steps = fields_.array(fields_.required(*normalizer, "normalizers", "normalizer.normalizers"),
                                                "normalizer.normalizers");
        for (std::size_t i = 0; i < steps.size(); ++i)
          step(steps[i], "normalizer.normalizers[" + std::to_string(i) + "]");
      } else {
        step(*normalizer, "normalizer");
      }
      if (!replace)
        fields_.fail("normalizer", "it does not Replace(\" \", \"▁\"); kvlab supports Llama's "
                                   "Sequence[Prepend(\"▁\"), Replace(\" \", \"▁\")]");
      rules.prefix = prepend ? space_prefix::every_segment : space_prefix::none;
    }
    const json_value* pre = json_fields::optional(root, "pre_tokenizer");
    if (pre == nullptr) {
      if (!replace)
        fields_.fail("pre_tokenizer", "null with no Replace(\" \", \"▁\") normalizer; kvlab supports Llama's "
                                      "normalizer, a Metaspace or a ByteLevel pre-tokenizer");
      return rules;
    }
    fields_.object(*pre, "pre_tokenizer");
    const std::string& type =
        fields_.string(fields_.required(*pre, "type", "pre_tokenizer.type"), "pre_tokenizer.type");
    if (rules.has_normalizer)
      fields_.fail("pre_tokenizer", "a " + printable(type) +
                                        " pre-tokenizer after a normalizer; kvlab supports either Llama's normalizer "
                                        "with no pre-tokenizer, or a pre-tokenizer with no normalizer");
    if (type == "Metaspace") {
      fields_.expect_string(*pre, "replacement", "pre_tokenizer.replacement", {escaped_space},
                            "kvlab supports the replacement \"▁\"");
      if (fields_.boolean(*pre, "split", "pre_tokenizer.split", true))
        fields_.fail("pre_tokenizer.split", "true; kvlab supports Metaspace with split false (Llama's)");
      const json_value* scheme = json_fields::optional(*pre, "prepend_scheme");
      const std::string scheme_name =
          scheme ? fields_.string(*scheme, "pre_tokenizer.prepend_scheme")
                 : (fields_.boolean(*pre, "add_prefix_space", "pre_tokenizer.add_prefix_space", true) ? "always"
                                                                                                      : "never");
      if (scheme_name == "always")
        rules.prefix = space_prefix::every_segment_if_missing;
      else if (scheme_name == "first")
        rules.prefix = space_prefix::first_segment_if_missing;
      else if (scheme_name == "never")
        rules.prefix = space_prefix::none;
      else
        fields_.fail("pre_tokenizer.prepend_scheme",
                     "\"" + printable(scheme_name) + "\"; expected \"always\", \"first\" or \"never\"");
      return rules;
    }
    rules.model = tokenizer_model::byte_level;
    if (type == "ByteLevel") {
      if (!fields_.boolean(*pre, "use_regex", "pre_tokenizer.use_regex", true))
        fields_.fail("pre_tokenizer.use_regex", "false with nothing that splits the text; kvlab supports ByteLevel "
                                                "with its GPT-2 regex or after a Split");
      byte_level_prefix(*pre, "pre_tokenizer", rules);
      return rules;
    }
    if (type != "Sequence")
      fields_.fail("pre_tokenizer.type", "unsupported pre-tokenizer \"" + printable(type) +
                                             "\"; kvlab supports Metaspace, ByteLevel and Sequence[Split, ByteLevel]");
    const json_array& steps = fields_.array(fields_.required(*pre, "pretokenizers", "pre_tokenizer.pretokenizers"),
                                            "pre_tokenizer.pretokenizers");
    const auto step_type = [&](std::size_t i) -> const std::string& {
      const std::string field = "pre_tokenizer.pretokenizers[" + std::to_string(i) + "]";
      return fields_.string(fields_.required(fields_.object(steps[i], field), "type", field + ".type"),
                            field + ".type");
    };
    if (steps.size() != 2 || step_type(0) != "Split" || step_type(1) != "ByteLevel")
      fields_.fail("pre_tokenizer.pretokenizers", "kvlab supports the Sequence [Split (a regex), ByteLevel] of Llama 3 "
                                                  "and Qwen2");
    const json_value& split = steps[0];
    const std::string field = "pre_tokenizer.pretokenizers[0]";
    const json_value& pattern =
        fields_.object(fields_.required(split, "pattern", field + ".pattern"), field + ".pattern");
    const std::string& regex =
        fields_.string(fields_.required(pattern, "Regex", field + ".pattern.Regex"), field + ".pattern.Regex");
    const auto known = hf_split_pattern(regex);
    if (!known)
      fields_.fail(field + ".pattern.Regex", "unknown split regex \"" + printable(regex) +
                                                 "\"; kvlab supports the gpt2, llama3 and qwen2 patterns");
    rules.split = *known;
    fields_.expect_string(split, "behavior", field + ".behavior", {"Isolated"}, "kvlab supports \"Isolated\"");
    if (fields_.boolean(split, "invert", field + ".invert", false))
      fields_.fail(field + ".invert", "true; expected false");
    byte_level_prefix(steps[1], "pre_tokenizer.pretokenizers[1]", rules);
    return rules;
  }

  void byte_level_prefix(const json_value& byte_level, const std::string& field, hf_text_rules& rules) const {
    rules.prefix = fields_.boolean(byte_level, "add_prefix_space", field + ".add_prefix_space", true)
                       ? space_prefix::every_segment_if_missing
                       : space_prefix::none;
  }

  std::int32_t lookup(const vocabulary& vocab, const std::string& piece, std::string_view field) const {
    for (std::size_t id = vocab.pieces.size(); id-- > 0;)
      if (vocab.pieces[id] == piece) return static_cast<std::int32_t>(id);
    fields_.fail(field, "the token '" + printable(piece) + "' is not in the vocabulary");
  }

  // BOS, EOS and add_bos: tokenizer_config.json beside tokenizer.json when it exists (bos_token,
  // eos_token, add_bos_token); otherwise, and for what it leaves out, the post-processor's
  // template (a special token before the sequence is BOS) and the conventional names of the
  // special added tokens (<s>, <|begin_of_text|>; </s>, <|endoftext|>, <|end_of_text|>).
  void special_tokens(const json_value& root, vocabulary& vocab) const {
    const auto by_name = [&](std::initializer_list<std::string_view> names) -> std::optional<std::int32_t> {
      for (const std::string_view name : names)
        for (std::size_t id = 0; id < vocab.pieces.size(); ++id)
          if (vocab.kinds[id] == token_kind::control && vocab.pieces[id] == name) return static_cast<std::int32_t>(id);
      return std::nullopt;
    };
    vocab.eos = by_name({"</s>", "<|endoftext|>", "<|end_of_text|>"});
    vocab.bos = by_name({"<s>", "<|begin_of_text|>"});
    vocab.add_bos = false;
    if (const auto template_bos = post_processor_bos(root, vocab)) {
      vocab.bos = template_bos;
      vocab.add_bos = true;
    }
    const std::filesystem::path config_file = file_.parent_path() / "tokenizer_config.json";
    if (!std::filesystem::exists(config_file)) return;
    const json_fields config("tokenizer_config.json", config_file);
    const std::string text = read_whole_file(config_file);
    const json_value root_config = parse_json(text, "tokenizer_config.json '" + config_file.string() + "'");
    config.object(root_config, "(top level)");
    const auto token = [&](std::string_view key) -> std::optional<std::int32_t> {
      const json_value* value = json_fields::optional(root_config, key);
      if (value == nullptr) return std::nullopt;
      const std::string field(key);
      const std::string& content =
          value->is_object() ? config.string(config.required(*value, "content", field + ".content"), field + ".content")
                             : config.string(*value, field);
      for (std::size_t id = vocab.pieces.size(); id-- > 0;)
        if (vocab.pieces[id] == content) return static_cast<std::int32_t>(id);
      config.fail(field, "the token '" + printable(content) + "' is not in " + file_.string());
    };
    if (const auto bos = token("bos_token")) vocab.bos = bos;
    if (const auto eos = token("eos_token")) vocab.eos = eos;
    vocab.add_bos = config.boolean(root_config, "add_bos_token", "add_bos_token", vocab.add_bos);
    if (vocab.add_bos && !vocab.bos) config.fail("add_bos_token", "true, but no BOS token is named");
  }

  // The special token a TemplateProcessing post-processor (alone or in a Sequence) puts before
  // the single sequence.
  std::optional<std::int32_t> post_processor_bos(const json_value& root, const vocabulary& vocab) const {
    const json_value* processor = json_fields::optional(root, "post_processor");
    if (processor == nullptr || !processor->is_object()) return std::nullopt;
    const json_value* templated = processor;
    if (const json_value* steps = processor->find("processors"); steps != nullptr && steps->is_array()) {
      templated = nullptr;
      for (const json_value& step : steps->array())
        if (const json_value* type = step.find("type");
            type && type->is_string() && type->string() == "TemplateProcessing")
          templated = &step;
    }
    if (templated == nullptr) return std::nullopt;
    const json_value* type = templated->find("type");
    const json_value* single = templated->find("single");
    if (!type || !type->is_string() || type->string() != "TemplateProcessing" || !single || !single->is_array() ||
        single->array().empty())
      return std::nullopt;
    const json_value* first = single->array().front().find("SpecialToken");
    if (first == nullptr) return std::nullopt;
    const std::string& name = fields_.string(fields_.required(*first, "id", "post_processor.single[0].SpecialToken.id"),
                                             "post_processor.single[0].SpecialToken.id");
    if (const json_value* specials = templated->find("special_tokens"))
      if (const json_value* entry = specials->find(name))
        if (const json_value* ids = entry->find("ids"); ids && ids->is_array() && ids->array().size() == 1)
          return fields_.id(ids->array().front(), "post_processor.special_tokens." + name + ".ids[0]");
    return lookup(vocab, name, "post_processor.single[0].SpecialToken.id");
  }

  std::filesystem::path file_;
  json_fields fields_;
};

} // namespace detail

// llama2.c's tokenizer.bin for a model of `vocab_size` tokens (the checkpoint's header says how
// many): BOS 1, EOS 2, <unk> 0, BOS added by default, encoding exactly as run.c's encode.
inline tokenizer load_llama2c_tokenizer(const std::filesystem::path& file, std::size_t vocab_size) {
  const auto fail = [&](const std::string& problem) {
    return error("llama2.c tokenizer '" + file.string() + "': " + problem);
  };
  const mapped_file mapped(file);
  const std::span<const std::byte> bytes = mapped.bytes();
  if (vocab_size == 0) throw fail("vocab_size 0: a model has at least one token");
  if (bytes.size() < 4)
    throw fail("the file is " + std::to_string(bytes.size()) + " bytes; expected at least the 4-byte max_token_length");
  const auto max_token_length = static_cast<std::int32_t>(detail::load_le32(bytes, 0));
  if (max_token_length < 1 || static_cast<std::uint64_t>(max_token_length) > bytes.size())
    throw fail("absurd max_token_length " + std::to_string(max_token_length) + ": expected 1 to the file size " +
               std::to_string(bytes.size()));
  // Every token takes at least 8 bytes (score and length), so the size is checked before reserving.
  if (vocab_size > (bytes.size() - 4) / 8)
    throw fail("vocab_size " + std::to_string(vocab_size) + " needs at least " + std::to_string(vocab_size) +
               " x 8 bytes of tokens, but only " + std::to_string(bytes.size() - 4) + " bytes follow the header");
  vocabulary vocab;
  vocab.model = tokenizer_model::llama2c;
  vocab.pieces.reserve(vocab_size);
  vocab.scores.reserve(vocab_size);
  vocab.kinds.reserve(vocab_size);
  std::size_t at = 4;
  for (std::size_t id = 0; id < vocab_size; ++id) {
    const std::string where = "token " + std::to_string(id) + " at byte " + std::to_string(at);
    if (bytes.size() - at < 8)
      throw fail(where + ": expected its 8-byte score and length, but the file ends after " +
                 std::to_string(bytes.size() - at) + " bytes (" + std::to_string(id) + " of " +
                 std::to_string(vocab_size) + " tokens read)");
    const float score = std::bit_cast<float>(detail::load_le32(bytes, at));
    const auto length = static_cast<std::int32_t>(detail::load_le32(bytes, at + 4));
    at += 8;
    if (length < 0 || length > max_token_length)
      throw fail(where + ": length " + std::to_string(length) + " outside 0 .. max_token_length " +
                 std::to_string(max_token_length));
    if (static_cast<std::size_t>(length) > bytes.size() - at)
      throw fail(where + ": length " + std::to_string(length) + " runs past the end of the file (" +
                 std::to_string(bytes.size() - at) + " bytes left)");
    std::string piece(reinterpret_cast<const char*>(bytes.data() + at), static_cast<std::size_t>(length));
    at += static_cast<std::size_t>(length);
    vocab.kinds.push_back(detail::llama2c_token_kind(id, piece));
    vocab.pieces.push_back(std::move(piece));
    vocab.scores.push_back(score);
  }
  if (at != bytes.size())
    throw fail(std::to_string(bytes.size() - at) + " bytes follow the " + std::to_string(vocab_size) +
               " tokens; is vocab_size right?");
  vocab.unk = 0;
  vocab.bos = 1;
  vocab.eos = 2;
  vocab.add_bos = true;
  vocab.description = "llama2.c tokenizer '" + file.string() + "': sentencepiece-bpe (run.c encode), " +
                      std::to_string(vocab_size) + " pieces";
  return tokenizer(std::move(vocab));
}

// A Hugging Face tokenizer.json whose model is BPE: Llama-style (U+2581 for spaces, byte
// fallback, merges by rank) or byte-level (GPT-2, Llama 3, Qwen2 splits). Unsupported models,
// normalizers or pre-tokenizers are a kvlab::error naming the file and the field.
inline tokenizer load_hf_tokenizer(const std::filesystem::path& tokenizer_json) {
  return detail::hf_loader(tokenizer_json).load();
}

} // namespace kvlab
