// A sweep of this project's own quantizer (ternary.cppm) and eviction policy (strided.cppm)
// next to kvlab's built-in components, composed as typed recipes, run by kvlab's runner into
// a results folder over two seeds, and printed as its table (mean ± 95 % CI).
#include <filesystem>
#include <iostream>
#include <vector>
import kvlab;
import kvlab.runner;
import outside.ternary;
import outside.strided;

int main(int argc, char** argv) {
  using namespace kvlab::parts;
  const std::filesystem::path out = argc > 1 ? argv[1] : "outside-results";
  const kvlab::stream fp16{f16{}, token{}};
  const kvlab::configs::sweep sweep{.recipes = {kvlab::recipe{.keys = kvlab::stream{int_q{4}, group{32}},
                                                              .values = kvlab::stream{int_q{4}, group{32}}},
                                                kvlab::recipe{.keys = kvlab::stream{ternary{}, group{32}},
                                                              .values = kvlab::stream{ternary{}, group{32}}},
                                                kvlab::recipe{.keys = fp16, .values = fp16, .eviction = window{0.5}},
                                                kvlab::recipe{.keys = fp16, .values = fp16, .eviction = strided{0.5}},
                                                kvlab::recipe{.keys = kvlab::stream{ternary{}, group{32}},
                                                              .values = kvlab::stream{ternary{}, group{32}},
                                                              .eviction = strided{0.5}}},
                                    .data = {"synthetic:gaussian(L=2,H=2,Q=8,T=256,D=64,seed={seed})"},
                                    .seeds = {1, 2},
                                    .decode_steps = 4};
  const auto summary = kvlab::run_sweep(sweep, {.out = out, .progress = false});
  std::cout << summary.computed << " cells computed, " << summary.skipped << " already done\n\n";
  for (const auto& table : kvlab::seed_tables(kvlab::read_labelled_cells(out), {}, kvlab::builtin_registry()))
    std::cout << table.markdown();
}
