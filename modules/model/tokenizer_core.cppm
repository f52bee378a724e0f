// kvlab.tokenizer:core: the vocabulary of a Llama-family model and the tokenizer built from it.
//   sentencepiece: SentencePiece BPE (Kudo & Richardson, arXiv 1808.06226) as llama.cpp's SPM
//                  tokenizer runs it (merge by piece score), or Hugging Face's BPE model over
//                  U+2581-escaped text (merge by merge rank) when the vocabulary has merges
//   llama2c:       llama2.c's run.c `encode` (Karpathy), spaces kept as " ", ids byte + 3 as byte fallback
//   byte_level:    GPT-2's byte-level BPE (Radford et al. 2019): a regex pre-tokenizer (PCRE2, UTF and
//                  Unicode properties), bytes mapped to printable characters, merge by merge rank
module;
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>
export module kvlab.tokenizer:core;
import kvlab.core;
import kvlab.npy;

export namespace kvlab {

// GGUF's tokenizer.ggml.token_type values (llama.cpp's llama_token_type).
enum class token_kind : std::uint8_t { normal = 1, unknown = 2, control = 3, user_defined = 4, unused = 5, byte = 6 };

enum class tokenizer_model : std::uint8_t { sentencepiece, llama2c, byte_level };

// The regex a byte-level tokenizer splits text with before BPE.
enum class pre_tokenizer : std::uint8_t { gpt2, llama3, qwen2 };

// Where the SentencePiece dummy prefix (U+2581 for sentencepiece, " " for byte_level) goes. A
// segment is a stretch of text between tokens matched literally (special tokens).
enum class space_prefix : std::uint8_t {
  none,
  every_segment,            // SentencePiece's add_dummy_prefix as llama.cpp applies it; HF's Prepend normalizer
  every_segment_if_missing, // unless the segment starts with a space: HF Metaspace "always", ByteLevel add_prefix_space
  first_segment_if_missing, // only at the start of the text: HF Metaspace prepend_scheme "first"
};

inline std::string_view tokenizer_model_name(tokenizer_model model) noexcept {
  switch (model) {
  case tokenizer_model::sentencepiece: return "sentencepiece-bpe";
  case tokenizer_model::llama2c: return "llama2.c sentencepiece-bpe";
  case tokenizer_model::byte_level: return "byte-level-bpe";
  }
  return "unknown";
}

inline std::string_view pre_tokenizer_name(pre_tokenizer split) noexcept {
  switch (split) {
  case pre_tokenizer::gpt2: return "gpt2";
  case pre_tokenizer::llama3: return "llama3";
  case pre_tokenizer::qwen2: return "qwen2";
  }
  return "unknown";
}

// Everything a tokenizer is built from; the loaders fill it from a file, tests by hand.
struct vocabulary {
  tokenizer_model model = tokenizer_model::sentencepiece;
  std::vector<std::string> pieces; // token id -> its text (sentencepiece: spaces as U+2581)
  std::vector<float> scores;       // one per piece, or empty; sentencepiece without merges and llama2c merge by them
  std::vector<token_kind> kinds;   // one per piece, or empty (all normal)
  std::vector<std::string> merges; // "left right" in rank order; a sentencepiece vocabulary with merges merges by rank
  pre_tokenizer split = pre_tokenizer::gpt2; // byte_level only
  std::optional<std::int32_t> bos, eos, unk;
  bool add_bos = false;
  space_prefix dummy_prefix = space_prefix::none;
  bool byte_fallback = true;  // sentencepiece: a character without a piece becomes its <0xNN> pieces (else unk)
  bool fuse_unk = false;      // consecutive unknown characters give one unk (HF fuse_unk)
  bool ignore_merges = false; // byte_level: a pre-token that is a piece is taken whole (HF ignore_merges)
  // Control and user-defined tokens matched in the text after the dummy prefix and the U+2581
  // escape, as "normalize(content)" (HF added tokens with "normalized": true under a normalizer);
  // the other control and user-defined tokens are matched in the raw text.
  std::vector<std::int32_t> normalized_literals;
  std::string description; // provenance, e.g. "sentencepiece-bpe, 32000 pieces"
};

namespace detail {

struct string_hash {
  using is_transparent = void;
  std::size_t operator()(std::string_view text) const noexcept { return std::hash<std::string_view>{}(text); }
};
using piece_index = std::unordered_map<std::string, std::int32_t, string_hash, std::equal_to<>>;

inline constexpr std::string_view escaped_space = "\xe2\x96\x81"; // U+2581, SentencePiece's meta symbol

// Bytes of the UTF-8 sequence a lead byte starts, from its top four bits, as llama.cpp's
// unicode_len_utf8 (a stray continuation byte counts as one).
inline std::size_t utf8_sequence_length(char lead) noexcept {
  constexpr std::array<std::uint8_t, 16> lengths = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return lengths[static_cast<unsigned char>(lead) >> 4];
}

// GPT-2's bytes_to_unicode (openai/gpt-2 encoder.py): the printable bytes ! to ~, ¡ to ¬ and
// ® to ÿ stand for themselves; the other 68 bytes, in increasing order, for U+0100 onwards.
inline std::uint32_t gpt2_byte_code_point(std::uint8_t byte) noexcept {
  if ((byte >= 0x21 && byte <= 0x7e) || (byte >= 0xa1 && byte <= 0xac) || byte >= 0xae) return byte;
  if (byte <= 0x20) return 0x100 + byte;
  if (byte <= 0xa0) return 0x100 + 0x21 + (byte - 0x7f);
  return 0x100 + 0x21 + 0x22; // 0xad, the soft hyphen
}

// "<0xNN>" (SentencePiece's byte pieces, hex digits in either case) -> the byte.
inline std::optional<std::uint8_t> byte_piece_value(std::string_view piece) noexcept {
  if (piece.size() != 6 || piece.substr(0, 3) != "<0x" || piece[5] != '>') return std::nullopt;
  const int high = hex_digit_value(piece[3]), low = hex_digit_value(piece[4]);
  if (high < 0 || low < 0) return std::nullopt;
  return static_cast<std::uint8_t>(high << 4 | low);
}

// The split patterns, as the models' tokenizer.json states them; the contractions use explicit
// case classes as llama.cpp does, so (?i) cannot fold other letters (the long s, the Kelvin sign) into them.
inline std::string_view pre_tokenizer_pattern(pre_tokenizer split) noexcept {
  switch (split) {
  case pre_tokenizer::gpt2: return R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
  case pre_tokenizer::llama3:
    return R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  case pre_tokenizer::qwen2:
    return R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  }
  return {};
}

// A compiled PCRE2 pattern (UTF, Unicode properties for \p, \s and \w, invalid UTF-8 allowed in
// subjects), shared by copies of the tokenizer; matching is thread-safe (match data per call).
class split_regex {
public:
  explicit split_regex(std::string_view pattern) {
    int code = 0;
    PCRE2_SIZE offset = 0;
    pcre2_code* compiled = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                         PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &code, &offset, nullptr);
    if (compiled == nullptr)
      throw error("pre-tokenizer regex '" + std::string(pattern) + "': PCRE2 cannot compile it at offset " +
                  std::to_string(offset) + ": " + message(code));
    code_.reset(compiled, pcre2_code_free);
    // JIT is an optimisation only: without it (a build without JIT support) the interpreter runs.
    pcre2_jit_compile(compiled, PCRE2_JIT_COMPLETE);
  }

