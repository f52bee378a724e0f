// test_max_abs_error: the largest |o_hat - o| over the channels of one query head's
// attention output. Exists only in the test build, to show that a metric added as one file
// is measured by kvlab eval, stored by sweeps and shown in tables with no other edit.
// Paper: - (the L-infinity counterpart of attn_rel_l2)
module;
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <string>
export module kvlab.metrics.test_max_abs_error;
import kvlab.core;

export namespace kvlab::metrics::test_max_abs_error {

struct largest_output_error {
  using component_concept = metric_tag;
  std::string name() const { return "test_max_abs_error"; }
  metric_direction direction() const { return metric_direction::lower; }
  double measure(const step_view& v) const {
    double largest = 0.0;
    for (std::size_t c = 0; c < v.exact_output.size(); ++c)
      largest = std::max(largest, std::fabs(double{v.output[c]} - v.exact_output[c]));
    return largest;
  }
};
static_assert(Metric<largest_output_error>);

inline strategy_info info() {
  return {.name = "test_max_abs_error",
          .usage = "test_max_abs_error",
          .summary = "largest |o_hat - o| of the attention output (test build only)",
          .paper = "-"};
}

inline largest_output_error make(const strategy_args& args) {
  args.expect_arguments(0, "test_max_abs_error");
  return {};
}

} // namespace kvlab::metrics::test_max_abs_error
