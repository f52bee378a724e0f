// snapkv(B,W,K): the last W queries (the observation window) vote: each earlier token's
// attention from them is summed and smoothed by average pooling over K neighbours; the W
// window tokens are kept and the best of the rest fill the budget B (B counts the window).
// The paper compresses once, at the end of prefill, and lets decode tokens grow the cache past
// B; here it compresses after every token (`step`), so decode tokens count against the budget
// as they do for every other policy and methods compare at equal memory. `compress=prefill`
// gives the paper's single compression.
// Paper: SnapKV, arXiv 2404.14469, sec. 4.2 (observation window, voting, pooling).
module;
#include <algorithm>
#include <cstddef>
#include <string>
#include <vector>
export module kvlab.strategies.snapkv;
import kvlab.core;
import kvlab.strategies.step;

export namespace kvlab::strategies::snapkv {

struct observation_vote {
  using component_concept = eviction_tag;
  token_budget keep;
  std::size_t window = 32;
  std::size_t kernel = 5;
  std::string name() const {
    return "snapkv(" + keep.text() + "," + std::to_string(window) + "," + std::to_string(kernel) + ")";
  }
  eviction_needs needs() const {
    if (window < 1 || kernel % 2 == 0)
      throw error(name() + ": the observation window W must be at least 1 and the pooling kernel K odd");
    return {.attention = true, .observation_window = window, .schedule = any_schedule(step::every_token{})};
  }
  std::size_t budget(std::size_t seen) const { return std::max(keep.tokens(seen), std::min(seen, window)); }
  std::vector<double> scores(const eviction_view& view) const {
    const std::size_t n = view.positions.size();
    const std::size_t first_window = view.tokens_seen - std::min(view.tokens_seen, window);
    std::size_t prefix = 0; // held tokens before the observation window
    while (prefix < n && view.positions[prefix] < first_window) ++prefix;
    std::vector<double> scores(n, protected_score);
    const std::size_t half = kernel / 2;
    for (std::size_t t = 0; t < prefix; ++t) {
      double sum = 0.0; // zero-padded average pool, as avg_pool1d with padding K/2
      for (std::size_t j = t - std::min(t, half); j <= std::min(prefix - 1, t + half); ++j) sum += view.accumulated[j];
      scores[t] = sum / static_cast<double>(kernel);
    }
    return scores;
  }
};
static_assert(Eviction<observation_vote>);

inline strategy_info info() {
  return {.name = "snapkv",
          .usage = "snapkv(B,W,K)",
          .summary = "budget B, observation window W, odd pooling kernel K; after every token",
          .paper = "arXiv 2404.14469 sec. 4.2",
          .examples = {"snapkv(16,4,3)"},
          .at_budget = [](double ratio) { return any_eviction(observation_vote{ratio, 32, 5}); }};
}

inline observation_vote make(const strategy_args& a) {
  a.expect_arguments(3, "snapkv(B,W,K)");
  const auto window = a.number_in<std::size_t>(1, "observation window W", 1, max_tokens);
  const auto kernel = a.number_in<std::size_t>(2, "pooling kernel K", 1, max_tokens);
  if (kernel % 2 == 0) throw error("'" + a.text + "': the pooling kernel K must be odd (1, 3, 5, ...)");
  return observation_vote{token_budget::parse(a.args[0], "'" + a.text + "', B"), window, kernel};
}

} // namespace kvlab::strategies::snapkv

// The typed name recipes use (kvlab.compose).
export namespace kvlab::parts {
using snapkv = strategies::snapkv::observation_vote;
} // namespace kvlab::parts
