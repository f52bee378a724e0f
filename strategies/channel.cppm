// channel(G): one channel over G consecutive tokens shares parameters (per-channel key
// quantization). A group is complete only when G tokens have arrived.
// Paper: KIVI, arXiv 2402.02750, sec. 3.2 (keys per channel, values per token).
module;
#include <cstddef>
#include <string>
export module kvlab.strategies.channel;
import kvlab.core;

export namespace kvlab::strategies::channel {

struct per_channel {
  using component_concept = granularity_tag;
  static constexpr token_span spans = token_span::several;
  std::size_t tokens;
  std::string name() const { return "channel(" + std::to_string(tokens) + ")"; }
  kvlab::group_shape group_shape(std::size_t) const {
    if (tokens < 1 || tokens > max_group_length)
      throw error(name() + ": group length must be in 1.." + std::to_string(max_group_length) + " tokens");
    return {.tokens = tokens, .channels = 1};
  }
};
static_assert(Granularity<per_channel>);

inline strategy_info info() {
  return {.name = "channel",
          .usage = "channel(G)",
          .summary = "one channel over G tokens",
          .paper = "arXiv 2402.02750 sec. 3.2",
          .examples = {"channel(32)"}};
}

inline per_channel make(const strategy_args& args) {
  args.expect_arguments(1, "channel(G)");
  const auto tokens = args.number_in<std::size_t>(0, "group length G (tokens)", 1, max_group_length);
  return per_channel{tokens};
}

} // namespace kvlab::strategies::channel

// The typed name recipes use (kvlab.compose).
export namespace kvlab::parts {
using channel = strategies::channel::per_channel;
} // namespace kvlab::parts
