// kivi-ablation: the shape of KIVI's ablation (arXiv 2402.02750, sec. 3.2 and table 2): keys
// quantized per channel vs per token, values per token, at 2 and 4 bits, with and without
// the 128-token fp16 residual window, on synthetic:llm data (whose outlier key channels
// are what makes per-channel keys win; see modules/data/synthetic_llm.cppm). Per-token keys
// use groups of 32 channels, so both key layouts share parameters over 32 values.
module;
#include <cstddef>
#include <string>
#include <vector>
export module kvlab.configs:kivi_ablation;
import kvlab.core;
import kvlab.compose;
import kvlab.registry_builtin;

export namespace kvlab::configs {

inline std::vector<any_recipe> kivi_ablation_recipes() {
  using namespace parts;
  std::vector<any_recipe> recipes;
  for (const unsigned bits : {2u, 4u})
    for (const std::size_t residual : {std::size_t{0}, std::size_t{128}}) {
      const stream values{uint_q{bits}, group{32}};
      recipes.push_back(recipe{.keys = stream{uint_q{bits}, channel{32}}, .values = values, .residual = residual});
      recipes.push_back(recipe{.keys = stream{uint_q{bits}, group{32}}, .values = values, .residual = residual});
    }
  return recipes;
}

inline const std::string kivi_ablation_data = "synthetic:llm(L=2,H=2,Q=8,T=1024,D=128,seed={seed})";

} // namespace kvlab::configs
