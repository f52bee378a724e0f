// default: the sweep `scripts/run-default` runs, on synthetic data calibrated on a real
// model (synthetic:llm(like=shakespeare-hd64), docs/data.md), so the first table shows what
// decides a KV-cache method on real caches:
//   - every baseline recipe (modules/configs/baselines.cppm);
//   - KIVI-2 with per-token keys, the control for its per-channel keys (KIVI sec. 3.1);
//   - eviction against quantization at equal bytes: fp16 caches whose policy (streaming,
//     h2o, snapkv) keeps what fits q4_0's bytes per token (budget=, sinks and decode tokens
//     included) hold what q4_0 holds for all of them.
// T = 1024 (the capture that was fitted has 256), so KIVI's fp16 residual of 128 tokens
// is an eighth of the cache rather than half.
// Paper: - (the baselines' own references are in modules/configs/baselines.cppm; the
// policies': streaming arXiv 2309.17453, h2o arXiv 2306.14048, snapkv arXiv 2404.14469)
module;
#include <string>
#include <vector>
export module kvlab.experiments.default_sweep;
import kvlab.core;
import kvlab.compose;
import kvlab.configs;
import kvlab.registry_builtin;

export namespace kvlab::experiments::default_sweep {

// q4_0 stores 4 bits and an fp16 scale per 32 values: 4.5 bits against fp16's 16. The fp16
// cache of like=shakespeare-hd64 holds 4 layers x 2 KV heads x 64 channels x (keys, values)
// x 2 bytes = 2048 bytes per token, so q4_0 holds 576.
inline constexpr double q4_0_bytes_per_token = 2048 * 4.5 / 16;

inline std::vector<configs::named_recipe> recipes(const registry& components) {
  using namespace parts;
  std::vector<configs::named_recipe> all = configs::baselines();
  all.emplace_back(
      "kivi-2 per-token keys",
      recipe{.keys = stream{uint_q{2}, group{32}}, .values = stream{uint_q{2}, group{32}}, .residual = 128},
      "control for KIVI's per-channel keys, arXiv 2402.02750 sec. 3.1");
  const stream fp16{f16{}, token{}};
  for (const strategy_info& policy : components.list())
    if (policy.kind == component_kind::eviction &&
        (policy.name == "streaming" || policy.name == "h2o" || policy.name == "snapkv")) {
      any_recipe r = recipe{.keys = fp16, .values = fp16};
      r.budget = byte_budget{q4_0_bytes_per_token, policy.name, policy.at_budget};
      all.emplace_back(policy.name + " at q4_0's bytes", r, policy.paper);
    }
  return all;
}

inline configs::experiment make() {
  return {.name = "default",
          .description = "the baselines, KIVI-2's per-token-key control, and eviction at q4_0's bytes, on synthetic "
                         "data calibrated on shakespeare-hd64",
          .cells = configs::sweep{.recipes = recipes(builtin_registry()),
                                  .data = {"synthetic:llm(like=shakespeare-hd64,T=1024,seed={seed})"}}};
}

} // namespace kvlab::experiments::default_sweep
