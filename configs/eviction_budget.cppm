// eviction-budget (`kvlab run eviction-budget`): every eviction policy of the registry that says how to keep a ratio of
// the tokens (strategy_info::at_budget) at 10 %, 25 % and 50 % of the tokens seen, keys and
// values in fp16, on synthetic:llm data calibrated on shakespeare-hd64's real capture
// (like=shakespeare-hd64, docs/data.md: its attention is as concentrated and as local as the
// model's, so the policies' ranking is the one real data gives); the full cache as
// reference; and MiKV-style demotion
// (arXiv 2402.18096, sec. 3): h2o's evicted tokens moved to 2-bit rht(lloyd2) instead of
// dropped, to compare with dropping at equal or more bytes per token.
module;
#include <string>
#include <vector>
export module kvlab.experiments.eviction_budget;
import kvlab.core;
import kvlab.compose;
import kvlab.configs;
import kvlab.registry_builtin;

export namespace kvlab::experiments::eviction_budget {

// Labelled by method (the policy's name), so a figure draws each policy as one line across
// its budgets.
inline std::vector<configs::named_recipe> recipes(const registry& components) {
  using namespace parts;
  const stream fp16{f16{}, token{}};
  const any_recipe full = recipe{.keys = fp16, .values = fp16};
  std::vector<configs::named_recipe> all{{"full cache", full}};
  for (const double ratio : {0.1, 0.25, 0.5}) {
    for (const strategy_info& policy : components.list())
      if (policy.kind == component_kind::eviction && policy.at_budget) {
        any_recipe r = full;
        r.eviction = policy.at_budget(ratio);
        all.emplace_back(policy.name, r);
      }
    all.emplace_back("h2o + 2-bit demotion", recipe{.keys = fp16,
                                                    .values = fp16,
                                                    .eviction = h2o{ratio / 2, ratio / 2},
                                                    .demote = stream{rht{lloyd{2}}, token{}}});
  }
  return all;
}

inline configs::experiment make() {
  return {.name = "eviction-budget",
          .description = "every eviction policy at 10/25/50 % of the tokens, and h2o with 2-bit demotion, on "
                         "synthetic:llm(like=shakespeare-hd64)",
          .cells = configs::sweep{.recipes = recipes(builtin_registry()),
                                  .data = {"synthetic:llm(like=shakespeare-hd64,T=1024,seed={seed})"}}};
}

} // namespace kvlab::experiments::eviction_budget
