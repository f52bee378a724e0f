// knorm(B): keep the B tokens whose keys have the smallest L2 norm (small-norm keys draw
// the most attention).
// Paper: Devoto et al., "A Simple and Effective L2 Norm-Based Strategy for KV Cache
// Compression", arXiv 2406.11430, sec. 3-4.
module;
#include <cstddef>
#include <string>
#include <vector>
export module kvlab.strategies.knorm;
import kvlab.core;

export namespace kvlab::strategies::knorm {

struct small_key_norm {
  using component_concept = eviction_tag;
  token_budget keep;
  std::string name() const { return "knorm(" + keep.text() + ")"; }
  eviction_needs needs() const { return {.key_norms = true}; }
  std::size_t budget(std::size_t seen) const { return keep.tokens(seen); }
  std::vector<double> scores(const eviction_view& view) const {
    std::vector<double> scores(view.key_norms.size());
    for (std::size_t t = 0; t < scores.size(); ++t) scores[t] = -view.key_norms[t];
    return scores;
  }
};
static_assert(Eviction<small_key_norm>);

inline strategy_info info() {
  return {.name = "knorm",
          .usage = "knorm(B)",
          .summary = "keep the keys with the smallest L2 norm",
          .paper = "arXiv 2406.11430 sec. 3",
          .examples = {"knorm(16)"},
          .at_budget = [](double ratio) { return any_eviction(small_key_norm{ratio}); }};
}

inline small_key_norm make(const strategy_args& a) {
  a.expect_arguments(1, "knorm(B)");
  return small_key_norm{token_budget::parse(a.args[0], "'" + a.text + "', B")};
}

} // namespace kvlab::strategies::knorm

// The typed name recipes use (kvlab.compose).
export namespace kvlab::parts {
using knorm = strategies::knorm::small_key_norm;
} // namespace kvlab::parts
