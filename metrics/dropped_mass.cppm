// dropped_mass: the exact attention weight on keys the cache no longer holds (0 without
// eviction). With kept_kl it splits score_kl, whose 1e-30 floor makes it about 69 nats times
// this mass under eviction.
// Paper: - (the attention mass an eviction policy loses; no paper prescribes this form)
module;
#include <string>
export module kvlab.metrics.dropped_mass;
import kvlab.core;
import kvlab.metrics;

export namespace kvlab::metrics::dropped_mass {

struct evicted_attention_mass {
  using component_concept = metric_tag;
  std::string name() const { return "dropped_mass"; }
  metric_direction direction() const { return metric_direction::lower; }
  double measure(const step_view& v) const { return kvlab::dropped_mass(v.exact_probabilities, v.positions); }
};
static_assert(Metric<evicted_attention_mass>);

inline strategy_info info() {
  return {.name = "dropped_mass",
          .usage = "dropped_mass",
          .summary = "exact attention weight on the keys the cache no longer holds",
          .paper = "-"};
}

inline evicted_attention_mass make(const strategy_args& args) {
  args.expect_arguments(0, "dropped_mass");
  return {};
}

} // namespace kvlab::metrics::dropped_mass
