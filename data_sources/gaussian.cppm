// synthetic:gaussian(L=2,H=2,Q=8,T=1024,D=128,seed=1): i.i.d. N(0,1) keys, values and
// queries; L layers, H KV heads, Q query heads (a multiple of H), T tokens, head_dim D.
// Paper: - (the isotropic baseline workload)
module;
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
export module kvlab.data_sources.gaussian;
import kvlab.core;
import kvlab.data;

export namespace kvlab::data_sources::gaussian {

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

struct parameters {
  std::size_t layers = 0, kv_heads = 0, q_heads = 0, tokens = 0, head_dim = 0;
  std::uint64_t seed = 0;
};

inline parameters read_parameters(std::string_view spec) {
  const term t =
      parse_term(spec.substr(std::string_view("synthetic:").size()), "data spec '" + std::string(spec) + "'");
  const generator_arguments args(t, spec, {{"L", 2}, {"H", 2}, {"Q", 8}, {"T", 1024}, {"D", 128}, {"seed", 1}});
  const parameters p{.layers = args.whole_number("L"),
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

} // namespace detail

inline data_source_info info() {
  return {.name = "synthetic:gaussian",
          .usage = "synthetic:gaussian(L,H,Q,T,D,seed)",
          .summary = "i.i.d. N(0,1) keys, values and queries"};
}

inline std::size_t check(std::string_view spec) {
  const detail::parameters p = detail::read_parameters(spec);
  return (2 * p.kv_heads + p.q_heads) * p.layers * p.tokens * p.head_dim;
}

inline kv_data load(std::string_view spec) {
  const detail::parameters p = detail::read_parameters(spec);
  kv_data data{kv_tensor({p.layers, p.kv_heads, p.tokens, p.head_dim}),
               kv_tensor({p.layers, p.kv_heads, p.tokens, p.head_dim}),
               kv_tensor({p.layers, p.q_heads, p.tokens, p.head_dim}), std::string(spec)};
  detail::fill_gaussian(data.keys, p.seed, 1);
  detail::fill_gaussian(data.values, p.seed, 2);
  detail::fill_gaussian(data.queries, p.seed, 3);
  check_consistent(data);
  return data;
}

} // namespace kvlab::data_sources::gaussian
