// synthetic:llm(...): keys, values and queries that imitate a real model's cache: outlier
// key channels, RoPE, attention sinks, local attention, heavy-tailed values. The generator
// and its knobs are in modules/data/synthetic_llm.cppm and docs/data.md.
// Paper: the KV statistics of KIVI, arXiv 2402.02750, sec. 3.1 (outlier key channels), and
// StreamingLLM, arXiv 2309.17453, sec. 3.1 (attention sinks).
module;
#include <cstddef>
#include <string>
#include <string_view>
export module kvlab.data_sources.llm;
import kvlab.core;
import kvlab.data;
import kvlab.data.llm;

export namespace kvlab::data_sources::llm {

inline term generator(std::string_view spec) {
  return parse_term(spec.substr(std::string_view("synthetic:").size()), "data spec '" + std::string(spec) + "'");
}

inline data_source_info info() {
  return {.name = "synthetic:llm",
          .usage = "synthetic:llm(L,H,Q,T,D,seed,...)",
          .summary = "imitates real caches: outlier key channels, RoPE, sinks, heavy-tailed values"};
}

inline std::size_t check(std::string_view spec) {
  const auto p = detail::llm::read_parameters(generator(spec), spec);
  return (2 * p.kv_heads + p.q_heads) * p.layers * p.tokens * p.head_dim;
}

inline kv_data load(std::string_view spec) { return synthetic_llm(generator(spec), spec); }

} // namespace kvlab::data_sources::llm
