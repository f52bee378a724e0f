// The vocabulary of token eviction: budgets, when to compress, how a KV head's query group
// is aggregated, how budgets are spread over layers and heads, and what a policy sees.
// The policies themselves are strategies (strategies/*.cppm); the cache runs them.
module;
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <numeric>
#include <span>
#include <string>
#include <vector>
export module kvlab.core:eviction;
import :errors;
import :numeric;

export namespace kvlab {

// A budget is a token count (a whole number >= 1) or a ratio of the tokens seen (in (0, 1)).
class token_budget {
public:
  token_budget() = default;
  // `text` is one argument of a policy, `what` names it for errors.
  static token_budget parse(const std::string& text, const std::string& what) {
    const double amount = parse_number<double>(text, what);
    if (!(amount > 0.0) || (amount >= 1.0 && amount != std::floor(amount)) || amount > static_cast<double>(max_tokens))
      throw error(what + ": a budget is a whole number of tokens in 1.." + std::to_string(max_tokens) +
                  " or a ratio in (0, 1), got '" + text + "'");
    token_budget b;
    b.amount_ = amount;
    return b;
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
  double amount_ = 1.0;
};

// When the cache compresses: once after prefill, after every appended token (decode
// step), or after every N appended tokens.
struct compress_schedule {
  enum class kind { prefill, step, every } when = kind::step;
  std::size_t period = 1; // for `every`

  std::string text() const {
    switch (when) {
    case kind::prefill: return "prefill";
    case kind::step: return "step";
    case kind::every: return "every(" + std::to_string(period) + ")";
    }
    return "step";
  }
  static compress_schedule parse(const std::string& text, const std::string& what) {
    if (text == "prefill") return {kind::prefill, 0};
    if (text == "step") return {kind::step, 1};
    if (text.starts_with("every(") && text.ends_with(")")) {
      const auto n = parse_number_in<std::size_t>(text.substr(6, text.size() - 7), what + ", every(N)", 1, max_tokens);
      return {kind::every, n};
    }
    throw error(what + ": expected prefill, step or every(N), got '" + text + "'");
  }
  bool operator==(const compress_schedule&) const = default;
};

// How the attention of a KV head's query heads becomes one score per key (GQA).
enum class group_aggregation { mean, max };

inline group_aggregation parse_group_aggregation(const std::string& text, const std::string& what) {
  if (text == "mean") return group_aggregation::mean;
  if (text == "max") return group_aggregation::max;
  throw error(what + ": expected mean or max, got '" + text + "'");
}

// What a policy needs the cache to collect for it.
struct eviction_needs {
  bool attention = false;             // the attention each held key receives at observed steps
  std::size_t observation_window = 0; // > 0: only the last W prefill queries are observed (SnapKV)
  bool keys = false;                  // the held keys, decoded
  compress_schedule schedule;         // when the policy compresses unless the recipe says otherwise
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
  std::span<const double> accumulated;    // per held token: attention summed over observed steps
  std::span<const double> latest;         // per held token: attention at the latest observed step
  std::span<const float> keys;            // held x head_dim decoded keys, when needs().keys
};

// How budgets are spread over layers and the KV heads of a layer.
//   uniform     every (layer, KV head) keeps the policy's budget;
//   pyramid(b)  PyramidKV, arXiv 2406.02069, sec. 3.3: per-layer budgets fall linearly from
//               the lowest layer to the top one, which gets average / b (b = 20 by default),
//               with the same total as uniform;
//   adakv(a)    Ada-KV, arXiv 2407.11550, sec. 4: the heads of a layer share one pool (heads x
//               budget) filled with the highest scores of all heads, each head keeping at
//               least a x budget (a = 0.2 by default, the authors' safeguard).
struct budget_allocation {
  enum class kind { uniform, pyramid, adakv } how = kind::uniform;
  double parameter = 0.0;

  std::string text() const {
    switch (how) {
    case kind::uniform: return "uniform";
    case kind::pyramid: return "pyramid(" + format_number(parameter) + ")";
    case kind::adakv: return "adakv(" + format_number(parameter) + ")";
    }
    return "uniform";
  }
  static budget_allocation parse(const std::string& text, const std::string& what) {
    const auto open = text.find('(');
    const std::string name = text.substr(0, open);
    std::string argument;
    if (open != std::string::npos) {
      if (!text.ends_with(")")) throw error(what + ": '" + text + "' must end with ')'");
      argument = text.substr(open + 1, text.size() - open - 2);
    }
    if (name == "uniform" && argument.empty()) return {};
    if (name == "pyramid") {
      const double beta = argument.empty() ? 20.0 : parse_number<double>(argument, what + ", pyramid(beta)");
      if (!(beta >= 1.0)) throw error(what + ": pyramid(beta) needs beta >= 1 (the top layer keeps average / beta)");
      return {kind::pyramid, beta};
    }
    if (name == "adakv") {
      const double alpha = argument.empty() ? 0.2 : parse_number<double>(argument, what + ", adakv(alpha)");
      if (!(alpha >= 0.0 && alpha <= 1.0)) throw error(what + ": adakv(alpha) needs alpha in [0, 1]");
      return {kind::adakv, alpha};
    }
    throw error(what + ": expected uniform, pyramid(beta) or adakv(alpha), got '" + text + "'");
  }

  // The budget of each KV head of `layer` when uniform allocation gives every head `budget`.
  // Pyramid budgets sum to layers x budget exactly: rounding leftovers go to the lowest layers.
  std::size_t layer_budget(std::size_t layer, std::size_t layers, std::size_t budget) const {
    if (how != kind::pyramid || layers == 1) return budget;
    const double average = static_cast<double>(budget), top = average / parameter, bottom = 2.0 * average - top;
    const auto exact = [&](std::size_t l) {
      return static_cast<std::size_t>(bottom -
                                      (bottom - top) * static_cast<double>(l) / static_cast<double>(layers - 1));
    };
    std::size_t total = 0;
    for (std::size_t l = 0; l < layers; ++l) total += exact(l);
    const std::size_t leftover = layers * budget - total;
    return exact(layer) + (layer < leftover ? 1 : 0);
  }
  bool operator==(const budget_allocation&) const = default;
};

// Scores that always survive (when the budget allows): sinks, recent windows.
inline constexpr double protected_score = std::numeric_limits<double>::infinity();

// Indices of the `keep` highest scores, ascending; ties keep the more recent token (the
// larger index), so every choice is deterministic.
inline std::vector<std::size_t> top_scores(std::span<const double> scores, std::size_t keep) {
  std::vector<std::size_t> order(scores.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  keep = std::min(keep, order.size());
  // The order is total (no two indices tie), so selection alone fixes the kept set: O(n),
  // where a partial sort is O(n log keep) and measured a quarter of an eviction sweep's time.
  std::ranges::nth_element(order, order.begin() + static_cast<std::ptrdiff_t>(keep), [&](std::size_t a, std::size_t b) {
    return scores[a] > scores[b] || (scores[a] == scores[b] && a > b);
  });
  order.resize(keep);
  std::ranges::sort(order);
  return order;
}

} // namespace kvlab
