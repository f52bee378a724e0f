// topk_recall(K): the share of the K keys with the largest exact attention weight that are
// among the K largest weights of the compressed cache (K = 32 by default; evicted keys
// weigh 0).
// Paper: - (the recall of the keys that carry most attention; no paper prescribes this form)
module;
#include <cstddef>
#include <span>
#include <string>
export module kvlab.metrics.topk_recall;
import kvlab.core;
import kvlab.metrics;

export namespace kvlab::metrics::topk_recall {

struct top_keys_recall {
  using component_concept = metric_tag;
  static constexpr std::size_t default_k = 32;
  std::size_t k = default_k;
  std::string name() const { return k == default_k ? "topk_recall" : "topk_recall(" + std::to_string(k) + ")"; }
  metric_direction direction() const { return metric_direction::higher; }
  double measure(const step_view& v) const { return kvlab::topk_recall(v.exact_probabilities, v.probabilities, k); }
};
static_assert(Metric<top_keys_recall>);

inline strategy_info info() {
  return {.name = "topk_recall",
          .usage = "topk_recall(K)",
          .summary = "share of the exact top-K keys among the compressed top-K (K = 32)",
          .paper = "-"};
}

inline top_keys_recall make(const strategy_args& args) {
  if (args.args.size() > 1) throw error("'" + args.text + "' takes at most one argument (usage: topk_recall(K))");
  if (args.args.empty()) return {};
  return {.k = args.number_in<std::size_t>(0, "K", 1, max_tokens)};
}

} // namespace kvlab::metrics::topk_recall
