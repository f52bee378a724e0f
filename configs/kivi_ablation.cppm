// kivi-ablation: the shape of KIVI's ablation (arXiv 2402.02750, sec. 3.2 and table 2): keys
// quantized per channel vs per token, values per token, at 2 and 4 bits, with and without
// the 128-token fp16 residual window, on synthetic:llm data (whose outlier key channels
// are what makes per-channel keys win; see modules/data/synthetic_llm.cppm). Per-token keys
// use groups of 32 channels, so both key layouts share parameters over 32 values.
module;
#include <string>
#include <vector>
export module kvlab.configs:kivi_ablation;
import kvlab.core;

export namespace kvlab::configs {

inline std::vector<recipe> kivi_ablation_recipes() {
  std::vector<recipe> recipes;
  for (const int bits : {2, 4})
    for (const std::size_t residual : {std::size_t{0}, std::size_t{128}})
      for (const std::string keys : {"channel(32)", "group(32)"}) {
        const std::string q = "uint" + std::to_string(bits);
        recipes.push_back({.keys = {.quantizer = q, .granularity = keys},
                           .values = {.quantizer = q, .granularity = "group(32)"},
                           .residual = residual});
      }
  return recipes;
}

inline const std::string kivi_ablation_data = "synthetic:llm(L=2,H=2,Q=8,T=1024,D=128,seed={seed})";

} // namespace kvlab::configs
