// Baseline recipes, each with the paper or engine it reproduces.
module;
#include <concepts>
#include <string>
#include <utility>
#include <vector>
export module kvlab.configs:baselines;
import kvlab.core;
import kvlab.compose;
import kvlab.registry_builtin;

export namespace kvlab::configs {

// A recipe with the short label tables and figures show for it ("KIVI-2"). Recipes that share
// a label are one method at several budgets or bit widths: one line in a figure.
struct named_recipe {
  std::string label;
  any_recipe value;
  std::string reference; // the paper or engine it reproduces, when it is a baseline

  named_recipe(std::string label, any_recipe value, std::string reference = {})
      : label(std::move(label)), value(std::move(value)), reference(std::move(reference)) {}
  // Unlabelled: the canonical name is the label.
  template <class R>
    requires std::convertible_to<R, any_recipe>
  named_recipe(R r) : value(std::move(r)) {
    label = canonical_name(value);
  }
};

inline const std::vector<named_recipe>& baselines() {
  using namespace parts;
  static const std::vector<named_recipe> all = {
      {"f32", recipe{.keys = stream{f32{}, token{}}, .values = stream{f32{}, token{}}}, "lossless reference"},
      {"fp16", recipe{.keys = stream{f16{}, token{}}, .values = stream{f16{}, token{}}},
       "inference engines' default cache"},
      {"int8-token", recipe{.keys = stream{int_q{8}, token{}}, .values = stream{int_q{8}, token{}}},
       "per-token int8 KV cache, arXiv 2211.10438 sec. 4"},
      {"q8_0", recipe{.keys = stream{parts::q8_0{}, group{32}}, .values = stream{parts::q8_0{}, group{32}}},
       "llama.cpp's q8_0 cache type (ggml's reference blocks byte for byte)"},
      {"kivi-2",
       recipe{.keys = stream{uint_q{2}, channel{32}}, .values = stream{uint_q{2}, group{32}}, .residual = 128},
       "KIVI 2-bit, arXiv 2402.02750 sec. 3 (keys per channel, values per token, fp16 residual 128)"},
      {"kivi-4",
       recipe{.keys = stream{uint_q{4}, channel{32}}, .values = stream{uint_q{4}, group{32}}, .residual = 128},
       "KIVI 4-bit, arXiv 2402.02750 sec. 3"},
      {"q4_0", recipe{.keys = stream{parts::q4_0{}, group{32}}, .values = stream{parts::q4_0{}, group{32}}},
       "llama.cpp's q4_0 cache type (ggml's reference blocks byte for byte)"},
  };
  return all;
}

} // namespace kvlab::configs
