// mean: a KV head's score for a key is the mean attention its query heads give the key.
// Paper: the GQA support of Ada-KV, arXiv 2407.11550 (scores averaged over the query group).
module;
#include <algorithm>
#include <cstddef>
#include <span>
#include <string>
export module kvlab.strategies.gqa_mean;
import kvlab.core;

export namespace kvlab::strategies::gqa_mean {

struct group_mean {
  using component_concept = aggregation_tag;
  std::string name() const { return "mean"; }
  void combine(std::span<const float> probabilities, std::size_t group, std::span<double> scores) const {
    // Head by head over all tokens: each token's sum adds its heads in order, as one loop per
    // token would, and the pass over the tokens is contiguous.
    const std::size_t held = probabilities.size() / group;
    std::ranges::fill(scores, 0.0);
    for (std::size_t g = 0; g < group; ++g)
      for (std::size_t t = 0; t < scores.size(); ++t)
        scores[t] += probabilities[g * held + t] / static_cast<double>(group);
  }
};
static_assert(Aggregation<group_mean>);

inline strategy_info info() {
  return {.name = "mean",
          .usage = "mean",
          .summary = "mean attention over the query heads of a KV head",
          .paper = "arXiv 2407.11550"};
}

inline group_mean make(const strategy_args& args) {
  args.expect_arguments(0, "mean");
  return {};
}

} // namespace kvlab::strategies::gqa_mean

// The typed name recipes use (kvlab.compose).
export namespace kvlab::parts {
using gqa_mean = strategies::gqa_mean::group_mean;
} // namespace kvlab::parts
