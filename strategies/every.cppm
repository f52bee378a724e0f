// every(N): compress after every N appended tokens (when the tokens seen are a multiple of
// N), so scoring costs 1/N of step's and the cache overshoots its budget by at most N - 1.
// Paper: - (a scheduling choice that amortises scoring; every(1) is H2O's per-step eviction,
// arXiv 2306.14048, sec. 3)
module;
#include <cstddef>
#include <string>
export module kvlab.strategies.every;
import kvlab.core;

export namespace kvlab::strategies::every {

class every_n_tokens {
public:
  using component_concept = schedule_tag;
  explicit every_n_tokens(std::size_t period) : period_(period) {
    if (period < 1 || period > max_tokens)
      throw error("every(N): N must be in 1.." + std::to_string(max_tokens) + ", got " + std::to_string(period));
  }
  std::string name() const { return "every(" + std::to_string(period_) + ")"; }
  bool after_prefill() const { return false; }
  bool after_token(std::size_t seen) const { return seen % period_ == 0; }

private:
  std::size_t period_;
};
static_assert(Schedule<every_n_tokens>);

inline strategy_info info() {
  return {.name = "every",
          .usage = "every(N)",
          .summary = "compress after every N appended tokens",
          .paper = "-",
          .examples = {"every(4)"}};
}

inline every_n_tokens make(const strategy_args& args) {
  args.expect_arguments(1, "every(N)");
  return every_n_tokens(args.number_in<std::size_t>(0, "N", 1, max_tokens));
}

} // namespace kvlab::strategies::every

// The typed name recipes use (kvlab.compose).
export namespace kvlab::parts {
using every = strategies::every::every_n_tokens;
} // namespace kvlab::parts
