// Tokenizers: llama.cpp's reference vectors for the Llama SentencePiece and GPT-2 byte-level
// vocabularies (every id), llama2.c's encoder on its tokenizer.bin files (ids from a direct port
// of run.c's encode), the TinyStories tokenizer.json (ids from Hugging Face tokenizers 0.23),
// round trips, a long text, and every kind of malformed file and vocabulary.
#include <boost/test/unit_test.hpp>

#include "shared_models.hpp"
#include "test_files.hpp"
#include <bit>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <utility>
#include <vector>
import kvlab.core;
import kvlab.gguf;
import kvlab.tokenizer;
import kvlab.tokenizer.gguf;

using namespace kvlab_test;
using namespace std::string_literals;

namespace {

using ids = std::vector<std::int32_t>;

std::string read_file(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  BOOST_REQUIRE_MESSAGE(in.good(), "cannot open " << file);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// llama.cpp's test-tokenizer-0: the .inp file's strings are separated by "\n__ggml_vocab_test__\n"
// (the file ends with one), the .out file has one line of ids per string; it tokenizes with
// add_special and parse_special false.
std::vector<std::pair<std::string, ids>> reference_vectors(const std::filesystem::path& vocab_file) {
  const std::string inputs = read_file(vocab_file.string() + ".inp");
  const std::string separator = "\n__ggml_vocab_test__\n";
  std::vector<std::string> texts;
  for (std::size_t at = 0; at < inputs.size();) {
    const std::size_t next = inputs.find(separator, at);
    if (next == std::string::npos) {
      texts.push_back(inputs.substr(at));
      break;
    }
    texts.push_back(inputs.substr(at, next - at));
    at = next + separator.size();
  }
  std::istringstream outputs(read_file(vocab_file.string() + ".out"));
  std::vector<std::pair<std::string, ids>> cases;
  std::string line;
  for (std::size_t i = 0; std::getline(outputs, line); ++i) {
    BOOST_REQUIRE(i < texts.size());
    std::istringstream numbers(line);
    ids expected;
    for (std::int32_t id; numbers >> id;) expected.push_back(id);
    cases.emplace_back(texts[i], expected);
  }
  BOOST_REQUIRE_EQUAL(cases.size(), texts.size());
  return cases;
}

std::string show(const ids& tokens) {
  std::string text;
  for (const auto id : tokens) text += (text.empty() ? "" : " ") + std::to_string(id);
  return text;
}

// Encodes every reference string; returns how many match id for id, and checks decode(encode(t)) == t.
std::size_t check_reference_vectors(const std::filesystem::path& vocab_file, const kvlab::tokenizer& tok) {
  const auto cases = reference_vectors(vocab_file);
  std::size_t matched = 0;
  for (const auto& [text, expected] : cases) {
    const ids found = tok.encode(text, false, false);
    BOOST_TEST(show(found) == show(expected), "text '" << text << "'");
    matched += found == expected;
    BOOST_TEST(tok.decode(found) == text);
  }
  BOOST_TEST(matched == cases.size());
  BOOST_TEST_MESSAGE(vocab_file.filename().string()
                     << ": " << matched << " of " << cases.size() << " reference vectors match id for id");
  return matched;
}

// A llama2.c tokenizer.bin: int32 max_token_length, then per token float32 score, int32 length, bytes.
std::string llama2c_file(const std::vector<std::pair<std::string, float>>& tokens, std::int32_t max_token_length) {
  std::string bytes;
  const auto int32 = [&](std::uint32_t value) {
    for (int i = 0; i < 4; ++i) bytes += static_cast<char>(value >> (8 * i) & 0xff);
  };
  int32(static_cast<std::uint32_t>(max_token_length));
  for (const auto& [piece, score] : tokens) {
    int32(std::bit_cast<std::uint32_t>(score));
    int32(static_cast<std::uint32_t>(piece.size()));
    bytes += piece;
  }
  return bytes;
}

// The layout llama2.c's tokenizer.py writes (<unk>, BOS, EOS, 256 byte pieces) plus " " and a
// few merges: "ab" and "ba" tie at -1 (the leftmost pair wins), "bb" is below run.c's -1e10.
std::vector<std::pair<std::string, float>> small_llama2c_tokens() {
  std::vector<std::pair<std::string, float>> tokens = {{"<unk>", 0.f}, {"\n<s>\n", 0.f}, {"\n</s>\n", 0.f}};
  constexpr char hex[] = "0123456789ABCDEF";
  for (int byte = 0; byte < 256; ++byte) tokens.push_back({"<0x"s + hex[byte >> 4] + hex[byte & 15] + ">", 0.f});
  tokens.push_back({" ", 0.f});         // 259
  tokens.push_back({"a", -3.f});        // 260
  tokens.push_back({"b", -3.f});        // 261
  tokens.push_back({"ab", -1.f});       // 262
  tokens.push_back({"ba", -1.f});       // 263
  tokens.push_back({" a", -2.f});       // 264
  tokens.push_back({"bb", -2e10f});     // 265
  tokens.push_back({"\xc3\xa9", -4.f}); // 266, é
  return tokens;
}

std::string load_error(auto&& load) { return kvlab_test::message_of<kvlab::error>(load); }

std::string llama2c_error(const std::string& bytes, std::size_t vocab_size) {
  const scratch_file file("tokenizer.bin");
  file.write(bytes);
  const std::string message = load_error([&] { kvlab::load_llama2c_tokenizer(file.path(), vocab_size); });
  BOOST_TEST(contains(message, file.path().string()), message);
  return message;
}

std::string hf_error(const std::string& json) {
  const scratch_directory folder("hf");
  const auto file = folder.write("tokenizer.json", json);
  const std::string message = load_error([&] { kvlab::load_hf_tokenizer(file); });
  BOOST_TEST(contains(message, file.string()), message);
  return message;
}

// A minimal Llama-style tokenizer.json (Prepend + Replace normalizer, byte fallback).
std::string llama_style_json(const std::string& model_type, const std::string& vocab, const std::string& normalizer) {
  return R"({"version": "1.0", "added_tokens": [], "normalizer": )" + normalizer +
         R"(, "pre_tokenizer": null, "model": {"type": ")" + model_type + R"(", "byte_fallback": true, )" + vocab +
         R"(, "merges": []}})";
}
const std::string llama_normalizer =
    R"({"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "\u2581"}, {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]})";

} // namespace

