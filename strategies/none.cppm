// none: keep every token (no eviction).
// Paper: - (the full-cache baseline every eviction paper compares against)
module;
#include <cstddef>
#include <string>
#include <vector>
export module kvlab.strategies.none;
import kvlab.core;

export namespace kvlab::strategies::none {

struct keep_all {
  using component_concept = eviction_tag;
  static constexpr bool keeps_every_token = true;
  std::string name() const { return "none"; }
  eviction_needs needs() const { return {}; }
  std::size_t budget(std::size_t seen) const { return seen; }
  std::vector<double> scores(const eviction_view& view) const { return std::vector<double>(view.positions.size()); }
};
static_assert(Eviction<keep_all>);

inline strategy_info info() { return {.name = "none", .usage = "none", .summary = "keep every token", .paper = "-"}; }

inline keep_all make(const strategy_args&) { return keep_all{}; }

} // namespace kvlab::strategies::none

// The typed name recipes use (kvlab.compose).
export namespace kvlab::parts {
using none = strategies::none::keep_all;
} // namespace kvlab::parts