  // Calls piece(text) for consecutive pieces covering `text`: each match, and each stretch no
  // alternative matches (bytes that are not UTF-8) as a piece of its own.
  template <class Piece>
  void split(std::string_view text, Piece&& piece) const {
    const std::unique_ptr<pcre2_match_data, void (*)(pcre2_match_data*)> match(
        pcre2_match_data_create_from_pattern(code_.get(), nullptr), pcre2_match_data_free);
    if (!match) throw error("pre-tokenizer: PCRE2 cannot allocate match data");
    const auto subject = reinterpret_cast<PCRE2_SPTR>(text.data());
    std::size_t at = 0;
    while (at < text.size()) {
      const int found = pcre2_match(code_.get(), subject, text.size(), at, 0, match.get(), nullptr);
      if (found == PCRE2_ERROR_NOMATCH) {
        piece(text.substr(at));
        return;
      }
      if (found < 0) throw error("pre-tokenizer: PCRE2 matching failed: " + message(found));
      const PCRE2_SIZE* range = pcre2_get_ovector_pointer(match.get());
      std::size_t start = range[0], end = range[1];
      if (start > at) piece(text.substr(at, start - at));
      if (end == start) end = std::min(text.size(), start + utf8_sequence_length(text[start]));
      piece(text.substr(start, end - start));
      at = end;
    }
  }

private:
  static std::string message(int code) {
    std::array<PCRE2_UCHAR, 256> buffer{};
    const int length = pcre2_get_error_message(code, buffer.data(), buffer.size());
    return length < 0 ? "error " + std::to_string(code)
                      : std::string(reinterpret_cast<const char*>(buffer.data()), static_cast<std::size_t>(length));
  }