BOOST_AUTO_TEST_SUITE(tokenizer)

BOOST_AUTO_TEST_CASE(llama_spm_vocabulary_matches_every_llama_cpp_vector) {
  const auto file = shared_model_file("vocab/ggml-vocab-llama-spm.gguf");
  if (!file) return;
  const kvlab::gguf_file gguf(*file);
  const kvlab::tokenizer tok = kvlab::tokenizer_from_gguf(gguf);
  BOOST_TEST(tok.size() == 32000u);
  BOOST_TEST((tok.model() == kvlab::tokenizer_model::sentencepiece));
  BOOST_TEST(tok.bos().value_or(-1) == 1);
  BOOST_TEST(tok.eos().value_or(-1) == 2);
  BOOST_TEST(tok.add_bos());
  BOOST_TEST(contains(tok.description(), "sentencepiece-bpe, 32000 pieces"), tok.description());
  BOOST_TEST(check_reference_vectors(*file, tok) == 46u);
  // BOS first when asked; "<s>" in the text is BOS only when special tokens are parsed.
  BOOST_TEST(show(tok.encode("Hello world", true)) == "1 15043 3186");
  BOOST_TEST(tok.encode("<s>Hello", false, true).front() == 1);
  BOOST_TEST(tok.encode("<s>Hello", false, false).front() != 1);
  BOOST_TEST(tok.decode(tok.encode("Hello world", true)) == "Hello world");
}

