// kvlab.cache:budget: an eviction budget in bytes per token (a recipe's `budget=B`, see
// byte_budget) as the tokens each (layer, KV head) keeps. B counts every byte over the whole
// cache per token seen, so a stream pair (one layer and KV head, keys and values) may hold
// B x seen / streams bytes. A held token costs its tier's bytes: a body token its record's
// share, a sink or residual-window token fp16, a demoted token its tier's record; tokens in
// fp16 tiers are assumed kept (a policy that drops them holds less than B). The counts are
// exact for per-token bodies; a per-channel block thinned by eviction keeps its size until
// it empties, so such caches can hold more than B.
module;
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <string>
export module kvlab.cache:budget;
import kvlab.core;
import :stream;

export namespace kvlab {

class bytes_budget {
public:
  // `keys` and `values` are one pair's streams (every pair has the same tiers); `recipe`
  // names the cache in errors.
  bytes_budget(const byte_budget& budget, std::size_t streams, const kv_stream& keys, const kv_stream& values,
               const std::string& recipe)
      : pair_bytes_(budget.bytes_per_token / static_cast<double>(streams)),
        body_(keys.body_token_bytes() + values.body_token_bytes()),
        demoted_(keys.demoted_token_bytes() + values.demoted_token_bytes()),
        half_(static_cast<double>(keys.half_token_bytes() + values.half_token_bytes())) {
    const auto per_token = [&](double pair) { return format_number(pair * static_cast<double>(streams)); };
    const std::string given = "recipe '" + recipe + "': budget=" + format_number(budget.bytes_per_token);
    if (pair_bytes_ <= demoted_)
      throw error(given + " bytes per token is not above what the demoted tier alone holds (" + per_token(demoted_) +
                  " bytes per token): give a larger budget or a smaller demotion codec");
    if (demoted_ >= body_)
      throw error(given + ": demoted tokens (" + per_token(demoted_) + " bytes per token) cost as much as held ones (" +
                  per_token(body_) + "), so no budget is met by demoting");
    if (pair_bytes_ >= body_)
      throw error(given + " bytes per token holds every token of this cache (" + per_token(body_) +
                  " bytes per token without eviction): give a smaller budget, or no eviction");
  }

  // The share of the tokens seen that the body holds at this budget, fp16 tiers aside: the
  // ratio the policy's shape is built at (strategy_info::at_budget).
  double ratio() const noexcept { return (pair_bytes_ - demoted_) / (body_ - demoted_); }

  // Tokens one (layer, KV head) keeps once `seen` tokens have arrived and `half_tokens` of
  // them sit in fp16 tiers: the most whose bytes, with every token not kept demoted (or
  // dropped), fit the budget; at least one.
  std::size_t tokens(std::size_t seen, double half_tokens) const noexcept {
    const double n = static_cast<double>(seen);
    const double room = pair_bytes_ * n - demoted_ * n - half_tokens * (half_ - body_);
    const double keep = std::floor(room / (body_ - demoted_) + 1e-9);
    return std::clamp<std::size_t>(keep < 1.0 ? 1 : static_cast<std::size_t>(keep), 1, std::max<std::size_t>(seen, 1));
  }

private:
  double pair_bytes_; // budget of one stream pair per token seen
  double body_;       // bytes of a body token, keys and values
  double demoted_;    // bytes of a demoted token, keys and values (0 without demotion)
  double half_;       // bytes of an fp16-tier token, keys and values
};

} // namespace kvlab
