// uniform: every (layer, KV head) keeps the policy's budget of its best-scored tokens.
// Paper: - (the allocation of every single-budget eviction policy, e.g. H2O arXiv 2306.14048)
module;
#include <cstddef>
#include <span>
#include <string>
#include <vector>
export module kvlab.strategies.uniform;
import kvlab.core;

export namespace kvlab::strategies::uniform {

struct same_budget {
  using component_concept = allocation_tag;
  std::string name() const { return "uniform"; }
  std::vector<std::vector<std::size_t>> keep(std::size_t, std::size_t, std::size_t budget,
                                             std::span<const std::vector<double>> scores) const {
    return top_scores_per_head(scores, budget);
  }
};
static_assert(Allocation<same_budget>);

inline strategy_info info() {
  return {.name = "uniform", .usage = "uniform", .summary = "every head keeps the policy's budget", .paper = "-"};
}

inline same_budget make(const strategy_args& args) {
  args.expect_arguments(0, "uniform");
  return {};
}

} // namespace kvlab::strategies::uniform

// The typed name recipes use (kvlab.compose).
export namespace kvlab::parts {
using uniform = strategies::uniform::same_budget;
} // namespace kvlab::parts
