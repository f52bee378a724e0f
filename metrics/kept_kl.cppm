// kept_kl: KL(exact || compressed) over the keys the cache holds, the exact weights
// renormalised over them, in nats: the error of attention among what was kept, apart from
// what eviction dropped (dropped_mass). Equal to score_kl without eviction.
// Paper: - (the divergence of the attention distribution over the kept keys; no paper prescribes this form)
module;
#include <string>
export module kvlab.metrics.kept_kl;
import kvlab.core;
import kvlab.metrics;

export namespace kvlab::metrics::kept_kl {

struct kept_attention_kl {
  using component_concept = metric_tag;
  std::string name() const { return "kept_kl"; }
  metric_direction direction() const { return metric_direction::lower; }
  double measure(const step_view& v) const {
    return kept_kl_divergence(v.exact_probabilities, v.probabilities, v.positions);
  }
};
static_assert(Metric<kept_attention_kl>);

inline strategy_info info() {
  return {.name = "kept_kl",
          .usage = "kept_kl",
          .summary = "KL(exact || compressed) over the held keys, exact weights renormalised, nats",
          .paper = "-"};
}

inline kept_attention_kl make(const strategy_args& args) {
  args.expect_arguments(0, "kept_kl");
  return {};
}

} // namespace kvlab::metrics::kept_kl