BOOST_AUTO_TEST_CASE(gpt2_vocabulary_matches_every_llama_cpp_vector) {
  const auto file = shared_model_file("vocab/ggml-vocab-gpt-2.gguf");
  if (!file) return;
  const kvlab::gguf_file gguf(*file);
  const kvlab::tokenizer tok = kvlab::tokenizer_from_gguf(gguf);
  BOOST_TEST(tok.size() == 50257u);
  BOOST_TEST((tok.model() == kvlab::tokenizer_model::byte_level));
  BOOST_TEST(!tok.add_bos());
  BOOST_TEST(contains(tok.description(), "byte-level-bpe (gpt2 split), 50257 pieces, 50000 merges"), tok.description());
  BOOST_TEST(check_reference_vectors(*file, tok) == 46u);
  // Bytes that are not UTF-8 still encode (each as its GPT-2 character) and decode back.
  const std::string binary = "a\xff\xfe b\x80";
  BOOST_TEST(tok.decode(tok.encode(binary, false)) == binary);
}

BOOST_AUTO_TEST_CASE(long_texts_tokenize_in_linear_time) {
  const auto spm_file = shared_model_file("vocab/ggml-vocab-llama-spm.gguf");
  const auto gpt2_file = shared_model_file("vocab/ggml-vocab-gpt-2.gguf");
  if (!spm_file || !gpt2_file) return;
  std::string text;
  for (const auto& [input, expected] : reference_vectors(*spm_file)) text += input + " ";
  const std::string unit = text;
  while (text.size() < 400'000) text += unit;
  for (const auto& file : {*spm_file, *gpt2_file}) {
    const kvlab::gguf_file gguf(file);
    const kvlab::tokenizer tok = kvlab::tokenizer_from_gguf(gguf);
    const auto start = std::chrono::steady_clock::now();
    const ids tokens = tok.encode(text, false);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    BOOST_TEST_MESSAGE(file.filename().string()
                       << ": " << text.size() << " bytes -> " << tokens.size() << " tokens in " << seconds << " s");
    BOOST_TEST(tokens.size() > 100'000u);
    BOOST_TEST(tok.decode(tokens) == text);
  }
}

BOOST_AUTO_TEST_CASE(llama2c_tok512_encodes_as_run_c) {
  const auto file = shared_model_file("stories260K/tok512.bin");
  if (!file) return;
  const kvlab::tokenizer tok = kvlab::load_llama2c_tokenizer(*file, 512);
  BOOST_TEST(tok.size() == 512u);
  BOOST_TEST((tok.model() == kvlab::tokenizer_model::llama2c));
  BOOST_TEST(tok.bos().value_or(-1) == 1);
  BOOST_TEST(tok.eos().value_or(-1) == 2);
  BOOST_TEST(tok.add_bos());
  // Expected ids from a line-by-line port of run.c's encode (rescanning every pair each merge).
  const std::string story =
      "Once upon a time, there was a little girl named Lily. She loved to play outside in the sunshine.";
  BOOST_TEST(show(tok.encode(story, true)) == "1 403 407 261 378 432 383 286 261 376 298 315 421 395 317 426 338 401 "
                                              "396 267 337 410 408 419 292 411 322 265 262 379 419 415 271 411 426");
  const std::string other = "Tom said, \"Let's go!\" caf\xc3\xa9 \xf0\x9f\x98\x80";
  BOOST_TEST(show(tok.encode(other, true)) ==
             "1 274 287 336 432 313 438 316 439 419 298 414 443 436 280 412 431 485 410 243 162 155 131");
  BOOST_TEST(show(tok.encode("", true)) == "1");
  BOOST_TEST(tok.decode(tok.encode(story, true)) == story);
  BOOST_TEST(tok.decode(tok.encode(other, false)) == other);
}

BOOST_AUTO_TEST_CASE(llama2c_tok260_is_bytes_and_the_space_piece) {
  const auto file = shared_model_file("shakespeare-hd64/tok260.bin");
  if (!file) return;
  const kvlab::tokenizer tok = kvlab::load_llama2c_tokenizer(*file, 260);
  // Every byte b is token b + 3 (no piece is a character); " " is 259, the dummy prefix included.
  BOOST_TEST(show(tok.encode("Hi you", true)) == "1 259 75 108 259 124 114 120");
  BOOST_TEST(show(tok.encode("\xc3\xa9\n", false)) == "259 198 172 13");
  BOOST_TEST(tok.decode(tok.encode("First Citizen:\nBefore we proceed", true)) == "First Citizen:\nBefore we proceed");
}

BOOST_AUTO_TEST_CASE(llama2c_merges_by_score_leftmost_first_above_minus_1e10) {
  const scratch_file file("tokenizer.bin");
  const auto tokens = small_llama2c_tokens();
  file.write(llama2c_file(tokens, 6));
  const kvlab::tokenizer tok = kvlab::load_llama2c_tokenizer(file.path(), tokens.size());
  // " ", a, b, a: "ab" and "ba" tie at -1; the leftmost pair merges first, so "ba" never forms.
  BOOST_TEST(show(tok.encode("aba", false)) == "259 262 260");
  // "bb" exists but scores -2e10, below run.c's starting best score of -1e10.
  BOOST_TEST(show(tok.encode("bb", false)) == "259 261 261");
  // A character that is a piece is that piece; one that is not is its bytes + 3.
  BOOST_TEST(show(tok.encode("\xc3\xa9\xc3\xa8", false)) == "259 266 198 171");
  BOOST_TEST(tok.decode(tok.encode("ab ba\xc3\xa8", true)) == "ab ba\xc3\xa8");
}

BOOST_AUTO_TEST_CASE(tinystories_tokenizer_json_matches_hugging_face) {
  const auto file = shared_model_file("tinystories-656k/tokenizer.json");
  if (!file) return;
  const kvlab::tokenizer tok = kvlab::load_hf_tokenizer(*file);
  BOOST_TEST(tok.size() == 2048u);
  BOOST_TEST(tok.bos().value_or(-1) == 1); // <|start_story|>, from tokenizer_config.json
  BOOST_TEST(tok.eos().value_or(-1) == 2);
  BOOST_TEST(tok.add_bos());
  BOOST_TEST(tok.piece(1) == "<|start_story|>");
  // Expected ids from Hugging Face tokenizers 0.23 (encode with add_special_tokens false).
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"Once upon a time, there was a little girl named Lily. She loved to play outside in the sunshine.\nOne day, "
       "she saw a big red ball.",
       "80 147 201 282 215 286 598 1662 887 1584 238 515 694 57 486 242 614 1714 10"},
      // Its added tokens are "normalized": matched as "\u2581<|end_story|>" in the normalized text.
      {"Hi <|end_story|>", "80 1158 2"},
      {"<|start_story|>Once upon", "1 147 201 189 111"},
      {"The end.<|end_story|>", "80 247 183 10 208 183 209 210"},
      {" Hello  world", "80 80 1288 139 80 410 555"},
      // No byte pieces: characters outside the vocabulary are one fused <unk>.
      {"\xc3\xa9\xf0\x9f\x98\x80 x", "80 0 80 76"},
      {"Tom said, \"Let's go!\" 123", "80 388 1991 254 300 12 13 14"},
  };
  for (const auto& [text, expected] : cases)
    BOOST_TEST(show(tok.encode(text, false)) == expected, "text '" << text << "'");
  const std::string story = cases[0].first;
  const ids with_bos = tok.encode(story, tok.add_bos());
  BOOST_TEST(with_bos.front() == 1);
  BOOST_TEST(tok.decode(with_bos) == story);
}

