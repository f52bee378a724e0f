// kivi-ablation (`kvlab run kivi-ablation`): the shape of KIVI's ablation (arXiv 2402.02750, sec. 3.2 and table 2):
// keys quantized per channel vs per token, values per token, at 2 and 4 bits, with and without the 128-token fp16
// residual window, on synthetic:llm data (whose outlier key channels are what makes per-channel keys win; see
// modules/data/synthetic_llm.cppm). Per-token keys use groups of 32 channels, so both key layouts share parameters over
// 32 values.
module;
#include <cstddef>
#include <string>
#include <vector>
export module kvlab.experiments.kivi_ablation;
import kvlab.core;
import kvlab.compose;
import kvlab.configs;
import kvlab.registry_builtin;

export namespace kvlab::experiments::kivi_ablation {

// Labelled by key layout and residual, so a figure draws each as one line across bit widths.
inline std::vector<configs::named_recipe> recipes() {
  using namespace parts;
  std::vector<configs::named_recipe> all;
  for (const unsigned bits : {2u, 4u})
    for (const std::size_t residual : {std::size_t{0}, std::size_t{128}}) {
      const stream values{uint_q{bits}, group{32}};
      const std::string with_residual = residual ? ", residual 128" : "";
      all.emplace_back("keys per channel" + with_residual,
                       recipe{.keys = stream{uint_q{bits}, channel{32}}, .values = values, .residual = residual});
      all.emplace_back("keys per token" + with_residual,
                       recipe{.keys = stream{uint_q{bits}, group{32}}, .values = values, .residual = residual});
    }
  return all;
}

inline configs::experiment make() {
  return {.name = "kivi-ablation",
          .description = "keys per channel vs per token, values per token, 2/4 bits, residual 0/128 on synthetic:llm",
          .cells =
              configs::sweep{.recipes = recipes(), .data = {"synthetic:llm(L=2,H=2,Q=8,T=1024,D=128,seed={seed})"}}};
}

} // namespace kvlab::experiments::kivi_ablation
