// eviction-budget (`kvlab run eviction-budget`): every eviction policy of the registry that
// says how to keep a ratio of the tokens (strategy_info::at_budget), each at budgets of 10 %,
// 25 % and 50 % of the full cache's bytes per token (recipe budget=, so every policy in a
// row holds the same memory, sinks and decode tokens included), keys and values in fp16, on
// synthetic:llm data calibrated on shakespeare-hd64's real capture (like=shakespeare-hd64,
// docs/data.md: its attention is as concentrated and as local as the model's, so the
// policies' ranking is the one real data gives); the full cache as reference; and MiKV-style
// demotion (arXiv 2402.18096, sec. 3) at the 25 % and 50 % budgets: h2o's evicted tokens
// moved to 2-bit rht(lloyd2) instead of dropped, in the same bytes (at 10 % the 2-bit tier
// alone would exceed the budget).
module;
#include <string>
#include <vector>
export module kvlab.experiments.eviction_budget;
import kvlab.core;
import kvlab.compose;
import kvlab.configs;
import kvlab.registry_builtin;

export namespace kvlab::experiments::eviction_budget {

// The fp16 cache of like=shakespeare-hd64: 4 layers x 2 KV heads x 64 channels x (keys,
// values) x 2 bytes per token.
inline constexpr double full_bytes_per_token = 2048;

// Labelled by method (the policy's name), so a figure draws each policy as one line across
// its budgets.
inline std::vector<configs::named_recipe> recipes(const registry& components) {
  using namespace parts;
  const stream fp16{f16{}, token{}};
  const any_recipe full = recipe{.keys = fp16, .values = fp16};
  std::vector<configs::named_recipe> all{{"full cache", full}};
  for (const double share : {0.1, 0.25, 0.5}) {
    const double bytes = full_bytes_per_token * share;
    for (const strategy_info& policy : components.list())
      if (policy.kind == component_kind::eviction && policy.at_budget) {
        any_recipe r = full;
        r.budget = byte_budget{bytes, policy.name, policy.at_budget};
        all.emplace_back(policy.name, r);
      }
    if (share > 0.1) {
      any_recipe demoting = full;
      demoting.demote = any_stream(stream{rht{lloyd{2}}, token{}});
      demoting.budget = byte_budget{bytes, "h2o", components.eviction_at_budget("h2o")};
      all.emplace_back("h2o + 2-bit demotion", demoting);
    }
  }
  return all;
}

inline configs::experiment make() {
  return {.name = "eviction-budget",
          .description =
              "every eviction policy at 10/25/50 % of the full cache's bytes, and h2o with 2-bit demotion at "
              "equal bytes, on synthetic:llm(like=shakespeare-hd64)",
          .cells = configs::sweep{.recipes = recipes(builtin_registry()),
                                  .data = {"synthetic:llm(like=shakespeare-hd64,T=1024,seed={seed})"}}};
}

} // namespace kvlab::experiments::eviction_budget
