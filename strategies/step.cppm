// step: compress after every appended token, so the cache never holds more than the budget
// (plus the token just appended).
// Paper: H2O, arXiv 2306.14048, sec. 3, Algorithm 1 (eviction at every decoding step).
module;
#include <cstddef>
#include <string>
export module kvlab.strategies.step;
import kvlab.core;

export namespace kvlab::strategies::step {

struct every_token {
  using component_concept = schedule_tag;
  std::string name() const { return "step"; }
  bool after_prefill() const { return false; }
  bool after_token(std::size_t) const { return true; }
};
static_assert(Schedule<every_token>);

inline strategy_info info() {
  return {.name = "step",
          .usage = "step",
          .summary = "compress after every appended token",
          .paper = "arXiv 2306.14048 sec. 3"};
}

inline every_token make(const strategy_args& args) {
  args.expect_arguments(0, "step");
  return {};
}

} // namespace kvlab::strategies::step

// The typed name recipes use (kvlab.compose).
export namespace kvlab::parts {
using step = strategies::step::every_token;
} // namespace kvlab::parts
