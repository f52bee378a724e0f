// random(B,seed): keep B tokens chosen uniformly at random, the floor any scoring policy
// must beat. Each token's score depends only on (seed, layer, KV head, position), so runs
// are reproducible whatever the thread count or schedule.
// Paper: - (the random-eviction baseline of H2O, arXiv 2306.14048, sec. 5)
module;
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>
export module kvlab.strategies.random;
import kvlab.core;

export namespace kvlab::strategies::random {

struct random_tokens {
  using component_concept = eviction_tag;
  token_budget keep;
  std::uint64_t seed = 0;
  std::string name() const { return "random(" + keep.text() + "," + std::to_string(seed) + ")"; }
  eviction_needs needs() const { return {}; }
  std::size_t budget(std::size_t seen) const { return keep.tokens(seen); }
  std::vector<double> scores(const eviction_view& view) const {
    std::vector<double> scores;
    const std::uint64_t stream = (std::uint64_t{view.layer} << 32) ^ view.kv_head;
    for (const std::size_t p : view.positions)
      scores.push_back(random_stream(seed ^ (p * 0x9e3779b97f4a7c15ull), stream).uniform());
    return scores;
  }
};
static_assert(Eviction<random_tokens>);

inline strategy_info info() {
  return {.name = "random",
          .usage = "random(B,seed)",
          .summary = "keep B tokens chosen at random (seeded)",
          .paper = "arXiv 2306.14048 sec. 5 (baseline)",
          .examples = {"random(16,1)"},
          .at_budget = [](double ratio) { return any_eviction(random_tokens{ratio, 1}); }};
}

inline random_tokens make(const strategy_args& a) {
  a.expect_arguments(2, "random(B,seed)");
  return random_tokens{token_budget::parse(a.args[0], "'" + a.text + "', B"), a.number<std::uint64_t>(1, "seed")};
}

} // namespace kvlab::strategies::random

// The typed name recipes use (kvlab.compose).
export namespace kvlab::parts {
using random = strategies::random::random_tokens;
} // namespace kvlab::parts
