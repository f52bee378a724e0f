// The vocabulary of token eviction: budgets, what a policy asks the cache to collect, what
// it sees, and the selection of the highest scores. Policies, allocation rules, schedules
// and GQA aggregation are strategies (strategies/*.cppm); the cache runs them.
module;
#include <algorithm>
#include <array>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <limits>
#include <numeric>
#include <optional>
#include <span>
#include <string>
#include <vector>
export module kvlab.core:eviction;
import :errors;
import :numeric;
import :schedule;

export namespace kvlab {

// A budget is a token count (a whole number >= 1) or a ratio of the tokens seen (in (0, 1)).
class token_budget {
public:
  token_budget() = default;
  // Typed recipes write budgets as numbers: `h2o{64, 64}` (counts), `h2o{0.1, 0.1}` (ratios).
  template <std::integral Count>
  token_budget(Count count) : token_budget(checked(static_cast<double>(count), std::to_string(count))) {}
  token_budget(double ratio_or_count) : token_budget(checked(ratio_or_count, format_number(ratio_or_count))) {}
  // `text` is one argument of a policy, `what` names it for errors.
  static token_budget parse(const std::string& text, const std::string& what) {
    return checked(parse_number<double>(text, what), text, what);
  }
  bool is_ratio() const noexcept { return amount_ < 1.0; }
  // Tokens kept once `seen` tokens have arrived: a ratio rounds up (the budget is never
  // below the ratio), a count is capped by what was seen.
  std::size_t tokens(std::size_t seen) const noexcept {
    if (!is_ratio()) return std::min(seen, static_cast<std::size_t>(amount_));
    return std::min(seen, static_cast<std::size_t>(std::ceil(amount_ * static_cast<double>(seen) - 1e-9)));
  }
  std::string text() const { return format_number(amount_); }

private:
  static token_budget checked(double amount, const std::string& text, const std::string& what = "token budget") {
    if (!(amount > 0.0) || (amount >= 1.0 && amount != std::floor(amount)) || amount > static_cast<double>(max_tokens))
      throw error(what + ": a budget is a whole number of tokens in 1.." + std::to_string(max_tokens) +
                  " or a ratio in (0, 1), got '" + text + "'");
    token_budget b;
    b.amount_ = amount;
    return b;
  }
  double amount_ = 1.0;
};

// What a policy needs the cache to collect for it.
struct eviction_needs {
  bool attention = false;               // the attention each held key receives at observed steps
  std::size_t observation_window = 0;   // > 0: only the last W prefill queries are observed (SnapKV)
  bool key_norms = false;               // the L2 norm of each held key, as decoded
  std::optional<any_schedule> schedule; // the policy's own schedule (else after every token)
};

// What an eviction policy sees of one (layer, KV head) when it scores tokens. Only the
// tokens it may evict are shown (tokens demoted to a lower-precision tier are not).
struct eviction_view {
  std::size_t layer = 0;
  std::size_t layers = 1;
  std::size_t kv_head = 0;
  std::size_t tokens_seen = 0; // tokens ever appended to the stream
  std::size_t head_dim = 0;
  std::span<const std::size_t> positions; // position of each held token, ascending
  std::span<const double> accumulated; // per held token: attention summed over observed steps, when needs().attention
  std::span<const double> latest;      // per held token: attention at the latest observed step, when needs().attention
  std::span<const double> key_norms;   // per held token: its decoded key's L2 norm, when needs().key_norms
};

// Scores that always survive (when the budget allows): sinks, recent windows.
inline constexpr double protected_score = std::numeric_limits<double>::infinity();

// Indices of the `keep` highest scores, ascending; ties keep the more recent token (the
// larger index), so every choice is deterministic. O(n) and no sort: a decode step that
// drops a few tokens of a long context finds them in one pass over the scores.
inline std::vector<std::size_t> top_scores(std::span<const double> scores, std::size_t keep) {
  const std::size_t n = scores.size();
  keep = std::min(keep, n);
  // The order is total (no two indices tie), so the kept set is fixed by selection alone.
  const auto better = [&](std::size_t a, std::size_t b) {
    return scores[a] > scores[b] || (scores[a] == scores[b] && a > b);
  };
  std::vector<std::size_t> kept;
  kept.reserve(keep);
  const auto keep_all_but = [&](std::span<const std::size_t> sorted_dropped) {
    for (std::size_t i = 0, next = 0; i < n; ++i)
      if (next < sorted_dropped.size() && sorted_dropped[next] == i)
        ++next;
      else
        kept.push_back(i);
  };
  const std::size_t dropped = n - keep;
  constexpr std::size_t few = 8;
  if (dropped <= few) {
    // The `dropped` worst seen so far, best first: a later index replaces the best of them
    // when it ranks below it.
    std::array<std::size_t, few> worst{};
    std::size_t count = 0;
    for (std::size_t i = 0; i < n && dropped > 0; ++i) {
      if (count == dropped) {
        if (!better(worst[0], i)) continue;
        std::shift_left(worst.begin(), worst.begin() + static_cast<std::ptrdiff_t>(count--), 1);
      }
      std::size_t at = count++;
      for (; at > 0 && better(i, worst[at - 1]); --at) worst[at] = worst[at - 1];
      worst[at] = i;
    }
    std::sort(worst.begin(), worst.begin() + static_cast<std::ptrdiff_t>(count));
    keep_all_but(std::span(worst).first(count));
    return kept;
  }
  // Otherwise the (keep)-th best is the threshold, and one pass collects what ranks above it.
  std::vector<std::size_t> order(n);
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::ranges::nth_element(order, order.begin() + static_cast<std::ptrdiff_t>(keep), better);
  const std::size_t first_dropped = order[keep];
  for (std::size_t i = 0; i < n; ++i)
    if (better(i, first_dropped)) kept.push_back(i);
  return kept;
}

// top_scores of each head's scores: what allocation rules that give every head of a layer
// the same budget keep.
inline std::vector<std::vector<std::size_t>> top_scores_per_head(std::span<const std::vector<double>> scores,
                                                                 std::size_t keep) {
  std::vector<std::vector<std::size_t>> kept;
  for (const auto& head : scores) kept.push_back(top_scores(head, keep));
  return kept;
}

} // namespace kvlab
