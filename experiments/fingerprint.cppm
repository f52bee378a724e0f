// kvlab.runner:fingerprint: the code a cell's result depends on, so a rerun can tell a cell
// made by other code. A cell's fingerprint is the digest of the framework (modules/ and the
// kernels, digested together) and of each strategy file it uses: the quantizers,
// granularities and eviction policy its recipe names, every storage, allocation, schedule and
// aggregation file (a recipe uses their defaults without naming them), every metric and its
// data source. The digests are taken at build time (cmake/build_provenance.cmake), so an
// edited strategy file changes the fingerprint of exactly the cells that use it.
module;
#include <algorithm>
#include <cctype>
#include <cstddef>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "build_provenance.hpp"
export module kvlab.runner:fingerprint;
import kvlab;

export namespace kvlab {

struct source_digest {
  std::string_view file; // as the build shows it: relative to kvlab's source folder
  std::string_view sha256;
};

// What this build was compiled from.
struct build_sources {
  std::string_view framework_sha256;
  std::span<const source_digest> files;
};

inline build_sources this_build() {
  static constexpr source_digest files[] = {KVLAB_SOURCE_DIGESTS{"", ""}};
  return {KVLAB_FRAMEWORK_DIGEST, std::span(files).first(std::size(files) - 1)};
}

// The strategy files a cell of `recipe` on `data_spec` uses (sorted; see the module comment).
inline std::vector<std::string> sources_used(const any_recipe& recipe, std::string_view data_spec,
                                             const registry& components) {
  std::vector<std::string> words; // the names in the canonical recipe: "uint2", "channel", "h2o", ...
  const std::string name = canonical_name(recipe);
  for (std::size_t at = 0; at < name.size();) {
    const auto is_word = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; };
    const std::size_t end = static_cast<std::size_t>(
        std::find_if_not(name.begin() + static_cast<std::ptrdiff_t>(at), name.end(), is_word) - name.begin());
    if (end > at) words.push_back(name.substr(at, end - at));
    at = end + 1;
  }
  const auto named = [&](const strategy_info& info) {
    return std::ranges::any_of(words, [&](const std::string& w) {
      if (!info.is_family()) return w == info.name;
      return w.size() > info.name.size() && w.starts_with(info.name) &&
             std::all_of(w.begin() + static_cast<std::ptrdiff_t>(info.name.size()), w.end(),
                         [](char c) { return std::isdigit(static_cast<unsigned char>(c)); });
    });
  };
  std::vector<std::string> files;
  for (const strategy_info& info : components.list()) {
    const bool always = info.kind != component_kind::quantizer && info.kind != component_kind::granularity &&
                        info.kind != component_kind::eviction;
    if (!info.source.empty() && (always || named(info))) files.push_back(info.source);
  }
  files.push_back(find_data_source(data_spec, builtin_data_sources()).file);
  std::ranges::sort(files);
  files.erase(std::ranges::unique(files).begin(), files.end());
  return files;
}

// A cell's fingerprint: the framework's digest and each used file's, and their combined digest.
struct code_fingerprint {
  std::string digest;
  std::vector<std::pair<std::string, std::string>> sources; // (file, sha256), "framework" first
};

inline code_fingerprint fingerprint_of(const std::vector<std::string>& files, const build_sources& build) {
  code_fingerprint f;
  f.sources.emplace_back("framework", std::string(build.framework_sha256));
  for (const auto& file : files) {
    const auto found = std::ranges::find(build.files, file, &source_digest::file);
    // A file outside the build's list (a strategy registered in code) has no digest of its own.
    f.sources.emplace_back(file, found != build.files.end() ? std::string(found->sha256) : "unknown");
  }
  std::string listing;
  for (const auto& [file, sha] : f.sources) listing += file + " " + sha + "\n";
  f.digest = sha256_hex(std::as_bytes(std::span(listing)));
  return f;
}

// The files whose digests differ between a stored fingerprint and the current one (a file in
// only one of them counts), for the message that says why a cell is computed again.
inline std::vector<std::string> changed_sources(const json_value& stored, const code_fingerprint& now) {
  std::vector<std::string> changed;
  const auto* sources = stored.find("sources");
  for (const auto& [file, sha] : now.sources) {
    const auto* old = sources ? sources->find(file) : nullptr;
    if (!old || !old->is_string() || old->string() != sha) changed.push_back(file);
  }
  if (sources && sources->is_object())
    for (const auto& [file, sha] : sources->object())
      if (std::ranges::find(now.sources, file, &std::pair<std::string, std::string>::first) == now.sources.end())
        changed.push_back(file);
  return changed;
}

} // namespace kvlab
