// attn_cosine: cosine similarity of one query head's attention output with exact attention
// over the whole history.
// Paper: - (a standard fidelity measure of the attention output)
module;
#include <string>
export module kvlab.metrics.attn_cosine;
import kvlab.core;
import kvlab.metrics;

export namespace kvlab::metrics::attn_cosine {

struct output_cosine {
  using component_concept = metric_tag;
  std::string name() const { return "attn_cosine"; }
  metric_direction direction() const { return metric_direction::higher; }
  double measure(const step_view& v) const { return cosine_similarity(v.output, v.exact_output); }
};
static_assert(Metric<output_cosine>);

inline strategy_info info() {
  return {.name = "attn_cosine",
          .usage = "attn_cosine",
          .summary = "cosine of the attention output with the exact one",
          .paper = "-"};
}

inline output_cosine make(const strategy_args& args) {
  args.expect_arguments(0, "attn_cosine");
  return {};
}

} // namespace kvlab::metrics::attn_cosine
