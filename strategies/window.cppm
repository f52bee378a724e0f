// window(N): keep the N most recent tokens (N a count or a ratio of the tokens seen).
// Paper: sliding-window attention, Longformer, arXiv 2004.05150, sec. 3.1; the "window
// attention" baseline of StreamingLLM, arXiv 2309.17453, sec. 3.
module;
#include <cstddef>
#include <string>
#include <vector>
export module kvlab.strategies.window;
import kvlab.core;

export namespace kvlab::strategies::window {

struct recent_window {
  using component_concept = eviction_tag;
  token_budget recent;
  std::string name() const { return "window(" + recent.text() + ")"; }
  eviction_needs needs() const { return {}; }
  std::size_t budget(std::size_t seen) const { return recent.tokens(seen); }
  // Newer is better: the score is the position.
  std::vector<double> scores(const eviction_view& view) const {
    return std::vector<double>(view.positions.begin(), view.positions.end());
  }
};
static_assert(Eviction<recent_window>);

inline strategy_info info() {
  return {.name = "window",
          .usage = "window(N)",
          .summary = "keep the N most recent tokens (N a count or a ratio of the tokens seen)",
          .paper = "arXiv 2004.05150 sec. 3.1",
          .examples = {"window(16)"},
          .at_budget = [](double ratio) { return any_eviction(recent_window{ratio}); }};
}

inline recent_window make(const strategy_args& a) {
  a.expect_arguments(1, "window(N)");
  return recent_window{token_budget::parse(a.args[0], "'" + a.text + "', N")};
}

} // namespace kvlab::strategies::window

// The typed name recipes use (kvlab.compose).
export namespace kvlab::parts {
using window = strategies::window::recent_window;
} // namespace kvlab::parts