  std::shared_ptr<pcre2_code> code_;
};

// Tokens matched literally in the text (special tokens), leftmost and then longest first, as
// Hugging Face's added-token matcher (Aho-Corasick, LeftmostLongest).
class literal_matcher {
public:
  struct match {
    std::size_t start, length;
    std::int32_t id;
  };

  void add(std::string pattern, std::int32_t id, bool special) {
    if (pattern.empty()) return;
    auto& bucket = by_first_byte_[static_cast<unsigned char>(pattern[0])];
    const auto shorter =
        std::ranges::find_if(bucket, [&](const entry& e) { return e.pattern.size() < pattern.size(); });
    bucket.insert(shorter, {std::move(pattern), id, special});
  }

  // The first match at or after `from`; special (control, unknown) tokens only if `special`.
  std::optional<match> find(std::string_view text, std::size_t from, bool special) const {
    for (std::size_t at = from; at < text.size(); ++at)
      for (const entry& e : by_first_byte_[static_cast<unsigned char>(text[at])])
        if ((special || !e.special) && text.substr(at, e.pattern.size()) == e.pattern)
          return match{at, e.pattern.size(), e.id};
    return std::nullopt;
  }

private:
  struct entry {
    std::string pattern;
    std::int32_t id;
    bool special;
  };
  std::array<std::vector<entry>, 256> by_first_byte_;
};

// A symbol of the BPE working sequence: a stretch of the working text, linked to its neighbours.
struct bpe_symbol {
  std::size_t start, length;
  std::int32_t prev, next;
  std::int32_t id; // its piece, or -1 while it is a character without one
};

// A possible merge of two adjacent symbols; `length` identifies the pair (symbols only grow, so
// a pair whose lengths no longer add up to it was changed by an earlier merge).
struct bpe_candidate {
  double priority; // the merged piece's score, or minus the merge rank
  std::int32_t left, right;
  std::size_t length;
  std::int32_t merged;
};

struct bpe_candidate_order {
  // Highest priority first; ties to the leftmost pair.
  bool operator()(const bpe_candidate& a, const bpe_candidate& b) const noexcept {
    return a.priority < b.priority || (a.priority == b.priority && a.left > b.left);
  }
};

struct bpe_work {
  std::string text;
  std::vector<bpe_symbol> symbols;
  std::vector<bpe_candidate> heap;

  void clear() {
    text.clear();
    symbols.clear();
    heap.clear();
  }
  void push(std::string_view piece, std::int32_t id) {
    const auto index = static_cast<std::int32_t>(symbols.size());
    if (index > 0) symbols.back().next = index;
    symbols.push_back({text.size(), piece.size(), index - 1, -1, id});
    text += piece;
  }
};

} // namespace detail

class tokenizer {
public:
  // Checks the vocabulary: ids in range, one score and kind per piece, byte pieces of the form
  // <0xNN>, merges of existing pieces whose concatenation is a piece; throws kvlab::error.
  explicit tokenizer(vocabulary vocab) : vocab_(std::move(vocab)) {
    if (vocab_.description.empty())
      vocab_.description =
          std::string(tokenizer_model_name(vocab_.model)) + ", " + std::to_string(vocab_.pieces.size()) + " pieces";
    validate_sizes();
    index_pieces();
    index_merges();
    index_literals();
    if (vocab_.model == tokenizer_model::byte_level) {
      for (unsigned byte = 0; byte < 256; ++byte) {
        std::string character;
        append_utf8(character, detail::gpt2_byte_code_point(static_cast<std::uint8_t>(byte)));
        const auto id = find(character);
        if (!id)
          fail("byte-level vocabulary has no piece for byte " + std::to_string(byte) + " (the character '" + character +
               "' of GPT-2's byte-to-unicode table)");
        byte_ids_[byte] = *id;
        byte_characters_[byte] = std::move(character);
        gpt2_bytes_[detail::gpt2_byte_code_point(static_cast<std::uint8_t>(byte))] = static_cast<std::int16_t>(byte);
      }
      regex_ = std::make_shared<detail::split_regex>(detail::pre_tokenizer_pattern(vocab_.split));
    }
    if (vocab_.model == tokenizer_model::llama2c) {
      if (vocab_.pieces.size() < 259)
        fail("llama2.c's encoder falls back to token byte + 3 for every byte, so it needs at least 259 pieces; found " +
             std::to_string(vocab_.pieces.size()));
      const auto space = find(" ");
      if (!space) fail("llama2.c's encoder prepends the piece \" \" as its dummy prefix, and the vocabulary has none");
      llama2c_space_ = *space;
    }
  }

