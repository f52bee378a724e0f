// Access to the real models beside the project (../shared/models, see its README.md) for tests.
// The folder is test data that a user's machine does not have: when it is absent, a test says
// it was skipped; when it is present, every file is checked against SHA256SUMS, and a missing
// or corrupt file fails the test (it must not pass as if the file were absent).
//   if (const auto file = kvlab_test::shared_model_file("vocab/ggml-vocab-gpt-2.gguf")) { ... }
// The folder is the build's KVLAB_SHARED_MODELS (<source>/../shared/models), or the
// environment variable KVLAB_SHARED_MODELS if set.
#pragma once
#include <boost/test/unit_test.hpp>

#include <cstddef>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
import kvlab.core;

namespace kvlab_test {

inline std::filesystem::path shared_models_folder() {
  if (const char* overridden = std::getenv("KVLAB_SHARED_MODELS"); overridden != nullptr && *overridden != '\0')
    return overridden;
#ifdef KVLAB_SHARED_MODELS
  return KVLAB_SHARED_MODELS;
#else
  return {};
#endif
}

namespace detail {

// The expected digest of `relative` from the folder's SHA256SUMS (lines "<hex>  ./<path>" or
// "<hex>  <path>" as sha256sum writes them), or nothing if it is not listed.
inline std::optional<std::string> listed_sha256(const std::filesystem::path& folder, std::string_view relative) {
  const auto sums = folder / "SHA256SUMS";
  std::ifstream in(sums);
  if (!in) throw kvlab::error("'" + sums.string() + "': cannot open the checksum list of the shared models");
  std::string line;
  while (std::getline(in, line)) {
    // The digest, a space, then ' ' (text mode) or '*' (binary mode), then the path.
    if (line.size() < 66 || line[64] != ' ' || (line[65] != ' ' && line[65] != '*')) continue;
    std::string_view listed = std::string_view(line).substr(66);
    if (listed.starts_with("./")) listed.remove_prefix(2);
    if (listed == relative) return line.substr(0, 64);
  }
  return std::nullopt;
}

// Whether a binary file went through a text decode that replaced every byte sequence that is
// not UTF-8 with U+FFFD (EF BF BD): the whole file is then valid UTF-8 and holds U+FFFD,
// which a GGUF file with any scores, counts or floats in it practically never is.
inline bool damaged_by_text_decoding(const std::filesystem::path& file) {
  const kvlab::mapped_file mapped(file);
  const auto bytes = mapped.bytes();
  bool replacement = false;
  for (std::size_t i = 0; i < bytes.size();) {
    const auto lead = std::to_integer<unsigned char>(bytes[i]);
    const std::size_t length = lead < 0x80           ? 1
                               : (lead >> 5) == 0x6  ? 2
                               : (lead >> 4) == 0xe  ? 3
                               : (lead >> 3) == 0x1e ? 4
                                                     : 0;
    if (length == 0 || i + length > bytes.size()) return false;
    for (std::size_t k = 1; k < length; ++k)
      if ((std::to_integer<unsigned char>(bytes[i + k]) & 0xc0) != 0x80) return false;
    if (length == 3 && lead == 0xef && std::to_integer<unsigned char>(bytes[i + 1]) == 0xbf &&
        std::to_integer<unsigned char>(bytes[i + 2]) == 0xbd)
      replacement = true;
    i += length;
  }
  return replacement;
}

} // namespace detail

// The verified path of ../shared/models/<relative>, or nothing (and a "skipped" message) when
// the folder is absent. A file that is missing, unlisted or has the wrong digest fails the test.
inline std::optional<std::filesystem::path> shared_model_file(std::string_view relative) {
  const auto folder = shared_models_folder();
  std::error_code ignored;
  if (folder.empty() || !std::filesystem::is_directory(folder, ignored)) {
    BOOST_TEST_MESSAGE("skipped: '" << relative << "' needs the shared models folder '" << folder.string()
                                    << "' (folder absent; set KVLAB_SHARED_MODELS to where it is)");
    return std::nullopt;
  }
  const auto file = folder / std::filesystem::path(std::string(relative));
  if (!std::filesystem::is_regular_file(file, ignored))
    BOOST_FAIL("the shared models folder '" << folder.string() << "' exists but has no file '" << relative << "'");

  // Each file is hashed once per process, whatever the number of tests that use it.
  static std::mutex mutex;
  static std::map<std::filesystem::path, std::string> verified; // path -> problem ("" if verified)
  std::string problem;
  {
    const std::lock_guard lock(mutex);
    const auto cached = verified.find(file);
    if (cached != verified.end()) {
      problem = cached->second;
    } else {
      const auto expected = detail::listed_sha256(folder, relative);
      if (!expected) {
        problem = "'" + std::string(relative) + "' is not listed in '" + (folder / "SHA256SUMS").string() + "'";
      } else {
        const std::string found = kvlab::sha256_file_hex(file);
        if (found != *expected)
          problem = "'" + file.string() + "' has SHA-256 " + found + ", but SHA256SUMS lists " + *expected +
                    "; the file is corrupt or was replaced";
      }
      verified.emplace(file, problem);
    }
  }
  if (!problem.empty()) BOOST_FAIL(problem);
  // The checksums in SHA256SUMS were taken after the damage, so they cannot catch it.
  if (file.extension() == ".gguf" && detail::damaged_by_text_decoding(file)) {
    BOOST_TEST_MESSAGE("skipped: '" << file.string()
                                    << "' is not a GGUF file any more: it was decoded as text, every byte that was not "
                                       "UTF-8 replaced by U+FFFD, before SHA256SUMS was computed; replace it with "
                                       "llama.cpp's original models/"
                                    << file.filename().string() << " and regenerate SHA256SUMS");
    return std::nullopt;
  }
  return file;
}

} // namespace kvlab_test
