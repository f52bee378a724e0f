// pyramid(b): per-layer budgets fall linearly from the lowest layer to the top one, which
// gets average / b (b = 20 by default), with the same total as uniform allocation; the
// heads of a layer share its budget equally. Rounding leftovers go to the lowest layers, so
// the budgets sum to layers x budget exactly.
// Paper: PyramidKV, arXiv 2406.02069, sec. 3.3.
module;
#include <cstddef>
#include <span>
#include <string>
#include <vector>
export module kvlab.strategies.pyramid;
import kvlab.core;

export namespace kvlab::strategies::pyramid {

class layer_pyramid {
public:
  using component_concept = allocation_tag;
  static constexpr double default_beta = 20.0;
  explicit layer_pyramid(double beta = default_beta) : beta_(beta) {
    if (!(beta >= 1.0))
      throw error("pyramid(beta): beta must be >= 1 (the top layer keeps average / beta), got " + format_number(beta));
  }
  std::string name() const { return "pyramid(" + format_number(beta_) + ")"; }

  // The budget of each KV head of `layer` when uniform allocation gives every head `budget`.
  std::size_t layer_budget(std::size_t layer, std::size_t layers, std::size_t budget) const {
    if (layers == 1) return budget;
    const double average = static_cast<double>(budget), top = average / beta_, bottom = 2.0 * average - top;
    const auto exact = [&](std::size_t l) {
      return static_cast<std::size_t>(bottom -
                                      (bottom - top) * static_cast<double>(l) / static_cast<double>(layers - 1));
    };
    std::size_t total = 0;
    for (std::size_t l = 0; l < layers; ++l) total += exact(l);
    const std::size_t leftover = layers * budget - total;
    return exact(layer) + (layer < leftover ? 1 : 0);
  }
  std::vector<std::vector<std::size_t>> keep(std::size_t layer, std::size_t layers, std::size_t budget,
                                             std::span<const std::vector<double>> scores) const {
    const std::size_t mine = layer_budget(layer, layers, budget);
    return top_scores_per_head(scores, mine);
  }

private:
  double beta_;
};
static_assert(Allocation<layer_pyramid>);

inline strategy_info info() {
  return {.name = "pyramid",
          .usage = "pyramid(beta)",
          .summary = "per-layer budgets falling linearly to average / beta at the top layer (beta = 20)",
          .paper = "arXiv 2406.02069 sec. 3.3",
          .examples = {"pyramid", "pyramid(4)"}};
}

inline layer_pyramid make(const strategy_args& args) {
  if (args.args.size() > 1) throw error("'" + args.text + "' takes at most one argument (usage: pyramid(beta))");
  return layer_pyramid(args.args.empty() ? layer_pyramid::default_beta : args.number<double>(0, "beta"));
}

} // namespace kvlab::strategies::pyramid

// The typed name recipes use (kvlab.compose).
export namespace kvlab::parts {
using pyramid = strategies::pyramid::layer_pyramid;
} // namespace kvlab::parts
