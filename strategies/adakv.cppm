// adakv(a): the KV heads of a layer share one pool of heads x budget slots. Each head first
// keeps its best a x budget tokens (the authors' safeguard, a = 0.2 by default); the
// remaining slots go to the best remaining scores of any head (ties: the more recent token,
// then the lower head).
// Paper: Ada-KV, arXiv 2407.11550, sec. 4.
module;
#include <algorithm>
#include <cstddef>
#include <span>
#include <string>
#include <vector>
export module kvlab.strategies.adakv;
import kvlab.core;

export namespace kvlab::strategies::adakv {

class shared_pool {
public:
  using component_concept = allocation_tag;
  static constexpr double default_alpha = 0.2;
  explicit shared_pool(double alpha = default_alpha) : alpha_(alpha) {
    if (!(alpha >= 0.0 && alpha <= 1.0))
      throw error("adakv(alpha): alpha must be in [0, 1], got " + format_number(alpha));
  }
  std::string name() const { return "adakv(" + format_number(alpha_) + ")"; }

  std::vector<std::vector<std::size_t>> keep(std::size_t, std::size_t, std::size_t budget,
                                             std::span<const std::vector<double>> scores) const {
    const auto floor = static_cast<std::size_t>(alpha_ * static_cast<double>(budget));
    std::vector<std::vector<std::size_t>> kept = top_scores_per_head(scores, floor);
    std::size_t slots = budget * scores.size();
    struct candidate {
      double score;
      std::size_t token, head;
    };
    std::vector<candidate> rest;
    for (std::size_t h = 0; h < scores.size(); ++h) {
      slots -= std::min(slots, kept[h].size());
      std::vector<bool> taken(scores[h].size());
      for (const std::size_t t : kept[h]) taken[t] = true;
      for (std::size_t t = 0; t < scores[h].size(); ++t)
        if (!taken[t]) rest.push_back({scores[h][t], t, h});
    }
    const std::size_t extra = std::min(slots, rest.size());
    // A total order (score, then token, then head), so selection fixes the set.
    std::ranges::nth_element(rest, rest.begin() + static_cast<std::ptrdiff_t>(extra),
                             [](const candidate& a, const candidate& b) {
                               if (a.score != b.score) return a.score > b.score;
                               if (a.token != b.token) return a.token > b.token;
                               return a.head < b.head;
                             });
    for (std::size_t j = 0; j < extra; ++j) kept[rest[j].head].push_back(rest[j].token);
    for (auto& k : kept) std::ranges::sort(k);
    return kept;
  }

private:
  double alpha_;
};
static_assert(Allocation<shared_pool>);

inline strategy_info info() {
  return {.name = "adakv",
          .usage = "adakv(alpha)",
          .summary = "the heads of a layer share one pool, each keeping at least alpha x budget (alpha = 0.2)",
          .paper = "arXiv 2407.11550 sec. 4",
          .examples = {"adakv", "adakv(0.5)"}};
}

inline shared_pool make(const strategy_args& args) {
  if (args.args.size() > 1) throw error("'" + args.text + "' takes at most one argument (usage: adakv(alpha))");
  return shared_pool(args.args.empty() ? shared_pool::default_alpha : args.number<double>(0, "alpha"));
}

} // namespace kvlab::strategies::adakv

// The typed name recipes use (kvlab.compose).
export namespace kvlab::parts {
using adakv = strategies::adakv::shared_pool;
} // namespace kvlab::parts
