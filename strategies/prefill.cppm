// prefill: compress once, when prefill ends; decode tokens are then all kept.
// Paper: SnapKV, arXiv 2404.14469, sec. 4 (compression of the prompt's cache only).
module;
#include <cstddef>
#include <string>
export module kvlab.strategies.prefill;
import kvlab.core;

export namespace kvlab::strategies::prefill {

struct once_after_prefill {
  using component_concept = schedule_tag;
  std::string name() const { return "prefill"; }
  bool after_prefill() const { return true; }
  bool after_token(std::size_t) const { return false; }
};
static_assert(Schedule<once_after_prefill>);

inline strategy_info info() {
  return {.name = "prefill",
          .usage = "prefill",
          .summary = "compress once when prefill ends",
          .paper = "arXiv 2404.14469 sec. 4"};
}

inline once_after_prefill make(const strategy_args& args) {
  args.expect_arguments(0, "prefill");
  return {};
}

} // namespace kvlab::strategies::prefill

// The typed name recipes use (kvlab.compose).
export namespace kvlab::parts {
using prefill = strategies::prefill::once_after_prefill;
} // namespace kvlab::parts
