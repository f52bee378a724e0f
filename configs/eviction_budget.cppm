// eviction-budget: every eviction policy at 10 %, 25 % and 50 % of the tokens seen, keys
// and values in fp16, on synthetic:llm data (sinks, locality and outlier channels give the
// policies something to find); the full cache as reference; and MiKV-style demotion
// (arXiv 2402.18096, sec. 3): h2o's evicted tokens moved to 2-bit rht(lloyd2) instead of
// dropped, to compare with dropping at equal or more bytes per token.
module;
#include <string>
#include <vector>
export module kvlab.configs:eviction_budget;
import kvlab.core;

export namespace kvlab::configs {

inline std::vector<recipe> eviction_budget_recipes() {
  const stream_recipe fp16{.quantizer = "f16", .granularity = "token"};
  std::vector<recipe> recipes{{.keys = fp16, .values = fp16}};
  for (const std::string b : {"0.1", "0.25", "0.5"}) {
    const std::string half = b == "0.1" ? "0.05" : b == "0.25" ? "0.125" : "0.25";
    for (const std::string& policy :
         {"window(" + b + ")", "streaming(4," + b + ")", "h2o(" + half + "," + half + ")", "tova(" + b + ")",
          "snapkv(" + b + ",32,5)", "knorm(" + b + ")", "random(" + b + ",1)"})
      recipes.push_back({.keys = fp16, .values = fp16, .eviction = policy});
    recipes.push_back({.keys = fp16,
                       .values = fp16,
                       .eviction = "h2o(" + half + "," + half + ")",
                       .demote = stream_recipe{.quantizer = "rht(lloyd2)", .granularity = "token"}});
  }
  return recipes;
}

inline const std::string eviction_budget_data = "synthetic:llm(L=2,H=2,Q=8,T=1024,D=128,seed={seed})";

} // namespace kvlab::configs
