// tensor: one parameter group for the whole (layer, KV head) stream: every token and
// channel shares one scale (and zero). group_shape.tokens == 0 stands for "all tokens".
// Paper: per-tensor scaling as in FP8 inference, arXiv 2209.05433 (FP8 Formats for Deep
// Learning), sec. 4.
module;
#include <cstddef>
#include <string>
export module kvlab.strategies.tensor;
import kvlab.core;

export namespace kvlab::strategies::tensor {

struct per_tensor {
  using component_concept = granularity_tag;
  static constexpr token_span spans = token_span::all;
  std::string name() const { return "tensor"; }
  kvlab::group_shape group_shape(std::size_t head_dim) const { return {.tokens = 0, .channels = head_dim}; }
};
static_assert(Granularity<per_tensor>);

inline strategy_info info() {
  return {.name = "tensor",
          .usage = "tensor",
          .summary = "one group for the whole stream",
          .paper = "arXiv 2209.05433 sec. 4"};
}

inline per_tensor make(const strategy_args&) { return per_tensor{}; }

} // namespace kvlab::strategies::tensor

// The typed name recipes use (kvlab.compose).
export namespace kvlab::parts {
using tensor = strategies::tensor::per_tensor;
} // namespace kvlab::parts
