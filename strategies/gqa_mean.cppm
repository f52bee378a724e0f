// mean: a KV head's score for a key is the mean attention its query heads give the key.
// Paper: the GQA support of Ada-KV, arXiv 2407.11550 (scores averaged over the query group).
module;
#include <bit>
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
    // Head by head over all tokens, so each pass is contiguous and vectorised: every token's
    // sum adds its heads in order. x / group equals x * (1 / group) exactly when group is a
    // power of two, so the division, slow even in vector form, is paid only for other groups.
    const std::size_t held = probabilities.size() / group;
    const auto mean = [&](auto share) {
      for (std::size_t t = 0; t < scores.size(); ++t) scores[t] = share(probabilities[t]);
      for (std::size_t g = 1; g < group; ++g)
        for (std::size_t t = 0; t < scores.size(); ++t) scores[t] += share(probabilities[g * held + t]);
    };
    const double heads = static_cast<double>(group), inverse = 1.0 / heads;
    if (std::has_single_bit(group))
      mean([inverse](float p) { return p * inverse; });
    else
      mean([heads](float p) { return p / heads; });
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
