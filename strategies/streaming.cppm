// streaming(S,N): keep the first S tokens (attention sinks) and the N most recent.
// Paper: StreamingLLM, arXiv 2309.17453, sec. 3.2 (attention sinks) and 3.3 (rolling cache).
module;
#include <algorithm>
#include <cstddef>
#include <string>
#include <vector>
export module kvlab.strategies.streaming;
import kvlab.core;

export namespace kvlab::strategies::streaming {

struct sinks_and_window {
  using component_concept = eviction_tag;
  std::size_t sinks = 4;
  token_budget recent;
  std::string name() const { return "streaming(" + std::to_string(sinks) + "," + recent.text() + ")"; }
  eviction_needs needs() const { return {}; }
  std::size_t budget(std::size_t seen) const { return std::min(seen, sinks + recent.tokens(seen)); }
  std::vector<double> scores(const eviction_view& view) const {
    std::vector<double> scores;
    for (const std::size_t p : view.positions) scores.push_back(p < sinks ? protected_score : static_cast<double>(p));
    return scores;
  }
};
static_assert(Eviction<sinks_and_window>);

inline strategy_info info() {
  return {.name = "streaming",
          .usage = "streaming(S,N)",
          .summary = "S attention sinks plus the N most recent tokens",
          .paper = "arXiv 2309.17453 sec. 3.2-3.3",
          .examples = {"streaming(4,16)"},
          .at_budget = [](double ratio) { return any_eviction(sinks_and_window{4, ratio}); }};
}

inline sinks_and_window make(const strategy_args& a) {
  a.expect_arguments(2, "streaming(S,N)");
  return sinks_and_window{a.number_in<std::size_t>(0, "S", 0, max_tokens),
                          token_budget::parse(a.args[1], "'" + a.text + "', N")};
}

} // namespace kvlab::strategies::streaming

// The typed name recipes use (kvlab.compose).
export namespace kvlab::parts {
using streaming = strategies::streaming::sinks_and_window;
} // namespace kvlab::parts
