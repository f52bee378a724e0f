// ip_rmse: the root mean square of q.k_hat - q.k over the keys the cache holds, one query
// head at one step: the distortion of the attention logits.
// Paper: the inner-product distortion D_prod of TurboQuant, arXiv 2504.19874, Theorem 2 (its root).
module;
#include <string>
export module kvlab.metrics.ip_rmse;
import kvlab.core;
import kvlab.metrics;

export namespace kvlab::metrics::ip_rmse {

struct inner_product_rmse {
  using component_concept = metric_tag;
  std::string name() const { return "ip_rmse"; }
  metric_direction direction() const { return metric_direction::lower; }
  double measure(const step_view& v) const { return inner_product_error(v.exact_dots, v.dots, v.positions).second; }
};
static_assert(Metric<inner_product_rmse>);

inline strategy_info info() {
  return {.name = "ip_rmse",
          .usage = "ip_rmse",
          .summary = "root mean square of q.k_hat - q.k over the held keys",
          .paper = "arXiv 2504.19874 Theorem 2"};
}

inline inner_product_rmse make(const strategy_args& args) {
  args.expect_arguments(0, "ip_rmse");
  return {};
}

} // namespace kvlab::metrics::ip_rmse
