// Experiments: `kvlab run NAME` runs one and prints its table. Each experiment is a
// function from the registry to a table (and its JSON); the definitions live in their own
// files, one per paper or table, and are listed here.
module;
#include <functional>
#include <string>
#include <vector>
export module kvlab.configs:experiments;
import kvlab.core;
import kvlab.report;
import :baselines;
import :recipe_table;
import :quantizer_distortion;

export namespace kvlab::configs {

struct experiment {
  std::string name;
  std::string description;
  std::function<experiment_output(const registry&)> run;
};

inline const std::vector<experiment>& experiments() {
  static const std::vector<experiment> all = [] {
    std::vector<recipe> recipes;
    for (const auto& b : baselines()) recipes.push_back(b.value);
    const std::string data = "synthetic:gaussian(L=2,H=2,Q=8,T=1024,D=128,seed=1)";
    return std::vector<experiment>{
        {"default", "every baseline recipe on embedded Gaussian data (" + data + ")",
         [recipes, data](const registry& components) { return recipe_table(recipes, data, 32, components); }},
        {"quantizer-distortion",
         "MSE of every quantizer and bit width (token groups, D = 128) on unit vectors and N(0,1) data, "
         "next to the Shannon bound 4^-b",
         [](const registry& components) { return quantizer_distortion(components); }},
    };
  }();
  return all;
}

} // namespace kvlab::configs
