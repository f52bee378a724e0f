// safetensors:FILE: tensors k, v and q of [layers, heads, tokens, head_dim] in F32, F16 or
// BF16 (format: the safetensors README, "Format").
// Paper: - (Hugging Face's safetensors format)
module;
#include <cstddef>
#include <string>
#include <string_view>
export module kvlab.data_sources.safetensors;
import kvlab.core;
import kvlab.data;
import kvlab.data.files;

export namespace kvlab::data_sources::safetensors {

inline data_source_info info() {
  return {.name = "safetensors",
          .usage = "safetensors:FILE",
          .summary = "tensors k, v, q of [layers, heads, tokens, head_dim], F32/F16/BF16"};
}

inline std::size_t check(std::string_view spec) {
  spec_argument(spec, "safetensors");
  return 0;
}

inline kv_data load(std::string_view spec) { return load_safetensors(std::string(spec_argument(spec, "safetensors"))); }

} // namespace kvlab::data_sources::safetensors