BOOST_AUTO_TEST_CASE(truncated_llama2c_files_are_rejected_at_every_length) {
  const auto tokens = small_llama2c_tokens();
  const std::string bytes = llama2c_file(tokens, 6);
  for (std::size_t length = 0; length < bytes.size(); ++length) {
    const std::string message = llama2c_error(bytes.substr(0, length), tokens.size());
    BOOST_TEST(contains(message, "llama2.c tokenizer"), message);
  }
  BOOST_TEST(
      contains(llama2c_error(bytes.substr(0, 2), tokens.size()), "expected at least the 4-byte max_token_length"));
  BOOST_TEST(
      contains(llama2c_error(bytes.substr(0, bytes.size() - 1), tokens.size()), "runs past the end of the file"));
  BOOST_TEST(contains(llama2c_error(bytes.substr(0, bytes.size() - 3), tokens.size()),
                      "expected its 8-byte score and length"));
}

BOOST_AUTO_TEST_CASE(malformed_llama2c_files_are_rejected) {
  auto tokens = small_llama2c_tokens();
  const std::string good = llama2c_file(tokens, 6);
  BOOST_TEST(contains(llama2c_error(llama2c_file(tokens, 0), tokens.size()), "absurd max_token_length 0"));
  BOOST_TEST(contains(llama2c_error(llama2c_file(tokens, -5), tokens.size()), "absurd max_token_length -5"));
  BOOST_TEST(
      contains(llama2c_error(llama2c_file(tokens, 1 << 30), tokens.size()), "absurd max_token_length 1073741824"));
  BOOST_TEST(contains(llama2c_error(llama2c_file(tokens, 4), tokens.size()),
                      "token 0 at byte 4: length 5 outside 0 .. max_token_length 4"));
  // The last token's length field claims 100 bytes where 2 are left (within max_token_length 1024).
  std::string long_length = llama2c_file(tokens, 1024);
  long_length[long_length.size() - 6] = 100;
  BOOST_TEST(contains(llama2c_error(long_length, tokens.size()),
                      "token 266 at byte 3695: length 100 runs past the end of the file (2 bytes left)"));
  BOOST_TEST(contains(llama2c_error(good + "xyz", tokens.size()), "3 bytes follow the 267 tokens"));
  BOOST_TEST(contains(llama2c_error(good, 1'000'000), "vocab_size 1000000 needs at least"));
  BOOST_TEST(contains(llama2c_error(good, 0), "vocab_size 0"));
  // run.c needs ids byte + 3 and the " " piece.
  tokens.resize(200);
  BOOST_TEST(contains(llama2c_error(llama2c_file(tokens, 6), 200), "needs at least 259 pieces"));
  auto no_space = small_llama2c_tokens();
  no_space[259].first = "_";
  BOOST_TEST(contains(llama2c_error(llama2c_file(no_space, 6), no_space.size()), "prepends the piece \" \""));
  BOOST_TEST(
      contains(load_error([] { kvlab::load_llama2c_tokenizer("/nonexistent/tok.bin", 32000); }), "no such file"));
}

