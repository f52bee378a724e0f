// Baseline recipes, each with the paper or engine it reproduces.
module;
#include <string>
#include <vector>
export module kvlab.configs:baselines;
import kvlab.core;

export namespace kvlab::configs {

struct named_recipe {
  std::string label;
  recipe value;
  std::string reference;
};

inline const std::vector<named_recipe>& baselines() {
  static const std::vector<named_recipe> all = {
      {"f32", {.keys = {.quantizer = "f32"}, .values = {.quantizer = "f32"}}, "lossless reference"},
      {"fp16", {.keys = {.quantizer = "f16"}, .values = {.quantizer = "f16"}}, "inference engines' default cache"},
      {"int8-token",
       {.keys = {.quantizer = "int8", .granularity = "token"}, .values = {.quantizer = "int8", .granularity = "token"}},
       "per-token int8 KV cache, arXiv 2211.10438 sec. 4"},
      {"q8_0",
       {.keys = {.quantizer = "int8", .granularity = "group(32)"},
        .values = {.quantizer = "int8", .granularity = "group(32)"}},
       "llama.cpp q8_0 cache type (block of 32, fp16 scale)"},
      {"kivi-2",
       {.keys = {.quantizer = "uint2", .granularity = "channel(32)"},
        .values = {.quantizer = "uint2", .granularity = "group(32)"},
        .residual = 128},
       "KIVI 2-bit, arXiv 2402.02750 sec. 3 (keys per channel, values per token, fp16 residual 128)"},
      {"kivi-4",
       {.keys = {.quantizer = "uint4", .granularity = "channel(32)"},
        .values = {.quantizer = "uint4", .granularity = "group(32)"},
        .residual = 128},
       "KIVI 4-bit, arXiv 2402.02750 sec. 3"},
      {"q4_0",
       {.keys = {.quantizer = "int4", .granularity = "group(32)"},
        .values = {.quantizer = "int4", .granularity = "group(32)"}},
       "llama.cpp q4_0-like cache (symmetric int4, block of 32, fp16 scale)"},
  };
  return all;
}

} // namespace kvlab::configs
