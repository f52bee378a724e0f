// h2o(H,R): keep H heavy hitters, the tokens with the largest attention mass accumulated
// over every step they were held, plus the R most recent tokens (H, R counts or ratios of
// the tokens seen).
// Paper: H2O, arXiv 2306.14048, sec. 3 (accumulated attention scores, Algorithm 1).
module;
#include <algorithm>
#include <cstddef>
#include <string>
#include <vector>
export module kvlab.strategies.h2o;
import kvlab.core;

export namespace kvlab::strategies::h2o {

struct heavy_hitters {
  using component_concept = eviction_tag;
  token_budget heavy, recent;
  std::string name() const { return "h2o(" + heavy.text() + "," + recent.text() + ")"; }
  eviction_needs needs() const { return {.attention = true}; }
  std::size_t budget(std::size_t seen) const { return std::min(seen, heavy.tokens(seen) + recent.tokens(seen)); }
  std::vector<double> scores(const eviction_view& view) const {
    const std::size_t first_recent = view.tokens_seen - recent.tokens(view.tokens_seen);
    std::vector<double> scores(view.accumulated.begin(), view.accumulated.end());
    for (std::size_t i = 0; i < scores.size(); ++i)
      if (view.positions[i] >= first_recent) scores[i] = protected_score;
    return scores;
  }
};
static_assert(Eviction<heavy_hitters>);

inline strategy_info info() {
  return {.name = "h2o",
          .usage = "h2o(H,R)",
          .summary = "H heavy hitters by accumulated attention plus R recent tokens",
          .paper = "arXiv 2306.14048 sec. 3",
          .examples = {"h2o(8,8)"},
          .at_budget = [](double ratio) { return any_eviction(heavy_hitters{ratio / 2, ratio / 2}); }};
}

inline heavy_hitters make(const strategy_args& a) {
  a.expect_arguments(2, "h2o(H,R)");
  return heavy_hitters{token_budget::parse(a.args[0], "'" + a.text + "', H"),
                       token_budget::parse(a.args[1], "'" + a.text + "', R")};
}

} // namespace kvlab::strategies::h2o

// The typed name recipes use (kvlab.compose).
export namespace kvlab::parts {
using h2o = strategies::h2o::heavy_hitters;
} // namespace kvlab::parts
