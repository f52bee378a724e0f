// group(G): G consecutive channels of one token share parameters (llama.cpp's q8_0/q4_0
// blocks are group(32)). G must divide head_dim: a ragged last group would change the
// bits per element silently, so it is rejected instead.
// Paper: fine-grained group quantization, arXiv 2206.01861 (ZeroQuant), sec. 3.
module;
#include <cstddef>
#include <string>
export module kvlab.strategies.group;
import kvlab.core;

export namespace kvlab::strategies::group {

struct channel_group {
  using component_concept = granularity_tag;
  static constexpr token_span spans = token_span::one;
  std::size_t size;
  std::string name() const { return "group(" + std::to_string(size) + ")"; }
  kvlab::group_shape group_shape(std::size_t head_dim) const {
    if (size == 0 || size > head_dim || head_dim % size != 0)
      throw error(name() + ": group size " + std::to_string(size) + " must divide head_dim " +
                  std::to_string(head_dim));
    return {.tokens = 1, .channels = size};
  }
};
static_assert(Granularity<channel_group>);

inline strategy_info info() {
  return {.name = "group",
          .usage = "group(G)",
          .summary = "G consecutive channels of one token",
          .paper = "arXiv 2206.01861 sec. 3",
          .examples = {"group(32)", "group(64)"}};
}

inline channel_group make(const strategy_args& args) {
  args.expect_arguments(1, "group(G)");
  const auto size = args.number_in<std::size_t>(0, "group size G (channels)", 1, max_group_length);
  return channel_group{size};
}

} // namespace kvlab::strategies::group

// The typed name recipes use (kvlab.compose).
export namespace kvlab::parts {
using group = strategies::group::channel_group;
} // namespace kvlab::parts