  // Token ids of `text`, preceded by BOS if `add_bos`. Control and unknown tokens' text (such as
  // "<s>") is matched as that token only if `parse_special` (llama.cpp's parse_special; Hugging
  // Face always matches its special added tokens); user-defined tokens always are. llama2.c's
  // encoder matches none.
  std::vector<std::int32_t> encode(std::string_view text, bool add_bos, bool parse_special = true) const {
    if (add_bos && !vocab_.bos) fail("encode with BOS: the vocabulary has no BOS token");
    std::vector<std::int32_t> ids;
    detail::bpe_work work;
    if (vocab_.model == tokenizer_model::llama2c) {
      encode_llama2c(text, add_bos, work, ids);
      return ids;
    }
    if (add_bos) ids.push_back(*vocab_.bos);
    std::size_t at = 0;
    while (at < text.size()) {
      const auto literal = raw_literals_.find(text, at, parse_special);
      const std::size_t end = literal ? literal->start : text.size();
      if (end > at) encode_segment(text.substr(at, end - at), at == 0, parse_special, work, ids);
      if (!literal) break;
      ids.push_back(literal->id);
      at = literal->start + literal->length;
    }
    return ids;
  }

  // The text of `ids`: byte pieces as their byte, U+2581 as a space (sentencepiece), GPT-2's
  // characters as their bytes (byte_level), control tokens (BOS, EOS) as nothing; the space of a
  // dummy prefix at the start is removed (SentencePiece's decoder), so decode(encode(t)) == t.
  std::string decode(std::span<const std::int32_t> ids) const {
    std::string text;
    for (const std::int32_t id : ids) append_piece_text(text, checked(id));
    const bool strips_prefix =
        vocab_.model == tokenizer_model::llama2c ||
        (vocab_.model == tokenizer_model::sentencepiece && vocab_.dummy_prefix != space_prefix::none);
    if (strips_prefix && !text.empty() && text.front() == ' ') text.erase(0, 1);
    return text;
  }

  // The piece of one token exactly as the vocabulary holds it.
  const std::string& piece(std::int32_t id) const { return vocab_.pieces[checked(id)]; }
  token_kind kind(std::int32_t id) const { return vocab_.kinds[checked(id)]; }
  // The id of a piece (the last token holding it, as llama.cpp's token_to_id), if any.
  std::optional<std::int32_t> find(std::string_view piece) const {
    const auto found = ids_.find(piece);
    return found == ids_.end() ? std::nullopt : std::optional<std::int32_t>(found->second);
  }

  std::size_t size() const noexcept { return vocab_.pieces.size(); }
  std::optional<std::int32_t> bos() const noexcept { return vocab_.bos; }
  std::optional<std::int32_t> eos() const noexcept { return vocab_.eos; }
  std::optional<std::int32_t> unk() const noexcept { return vocab_.unk; }
  bool add_bos() const noexcept { return vocab_.add_bos; }
  tokenizer_model model() const noexcept { return vocab_.model; }
  const std::string& description() const noexcept { return vocab_.description; }
  const vocabulary& vocab() const noexcept { return vocab_; }

private:
  [[noreturn]] void fail(const std::string& problem) const {
    throw error("tokenizer (" + vocab_.description + "): " + problem);
  }

  std::size_t checked(std::int32_t id) const {
    if (id < 0 || static_cast<std::size_t>(id) >= vocab_.pieces.size())
      fail("token id " + std::to_string(id) + " is outside the vocabulary of " + std::to_string(vocab_.pieces.size()) +
           " pieces");
    return static_cast<std::size_t>(id);
  }

  std::string token_name(std::size_t id) const {
    return "token " + std::to_string(id) + " '" + detail::printable(vocab_.pieces[id]) + "'";
  }

