// Experiments: `kvlab run NAME` runs one and prints its table. Each experiment is a
// function from the registry to a table (and its JSON); the definitions live in their own
// files, one per paper or table, and are listed here.
module;
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>
export module kvlab.configs:experiments;
import kvlab.core;
import kvlab.report;
import kvlab.registry_builtin;
import :baselines;
import :recipe_table;
import :quantizer_distortion;
import :kivi_ablation;
import :eviction_budget;

export namespace kvlab::configs {

// A grid of cells: every recipe on every data spec for every seed. A data spec may contain
// "{seed}", replaced by each seed (synthetic generators); specs without it run once per seed
// with the same data. Cells are what `kvlab run` stores, resumes and shards.
struct sweep {
  std::vector<any_recipe> recipes;
  std::vector<std::string> data;
  std::vector<std::uint64_t> seeds = {1};
  std::size_t decode_steps = 32;
};

// An experiment is either a sweep (run cell by cell into a results folder) or a function
// that computes its table directly (quick studies such as quantizer-distortion).
struct experiment {
  std::string name;
  std::string description;
  std::optional<sweep> cells;
  std::function<experiment_output(const registry&)> run;
};

inline const std::vector<experiment>& experiments() {
  static const std::vector<experiment> all = [] {
    std::vector<any_recipe> recipes;
    for (const auto& b : baselines()) recipes.push_back(b.value);
    const std::string data = "synthetic:gaussian(L=2,H=2,Q=8,T=1024,D=128,seed={seed})";
    return std::vector<experiment>{
        {.name = "default",
         .description = "every baseline recipe on embedded Gaussian data",
         .cells = sweep{.recipes = recipes, .data = {data}}},
        {.name = "kivi-ablation",
         .description = "keys per channel vs per token, values per token, 2/4 bits, residual 0/128 on synthetic:llm",
         .cells = sweep{.recipes = kivi_ablation_recipes(), .data = {kivi_ablation_data}}},
        {.name = "eviction-budget",
         .description = "every eviction policy at 10/25/50 % of the tokens, and h2o with 2-bit demotion, on "
                        "synthetic:llm",
         .cells = sweep{.recipes = eviction_budget_recipes(builtin_registry()), .data = {eviction_budget_data}}},
        {.name = "quantizer-distortion",
         .description = "MSE of every quantizer and bit width (token groups, D = 128) on unit vectors and N(0,1) "
                        "data, next to the Shannon bound 4^-b",
         .run = [](const registry& components) { return quantizer_distortion(components); }},
    };
  }();
  return all;
}

} // namespace kvlab::configs
