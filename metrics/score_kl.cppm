// score_kl: KL(exact || compressed) of the attention probabilities over every position, in
// nats; an evicted key has weight 0, floored at 1e-30 (see kl_divergence).
// Paper: - (the divergence of the attention distribution; no paper prescribes this form)
module;
#include <string>
export module kvlab.metrics.score_kl;
import kvlab.core;
import kvlab.metrics;

export namespace kvlab::metrics::score_kl {

struct attention_kl {
  using component_concept = metric_tag;
  std::string name() const { return "score_kl"; }
  metric_direction direction() const { return metric_direction::lower; }
  double measure(const step_view& v) const { return kl_divergence(v.exact_probabilities, v.probabilities); }
};
static_assert(Metric<attention_kl>);

inline strategy_info info() {
  return {.name = "score_kl",
          .usage = "score_kl",
          .summary = "KL(exact || compressed) of the attention probabilities, nats",
          .paper = "-"};
}

inline attention_kl make(const strategy_args& args) {
  args.expect_arguments(0, "score_kl");
  return {};
}

} // namespace kvlab::metrics::score_kl