  void validate_sizes() {
    const std::size_t n = vocab_.pieces.size();
    if (n == 0) fail("the vocabulary has no pieces");
    if (n > static_cast<std::size_t>(INT32_MAX)) fail(std::to_string(n) + " pieces do not fit 32-bit token ids");
    if (!vocab_.scores.empty() && vocab_.scores.size() != n)
      fail(std::to_string(vocab_.scores.size()) + " scores for " + std::to_string(n) +
           " pieces; expected one per piece");
    const bool merges_by_score = vocab_.model == tokenizer_model::llama2c ||
                                 (vocab_.model == tokenizer_model::sentencepiece && vocab_.merges.empty());
    if (merges_by_score && vocab_.scores.empty())
      fail("a " + std::string(tokenizer_model_name(vocab_.model)) +
           " vocabulary without merges merges by piece score, and it has no scores");
    for (std::size_t id = 0; id < vocab_.scores.size(); ++id)
      if (std::isnan(vocab_.scores[id])) fail(token_name(id) + " has a NaN score");
    if (vocab_.kinds.empty()) vocab_.kinds.assign(n, token_kind::normal);
    if (vocab_.kinds.size() != n)
      fail(std::to_string(vocab_.kinds.size()) + " token kinds for " + std::to_string(n) +
           " pieces; expected one per piece");
    for (std::size_t id = 0; id < n; ++id) {
      const auto kind = static_cast<unsigned>(vocab_.kinds[id]);
      if (kind < 1 || kind > 6)
        fail(token_name(id) + " has token type " + std::to_string(kind) +
             "; expected 1 (normal), 2 (unknown), 3 (control), 4 (user-defined), 5 (unused) or 6 (byte)");
    }
    const auto check_id = [&](const std::optional<std::int32_t>& id, std::string_view what) {
      if (id && (*id < 0 || static_cast<std::size_t>(*id) >= n))
        fail(std::string(what) + " id " + std::to_string(*id) + " is outside the vocabulary of " + std::to_string(n) +
             " pieces");
    };
    check_id(vocab_.bos, "BOS");
    check_id(vocab_.eos, "EOS");
    check_id(vocab_.unk, "unknown-token");
    for (const std::int32_t id : vocab_.normalized_literals) check_id(id, "normalized literal token");
    if (vocab_.add_bos && !vocab_.bos) fail("add_bos is set but the vocabulary has no BOS token");
  }

  void index_pieces() {
    ids_.reserve(vocab_.pieces.size());
    for (std::size_t id = 0; id < vocab_.pieces.size(); ++id) {
      const std::string& piece = vocab_.pieces[id];
      if (!piece.empty()) ids_.insert_or_assign(piece, static_cast<std::int32_t>(id));
      if (vocab_.kinds[id] != token_kind::byte) continue;
      const auto byte = detail::byte_piece_value(piece);
      if (!byte) fail(token_name(id) + " is a byte token but its piece is not of the form <0xNN>");
      byte_pieces_[*byte] = static_cast<std::int32_t>(id);
    }
  }

  // A merge "left right" splits at the first space after its first byte (llama.cpp's rule, so a
  // left piece may start with a space); ranks are positions, and a repeated pair keeps its first.
  void index_merges() {
    if (vocab_.merges.empty()) return;
    if (vocab_.model == tokenizer_model::llama2c) fail("llama2.c vocabularies merge by score and have no merges");
    merges_.reserve(vocab_.merges.size());
    for (std::size_t rank = 0; rank < vocab_.merges.size(); ++rank) {
      const std::string& merge = vocab_.merges[rank];
      const auto space = merge.find(' ', 1);
      const auto where = [&] { return "merge " + std::to_string(rank) + " '" + detail::printable(merge) + "'"; };
      if (space == std::string::npos || space + 1 == merge.size())
        fail(where() + " is not two pieces separated by a space");
      const std::string_view left = std::string_view(merge).substr(0, space),
                             right = std::string_view(merge).substr(space + 1);
      const auto left_id = find(left), right_id = find(right), merged_id = find(std::string(left) + std::string(right));
      if (!left_id) fail(where() + ": its left piece '" + detail::printable(left) + "' is not in the vocabulary");
      if (!right_id) fail(where() + ": its right piece '" + detail::printable(right) + "' is not in the vocabulary");
      if (!merged_id) fail(where() + ": the merged piece is not in the vocabulary");
      merges_.try_emplace(pair_key(*left_id, *right_id), static_cast<std::int32_t>(rank), *merged_id);
    }
  }

