// default: every baseline recipe (modules/configs/baselines.cppm) on embedded Gaussian data, the
// sweep `scripts/run-default` runs.
// Paper: - (the baselines' own references are in modules/configs/baselines.cppm)
module;
#include <string>
#include <vector>
export module kvlab.experiments.default_sweep;
import kvlab.core;
import kvlab.configs;

export namespace kvlab::experiments::default_sweep {

inline configs::experiment make() {
  return {.name = "default",
          .description = "every baseline recipe on embedded Gaussian data",
          .cells = configs::sweep{.recipes = configs::baselines(),
                                  .data = {"synthetic:gaussian(L=2,H=2,Q=8,T=1024,D=128,seed={seed})"}}};
}

} // namespace kvlab::experiments::default_sweep
