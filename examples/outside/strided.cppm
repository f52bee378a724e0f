// An eviction policy defined outside kvlab: keep evenly spaced tokens (every S-th position,
// S chosen so they fill half the budget) plus the most recent ones (the other half), the
// strided pattern of Sparse Transformers (arXiv 1904.10509, sec. 4.2) used as a cache.
module;
#include <algorithm>
#include <cstddef>
#include <string>
#include <vector>
export module outside.strided;
import kvlab;

export struct strided {
  using component_concept = kvlab::eviction_tag;
  kvlab::token_budget keep;
  std::string name() const { return "strided(" + keep.text() + ")"; }
  kvlab::eviction_needs needs() const { return {}; }
  std::size_t budget(std::size_t seen) const { return keep.tokens(seen); }
  std::vector<double> scores(const kvlab::eviction_view& view) const {
    const std::size_t half = std::max<std::size_t>(1, budget(view.tokens_seen) / 2);
    const std::size_t stride = std::max<std::size_t>(1, view.tokens_seen / half);
    const std::size_t first_recent = view.tokens_seen - std::min(view.tokens_seen, half);
    std::vector<double> scores;
    for (const std::size_t position : view.positions)
      scores.push_back(position >= first_recent || position % stride == 0 ? kvlab::protected_score
                                                                          : static_cast<double>(position));
    return scores;
  }
};
static_assert(kvlab::Eviction<strided>);
