// kvlab.data: data sources, the kinds of data spec (`synthetic:gaussian(...)`, `npy:DIR`,
// ...). Each source is a file in data_sources/ (discovered as strategies are; the generated
// module kvlab.data_sources_builtin lists them and offers load_data), declaring its name,
// usage and summary, a check that validates a spec before anything is read or generated,
// and a load that builds the workload.
module;
#include <algorithm>
#include <cstddef>
#include <span>
#include <string>
#include <string_view>
#include <vector>
export module kvlab.data;
import kvlab.core;

export namespace kvlab {

struct data_source_info {
  std::string name;    // what a spec starts with: "npy", "synthetic:gaussian"
  std::string usage;   // "npy:DIR", "synthetic:gaussian(L,H,Q,T,D,seed)"
  std::string summary; // one line: what it is
};

struct data_source {
  data_source_info info;
  std::string file; // the file that defines it
  // The spec taken apart and checked, never opening a file or generating a value: the
  // floats the workload will hold, or 0 when only reading tells.
  std::size_t (*check)(std::string_view spec) = nullptr;
  kv_data (*load)(std::string_view spec) = nullptr;
};

// Adds a source from `file`; a name another file has added is an error naming both.
inline void add_data_source(std::vector<data_source>& all, std::string_view file, data_source_info info,
                            std::size_t (*check)(std::string_view), kv_data (*load)(std::string_view)) {
  for (const auto& s : all)
    if (s.info.name == info.name)
      throw error(std::string(file) + ": data source '" + info.name + "' is registered twice (first by " + s.file +
                  ")");
  all.push_back({std::move(info), std::string(file), check, load});
}

// The source whose name the spec is, or starts with followed by ':' or '(' (the longest).
inline const data_source& find_data_source(std::string_view spec, std::span<const data_source> sources) {
  const data_source* found = nullptr;
  for (const auto& s : sources) {
    const std::string& name = s.info.name;
    const bool matches =
        spec.starts_with(name) && (spec.size() == name.size() || spec[name.size()] == ':' || spec[name.size()] == '(');
    if (matches && (!found || name.size() > found->info.name.size())) found = &s;
  }
  if (found) return *found;
  std::string allowed;
  for (const auto& s : sources) allowed += (allowed.empty() ? "" : ", ") + s.info.usage;
  throw error("data spec '" + std::string(spec) + "': unknown source; allowed: " + allowed);
}

// The text after `<name>:` of a spec whose source is `name`, which must not be empty.
inline std::string_view spec_argument(std::string_view spec, std::string_view name) {
  const std::string_view rest = spec.substr(std::min(spec.size(), name.size() + 1));
  if (rest.empty()) throw error("data spec '" + std::string(spec) + "': nothing after '" + std::string(name) + ":'");
  return rest;
}

} // namespace kvlab