  void index_literals() {
    std::vector<bool> normalized(vocab_.pieces.size(), false);
    for (const std::int32_t id : vocab_.normalized_literals) {
      const token_kind kind = vocab_.kinds[static_cast<std::size_t>(id)];
      if (kind != token_kind::control && kind != token_kind::user_defined && kind != token_kind::unknown)
        fail(token_name(static_cast<std::size_t>(id)) +
             " is listed as a normalized literal but is not a control, unknown or user-defined token");
      normalized[static_cast<std::size_t>(id)] = true;
    }
    if (vocab_.model == tokenizer_model::llama2c) return;
    for (std::size_t id = 0; id < vocab_.pieces.size(); ++id) {
      const token_kind kind = vocab_.kinds[id];
      if (kind != token_kind::control && kind != token_kind::user_defined && kind != token_kind::unknown) continue;
      const bool special = kind != token_kind::user_defined;
      if (normalized[id])
        normalized_literals_.add(normalize(vocab_.pieces[id], true), static_cast<std::int32_t>(id), special);
      else
        raw_literals_.add(vocab_.pieces[id], static_cast<std::int32_t>(id), special);
    }
  }

  static std::uint64_t pair_key(std::int32_t left, std::int32_t right) noexcept {
    return static_cast<std::uint64_t>(static_cast<std::uint32_t>(left)) << 32 | static_cast<std::uint32_t>(right);
  }

  bool prefix_wanted(std::string_view segment, bool first, std::string_view space) const noexcept {
    switch (vocab_.dummy_prefix) {
    case space_prefix::none: return false;
    case space_prefix::every_segment: return true;
    case space_prefix::every_segment_if_missing: return !segment.starts_with(' ') && !segment.starts_with(space);
    case space_prefix::first_segment_if_missing:
      return first && !segment.starts_with(' ') && !segment.starts_with(space);
    }
    return false;
  }

  // A sentencepiece segment as the merges see it: the dummy prefix, then every space as U+2581.
  std::string normalize(std::string_view segment, bool first) const {
    std::string out;
    out.reserve(segment.size() + segment.size() / 2 + 3);
    if (prefix_wanted(segment, first, detail::escaped_space)) out += detail::escaped_space;
    for (const char c : segment) {
      if (c == ' ')
        out += detail::escaped_space;
      else
        out += c;
    }
    return out;
  }

  void encode_segment(std::string_view segment, bool first, bool parse_special, detail::bpe_work& work,
                      std::vector<std::int32_t>& ids) const {
    if (vocab_.model == tokenizer_model::byte_level) {
      const bool prefix = prefix_wanted(segment, first, " ");
      std::string prefixed;
      if (prefix) prefixed = " " + std::string(segment);
      regex_->split(prefix ? std::string_view(prefixed) : segment,
                    [&](std::string_view word) { encode_byte_level_word(word, work, ids); });
      return;
    }
    const std::string normalized = normalize(segment, first);
    const std::string_view text = normalized;
    std::size_t at = 0;
    while (at < text.size()) {
      const auto literal = normalized_literals_.find(text, at, parse_special);
      const std::size_t end = literal ? literal->start : text.size();
      if (end > at) encode_sentencepiece_word(text.substr(at, end - at), work, ids);
      if (!literal) break;
      ids.push_back(literal->id);
      at = literal->start + literal->length;
    }
  }

  // SentencePiece BPE over the characters of `word` (llama.cpp's llm_tokenizer_spm): merge by
  // score, or by rank when the vocabulary has merges (HF BPE), then characters without a piece
  // become their byte pieces, or unk.
  void encode_sentencepiece_word(std::string_view word, detail::bpe_work& work, std::vector<std::int32_t>& ids) const {
    work.clear();
    for (std::size_t at = 0; at < word.size();) {
      const std::size_t length = std::min(detail::utf8_sequence_length(word[at]), word.size() - at);
      const std::string_view character = word.substr(at, length);
      work.push(character, find(character).value_or(-1));
      at += length;
    }
    merge(work);
    bool previous_unknown = false;
    for (std::int32_t i = 0; i >= 0; i = work.symbols[static_cast<std::size_t>(i)].next) {
      const detail::bpe_symbol& symbol = work.symbols[static_cast<std::size_t>(i)];
      if (symbol.id >= 0) {
        ids.push_back(symbol.id);
        previous_unknown = false;
        continue;
      }
      const std::string_view text = std::string_view(work.text).substr(symbol.start, symbol.length);
      const bool bytes = vocab_.byte_fallback && std::ranges::all_of(text, [&](char c) {
                           return byte_pieces_[static_cast<unsigned char>(c)] >= 0;
                         });
      if (bytes) {
        for (const char c : text) ids.push_back(byte_pieces_[static_cast<unsigned char>(c)]);
        previous_unknown = false;
      } else if (vocab_.unk) {
        if (!(vocab_.fuse_unk && previous_unknown)) ids.push_back(*vocab_.unk);
        previous_unknown = true;
      } else {
        fail("the character '" + detail::printable(text) + "' has no piece, " +
             (vocab_.byte_fallback ? "no byte pieces" : "byte fallback is off") + " and there is no unknown token");
      }
    }
  }

