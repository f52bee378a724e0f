// tova(B): Token Omission Via Attention. Keep the B tokens with the largest attention at
// the latest step (averaged, or max-ed, over the query heads sharing the KV head).
// Paper: TOVA, arXiv 2401.06104, sec. 3.
module;
#include <cstddef>
#include <string>
#include <vector>
export module kvlab.strategies.tova;
import kvlab.core;

export namespace kvlab::strategies::tova {

struct latest_attention {
  using component_concept = eviction_tag;
  token_budget keep;
  std::string name() const { return "tova(" + keep.text() + ")"; }
  eviction_needs needs() const { return {.attention = true}; }
  std::size_t budget(std::size_t seen) const { return keep.tokens(seen); }
  std::vector<double> scores(const eviction_view& view) const {
    return std::vector<double>(view.latest.begin(), view.latest.end());
  }
};
static_assert(Eviction<latest_attention>);

inline strategy_info info() {
  return {.name = "tova",
          .usage = "tova(B)",
          .summary = "keep the tokens the latest query attends to most",
          .paper = "arXiv 2401.06104 sec. 3",
          .examples = {"tova(16)"},
          .at_budget = [](double ratio) { return any_eviction(latest_attention{ratio}); }};
}

inline latest_attention make(const strategy_args& a) {
  a.expect_arguments(1, "tova(B)");
  return latest_attention{token_budget::parse(a.args[0], "'" + a.text + "', B")};
}

} // namespace kvlab::strategies::tova

// The typed name recipes use (kvlab.compose).
export namespace kvlab::parts {
using tova = strategies::tova::latest_attention;
} // namespace kvlab::parts
