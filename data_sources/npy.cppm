// npy:DIR: a directory of K.npy, V.npy and Q.npy, each [layers, heads, tokens, head_dim]
// (kvlab export and kvlab capture write them; docs/data.md has a capture script).
// Paper: - (NumPy's .npy format, version 1.0-3.0)
module;
#include <cstddef>
#include <string>
#include <string_view>
export module kvlab.data_sources.npy;
import kvlab.core;
import kvlab.data;
import kvlab.data.files;

export namespace kvlab::data_sources::npy {

inline data_source_info info() {
  return {.name = "npy", .usage = "npy:DIR", .summary = "K.npy, V.npy and Q.npy of [layers, heads, tokens, head_dim]"};
}

inline std::size_t check(std::string_view spec) {
  spec_argument(spec, "npy");
  return 0;
}

inline kv_data load(std::string_view spec) { return load_npy_dir(std::string(spec_argument(spec, "npy"))); }

} // namespace kvlab::data_sources::npy