  // GPT-2 byte-level BPE of one pre-token: its bytes as GPT-2's characters, merged by rank.
  void encode_byte_level_word(std::string_view word, detail::bpe_work& work, std::vector<std::int32_t>& ids) const {
    work.clear();
    for (const char c : word)
      work.push(byte_characters_[static_cast<unsigned char>(c)], byte_ids_[static_cast<unsigned char>(c)]);
    if (vocab_.ignore_merges) {
      if (const auto whole = find(work.text)) {
        ids.push_back(*whole);
        return;
      }
    }
    merge(work);
    for (std::int32_t i = 0; i >= 0; i = work.symbols[static_cast<std::size_t>(i)].next)
      ids.push_back(work.symbols[static_cast<std::size_t>(i)].id);
  }

  // llama2.c's run.c encode: BOS (if asked) and the piece " " as dummy prefix (if the text is not
  // empty) join the sequence; every UTF-8 character (a byte and at most three continuation bytes)
  // is its piece or its bytes as tokens byte + 3; then the pair whose concatenated pieces form the
  // piece of highest score (above -1e10; ties to the leftmost) merges until none does.
  void encode_llama2c(std::string_view text, bool add_bos, detail::bpe_work& work,
                      std::vector<std::int32_t>& ids) const {
    const auto push_token = [&](std::int32_t id) { work.push(vocab_.pieces[static_cast<std::size_t>(id)], id); };
    if (add_bos) push_token(*vocab_.bos);
    if (!text.empty()) push_token(llama2c_space_);
    for (std::size_t at = 0; at < text.size();) {
      std::size_t end = at + 1;
      while (end < text.size() && (static_cast<unsigned char>(text[end]) & 0xc0) == 0x80 && end - at < 4) ++end;
      if (const auto id = find(text.substr(at, end - at)))
        push_token(*id);
      else
        for (std::size_t i = at; i < end; ++i)
          push_token(static_cast<std::int32_t>(static_cast<unsigned char>(text[i])) + 3);
      at = end;
    }
    if (work.symbols.empty()) return;
    merge(work);
    for (std::int32_t i = 0; i >= 0; i = work.symbols[static_cast<std::size_t>(i)].next)
      ids.push_back(work.symbols[static_cast<std::size_t>(i)].id);
  }

  // The candidate merge of adjacent symbols `left` and `right`, if the vocabulary allows it.
  void consider(detail::bpe_work& work, std::int32_t left, std::int32_t right) const {
    if (left < 0 || right < 0) return;
    const detail::bpe_symbol& a = work.symbols[static_cast<std::size_t>(left)];
    const detail::bpe_symbol& b = work.symbols[static_cast<std::size_t>(right)];
    const std::size_t length = a.length + b.length;
    detail::bpe_candidate candidate{0, left, right, length, -1};
    if (merges_by_rank()) {
      if (a.id < 0 || b.id < 0) return;
      const auto found = merges_.find(pair_key(a.id, b.id));
      if (found == merges_.end()) return;
      candidate.priority = -static_cast<double>(found->second.first);
      candidate.merged = found->second.second;
    } else {
      const auto id = find(std::string_view(work.text).substr(a.start, length));
      if (!id) return;
      const float score = vocab_.scores[static_cast<std::size_t>(*id)];
      // run.c keeps a pair only if its score beats the initial best_score of -1e10.
      if (vocab_.model == tokenizer_model::llama2c && !(score > -1e10f)) return;
      candidate.priority = score;
      candidate.merged = *id;
    }
    work.heap.push_back(candidate);
    std::ranges::push_heap(work.heap, detail::bpe_candidate_order{});
  }

