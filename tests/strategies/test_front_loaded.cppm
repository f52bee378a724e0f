// test_front_loaded: an allocation rule that gives the lower half of the layers 3/2 of the
// budget and the upper half 1/2 (an odd layer count leaves the middle layer at the budget).
// Exists only in the test build, to show that an allocation rule added as one file is
// registered, listed and usable in recipes (alloc=test_front_loaded) with no other edit.
// Paper: the layer-wise budget idea of PyramidKV, arXiv 2406.02069, sec. 3.3, as a step.
module;
#include <cstddef>
#include <span>
#include <string>
#include <vector>
export module kvlab.strategies.test_front_loaded;
import kvlab.core;

export namespace kvlab::strategies::test_front_loaded {

struct front_loaded {
  using component_concept = allocation_tag;
  std::string name() const { return "test_front_loaded"; }
  std::vector<std::vector<std::size_t>> keep(std::size_t layer, std::size_t layers, std::size_t budget,
                                             std::span<const std::vector<double>> scores) const {
    const bool middle = layers % 2 == 1 && layer == layers / 2;
    const std::size_t mine = middle ? budget : layer < layers / 2 ? budget * 3 / 2 : budget / 2;
    return top_scores_per_head(scores, mine);
  }
};
static_assert(Allocation<front_loaded>);

inline strategy_info info() {
  return {.name = "test_front_loaded",
          .usage = "test_front_loaded",
          .summary = "lower layers 3/2 of the budget, upper layers 1/2 (test build only)",
          .paper = "arXiv 2406.02069 sec. 3.3"};
}

inline front_loaded make(const strategy_args& args) {
  args.expect_arguments(0, "test_front_loaded");
  return {};
}

} // namespace kvlab::strategies::test_front_loaded

// The typed name recipes use (kvlab.compose).
export namespace kvlab::parts {
using test_front_loaded = strategies::test_front_loaded::front_loaded;
} // namespace kvlab::parts