BOOST_AUTO_TEST_CASE(unsupported_or_malformed_tokenizer_json_is_rejected) {
  const std::string vocab = R"("vocab": {"<unk>": 0, "a": 1, "\u2581": 2})";
  BOOST_TEST(contains(hf_error(llama_style_json("WordPiece", vocab, llama_normalizer)),
                      "field 'model.type': expected \"BPE\""));
  BOOST_TEST(contains(hf_error(llama_style_json("Unigram", vocab, llama_normalizer)), "found the string \"Unigram\""));
  BOOST_TEST(contains(hf_error(llama_style_json("BPE", R"("unk_token": null)", llama_normalizer)),
                      "field 'model.vocab': missing"));
  BOOST_TEST(contains(hf_error(llama_style_json("BPE", vocab, R"({"type": "NFC"})")),
                      "field 'normalizer.type': unsupported normalizer \"NFC\""));
  BOOST_TEST(contains(hf_error(llama_style_json("BPE", R"("vocab": {"<unk>": 0, "a": 5})", llama_normalizer)),
                      "token id 5 with only 2 pieces"));
  BOOST_TEST(contains(hf_error(llama_style_json("BPE", R"("vocab": {"<unk>": 0, "a": 0.5})", llama_normalizer)),
                      "field 'model.vocab[\"a\"]': expected a token id"));
  BOOST_TEST(contains(hf_error(R"({"model": {"type": "BPE", "vocab": {"a": 0}}, "normalizer": null, "pre_tokenizer": )"
                               R"({"type": "Whitespace"}})"),
                      "unsupported pre-tokenizer \"Whitespace\""));
  BOOST_TEST(contains(hf_error(R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1}, "merges": ["a c"]},)"
                               R"( "pre_tokenizer": {"type": "Metaspace", "replacement": "\u2581", "split": false}})"),
                      "merge 0 'a c': its right piece 'c' is not in the vocabulary"));
  BOOST_TEST(contains(hf_error("{\"model\": "), "invalid JSON"));
  BOOST_TEST(contains(load_error([] { kvlab::load_hf_tokenizer("/nonexistent/tokenizer.json"); }), "no such file"));
}

