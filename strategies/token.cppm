// token: one parameter group per token, spanning the token's whole head_dim.
// Paper: per-token quantization as in arXiv 2206.01861 (ZeroQuant), sec. 3.
module;
#include <cstddef>
#include <string>
export module kvlab.strategies.token;
import kvlab.core;

export namespace kvlab::strategies::token {

struct per_token {
  using component_concept = granularity_tag;
  static constexpr token_span spans = token_span::one;
  std::string name() const { return "token"; }
  kvlab::group_shape group_shape(std::size_t head_dim) const { return {.tokens = 1, .channels = head_dim}; }
};
static_assert(Granularity<per_token>);

inline strategy_info info() {
  return {.name = "token",
          .usage = "token",
          .summary = "one group per token (all of head_dim)",
          .paper = "arXiv 2206.01861 sec. 3"};
}

inline per_token make(const strategy_args&) { return per_token{}; }

} // namespace kvlab::strategies::token

// The typed name recipes use (kvlab.compose).
export namespace kvlab::parts {
using token = strategies::token::per_token;
} // namespace kvlab::parts
