// What the fuzz targets share: the input as text or split in two, files for the parsers that
// read only paths, and a workout for the tokenizers a file describes.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include <unistd.h>

namespace kvlab_fuzz {

inline std::string_view as_text(const std::uint8_t* data, std::size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

// An input that holds two files: the first up to its first NUL byte (a JSON text never holds
// one), the second after it, if there is a NUL.
inline std::pair<std::string_view, std::optional<std::string_view>> split_at_nul(std::string_view input) {
  const auto nul = input.find('\0');
  if (nul == std::string_view::npos) return {input, std::nullopt};
  return {input.substr(0, nul), input.substr(nul + 1)};
}

// A folder of this process alone (fuzzers may run side by side, or fork), removed at exit.
inline const std::filesystem::path& scratch_folder() {
  struct folder {
    std::filesystem::path path = std::filesystem::temp_directory_path() / ("kvlab_fuzz_" + std::to_string(::getpid()));
    folder() { std::filesystem::create_directories(path); }
    ~folder() {
      std::error_code ignored;
      std::filesystem::remove_all(path, ignored);
    }
  };
  static const folder instance;
  return instance.path;
}

// Writes `bytes` as the scratch folder's file `name`, replacing the previous input's, or removes
// that file when there are no bytes to write (an input without its optional second file).
inline std::filesystem::path scratch_file(const std::string& name, std::optional<std::string_view> bytes) {
  const auto file = scratch_folder() / name;
  if (!bytes) {
    std::filesystem::remove(file);
    return file;
  }
  std::ofstream out(file, std::ios::binary | std::ios::trunc);
  out.write(bytes->data(), static_cast<std::streamsize>(bytes->size()));
  if (!out.flush()) {
    // Not a finding in the parser: the fuzzer cannot go on without its scratch files.
    std::fprintf(stderr, "kvlab fuzz: cannot write %s\n", file.c_str());
    std::abort();
  }
  return file;
}

// The input as the scratch file `name`, read by `read`: what it reads (an `Error` ends the run
// quietly) must survive `write` to another file and `read` again unchanged by `same`;
// anything else is a finding, reported as `what` changed.
template <class Error, class Read, class Write, class Same>
void check_round_trip(std::string_view input, const std::string& name, Read read, Write write, Same same,
                      const char* what) {
  decltype(read(std::filesystem::path{})) first;
  try {
    first = read(scratch_file(name, input));
  } catch (const Error&) {
    return;
  }
  const auto copy = scratch_folder() / ("copy_" + name);
  write(copy, first);
  if (!same(read(copy), first)) {
    std::fprintf(stderr, "writing and reading back changed the %s\n", what);
    std::abort();
  }
}

// Texts that reach every path of an encoder: words and spaces, digits, a contraction, U+2581,
// two- to four-byte characters, the spellings of special tokens, and bytes that are not UTF-8.
inline constexpr std::string_view tokenizer_texts[] = {
    "Once upon a time, there was a little girl named Lily.",
    "  leading spaces\tand tabs\nand 12345 digits, it's   ",
    "\xe2\x96\x81U+2581 caf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x98\x80",
    "<s>a</s><unk><|endoftext|><|begin_of_text|><0x41>",
    "\xff\xfe broken \xc3 utf-8 \xed\xa0\x80 \xf4\x90\x80\x80",
    std::string_view("\0nul\0", 5),
};

// Decodes every id (up to a bound) and encodes and decodes each text, with and without BOS and
// special tokens. A tokenizer may refuse with kvlab::error (the caller catches it); anything
// else is a finding.
template <class Tokenizer>
void exercise_tokenizer(const Tokenizer& tokenizer) {
  std::vector<std::int32_t> ids(std::min<std::size_t>(tokenizer.size(), 1 << 16));
  std::iota(ids.begin(), ids.end(), 0);
  static_cast<void>(tokenizer.decode(ids));
  for (const std::string_view text : tokenizer_texts)
    for (const bool parse_special : {false, true}) {
      const bool add_bos = parse_special && tokenizer.bos().has_value();
      static_cast<void>(tokenizer.decode(tokenizer.encode(text, add_bos, parse_special)));
    }
}

} // namespace kvlab_fuzz