BOOST_AUTO_TEST_CASE(tokenizer_json_config_gives_bos_and_eos) {
  const scratch_directory folder("hf_config");
  const auto file = folder.write(
      "tokenizer.json",
      R"({"added_tokens": [{"id": 0, "content": "<unk>", "special": true, "normalized": false},)"
      R"( {"id": 1, "content": "<s>", "special": true, "normalized": false},)"
      R"( {"id": 2, "content": "</s>", "special": true, "normalized": false}],)"
      R"( "normalizer": )" +
          llama_normalizer +
          R"(, "pre_tokenizer": null, "model": {"type": "BPE", "byte_fallback": true, "unk_token": "<unk>",)"
          R"( "vocab": {"<unk>": 0, "<s>": 1, "</s>": 2, "\u2581": 3, "a": 4, "b": 5, "\u2581a": 6, "ab": 7, "\u2581ab": 8},)"
          R"( "merges": [["a", "b"], "\u2581 a", "\u2581a b", "\u2581 ab"]}})");
  {
    const kvlab::tokenizer tok = kvlab::load_hf_tokenizer(file);
    BOOST_TEST(tok.bos().value_or(-1) == 1); // conventional names without a config or template
    BOOST_TEST(tok.eos().value_or(-1) == 2);
    BOOST_TEST(!tok.add_bos());
    // Merges by rank: "a b" (rank 0) before "\u2581 a" (rank 1), then "\u2581 ab" (rank 3).
    BOOST_TEST(show(tok.encode("ab", false)) == "8");
    BOOST_TEST(show(tok.encode("ab</s>ab", false)) == "8 2 8"); // the Prepend normalizer applies after a special token
    BOOST_TEST(tok.decode(tok.encode("ab ab", true)) == "ab ab");
  }
  folder.write("tokenizer_config.json",
               R"({"bos_token": {"content": "</s>"}, "eos_token": "<s>", "add_bos_token": true})");
  {
    const kvlab::tokenizer tok = kvlab::load_hf_tokenizer(file);
    BOOST_TEST(tok.bos().value_or(-1) == 2);
    BOOST_TEST(tok.eos().value_or(-1) == 1);
    BOOST_TEST(tok.add_bos());
  }
  folder.write("tokenizer_config.json", R"({"bos_token": "<bos>"})");
  BOOST_TEST(
      contains(load_error([&] { kvlab::load_hf_tokenizer(file); }), "field 'bos_token': the token '<bos>' is not in"));
}

