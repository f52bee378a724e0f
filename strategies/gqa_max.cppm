// max: a KV head's score for a key is the largest attention any of its query heads gives it,
// so a key one head relies on is not averaged away.
// Paper: - (the ablation alternative to mean; no paper prescribes it)
module;
#include <algorithm>
#include <cstddef>
#include <span>
#include <string>
export module kvlab.strategies.gqa_max;
import kvlab.core;

export namespace kvlab::strategies::gqa_max {

struct group_max {
  using component_concept = aggregation_tag;
  std::string name() const { return "max"; }
  void combine(std::span<const float> probabilities, std::size_t group, std::span<double> scores) const {
    const std::size_t held = probabilities.size() / group;
    for (std::size_t t = 0; t < scores.size(); ++t) {
      double most = 0.0;
      for (std::size_t g = 0; g < group; ++g) most = std::max(most, static_cast<double>(probabilities[g * held + t]));
      scores[t] = most;
    }
  }
};
static_assert(Aggregation<group_max>);

inline strategy_info info() {
  return {
      .name = "max", .usage = "max", .summary = "largest attention over the query heads of a KV head", .paper = "-"};
}

inline group_max make(const strategy_args& args) {
  args.expect_arguments(0, "max");
  return {};
}

} // namespace kvlab::strategies::gqa_max

// The typed name recipes use (kvlab.compose).
export namespace kvlab::parts {
using gqa_max = strategies::gqa_max::group_max;
} // namespace kvlab::parts
