// ip_bias: the mean of q.k_hat - q.k over the keys the cache holds, one query head at one
// step: how far the cache's attention logits are shifted on average.
// Paper: the inner-product bias that QJL removes, arXiv 2406.03482, sec. 3.
module;
#include <string>
export module kvlab.metrics.ip_bias;
import kvlab.core;
import kvlab.metrics;

export namespace kvlab::metrics::ip_bias {

struct inner_product_bias {
  using component_concept = metric_tag;
  std::string name() const { return "ip_bias"; }
  metric_direction direction() const { return metric_direction::nearer_zero; }
  double measure(const step_view& v) const { return inner_product_error(v.exact_dots, v.dots, v.positions).first; }
};
static_assert(Metric<inner_product_bias>);

inline strategy_info info() {
  return {.name = "ip_bias",
          .usage = "ip_bias",
          .summary = "mean of q.k_hat - q.k over the held keys",
          .paper = "arXiv 2406.03482 sec. 3"};
}

inline inner_product_bias make(const strategy_args& args) {
  args.expect_arguments(0, "ip_bias");
  return {};
}

} // namespace kvlab::metrics::ip_bias