BOOST_AUTO_TEST_CASE(inconsistent_vocabularies_are_rejected) {
  const auto message = [](kvlab::vocabulary vocab) {
    vocab.description = "test vocabulary";
    return load_error([&] { [[maybe_unused]] const kvlab::tokenizer tok(vocab); });
  };
  kvlab::vocabulary good;
  good.pieces = {"<unk>", "a", "b", "ab"};
  good.scores = {0, -1, -1, -2};
  BOOST_TEST(message(good).empty());
  auto v = good;
  v.scores.pop_back();
  BOOST_TEST(message(v) == "tokenizer (test vocabulary): 3 scores for 4 pieces; expected one per piece");
  v = good;
  v.bos = 4;
  BOOST_TEST(message(v) == "tokenizer (test vocabulary): BOS id 4 is outside the vocabulary of 4 pieces");
  v = good;
  v.add_bos = true;
  BOOST_TEST(contains(message(v), "add_bos is set but the vocabulary has no BOS token"));
  v = good;
  v.kinds = {kvlab::token_kind::unknown, kvlab::token_kind::byte, kvlab::token_kind::normal, kvlab::token_kind::normal};
  BOOST_TEST(contains(message(v), "token 1 'a' is a byte token but its piece is not of the form <0xNN>"));
  v = good;
  v.kinds = {kvlab::token_kind::unknown, static_cast<kvlab::token_kind>(9), kvlab::token_kind::normal,
             kvlab::token_kind::normal};
  BOOST_TEST(contains(message(v), "token 1 'a' has token type 9"));
  v = good;
  v.merges = {"a b", "b a"};
  BOOST_TEST(message(v) == "tokenizer (test vocabulary): merge 1 'b a': the merged piece is not in the vocabulary");
  v.merges = {"ab"};
  BOOST_TEST(contains(message(v), "merge 0 'ab' is not two pieces separated by a space"));
  v = good;
  v.model = kvlab::tokenizer_model::byte_level;
  v.merges = {"a b"};
  BOOST_TEST(contains(message(v), "byte-level vocabulary has no piece for byte 0"));
  v = good;
  v.scores.clear();
  BOOST_TEST(contains(message(v), "merges by piece score, and it has no scores"));
  // Out-of-range ids in decode and a character nothing can encode.
  const kvlab::tokenizer tok(good);
  BOOST_TEST(contains(load_error([&] { tok.decode(ids{7}); }), "token id 7 is outside the vocabulary of 4 pieces"));
  BOOST_TEST(contains(load_error([&] { tok.encode("c", false); }), "the character 'c' has no piece"));
  BOOST_TEST(contains(load_error([&] { tok.encode("a", true); }), "the vocabulary has no BOS token"));
}

BOOST_AUTO_TEST_CASE(byte_level_vocabulary_without_merges_encodes_every_byte_alone) {
  // A GGUF "gpt2" vocabulary or a tokenizer.json may have no merges, and byte-level ones have no
  // scores: nothing merges, even where two pieces make a third (tests/fuzz/corpus/gguf/
  // crash-byte-level-without-merges read a score that was not there).
  kvlab::vocabulary vocab;
  vocab.model = kvlab::tokenizer_model::byte_level;
  for (unsigned byte = 0; byte < 256; ++byte) {
    vocab.pieces.emplace_back();
    kvlab::append_utf8(vocab.pieces.back(), kvlab::detail::gpt2_byte_code_point(static_cast<std::uint8_t>(byte)));
  }
  vocab.pieces.push_back("ab");
  const kvlab::tokenizer tok(vocab);
  BOOST_TEST(show(tok.encode("ab", false)) == "97 98");
  BOOST_TEST(tok.decode(tok.encode("ab", false)) == "ab");
}

BOOST_AUTO_TEST_CASE(sentencepiece_merges_by_score_leftmost_first_with_byte_fallback) {
  kvlab::vocabulary vocab;
  vocab.pieces = {"<unk>",
                  "<0xC3>",
                  "<0xA9>",
                  "\xe2\x96\x81",
                  "a",
                  "b",
                  "ab",
                  "ba",
                  "\xe2\x96\x81"
                  "a"};
  vocab.scores = {0, 0, 0, -5, -5, -5, -1, -1, -3};
  vocab.kinds = {kvlab::token_kind::unknown, kvlab::token_kind::byte, kvlab::token_kind::byte};
  vocab.kinds.resize(vocab.pieces.size(), kvlab::token_kind::normal);
  vocab.unk = 0;
  vocab.dummy_prefix = kvlab::space_prefix::every_segment;
  const kvlab::tokenizer tok(vocab);
  // "\u2581aba": "ab" and "ba" tie; the leftmost merges, leaving "\u2581" alone.
  BOOST_TEST(show(tok.encode("aba", false)) == "3 6 4");
  // é has no piece: its bytes' pieces; è has none of its bytes: <unk>.
  BOOST_TEST(show(tok.encode("a\xc3\xa9\xc3\xa8", false)) == "8 1 2 0");
  BOOST_TEST(tok.decode(tok.encode("ab\xc3\xa9", false)) == "ab\xc3\xa9");
}

BOOST_AUTO_TEST_SUITE_END()
