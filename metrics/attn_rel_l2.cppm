// attn_rel_l2: ||o_hat - o|| / ||o||, the relative L2 error of one query head's attention
// output against exact attention over the whole history.
// Paper: - (the attention-output error every KV-compression study reports in some form)
module;
#include <string>
export module kvlab.metrics.attn_rel_l2;
import kvlab.core;
import kvlab.metrics;

export namespace kvlab::metrics::attn_rel_l2 {

struct relative_output_error {
  using component_concept = metric_tag;
  std::string name() const { return "attn_rel_l2"; }
  metric_direction direction() const { return metric_direction::lower; }
  double measure(const step_view& v) const { return relative_l2(v.output, v.exact_output); }
};
static_assert(Metric<relative_output_error>);

inline strategy_info info() {
  return {.name = "attn_rel_l2",
          .usage = "attn_rel_l2",
          .summary = "||o_hat - o|| / ||o|| of the attention output",
          .paper = "-"};
}

inline relative_output_error make(const strategy_args& args) {
  args.expect_arguments(0, "attn_rel_l2");
  return {};
}

} // namespace kvlab::metrics::attn_rel_l2
