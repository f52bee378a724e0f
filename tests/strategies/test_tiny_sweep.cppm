// test-tiny-sweep: two typed recipes on a small Gaussian workload (and the test_ramp data
// source), two seeds. Exists only in the test build, to show that an experiment added as
// one file reaches `kvlab run` and `kvlab list` with no other edit.
// Paper: - (a test fixture)
module;
#include <vector>
export module kvlab.experiments.test_tiny_sweep;
import kvlab.core;
import kvlab.compose;
import kvlab.configs;
import kvlab.registry_builtin;

export namespace kvlab::experiments::test_tiny_sweep {

inline configs::experiment make() {
  using namespace parts;
  return {.name = "test-tiny-sweep",
          .description = "int8 and int4 per group(8) on a tiny workload (test build only)",
          .cells = configs::sweep{
              .recipes = {recipe{.keys = stream{int_q{8}, group{8}}, .values = stream{int_q{8}, group{8}}},
                          recipe{.keys = stream{int_q{4}, group{8}}, .values = stream{int_q{4}, group{8}}}},
              .data = {"synthetic:gaussian(L=1,H=1,Q=2,T=64,D=8,seed={seed})", "test_ramp(48)"},
              .seeds = {1, 2},
              .decode_steps = 4}};
}

} // namespace kvlab::experiments::test_tiny_sweep