  // Byte-level BPE (GPT-2's, HF's) only ever merges by rank, so without merges it merges nothing;
  // its vocabularies have no scores to merge by.
  bool merges_by_rank() const noexcept { return vocab_.model == tokenizer_model::byte_level || !vocab_.merges.empty(); }

  // Merges the best pair until no pair can merge, with a priority queue of candidates (stale ones
  // skipped when popped): O(n log n) instead of run.c's rescan of every pair after every merge,
  // with the same result because the order (priority, then leftmost) is the same.
  void merge(detail::bpe_work& work) const {
    auto& symbols = work.symbols;
    for (std::size_t i = 1; i < symbols.size(); ++i)
      consider(work, static_cast<std::int32_t>(i - 1), static_cast<std::int32_t>(i));
    while (!work.heap.empty()) {
      std::ranges::pop_heap(work.heap, detail::bpe_candidate_order{});
      const detail::bpe_candidate best = work.heap.back();
      work.heap.pop_back();
      detail::bpe_symbol& left = symbols[static_cast<std::size_t>(best.left)];
      detail::bpe_symbol& right = symbols[static_cast<std::size_t>(best.right)];
      if (left.length == 0 || right.length == 0 || left.next != best.right || left.length + right.length != best.length)
        continue;
      left.length = best.length;
      left.id = best.merged;
      left.next = right.next;
      right.length = 0;
      if (right.next >= 0) symbols[static_cast<std::size_t>(right.next)].prev = best.left;
      consider(work, left.prev, best.left);
      consider(work, best.left, left.next);
    }
  }

  void append_piece_text(std::string& text, std::size_t id) const {
    const std::string& piece = vocab_.pieces[id];
    switch (vocab_.kinds[id]) {
    case token_kind::control: return;
    case token_kind::byte: text += static_cast<char>(*detail::byte_piece_value(piece)); return;
    case token_kind::user_defined:
    case token_kind::unknown: text += piece; return;
    case token_kind::normal:
    case token_kind::unused: break;
    }
    if (vocab_.model == tokenizer_model::llama2c) {
      text += piece;
    } else if (vocab_.model == tokenizer_model::sentencepiece) {
      for (std::size_t at = 0; at < piece.size();) {
        if (std::string_view(piece).substr(at, 3) == detail::escaped_space) {
          text += ' ';
          at += 3;
        } else {
          text += piece[at++];
        }
      }
    } else {
      append_gpt2_bytes(text, piece);
    }
  }

  // Inverse of GPT-2's byte-to-unicode table (whose characters are U+0021 to U+0143, one or two
  // UTF-8 bytes); other characters are copied as they are.
  void append_gpt2_bytes(std::string& text, std::string_view piece) const {
    for (std::size_t at = 0; at < piece.size();) {
      const std::size_t length = std::min(detail::utf8_sequence_length(piece[at]), piece.size() - at);
      const auto lead = static_cast<unsigned char>(piece[at]);
      const std::uint32_t code =
          length == 1
              ? lead
              : (length == 2 ? (lead & 0x1fu) << 6 | (static_cast<unsigned char>(piece[at + 1]) & 0x3fu) : 0xffffu);
      if (code < gpt2_bytes_.size() && gpt2_bytes_[code] >= 0)
        text += static_cast<char>(gpt2_bytes_[code]);
      else
        text += piece.substr(at, length);
      at += length;
    }
  }

  vocabulary vocab_;
  detail::piece_index ids_;
  std::unordered_map<std::uint64_t, std::pair<std::int32_t, std::int32_t>> merges_; // pair -> (rank, merged id)
  std::array<std::int32_t, 256> byte_pieces_ = filled(-1);                          // <0xNN> pieces
  std::array<std::int32_t, 256> byte_ids_ = filled(-1);                             // byte_level: GPT-2 characters
  std::array<std::string, 256> byte_characters_;
  std::array<std::int16_t, 0x144> gpt2_bytes_ = [] {
    std::array<std::int16_t, 0x144> bytes{};
    bytes.fill(-1);
    return bytes;
  }();
  detail::literal_matcher raw_literals_, normalized_literals_;
  std::shared_ptr<const detail::split_regex> regex_;
  std::int32_t llama2c_space_ = -1;

  static constexpr std::array<std::int32_t, 256> filled(std::int32_t value) {
    std::array<std::int32_t, 256> values{};
    values.fill(value);
    return values;
  }
};

} // namespace kvlab
