// Experiments: a data spec and the recipes to evaluate on it. `kvlab run NAME` runs one.
module;
#include <cstddef>
#include <string>
#include <vector>
export module kvlab.configs:experiments;
import kvlab.core;
import :baselines;

export namespace kvlab::configs {

struct experiment {
  std::string name;
  std::string description;
  std::string data;
  std::vector<recipe> recipes;
  std::size_t decode_steps = 32;
};

inline const std::vector<experiment>& experiments() {
  static const std::vector<experiment> all = [] {
    experiment baseline{.name = "default",
                        .description = "every baseline recipe on embedded Gaussian data",
                        .data = "synthetic:gaussian(L=2,H=2,Q=8,T=1024,D=128,seed=1)"};
    for (const auto& b : baselines()) baseline.recipes.push_back(b.value);
    return std::vector<experiment>{baseline};
  }();
  return all;
}

} // namespace kvlab::configs
