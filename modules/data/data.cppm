// kvlab.data: KV workloads from data specs: synthetic:gaussian(...), synthetic:llm(...)
// (modules/data/synthetic_llm.cppm documents its knobs), npy:DIR and safetensors:FILE
// (modules/data/kv_files.cppm; see docs/data.md).
//   synthetic:gaussian(L=2,H=2,Q=8,T=1024,D=128,seed=1): i.i.d. N(0,1) keys, values and
//   queries; L layers, H KV heads, Q query heads (a multiple of H), T tokens, head_dim D.
module;
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
export module kvlab.data;
import kvlab.core;
import kvlab.data.llm;
import kvlab.data.files;

export namespace kvlab {

namespace detail {

inline void fill_gaussian(kv_tensor& tensor, std::uint64_t seed, std::uint64_t tensor_id) {
  const auto& s = tensor.shape();
  for (std::size_t layer = 0; layer < s.layers; ++layer)
    for (std::size_t head = 0; head < s.heads; ++head) {
      random_stream random(seed, (tensor_id << 48) ^ (layer << 24) ^ head);
      for (std::size_t t = 0; t < s.tokens; ++t)
        for (float& x : tensor.row(layer, head, t)) x = static_cast<float>(random.normal());
    }
}

inline kv_data gaussian(const term& t, std::string_view spec) {
  const generator_arguments args(t, spec, {{"L", 2}, {"H", 2}, {"Q", 8}, {"T", 1024}, {"D", 128}, {"seed", 1}});
  const std::size_t layers = args.whole_number("L"), kv_heads = args.whole_number("H"),
                    q_heads = args.whole_number("Q");
  const std::size_t tokens = args.whole_number("T", 2), head_dim = args.whole_number("D");
  const auto seed = static_cast<std::uint64_t>(args.whole_number("seed", 0));
  if (q_heads % kv_heads != 0)
    args.fail("Q = " + std::to_string(q_heads) + " query heads is not a multiple of H = " + std::to_string(kv_heads) +
              " KV heads (grouped-query attention)");
  // Refuse workloads that would not fit this machine's memory, before allocating them.
  checked_workload_elements({2 * kv_heads + q_heads, layers, tokens, head_dim},
                            "data spec '" + std::string(spec) + "'");
  kv_data data{kv_tensor({layers, kv_heads, tokens, head_dim}), kv_tensor({layers, kv_heads, tokens, head_dim}),
               kv_tensor({layers, q_heads, tokens, head_dim}), std::string(spec)};
  fill_gaussian(data.keys, seed, 1);
  fill_gaussian(data.values, seed, 2);
  fill_gaussian(data.queries, seed, 3);
  return data;
}

} // namespace detail

// Builds the workload a data spec names. Throws kvlab::error naming the bad part.
inline kv_data load_data(std::string_view spec) {
  const auto colon = spec.find(':');
  const std::string source(spec.substr(0, colon));
  if (colon == std::string_view::npos)
    throw error("data spec '" + std::string(spec) +
                "': expected source:arguments, for example "
                "synthetic:gaussian(L=2,H=2,Q=8,T=1024,D=128,seed=1)");
  if (source == "synthetic") {
    const term generator = parse_term(spec.substr(colon + 1), "data spec '" + std::string(spec) + "'");
    if (generator.name == "gaussian") {
      kv_data data = detail::gaussian(generator, spec);
      check_consistent(data);
      return data;
    }
    if (generator.name == "llm") return synthetic_llm(generator, spec);
    throw error("data spec '" + std::string(spec) + "': unknown synthetic generator '" + generator.name +
                "'; allowed: gaussian, llm");
  }
  const std::string path(spec.substr(colon + 1));
  if (path.empty()) throw error("data spec '" + std::string(spec) + "': no path after '" + source + ":'");
  if (source == "npy") return load_npy_dir(path);
  if (source == "safetensors") return load_safetensors(path);
  throw error("data spec '" + std::string(spec) + "': unknown source '" + source +
              "'; allowed: synthetic, npy, safetensors, model");
}

} // namespace kvlab
