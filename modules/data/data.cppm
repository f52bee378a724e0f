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

struct gaussian_parameters {
  std::size_t layers = 0, kv_heads = 0, q_heads = 0, tokens = 0, head_dim = 0;
  std::uint64_t seed = 0;
};

inline gaussian_parameters read_gaussian_parameters(const term& t, std::string_view spec) {
  const generator_arguments args(t, spec, {{"L", 2}, {"H", 2}, {"Q", 8}, {"T", 1024}, {"D", 128}, {"seed", 1}});
  const gaussian_parameters p{.layers = args.whole_number("L"),
                              .kv_heads = args.whole_number("H"),
                              .q_heads = args.whole_number("Q"),
                              .tokens = args.whole_number("T", 2),
                              .head_dim = args.whole_number("D"),
                              .seed = static_cast<std::uint64_t>(args.whole_number("seed", 0))};
  if (p.q_heads % p.kv_heads != 0)
    args.fail("Q = " + std::to_string(p.q_heads) + " query heads is not a multiple of H = " +
              std::to_string(p.kv_heads) + " KV heads (grouped-query attention)");
  // Refuse workloads that would not fit this machine's memory, before allocating them.
  checked_workload_elements({2 * p.kv_heads + p.q_heads, p.layers, p.tokens, p.head_dim},
                            "data spec '" + std::string(spec) + "'");
  return p;
}

inline kv_data gaussian(const term& t, std::string_view spec) {
  const gaussian_parameters p = read_gaussian_parameters(t, spec);
  kv_data data{kv_tensor({p.layers, p.kv_heads, p.tokens, p.head_dim}),
               kv_tensor({p.layers, p.kv_heads, p.tokens, p.head_dim}),
               kv_tensor({p.layers, p.q_heads, p.tokens, p.head_dim}), std::string(spec)};
  fill_gaussian(data.keys, p.seed, 1);
  fill_gaussian(data.values, p.seed, 2);
  fill_gaussian(data.queries, p.seed, 3);
  return data;
}

} // namespace detail

// A data spec taken apart and checked as load_data checks it, before any file is read or any
// value generated (the fuzz target checks specs this way, so it never builds huge workloads).
struct data_request {
  std::string source;       // synthetic, npy or safetensors
  term generator;           // synthetic: gaussian(...) or llm(...)
  std::size_t elements = 0; // synthetic: the floats of keys, values and queries
  std::string path;         // npy and safetensors
};

// Throws kvlab::error naming the bad part.
inline data_request parse_data_spec(std::string_view spec) {
  const auto colon = spec.find(':');
  if (colon == std::string_view::npos)
    throw error("data spec '" + std::string(spec) +
                "': expected source:arguments, for example "
                "synthetic:gaussian(L=2,H=2,Q=8,T=1024,D=128,seed=1)");
  data_request request{.source = std::string(spec.substr(0, colon))};
  if (request.source == "synthetic") {
    request.generator = parse_term(spec.substr(colon + 1), "data spec '" + std::string(spec) + "'");
    const auto elements = [](const auto& p) { return (2 * p.kv_heads + p.q_heads) * p.layers * p.tokens * p.head_dim; };
    if (request.generator.name == "gaussian")
      request.elements = elements(detail::read_gaussian_parameters(request.generator, spec));
    else if (request.generator.name == "llm")
      request.elements = elements(detail::llm::read_parameters(request.generator, spec));
    else
      throw error("data spec '" + std::string(spec) + "': unknown synthetic generator '" + request.generator.name +
                  "'; allowed: gaussian, llm");
    return request;
  }
  request.path = spec.substr(colon + 1);
  if (request.path.empty())
    throw error("data spec '" + std::string(spec) + "': no path after '" + request.source + ":'");
  if (request.source != "npy" && request.source != "safetensors")
    throw error("data spec '" + std::string(spec) + "': unknown source '" + request.source +
                "'; allowed: synthetic, npy, safetensors, model");
  return request;
}

// Builds the workload a data spec names. Throws kvlab::error naming the bad part.
inline kv_data load_data(std::string_view spec) {
  const data_request request = parse_data_spec(spec);
  if (request.source == "npy") return load_npy_dir(request.path);
  if (request.source == "safetensors") return load_safetensors(request.path);
  if (request.generator.name == "llm") return synthetic_llm(request.generator, spec);
  kv_data data = detail::gaussian(request.generator, spec);
  check_consistent(data);
  return data;
}

} // namespace kvlab
